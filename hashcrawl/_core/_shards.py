"""A crawl spread over S shards: which shard a host is in, the shards' hash tags, and
when a sharded crawl is over. Pure: no IO.

Shard 0 of crawl NAME is the crawl as it always was (keys ``hc:{NAME}:...``); shard s > 0
is a complete crawl of its own under ``hc:{NAME~TAG}:...``, TAG chosen when the crawl
starts so that the shards' slots spread over a cluster's primaries (:func:`choose_tags`).
A host is in shard :func:`shard_of` for ever, so its seen filter, streams, pace records
and overflow are all in one slot, and that shard's ring gives it one owner. The end of
the crawl is the end of every shard, decided by :class:`Ends` (docs/design.md,
"Spreading a crawl over slots", argues the rule).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs

SEP = "~"  # between the crawl's name and a shard's tag: no crawl name holds it
MAX_SHARDS = 256
TAG_TRIES = 100_000  # candidate tags tried at most (a few per shard are enough)


def shard_of(host: str, shards: int) -> int:
    """The shard of ``host`` (a host key) in a crawl of ``shards`` shards: a stable hash
    (BLAKE2b), the same in every process and Python version."""
    if shards <= 1:
        return 0
    digest = hashlib.blake2b(host.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_name(crawl: str, tag: str) -> str:
    """The name whose hash tag holds a shard's keys ("" for shard 0: the crawl's own)."""
    return f"{crawl}{SEP}{tag}" if tag else crawl


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        n, r = divmod(n, 36)
        text = digits[r] + text
        if not n:
            return text


def choose_tags(
    crawl: str, shards: int, slot_of: Callable[[str], int], primary_of: Callable[[int], str]
) -> list[str]:
    """Tags for shards 1..``shards``-1 (shard 0's is the crawl's name), so that the
    shards' slots are distinct and spread evenly over the primaries: each tag is taken
    only if its slot's primary holds no more shards than any other yet.

    Args:
        slot_of: the hash slot of a name in braces (``CLUSTER KEYSLOT`` of ``{name}``).
        primary_of: the primary serving a slot ("" on one server: every tag fits).

    Raises:
        ValueError: no such tags among the first TAG_TRIES candidates.
    """
    first = slot_of(crawl)
    slots = {first}
    count: dict[str, int] = {}
    primaries = {primary_of(s) for s in range(0, 16384, 64)} | {primary_of(first)}
    count = dict.fromkeys(primaries, 0)
    count[primary_of(first)] = 1
    tags: list[str] = []
    for n in range(1, TAG_TRIES):
        if len(tags) == shards - 1:
            return tags
        tag = _base36(n)
        slot = slot_of(shard_name(crawl, tag))
        where = primary_of(slot)
        if slot in slots or count.get(where, 0) > min(count.values()):
            continue
        slots.add(slot)
        count[where] = count.get(where, 0) + 1
        tags.append(tag)
    if len(tags) == shards - 1:
        return tags
    raise ValueError(f"found no tags for {shards} shards of {crawl!r}")


@attrs.frozen
class Report:
    """One heartbeat of one shard, as the end of the crawl weighs it.

    ``marker`` is what shows the shard idle (its ``idle_since``, or ``"unbegun"`` for a
    shard nothing was ever queued in), None while anything is outstanding there or this
    worker holds some of it; ``quiet`` says it has been idle ``--idle`` seconds. ``sent``
    and ``received`` are this worker's clock around the heartbeat.
    """

    marker: str | None
    quiet: bool
    sent: float
    received: float


class Ends:
    """When a crawl of ``shards`` shards is over (this worker's view; each shard's
    heartbeats report to it).

    Over when every shard is idle at one instant: for each shard, a run of reports with
    the same marker (``idle_since`` is deleted by any add and set anew, later, by the
    next idle heartbeat, so an unchanged marker means idle throughout), the last of them
    quiet, and the first of every run received before the last of any was sent. At that
    instant nothing was outstanding anywhere, and a link is always outstanding in its
    source shard until it is in its destination's (delivered before acknowledged), so
    nothing was in flight either. At least one shard must have begun (an unbegun crawl
    is not idle, as on one shard). Once over, it stays over.
    """

    def __init__(self, shards: int, *, one_sweep: bool = False) -> None:
        """Args:
        one_sweep: the deliberate bug ``end_from_one_sweep``: over once every shard's
            last report is quiet, however far apart they came.
        """
        self.shards = shards
        self.one_sweep = one_sweep
        self.first: dict[int, Report] = {}  # the first report of each shard's current run
        self.last: dict[int, Report] = {}
        self._over = False

    def report(self, shard: int, report: Report) -> bool:
        """Take ``report`` of ``shard``; returns whether the crawl is over."""
        if report.marker is None:
            self.first.pop(shard, None)
            self.last.pop(shard, None)
            return self._over
        first = self.first.get(shard)
        if first is None or first.marker != report.marker:
            self.first[shard] = report
        self.last[shard] = report
        return self.over()

    def over(self) -> bool:
        if self._over:
            return True
        if len(self.last) < self.shards or len(self.first) < self.shards:
            return False
        lasts = self.last.values()
        if not all(r.quiet for r in lasts) or all(r.marker == "unbegun" for r in lasts):
            return False
        if self.one_sweep or max(r.received for r in self.first.values()) < min(
            r.sent for r in lasts
        ):
            self._over = True
        return self._over
