"""Entries written by hand at the edges of what a worker reads: a pair for each rule of
the entry format, one at its limit and one just past it.

``reach.plant`` writes unreadable entries into a member's stream; these go beside them,
so the decoder's every bound (``hashcrawl/_core/_entry.py``: the numbers' ranges, the
timeout, the redirect limit, headers, statuses, the rule index, the meta's nesting, the
method, the flags, the size cap) is crossed from both sides in a real crawl. Judged from
outside:

- an entry at a limit is an entry: by the end the web saw a request for its URL, or it
  is dead after its host's robots.txt failed (:func:`read_at_the_end`);
- an entry past a limit is bad: counted once in ``queue_bad`` like the other planted
  ones (``reach.bad_counted``), and the web never sees a request for its URL.

Every URL here is of a page the site does not have (the web answers 404 at once), and
unique to its planting, so no page of the crawl is fetched twice because of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hashcrawl._core._entry import (
    MAX_ENTRY_BYTES,
    MAX_HEADERS,
    MAX_META_DEPTH,
    MAX_REDIRECTS,
    MAX_RULE,
    MAX_STATUSES,
    MAX_TIMEOUT,
    RANGES,
)

if TYPE_CHECKING:
    from simulations.world import World


def _nested(n: int) -> Any:
    value: list[Any] = []
    for _ in range(n - 1):
        value = [value]
    return value


def _headers(n: int) -> list[list[str]]:
    return [["X-Edge", str(i)] for i in range(n)]


def _statuses(n: int, top: int) -> list[int]:
    return list(range(top - n + 1, top + 1))


# name -> (the fields at the limit, the fields just past it)
EDGES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # An entry's attempts rise when its holder dies (it comes back a suspect, one attempt
    # used): one at the top of the range would come back past it, so this one is one below.
    **{
        f"{key}-high": ({key: high - (key == "a")}, {key: high + 1})
        for key, (_low, high) in RANGES.items()
    },
    **{f"{key}-low": ({key: low}, {key: low - 1}) for key, (low, _high) in RANGES.items()},
    "redirects": ({"r": MAX_REDIRECTS}, {"r": MAX_REDIRECTS + 1}),
    "timeout": ({"t": MAX_TIMEOUT}, {"t": MAX_TIMEOUT + 0.5}),
    "timeout-low": ({"t": 1.0}, {"t": 0}),  # any timeout above 0; the web answers in 0.05 s
    "headers": ({"H": _headers(MAX_HEADERS)}, {"H": _headers(MAX_HEADERS + 1)}),
    "statuses": ({"S": _statuses(MAX_STATUSES, 599)}, {"S": _statuses(MAX_STATUSES + 1, 599)}),
    "status-high": ({"S": [599]}, {"S": [600]}),
    "status-low": ({"S": [100]}, {"S": [99]}),
    "rule": ({"R": MAX_RULE}, {"R": MAX_RULE + 1}),
    "rule-low": ({"R": 0}, {"R": -1}),
    "meta": ({"m": _nested(MAX_META_DEPTH)}, {"m": _nested(MAX_META_DEPTH + 1)}),
    "method": ({"M": "POST", "B": "a=1"}, {"M": "post", "B": "a=1"}),
    "flag": ({"f": 1}, {"f": 2}),
}


# Bytes a worker may add to an entry it writes again (a suspect's flag, an attempt): an
# entry closer to the cap than this comes back unreadable (see docs/notes/issue-28.md).
SIZE_ROOM = 32


def payloads(host: str, index: int) -> tuple[dict[str, str], dict[str, str]]:
    """The entries of one planting: (URL -> payload at a limit, URL -> payload past it)."""
    good, bad = {}, {}
    for name, (at, past) in EDGES.items():
        url = f"http://{host}/edge-{index}-{name}"
        good[url] = json.dumps({"u": url, **at})
        bad[url + "-past"] = json.dumps({"u": url + "-past", **past})
    url = f"http://{host}/edge-{index}-size"
    good[url] = _sized(url, MAX_ENTRY_BYTES - SIZE_ROOM)
    bad[url + "-past"] = _sized(url + "-past", MAX_ENTRY_BYTES + 1)
    return good, bad


def _sized(url: str, size: int) -> str:
    """An entry of exactly ``size`` bytes, its meta padded."""
    bare = json.dumps({"u": url, "m": ""})
    return json.dumps({"u": url, "m": "x" * (size - len(bare))})


def plant(world: World, stream: str, index: int) -> int:
    """Write one planting into ``stream``; returns how many of them are bad."""
    host = world.web.url(0).split("/")[2]
    good, bad = payloads(host, index)
    for payload in [*good.values(), *bad.values()]:
        world.observer.r.xadd(stream, {"r": payload})
    world.edges_good.update(good)
    world.edges_bad.update(bad)
    return len(bad)


def read_at_the_end(world: World, dead: Mapping[str, str]) -> list[str]:
    """Every entry at a limit was read as one: the web saw a request for it (a sitemap's
    makes no item, so a request is the mark), or it is dead after its host's robots.txt
    failed."""
    sent = {f.url for f in world.fetches}
    return [
        f"{url} was never fetched, though its entry ({payload[:80]}) is within every limit"
        for url, payload in sorted(world.edges_good.items())
        if url not in sent and not (url in dead and world.failed(url))
    ]


def never_fetched(world: World) -> list[str]:
    """No request for an entry past a limit ever reached the web."""
    if not world.edges_bad:
        return []
    sent = sorted({f.url for f in world.fetches if f.url in world.edges_bad})
    return [
        f"{url} was fetched, though its entry ({world.edges_bad[url][:80]}) is bad" for url in sent
    ]
