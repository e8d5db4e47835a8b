"""A worker's membership of a sharded crawl: one driver per shard, in one process.

A crawl of S > 1 shards is S complete crawls (``_core._shards``), each with its own
members, epoch, ring, streams, seen filter and pace records, run by today's scripts with
keys of one slot. A worker is a member of every shard under one id: a
:class:`ShardDriver` per shard, sharing the worker's fetcher, handler, sink and counters,
each with its share of ``--concurrency``. What crosses shards:

- **Links.** A link found on a page of shard s whose host is in shard d is committed
  into d first (a commit with only ``add`` entries, routed by d's ring, seen-filtered
  there, retried on ``stale`` like any), and only then does s's commit acknowledge the
  page (``ShardDriver.deliver``). A crash in between costs a refetch of the page, whose
  links d's seen filter then stops; a ``dont_filter`` link is added again (a duplicate).
- **Scope.** Every shard holds the crawl's scope. A commit's widening (a redirect's
  host) goes to every other shard first, and what shard 0 reads of it (``configure``)
  is copied to the others.
- **The end.** Every shard's heartbeat reports to one :class:`~hashcrawl._core._shards.Ends`.
- **Stopping, fencing.** A stop ends every membership once all are flushed (a link may
  still be on its way into a shard that left). Fenced in one shard, the worker leaves
  all at once (the others' memberships lapse after a lease) and rejoins all anew.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from hashcrawl._core._batch import Beat, Status, chunks
from hashcrawl._core._entry import Entry
from hashcrawl._core._ledger import Commit
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._session import COMMIT_EVERY
from hashcrawl._core._shards import Ends, Report, shard_of
from hashcrawl._core._urls import host_key
from hashcrawl._exceptions import Fenced, QueueError
from hashcrawl._run._driver import Driver
from hashcrawl._run._membership import Member, unwrapped
from hashcrawl._settings import Settings
from hashcrawl._store._revisits import Revisits
from hashcrawl._store._shards import Shards, queued_any
from hashcrawl._web._fetch import Fetcher

log = logging.getLogger("hashcrawl")
# What a commit costs (~10 commands, and a WAIT on a cluster) is per commit, not per page,
# and each shard's driver sees 1/S of the worker's pages: so a sharded worker's drivers
# commit together, every COMMIT_EVERY * S seconds (at most COMMIT_TICK_MAX) on one clock,
# and their links to one another's shards then meet in one delivery per shard.
COMMIT_TICK_MAX = 1.0
# A delivery into a shard waits this part of the commit tick for the links of this
# worker's other shards' commits to join it.
GATHER_PART = 1 / 4
# Heartbeats of shards s > 0 come every fresh_for / BEAT_PARTS seconds (never more often
# than a shard 0's): two may fail in a row before the shard stops fetching. They renew
# the lease and learn the shard's epoch; a stale route is refused by a commit anyway.
BEAT_PARTS = 3
# An empty stream is read with a long block: an XADD into it ends the wait at once.
READ_BLOCK_MS = 5000
SCOPE_CHUNK = 1000  # scope members per SADD when copied to the other shards
_OWN = frozenset({"_worker", "shard", "settings", "instance", "_shards"})


def share(settings: Settings, shards: int) -> Settings:
    """One shard's settings: its share of ``--concurrency`` (at least one)."""
    return attrs.evolve(settings, concurrency=max(1, math.ceil(settings.concurrency / shards)))


class ShardMember:
    """The worker as one shard's driver sees it: its own settings (a share of the
    concurrency) and instance marker (shard 0's is the worker's); all else the worker's."""

    def __init__(self, worker: Any, shard: int, shards: int) -> None:
        object.__setattr__(self, "_worker", worker)
        object.__setattr__(self, "shard", shard)
        object.__setattr__(self, "_shards", shards)
        object.__setattr__(self, "settings", share(worker.settings, shards))
        if shard:  # shard 0's marker is the worker's own (``__getattr__``)
            object.__setattr__(self, "instance", "")

    def __getattr__(self, name: str) -> Any:
        if name == "instance":
            return self._worker.instance
        return getattr(self._worker, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "instance" and self.shard == 0:
            self._worker.instance = value
        elif name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._worker, name, value)


class ShardDriver(Driver):
    """One shard's membership (a :class:`Driver`), delivering links into the other
    shards and ending with all of them."""

    def __init__(self, sharded: Sharded, shard: int, member: ShardMember, **kwargs: Any) -> None:
        self.sharded, self.shard = sharded, shard
        store = sharded.shards.stores[shard]
        super().__init__(member, store, sharded.fetcher, **kwargs)
        count = len(sharded.shards)
        if "foreign_in_source" not in member.faults:  # off: a deliberate bug to catch
            self.session.commits.foreign = lambda host: shard_of(host, count) != shard
        self.misroute: Any = None  # deliver_by_source_ring: the ring that routes, wrongly
        self.beat_sent = 0.0
        self.tick = min(COMMIT_TICK_MAX, COMMIT_EVERY * count)
        self.read_block_ms = READ_BLOCK_MS
        self._inbound: list[Entry] = []  # links waiting for a delivery into this shard
        self._rounds = 0  # deliveries that took their links
        self._delivered = 0  # of those, done (they finish in order: one at a time)
        self._one_at_a_time = trio.Lock()

    async def begin(self) -> None:
        await super().begin()
        await self.sharded.joined()  # no link is delivered into a shard not yet joined

    async def beat_once(self) -> Beat | None:
        self.beat_sent = self.now()
        return await super().beat_once()

    def beat_every(self) -> float:
        """Shard 0 beats as one shard does; the others less often, but as often while
        the worker stops (its end waits on their beats)."""
        every = self.settings.beat_interval
        if self.shard == 0 or self.session.stopping:
            return every
        return max(every, self.settings.fresh_for / BEAT_PARTS)

    def next_commit_at(self) -> float:
        """The next tick of the worker's commit clock (every shard's driver on it)."""
        return (math.floor(self.now() / self.tick) + 1) * self.tick

    async def ending(self, beat: Beat) -> bool:
        """Whether this membership ends: once every shard is flushed (a stop), or the
        crawl is over in every shard (``Ends``)."""
        session = self.session
        flushed = session.flushed()
        self.check_limits()
        if flushed:
            if self.sharded.flushed():
                return True
            # The heartbeat loop waits on this shard's flush, done: pace it here instead.
            await trio.sleep(self.settings.beat_interval / 4)
            return False
        marker = None
        if self.settings.idle is not None and not session.busy():
            if beat.idle_since >= 0:
                marker = str(beat.idle_since)
            else:
                try:
                    begun = await self.call(queued_any, self.sharded.shards.stores[self.shard])
                except QueueError:
                    begun = True
                marker = None if begun else "unbegun"
        quiet = marker == "unbegun" or session.finished(beat)
        report = Report(marker, quiet, self.beat_sent, self.now())
        return self.sharded.ends.report(self.shard, report)

    async def settings_loop(self) -> None:
        if self.shard == 0:  # the crawl's settings are shard 0's
            await super().settings_loop()

    async def read_scope(self) -> None:
        before = self.session.scope
        await super().read_scope()
        if self.shard == 0:  # configure widens shard 0's scope: every shard's, from here
            new = _scope_members_of(self.session.scope) - _scope_members_of(before)
            await self.sharded.widen_others(self.shard, new)

    async def deliver(self, commit: Commit) -> None:
        """Commit into their shards the links of ``commit`` whose hosts are elsewhere
        (and widen the other shards' scopes by its redirects) before it acknowledges."""
        session, count = self.session, len(self.sharded.shards)
        widen = {h for o in commit.outcomes for h in o.widen}
        scope = session.scope.widened(widen)
        elsewhere: dict[int, list[Entry]] = {}
        for outcome in commit.outcomes:
            for entry in outcome.follows:
                host = host_key(entry.canonical)
                shard = shard_of(host, count)
                if shard != self.shard and scope.allows(host):
                    elsewhere.setdefault(shard, []).append(entry)
        if widen:
            await self.sharded.widen_others(self.shard, scope_members(hosts=widen))
        async with trio.open_nursery() as nursery:  # into every destination at once
            for shard, entries in sorted(elsewhere.items()):
                if "deliver_by_source_ring" in self.worker.faults:  # a deliberate bug
                    self.sharded.drivers[shard].misroute = self.session.epochs.latest
                nursery.start_soon(self.sharded.drivers[shard].accept, entries)

    async def accept(self, entries: Sequence[Entry]) -> None:
        """Add ``entries`` (links found in another shard) to this shard, confirmed.

        Deliveries into one shard go one at a time, each with every link waiting when it
        starts (a group commit): this worker's S-1 other shards' commits, made on the
        same tick, share a delivery, gathered for a part of the tick, instead of one each.

        Raises:
            Fenced: this worker is no longer a member of this shard.
        """
        self._inbound.extend(entries)
        ticket = self._rounds  # the first delivery to take entries after now has them
        async with self._one_at_a_time:
            if self._delivered > ticket:  # a delivery since has taken them, and is done
                return
            await trio.sleep(self.tick * GATHER_PART)
            taken, self._inbound = self._inbound, []
            self._rounds += 1
            try:
                await self._add(taken)
            except BaseException:
                self._inbound[:0] = taken  # never counted as delivered
                raise
            self._delivered += 1

    async def _add(self, entries: Sequence[Entry]) -> None:
        session = self.session
        while True:
            batch = session.commits.delivery(entries, self.now(), ring=self.misroute)
            if not batch.add:
                return
            result = await self.persist(self.store.commit, batch)
            if result.status is Status.OK:
                session.seen.remember_entries(entries, session.scope)
                return
            if result.status is Status.FENCED:
                raise Fenced(f"worker {session.id} lost its membership of a shard")
            if result.status is Status.RESCOPE:
                await self.read_scope()
            else:
                await self.read_members()
                self.wake()


def _scope_members_of(scope: Any) -> set[str]:
    return scope_members(hosts=scope.hosts, domains=scope.domains, span=scope.span)


class Sharded:
    """A worker's memberships of every shard of a crawl, run together: the face the
    worker sees of them is a driver's (``run``, ``request_stop``, ``take_settings``)."""

    def __init__(self, worker: Member, shards: Shards, fetcher: Fetcher, **kwargs: Any) -> None:
        self.worker, self.shards, self.fetcher = worker, shards, fetcher
        self.ends = Ends(len(shards), one_sweep="end_from_one_sweep" in worker.faults)
        self._joined = 0
        self._all_joined = trio.Event()
        self.members = [ShardMember(worker, i, len(shards)) for i in range(len(shards))]
        seams = {k: v for k, v in kwargs.items() if k != "revisits"}  # call, spawn, offload
        self.drivers = [
            ShardDriver(self, i, member, revisits=_revisits_of(shards, i, kwargs), **seams)
            for i, member in enumerate(self.members)
        ]

    @property
    def session(self) -> Any:
        return self.drivers[0].session

    async def run(self) -> None:
        async with unwrapped(), trio.open_nursery() as nursery:
            for driver in self.drivers:
                nursery.start_soon(driver.run)

    async def joined(self) -> None:
        self._joined += 1
        if self._joined == len(self.drivers):
            self._all_joined.set()
        await self._all_joined.wait()

    def flushed(self) -> bool:
        return all(d.session.flushed() for d in self.drivers)

    async def widen_others(self, shard: int, members: set[str]) -> None:
        """Add ``members`` to every shard's scope but ``shard``'s, a thousand a command."""
        for chunk in chunks(sorted(members), SCOPE_CHUNK):
            for other in self.drivers:
                if other.shard != shard:
                    await other.persist(other.store.widen_scope, set(chunk))

    def request_stop(self) -> None:
        for driver in self.drivers:
            driver.request_stop()

    def take_settings(self, settings: Settings) -> None:
        for member, driver in zip(self.members, self.drivers, strict=True):
            member.settings = share(settings, len(self.drivers))
            driver.take_settings(member.settings)


def _revisits_of(shards: Shards, shard: int, kwargs: dict[str, Any]) -> Revisits | None:
    return Revisits.of(shards.stores[shard]) if kwargs.get("revisits") is not None else None
