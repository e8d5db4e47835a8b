"""What travels through Redis: one entry per request, as compact JSON."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ._exceptions import HashcrawlError
from ._urls import canonicalize


class BadEntry(HashcrawlError, ValueError):
    """A stream entry that hashcrawl did not write, or cannot read."""


@attrs.frozen(kw_only=True)
class Entry:
    """One request waiting in, or held from, a stream.

    ``url`` is the URL to request, as the page wrote it (made fit to send);
    :attr:`canonical` is its canonical form, which dedupe and routing use.
    ``meta`` is JSON; ``callback`` names a spider method. ``sitemap`` is 0 for a page,
    or how deep in sitemap indexes a sitemap is (1: named by robots.txt or /sitemap.xml).
    ``suspect`` marks an entry that a worker died holding: its owner records it as in
    flight before fetching it, so a page that kills workers is counted and parked dead.
    """

    url: str
    depth: int = 0
    priority: int = 0
    attempts: int = 0
    meta: Any = None
    callback: str | None = None
    dont_filter: bool = False
    suspect: bool = False
    sitemap: int = 0

    @property
    def canonical(self) -> str:
        """The canonical form of ``url`` (cached by ``canonicalize``).

        Raises:
            InvalidURL: ``url`` is not a crawlable http(s) URL.
        """
        return canonicalize(self.url)

    def encode(self) -> str:
        """The entry as the JSON text stored in the stream's ``r`` field."""
        doc: dict[str, Any] = {"u": self.url}
        for key, value, default in (
            ("d", self.depth, 0),
            ("p", self.priority, 0),
            ("a", self.attempts, 0),
            ("m", self.meta, None),
            ("c", self.callback, None),
            ("f", int(self.dont_filter), 0),
            ("s", int(self.suspect), 0),
            ("x", self.sitemap, 0),
        ):
            if value != default:
                doc[key] = value
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, text: str | None) -> Entry:
        """Read an entry back.

        Raises:
            BadEntry: the text is not an entry hashcrawl wrote.
        """
        try:
            doc = json.loads(text) if text is not None else None
        except ValueError:
            raise BadEntry(f"entry is not JSON: {_clip(text)}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("u"), str):
            raise BadEntry(f"entry has no url: {_clip(text)}")
        return cls._from_doc(doc, text)

    @classmethod
    def _from_doc(cls, doc: dict[str, Any], text: str | None) -> Entry:
        ints = [doc.get(key, 0) for key in ("d", "p", "a", "x")]
        callback = doc.get("c")
        if not all(type(i) is int for i in ints) or not isinstance(callback, str | None):
            raise BadEntry(f"entry has a field of the wrong type: {_clip(text)}")
        return cls(
            url=doc["u"],
            depth=ints[0],
            priority=ints[1],
            attempts=ints[2],
            meta=doc.get("m"),
            callback=callback,
            dont_filter=bool(doc.get("f", 0)),
            suspect=bool(doc.get("s", 0)),
            sitemap=ints[3],
        )


def _clip(text: str | None) -> str:
    return repr(text if text is None else text[:120])
