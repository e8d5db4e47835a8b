"""One commit's contents, how a big one is split so no script call blocks Redis long, and
what a heartbeat brings back: the values the core and the store exchange, with no IO.

A commit script's cost grows with what it carries: each new entry costs a few dozen
seen-filter bit operations, each move three commands. A page that keeps 100,000 links
would hold Redis for seconds in one call, and every worker with it. So a batch heavier
than ``SPLIT_AT`` goes out as several script calls: first parts carrying only what is
safe to apply on its own (new entries, moves, parking, pace records), then a last part
with the acknowledgements, retries, dead letters, counters and the applied epoch.

If the last part never runs (a crash, a stale epoch), the earlier parts' entries are in
and the page is still pending: it is fetched again and its links are stopped by the seen
filter, while moves and parking already done are skipped because their entries are gone
from the source stream. Each part is checked for membership and epoch on its own.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from hashcrawl._core._urls import fingerprint

#: The most work one script call carries, in entries added (each costs a few dozen
#: seen-filter bit operations), moved or parked, and pace records, with ten
#: acknowledgements (or entries added past the filter) counting as one: about 20 ms of
#: Redis time (docs/design.md).
#: An ordinary commit (tens of pages) stays far below it, and goes as one call.
SPLIT_AT = 500
CHEAP_PER_UNIT = 10  # acknowledgements, or entries added past the seen filter
T = TypeVar("T")


class Status(enum.StrEnum):
    """How Redis answered a commit, a handoff, a drain or an unpark."""

    OK = "ok"
    STALE = "stale"  # a newer epoch: route the batch anew and send it again
    RESCOPE = "rescope"  # the crawl's scope grew: read it, filter again, send again
    FENCED = "fenced"  # the worker is no longer a member


@attrs.frozen(kw_only=True)
class Committed:
    """The outcome of a commit: done, or refused as stale, rescope or fenced."""

    status: Status = attrs.field(converter=Status)
    epoch: int = 0
    added: int = 0
    acked: int = 0
    moved: int = 0
    scope: int = 0

    @classmethod
    def from_reply(cls, reply: Sequence[Any]) -> Committed:
        if reply[0] == "ok":
            added, acked, moved, scope = (int(x) for x in reply[1:5])
            return cls(status=Status.OK, added=added, acked=acked, moved=moved, scope=scope)
        if reply[0] == "stale":
            return cls(status=Status.STALE, epoch=int(reply[1]))
        if reply[0] == "rescope":
            return cls(status=Status.RESCOPE, scope=int(reply[1]))
        return cls(status=Status.FENCED)

    def __add__(self, other: Committed) -> Committed:
        return attrs.evolve(
            other,
            added=self.added + other.added,
            acked=self.acked + other.acked,
            moved=self.moved + other.moved,
        )


@attrs.define
class Batch:
    """One commit: acknowledgements, moves and new entries, applied atomically.

    ``add`` holds ``[target_stream, payload, h1, h2, filter]``; ``mv`` holds
    ``[id, target_stream, payload]``; ``once`` holds ``[id, target_stream, payload, ...]``:
    an entry acknowledged together with the entries it led to that the seen filter would
    not stop (a retry, follows with ``dont_filter``), so that a batch sent again after a
    lost reply adds them only once. ``unpace`` holds ``[host, record, ...]``: pace
    records their new owner has read, deleted if still as read. ``dead`` holds
    ``[key, record, ...]`` (see ``dead_key``); ``bad`` holds ``[id, sample]`` of
    unreadable entries, acknowledged and counted by the script only if still there (two
    drainers of one stream count each once).
    """

    worker: str
    epoch: int
    src: str = ""
    ack: list[str] = attrs.Factory(list)
    mv: list[list[Any]] = attrs.Factory(list)
    once: list[list[Any]] = attrs.Factory(list)
    add: list[list[Any]] = attrs.Factory(list)
    park: list[list[Any]] = attrs.Factory(list)
    pace: list[str] = attrs.Factory(list)
    unpace: list[str] = attrs.Factory(list)
    dead: list[str] = attrs.Factory(list)
    bad: list[list[str]] = attrs.Factory(list)
    stats: dict[str, int] = attrs.Factory(dict)
    applied: int | None = None
    scope: int | None = None
    widen: list[str] = attrs.Factory(list)
    instance: str = ""  # a submitter's marker for a crawl that has none yet
    #: Follows --no-parent kept out as the batch was made: counted once it commits, never
    #: sent (``Commits.committed``).
    unparented: list[Any] = attrs.Factory(list)  # Entry values

    def to_json(self) -> str:
        doc: dict[str, Any] = {"w": self.worker, "e": self.epoch, "src": self.src}
        for name in ("ack", "mv", "once", "add", "park", "pace", "unpace", "dead", "bad"):
            if value := getattr(self, name):
                doc[name] = value
        if self.stats:
            doc["stats"] = self.stats
        if self.applied is not None:
            doc["applied"] = self.applied
        if self.scope is not None:
            doc["sv"] = self.scope
        if self.widen:
            doc["widen"] = self.widen
        if self.instance:
            doc["i"] = self.instance
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    def weight(self) -> int:
        """The work this batch asks of one script call, in entries and records."""
        filtered = sum(1 for rec in self.add if rec[4])
        cheap = len(self.ack) + len(self.add) - filtered + sum(len(o) // 2 for o in self.once)
        listed = cheap // CHEAP_PER_UNIT + filtered + len(self.mv) + len(self.park) + len(self.bad)
        return listed + (len(self.pace) + len(self.unpace) + len(self.dead)) // 2

    def parts(self, limit: int | None = None) -> list[Batch]:
        """This batch as script calls of at most ``limit`` weight each (itself if light).

        Everything but the last part is safe to apply alone, in order: entries added
        through the seen filter (sent again, it stops them), then moved, then parked,
        then pace records written (before the applied epoch that lets the hosts' new
        owners read them, which goes in the last part). Entries added past the filter
        cannot be sent twice: they stay in the last part, with the acknowledgements.
        """
        limit = SPLIT_AT if limit is None else limit
        if self.weight() <= limit:
            return [self]
        filtered = [rec for rec in self.add if rec[4]]
        first: list[Batch] = []
        for name, items, size in (
            ("add", filtered, 1),
            ("mv", self.mv, 1),
            ("park", self.park, 1),
            ("pace", self.pace, 2),
            ("unpace", self.unpace, 2),
        ):
            step = limit * size
            for start in range(0, len(items), step):
                part = self._part()
                setattr(part, name, items[start : start + step])
                first.append(part)
        unfiltered = [rec for rec in self.add if not rec[4]]
        last = attrs.evolve(self, add=unfiltered, mv=[], park=[], pace=[], unpace=[])
        return [*first, *_acks_split(last, limit)]

    def _part(self) -> Batch:
        """An empty part of this batch, checked against the same epoch and scope."""
        return Batch(worker=self.worker, epoch=self.epoch, src=self.src, scope=self.scope)


def _acks_split(last: Batch, limit: int) -> list[Batch]:
    """Acknowledgements in parts of ``limit`` units; the last carries everything else."""
    acks, limit = last.ack, limit * CHEAP_PER_UNIT
    parts = []
    for start in range(0, max(0, len(acks) - limit), limit):
        parts.append(attrs.evolve(last._part(), ack=acks[start : start + limit]))
    done = len(parts) * limit
    parts.append(attrs.evolve(last, ack=acks[done:]))
    return parts


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter), so each Redis call
    carries a bounded load."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


LOST = (
    "the crawl's state in Redis is gone (Redis restarted without persistence, "
    "FLUSHALL, or `hashcrawl clear`)"
)


@attrs.frozen(kw_only=True)
class Beat:
    """What a heartbeat learned: the fleet as the server sees it now."""

    alive: bool
    now_ms: int
    lost: bool = False
    epoch: int = 0
    settled: int = 0
    idle_since: int = -1
    orphans: int = 0
    settings: str = ""  # the version of the crawl's settings (see _crawlconfig)
    #: While some member has not applied the newest epoch: each such member's applied
    #: epoch, and the members of the rings they fetch by (see ``Release``).
    behind: Mapping[str, int] = attrs.field(factory=dict)
    rings: Mapping[int, tuple[str, ...]] = attrs.field(factory=dict)
    members: tuple[str, ...] | None = None

    @classmethod
    def from_reply(cls, reply: Sequence[Any]) -> Beat:
        if reply[0] != "ok":
            return cls(alive=False, now_ms=int(reply[1]), lost=reply[0] == "lost")
        members = tuple(sorted(reply[8:])) if len(reply) > 8 else None
        behind, rings = _release(reply[7] if len(reply) > 7 else "")
        return cls(
            alive=True,
            now_ms=int(reply[1]),
            epoch=int(reply[2]),
            settled=int(reply[3]),
            idle_since=int(reply[4]),
            orphans=int(reply[5]),
            settings=str(reply[6]),
            behind=behind,
            rings=rings,
            members=members,
        )


def _release(text: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
    """The heartbeat's JSON of members behind and their rings ('' when none is)."""
    if not text:
        return {}, {}
    got = json.loads(text)
    behind = {str(m): int(e) for m, e in (got.get("behind") or {}).items()}
    # Lua's cjson writes an empty list as {}.
    rings = {int(e): tuple(sorted(m or ())) for e, m in (got.get("rings") or {}).items()}
    return behind, rings


def dead_key(url: str) -> str:
    """A dead letter's field in ``dead``: the URL's fingerprint, short whatever its length."""
    h1, h2 = fingerprint(url)
    return f"{h1:08x}{h2:08x}"
