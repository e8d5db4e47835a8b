"""Revisits in the simulation: the crawl's setting, the web's changing pages, the store's
revisit calls through the link, and the invariants judged from the web's log.

Some examples crawl with ``--revisit`` (a fixed 6 s, or adaptive between 4 and 10 s of
simulated time). Their pages that answer 200 change at known simulated times (every
5 or 15 s, or never) and serve an ETag, a Last-Modified or neither, answering 304 to a
conditional request that still matches. The takers run as every other loop's turn,
until ``TAKES_FOR`` seconds into the fault-free end (a revisiting crawl never runs out
of work by itself); then the crawl ends as any other.

The invariants, from the web's own log (every request, and when its answer was read):

- *never early*: a revisited page is fetched again no sooner than ``--revisit`` (or
  ``--revisit-min``) after the end of its previous fetch for good; a fetch sooner than
  that is allowed only as the existing duplicates are, once for each holder of it that
  died or stalled (a repeated fetch, not a revisit);
- *never lost*: a page whose revisit was due before the last take that Redis ran (its
  last answer read, plus the heartbeat latency, a second for rounding up, and the
  longest interval) was fetched again, unless it ended in the dead letters.
"""

from __future__ import annotations

import email.utils
import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from hashcrawl._core._due import Fetch as Revisited
from hashcrawl._store._revisits import TAKE_MOST, Revisits

if TYPE_CHECKING:
    from simulations.crew import FaultyStore
    from simulations.web import Fetch, Web
    from simulations.world import World

#: setup's draw: "" is no revisits (three examples in five, as before revisits).
CHOICES = ("", "", "", "6", "adaptive")
LOW_S, HIGH_S = 4, 10  # --revisit adaptive's bounds here, in simulated seconds
TAKES_FOR = 30.0  # simulated seconds of the fault-free end that the takers keep taking
TAKES_PER_TURN = 10  # a take visits 8 buckets: ten cover any site here (40 pages at most)
CHANGE_EVERY = (None, 5.0, 15.0)  # seconds between a page's changes (None: never)
VALIDATORS = ("etag", "last-modified", "none")
MODIFIED_BASE = 1_000_000  # Last-Modified of a page's version 0, in seconds (1970, > 0)
REVISITED_KINDS = ("ok", "slow", "flaky", "busy")  # pages whose final answer is a 200
EPSILON = 1e-6
#: Where crash_at_revisit strikes (crash_later's form: "before" or "after" a Store call).
CRASH_POINTS = ("before revisit_put", "after revisit_put", "after revisit_take")


def settings_of(choice: str) -> dict[str, Any]:
    """The worker settings of setup's ``revisit`` draw."""
    if not choice:
        return {}
    return {"revisit": choice, "revisit_min": LOW_S, "revisit_max": HIGH_S}


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
    """Each page's changes, from draws of their own (no other page of the site moves)."""
    rng = random.Random(f"changes {seed}")
    return {url: Change(rng.choice(CHANGE_EVERY), rng.choice(VALIDATORS)) for url in urls}


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


@attrs.define
class Plan:
    """One example's revisits: its setting, and what the judges need to know of it."""

    choice: str
    low: float
    high: float
    takes: list[float] = attrs.Factory(list)  # when Redis ran a take (any worker's)
    end_from: float | None = None  # when the fault-free end began

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> Plan | None:
        choice = str(settings.get("revisit") or "")
        if not choice:
            return None
        if choice == "adaptive":
            return cls(choice, float(settings["revisit_min"]), float(settings["revisit_max"]))
        return cls(choice, float(choice), float(choice))

    def taking(self, now: float, finishing: bool) -> bool:
        """Whether the takers still take: until ``TAKES_FOR`` s into the fault-free end."""
        if finishing and self.end_from is None:
            self.end_from = now
        return self.end_from is None or now < self.end_from + TAKES_FOR

    def took(self, now: float) -> None:
        self.takes.append(now)


class FaultyRevisits:
    """The crawl's revisit records (``RevisitStore``) through a worker's link: cut off,
    losing replies or dying at ``revisit_put`` and ``revisit_take`` like any call."""

    def __init__(self, revisits: Revisits, store: FaultyStore) -> None:
        self._revisits = revisits
        self._store = store

    def put(self, fetches: Sequence[Revisited]) -> int:
        written: int = self._store._through("revisit_put", self._revisits.put, fetches)
        return written

    def take(self, *, requeue_s: int, now_s: int | None = None, most: int = TAKE_MOST) -> Any:
        return self._store._through(
            "revisit_take", self._revisits.take, requeue_s=requeue_s, now_s=now_s, most=most
        )


# -- the judges ------------------------------------------------------------------------------


def revisited(web: Web) -> set[str]:
    """The pages a revisiting crawl watches: those whose answer for good is a 200."""
    return {
        url for url, page in web.pages.items() if page.kind in REVISITED_KINDS and url != web.killer
    }


def early(
    fetches: Iterable[Fetch], watched: Collection[str], low: float, excused: Mapping[str, int]
) -> list[str]:
    """A watched page is fetched for good again no sooner than ``low`` after the end of
    the fetch its visit began with, but for one repeat per holder that died or stalled."""
    problems = []
    for url, got in sorted(_finals(fetches, watched).items()):
        anchor, soon = got[0], []
        for fetch in got[1:]:
            if fetch.start >= anchor.end + low - EPSILON:
                anchor = fetch  # a revisit, due by then: the next visit begins
            else:
                soon.append(fetch)
        if len(soon) > excused.get(url, 0):
            shown = ", ".join(f"{f.worker} at {f.start:.3f}" for f in soon[:4])
            problems.append(
                f"{url} was fetched again sooner than its interval of {low:g} s {len(soon)} "
                f"times ({shown}), though holders of it died or stalled only "
                f"{excused.get(url, 0)} times"
            )
    return problems


def lost(
    fetches: Iterable[Fetch],
    watched: Collection[str],
    read: Mapping[str, float],
    dead: Collection[str],
    *,
    high: float,
    latency: float,
    last_take: float | None,
) -> list[str]:
    """A watched page whose revisit was due before the last take Redis ran was fetched
    again: due at most its last answer's reading, the heartbeat's latency (the clock's
    offset), a second (due times are rounded up) and ``high`` later."""
    if last_take is None:
        return []
    problems = []
    for url in sorted(_finals(fetches, watched)):
        if url in dead or url not in read:
            continue
        due_by = read[url] + latency + 1.0 + high
        if due_by <= last_take - EPSILON:
            problems.append(
                f"{url} was due again by {due_by:.3f} s (its last answer read at "
                f"{read[url]:.3f} s) but never fetched again, though a take ran at "
                f"{last_take:.3f} s"
            )
    return problems


def figures(fetches: Sequence[Fetch], watched: Collection[str]) -> Counter[str]:
    """What an example's revisits covered: revisits, 304s, and revisits fetched by another
    worker than the page's previous fetch (its host handed over, or its worker gone)."""
    counts: Counter[str] = Counter()
    for got in _finals(fetches, watched).values():
        counts["revisit fetches"] += len(got) - 1
        counts["revisits by another worker"] += sum(
            a.worker != b.worker for a, b in itertools.pairwise(got)
        )
    counts["304s"] += sum(f.status == 304 for f in fetches)
    counts["examples"] += 1
    return counts


def _finals(fetches: Iterable[Fetch], watched: Collection[str]) -> dict[str, list[Fetch]]:
    finals: dict[str, list[Fetch]] = defaultdict(list)
    for fetch in fetches:
        if fetch.final and fetch.url in watched:
            finals[fetch.url].append(fetch)
    for got in finals.values():
        got.sort(key=lambda f: (f.start, f.end))
    return finals


# -- what verdict.py asks ----------------------------------------------------------------------


def repeats(world: World) -> list[str]:
    """The fetched-once invariant, and in a revisiting example *never early* for the
    pages it watches (the rest are fetched once as ever)."""
    from simulations import checks  # checks -> web -> this module: imported when judging

    plan = world.revisit
    if plan is None:
        return checks.duplicates(world.fetches, world.excused)
    watched = revisited(world.web)
    others = [f for f in world.fetches if f.url not in watched]
    return checks.duplicates(others, world.excused) + early(
        world.fetches, watched, plan.low, world.excused
    )


def lost_at_end(world: World, dead: Collection[str]) -> list[str]:
    """*Never lost*, judged once every worker has left."""
    plan = world.revisit
    if plan is None:
        return []
    read: dict[str, float] = {}
    for w in world.workers.values():
        for url, at in w.fetcher.read.items():
            read[url] = max(at, read.get(url, at))
    last_take = max(plan.takes, default=None)
    watched = revisited(world.web)
    return lost(
        world.fetches,
        watched,
        read,
        dead,
        high=plan.high,
        latency=world.latency,
        last_take=last_take,
    )


def taken_at_the_end(world: World) -> bool:
    """Whether revisits wait in the inbox though the fleet saw the crawl finished: a take
    that raced the last heartbeats (a taker that then died, say). The records' entries
    are not lost: an operator's next ``join`` sees them through, as the simulation does."""
    if world.revisit is None:
        return False
    queued = world.observer.snapshot().queued
    return bool(queued) and all(
        key == world.observer.inbox for keys in queued.values() for key in keys
    )
