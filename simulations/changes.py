"""How the pages of a revisiting example change: at known simulated times, each with an
ETag, a Last-Modified or neither, answering 304 to a conditional request that still
matches (the web serves them, ``simulations/revisits.py`` judges the revisits).
"""

from __future__ import annotations

import email.utils
import random
from collections.abc import Iterable, Mapping

import attrs

CHANGE_EVERY = (None, 5.0, 15.0)  # seconds between a page's changes (None: never)
VALIDATORS = ("etag", "last-modified", "none")
MODIFIED_BASE = 1_000_000  # Last-Modified of a page's version 0, in seconds (1970, > 0)


@attrs.frozen
class Change:
    """How one page changes: every ``every`` s (None: never), and its validator."""

    every: float | None
    validator: str

    def version(self, now: float) -> int:
        return 0 if self.every is None else int(now // self.every)

    def modified_s(self, version: int) -> int:
        return MODIFIED_BASE + int(version * (self.every or 0))


def changes_of(seed: int, urls: Iterable[str]) -> dict[str, Change]:
    """Each page's changes, from draws of their own (no other page of the site moves),
    drawn in the URLs' order: ``urls`` is often a set, whose order changes with the
    process's hash seed, and a seed must draw the same changes in every process."""
    rng = random.Random(f"changes {seed}")
    return {url: Change(rng.choice(CHANGE_EVERY), rng.choice(VALIDATORS)) for url in sorted(urls)}


def revised(change: Change, html: bytes, asked: Mapping[str, str], now: float) -> Answered:
    """A changing page's 200 at ``now``: its version in the body and its validator, or a
    304 if the request's conditional headers still match."""
    version = change.version(now)
    headers: dict[str, str] = {}
    if change.validator == "etag":
        headers["etag"] = f'"v{version}"'
    elif change.validator == "last-modified":
        when = change.modified_s(version)
        headers["last-modified"] = email.utils.formatdate(when, usegmt=True)
    if _still_matches(change, version, headers, asked):
        return Answered(304, b"", headers)
    return Answered(200, html + f"<!-- version {version} -->".encode(), headers)


@attrs.frozen
class Answered:
    status: int
    body: bytes
    headers: dict[str, str]


def _still_matches(
    change: Change, version: int, headers: Mapping[str, str], asked: Mapping[str, str]
) -> bool:
    lowered = {k.lower(): v for k, v in asked.items()}
    if "etag" in headers and "if-none-match" in lowered:
        return lowered["if-none-match"] == headers["etag"]
    since = lowered.get("if-modified-since")
    if "last-modified" in headers and since:
        try:
            asked_s = email.utils.parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError):
            return False
        return asked_s >= change.modified_s(version)
    return False
