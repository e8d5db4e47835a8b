"""A worker's membership of a sharded crawl: one driver per shard, in one process.

A crawl of S > 1 shards is S complete crawls (``_core._shards``), each with its own
members, epoch, ring, streams, seen filter and pace records, run by today's scripts with
keys of one slot. A worker is a member of every shard under one id: a
:class:`ShardDriver` per shard, sharing the worker's fetcher, handler, sink and counters,
each with its share of ``--concurrency``. What crosses shards:

- **Links.** A link found on a page of shard s whose host is in shard d is committed
  into d first: handed to d's driver (``Inbound``), it goes in d's next commit (routed
  by d's ring, seen-filtered there, retried on ``stale`` like any), and only once that
  has returned, confirmed, may a commit of s acknowledge the page
  (``ShardDriver.committable``): a tick later. A crash in between costs a refetch of
  the page, whose links d's seen filter then stops; a ``dont_filter`` link is added
  again (a duplicate).
- **Scope.** Every shard holds the crawl's scope. A commit's widening (a redirect's
  host) goes to every other shard first, and what shard 0 reads of it (``configure``)
  is copied to the others.
- **The end.** Every shard's heartbeat reports to one :class:`~hashcrawl._core._shards.Ends`.
- **Stopping, fencing.** A stop ends every membership once all are flushed (a link may
  still be on its way into a shard that left). Fenced in one shard, the worker leaves
  all at once (the others' memberships lapse after a lease) and rejoins all anew.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from hashcrawl._core._batch import Beat, chunks
from hashcrawl._core._entry import Entry
from hashcrawl._core._gate import Pool
from hashcrawl._core._outcome import Outcome
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._session import COMMIT_MAX
from hashcrawl._core._settings import Settings
from hashcrawl._core._shards import Ends, Report, shard_of
from hashcrawl._exceptions import QueueError
from hashcrawl._run._calls import Signal
from hashcrawl._run._driver import Driver
from hashcrawl._run._inbound import Parcel
from hashcrawl._run._membership import Member, unwrapped
from hashcrawl._store._revisits import Revisits
from hashcrawl._store._shards import Shards, queued_any
from hashcrawl._web._fetch import Fetcher

log = logging.getLogger("hashcrawl")
# What a commit costs (~10 commands, and a WAIT on a cluster) is per commit, not per page,
# and each shard's driver sees 1/S of the worker's pages: so a sharded worker's drivers
# commit together, every COMMIT_TICK seconds on one clock (S commits a tick), each
# carrying the links the others found for its shard. (A tick of 0.2 * S at 3 shards cost
# 5-9% more commands per page than 1 s in the bench, with no fewer pages per second.)
COMMIT_TICK = 1.0
# Heartbeats of shards s > 0 come every fresh_for / BEAT_PARTS seconds (never more often
# than a shard 0's): two may fail in a row before the shard stops fetching. They renew
# the lease and learn the shard's epoch; a stale route is refused by a commit anyway.
BEAT_PARTS = 3
# An empty stream is read with a long block: an XADD into it ends the wait at once.
READ_BLOCK_MS = 5000
SCOPE_CHUNK = 1000  # scope members per SADD when copied to the other shards
# A sharded worker's pages fetched and not yet acknowledged, over all its shards, as a
# multiple of --concurrency (``_core._gate.Pool``): the pages that wait a tick on their
# links' delivery into other shards hold slots that long.
POOL = 2
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


def _foreign(count: int, shard: int, host: str) -> bool:
    """Whether ``host`` is another shard's than ``shard`` of ``count``."""
    return shard_of(host, count) != shard


class ShardDriver(Driver):
    """One shard's membership (a :class:`Driver`), delivering links into the other
    shards and ending with all of them."""

    def __init__(self, sharded: Sharded, shard: int, member: ShardMember, **kwargs: Any) -> None:
        self.sharded, self.shard = sharded, shard
        store = sharded.shards.stores[shard]
        count = len(sharded.shards)
        foreign: Callable[[str], bool] | None = functools.partial(_foreign, count, shard)
        if "foreign_in_source" in member.faults:  # off: a deliberate bug to catch
            foreign = None
        super().__init__(
            member, store, sharded.fetcher, **kwargs, pool=sharded.pool, foreign=foreign
        )
        self.beat_sent = 0.0
        self.tick = COMMIT_TICK
        self.read_block_ms = READ_BLOCK_MS
        # This shard's outcomes (by id) and the parcels of their links to other shards
        # (None: not yet handed off, their redirects' scope to be widened first).
        self._sent: dict[int, tuple[Outcome, list[Parcel] | None]] = {}

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
        if self.shard == 0 or self.session.due().stopping:
            return every
        return max(every, self.settings.fresh_for / BEAT_PARTS)

    def next_commit_at(self) -> float:
        """The next tick of the worker's commit clock (every shard's driver on it)."""
        return (math.floor(self.now() / self.tick) + 1) * self.tick

    async def ending(self, beat: Beat) -> bool:
        """Whether this membership ends: once every shard is flushed (a stop), or the
        crawl is over in every shard (``Ends``)."""
        session = self.session
        due = session.due()
        self.check_limits()
        if due.flushed:
            if self.sharded.flushed():
                return True
            # The heartbeat loop waits on this shard's flush, done: pace it here instead.
            await trio.sleep(self.settings.beat_interval / 4)
            return False
        marker = None
        if self.settings.idle is not None and not session.due().busy:
            if beat.idle_since >= 0:
                marker = str(beat.idle_since)
            else:
                try:
                    begun = await self.call(queued_any, self.sharded.shards.stores[self.shard])
                except QueueError:
                    begun = True
                marker = None if begun else "unbegun"
        quiet = marker == "unbegun" or session.due().finished
        report = Report(marker, quiet, self.beat_sent, self.now())
        return self.sharded.ends.report(self.shard, report)

    async def settings_loop(self) -> None:
        if self.shard == 0:  # the crawl's settings are shard 0's
            await super().settings_loop()

    async def read_scope(self) -> set[str]:
        before = self.session.due().scope
        stored = await super().read_scope()
        if self.shard == 0:  # configure widens shard 0's scope: every shard's, from here
            after = Scope.from_members(stored)  # as the session takes it on
            new = _scope_members_of(after) - _scope_members_of(before)
            await self.sharded.widen_others(self.shard, new)
        return stored

    def hand_off(self) -> None:
        """Give the links of this shard's new outcomes whose hosts are in other shards
        to those shards' next commits (``Inbound``). An outcome that widens the scope (a
        redirect) waits for its owner to widen every shard's first (``hand_off_widening``)."""
        sent: dict[int, tuple[Outcome, list[Parcel] | None]] = {}
        for outcome in self.session.due().outcomes:
            key = id(outcome)
            if key in self._sent:
                sent[key] = self._sent[key]
            else:
                sent[key] = (outcome, None if outcome.widen else self._parcels_of(outcome))
        self._sent = sent  # the outcomes committed since are gone from it

    async def hand_off_widening(self) -> None:
        waiting = [o for o, parcels in self._sent.values() if parcels is None]
        if waiting:
            hosts = {h for o in waiting for h in o.widen}
            await self.sharded.widen_others(self.shard, scope_members(hosts=hosts))
            for outcome in waiting:
                self._sent[id(outcome)] = (outcome, self._parcels_of(outcome))

    def _parcels_of(self, outcome: Outcome) -> list[Parcel]:
        due, count = self.session.due(), len(self.sharded.shards)
        scope = due.scope.widened(outcome.widen)
        elsewhere: dict[int, list[Entry]] = {}
        for entry in outcome.follows:
            host = entry.host
            shard = shard_of(host, count)
            if shard != self.shard and scope.allows(host):
                elsewhere.setdefault(shard, []).append(entry)
        parcels = []
        for shard, entries in sorted(elsewhere.items()):
            other = self.sharded.drivers[shard]
            if "deliver_by_source_ring" in self.worker.faults:  # a deliberate bug
                other.inbound.misroute = due.ring
            parcels.append(other.inbound.put(entries))
            if due.saturated:  # this shard's slots wait on that commit: at once
                other.commit_soon.set()
        return parcels

    async def committable(self) -> int:
        """How many of the oldest outcomes may be acknowledged now: those whose links of
        other shards a commit of each of those shards has added, confirmed (handed to
        them here first). A crash in between costs a refetch of the page."""
        self.sharded.hand_off()
        await self.hand_off_widening()
        outcomes = self.session.due().outcomes[:COMMIT_MAX]
        if "deliver_after_ack" in self.worker.faults:  # a deliberate bug to catch
            return len(outcomes)
        count = 0
        for outcome in outcomes:
            parcels = self._sent[id(outcome)][1]
            if parcels is None or not all(p.done for p in parcels):
                break
            count += 1
        return count

    def carried(self, parcels: list[Parcel]) -> None:
        super().carried(parcels)
        self.sharded.delivered_some()

    def wake(self) -> None:
        super().wake()
        self.sharded.slots_freed(self)

    async def deliveries_awaited(self) -> None:
        if not await self.committable():
            with trio.move_on_after(self.tick):  # a notice during committable is missed
                await self.sharded.delivered.wait()


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
        self.delivered = Signal()  # a commit carried links into its shard
        self.members = [ShardMember(worker, i, len(shards)) for i in range(len(shards))]
        self.pool = Pool(POOL * worker.settings.concurrency, self._sessions)
        seams = {k: v for k, v in kwargs.items() if k != "revisits"}  # call, spawn, offload
        self.drivers = [
            ShardDriver(self, i, member, revisits=_revisits_of(shards, i, kwargs), **seams)
            for i, member in enumerate(self.members)
        ]

    def _sessions(self) -> list[Any]:
        return [driver.session for driver in self.drivers]

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
        return all(d.session.due().flushed for d in self.drivers)

    def hand_off(self) -> None:
        """Every shard's new links of other shards to their shards' next commits: so
        that the commits of one tick carry every link found before it."""
        for driver in self.drivers:
            driver.hand_off()

    def delivered_some(self) -> None:
        """A commit carried links: the drivers waiting on them may commit."""
        self.delivered.notify()
        for driver in self.drivers:
            due = driver.session.due()
            if due.saturated or due.stopping:
                driver.commit_soon.set()

    def slots_freed(self, woken: ShardDriver) -> None:
        """A dispatch refused for the worker's full pool may go on: wake every shard's."""
        if self.pool.released():
            for driver in self.drivers:
                if driver is not woken:
                    driver.changed.notify()

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
        self.pool.limit = POOL * settings.concurrency


def _revisits_of(shards: Shards, shard: int, kwargs: dict[str, Any]) -> Revisits | None:
    return Revisits.of(shards.stores[shard]) if kwargs.get("revisits") is not None else None
