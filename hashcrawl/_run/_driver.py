"""One membership of a worker, from join to leave (or to being fenced), under trio.

A :class:`Driver` is around a :class:`~hashcrawl._core._session.Session`: the session
decides everything and does no IO; the driver does the IO it asks for, in thin trio
loops under one nursery, each loop a repetition of one *turn* method:

- ``beat_turn``: renew membership, learn of epochs, end the crawl when idle;
- ``read_turn``: move entries from the worker's stream into its frontier;
- ``dispatch_one``: start a fetch when a host's pacing allows (``fetch_one`` then asks
  the session once more right before the request leaves);
- ``commit_turn``: write items, flush, then acknowledge and route links atomically;
- ``apply_turn``: hand over the hosts a new epoch takes away;
- ``drain_turn``: move departed workers' streams to their hosts' new owners;
- ``pace_turn`` and ``unpark_turn``: read carried-over pacing, take parked entries back;
- ``follow_settings``: take on the crawl's settings when a heartbeat names new ones.

A page's steps are the core's :class:`~hashcrawl._core._page.Page`'s to decide. Every
store call that must get through goes through one ``StoreCaller`` (``_calls``), which
owns the retry policy; the loops wait on ``Wakeup`` values.

Store calls go through ``call`` and fetches start through ``spawn``, both given to the
driver's constructor, so the simulations drive these same turns one at a time.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from hashcrawl._core._entry import BadEntry, Entry
from hashcrawl._core._exchanges import Forget, Idle, Join, Leave, PaceDue, Read, Renew, Unparks
from hashcrawl._core._gate import Pool
from hashcrawl._core._names import Holder, HolderBehind
from hashcrawl._core._session import FORGET_EVERY
from hashcrawl._exceptions import ConfigError, InvalidURL, QueueError
from hashcrawl._run._calls import Call
from hashcrawl._run._committer import Committer
from hashcrawl._run._dispatcher import Dispatcher
from hashcrawl._run._handoffs import Handoffs
from hashcrawl._run._membership import (
    Member,
    Membership,
    Offload,
    Spawn,
    _resident_mib,
    unwrapped,
)
from hashcrawl._run._naming import Place, claim
from hashcrawl._run._taker import Taker
from hashcrawl._store import _crawlconfig
from hashcrawl._store._base import RevisitStore, WorkerStore
from hashcrawl._store._store import Beat
from hashcrawl._web._fetch import Fetcher

log = logging.getLogger("hashcrawl")
#: Pages of a predecessor's a worker that takes its place reads, to find their hosts.
HELD_READ = 10_000


def _host_of(payload: bytes | None) -> str | None:
    """The host of an entry as stored, or None if it cannot be read (input from Redis)."""
    try:
        return Entry.decode(payload).host
    except (BadEntry, InvalidURL):
        return None


class Driver(Membership):
    """One membership of a worker under trio: the IO its :class:`Session` asks for, in
    loops that share this membership's plumbing (:class:`Membership`).

    ``read_block_ms`` is how long a read of an empty stream waits for entries (an XADD
    into the stream ends the wait at once, so a longer one only saves polls).

    Args:
        worker: the worker this membership is of (its id, settings, handler, sink).
        store: the crawl's store.
        fetcher: fetches requests.
        call: runs one blocking store call (default: in a worker thread).
        spawn: starts a fetch task (default: in this membership's nursery).
        offload: runs other blocking work, parsing a robots.txt or writing items
            (default: in a worker thread, off the event loop).
        revisits: the crawl's revisit records, with ``--revisit``: the driver takes
            due ones and its commits write the next ones.
        after_join: checked right after the first join, before any loop starts; a
            ``ConfigError`` it raises makes the driver leave again and raise it.
        place: where the worker runs, recorded at join so that a successor of its name
            can tell it has stopped (default: this machine and process).
        pool, foreign: a sharded crawl's shared slots and test of another shard's host
            (see :class:`Membership`).
    """

    read_block_ms = 500

    def __init__(
        self,
        worker: Member,
        store: WorkerStore,
        fetcher: Fetcher,
        *,
        call: Call | None = None,
        spawn: Spawn | None = None,
        offload: Offload | None = None,
        revisits: RevisitStore | None = None,
        after_join: Callable[[Driver], Awaitable[None]] | None = None,
        place: Place | None = None,
        pool: Pool | None = None,
        foreign: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(
            worker, store, call=call, spawn=spawn, offload=offload, revisits=revisits,
            pool=pool, foreign=foreign,
        )  # fmt: skip
        self.after_join = after_join
        self.place = place if place is not None else Place.here()
        self.dispatcher = Dispatcher(self, fetcher)
        self.committer = Committer(self)
        self.handoffs = Handoffs(self)
        # Each loop's turn, by the name the simulations take it by.
        self.dispatch_turn = self.dispatcher.dispatch_turn
        self.dispatch_one = self.dispatcher.dispatch_one
        self.commit_turn = self.committer.commit_turn
        self.flush_now = self.committer.flush_now
        self.apply_turn = self.handoffs.apply_turn
        self.drain_turn = self.handoffs.drain_turn
        self.drain = self.handoffs.drain

    async def run(self) -> None:
        await self.begin()
        try:
            async with unwrapped(), trio.open_nursery() as nursery:
                self.nursery = nursery
                for loop in (
                    self.heartbeat_loop,
                    self.reader_loop,
                    self.dispatcher.dispatch_loop,
                    self.committer.commit_loop,
                    self.handoffs.apply_loop,
                    self.handoffs.drain_loop,
                    self.pace_loop,
                    self.unpark_loop,
                    self.forget_loop,
                    self.settings_loop,
                ):
                    nursery.start_soon(loop)
                if self.revisits is not None:
                    nursery.start_soon(Taker(self).take_loop)
            await self.leave()
        finally:
            self.worker.sink.flush()

    async def begin(self) -> None:
        """Join the ring, adopt its epoch and learn the crawl's scope and parked hosts."""
        worker, session = self.worker, self.session
        info = {
            "host": socket.gethostname(),
            "machine": self.place.machine,  # with the pid: a successor here tells it is gone
            "pid": self.place.pid,
            "started": int(time.time()),
            "lease_ms": int(self.settings.lease * 1000),  # so status can tell a stale member
            "spider": worker.spider_name,
        }
        if not worker.instance:
            warning = await self.persist(self.store.durability_warning)
            if warning:
                log.warning("%s", warning)
        while True:
            replaces, in_hand = None, []
            if worker.name is not None:
                lease = self.settings.lease
                name, flag, faults = worker.name, worker.name_flag, worker.faults
                replaces = await claim(
                    self.store, self.persist, name, lease, flag, faults, self.place
                )
            if replaces is not None:  # read before the join: the holder reads no more
                in_hand = await self.hosts_in_hand(replaces.member)
            sent = self.now()
            try:
                now_ms, _, worker.instance = await self.persist_join(info, replaces, in_hand)
                break
            except HolderBehind:  # an epoch began between the look and the join
                continue
        joining = session.start(Join(sent, self.now(), now_ms))
        if self.after_join is not None:
            try:
                await self.after_join(self)
            except ConfigError:
                await self.leave()  # nothing fetched or committed: hand the hosts back
                raise
        epoch, members = await self.carry_out(joining)
        log.info(
            "%s joined crawl %s at epoch %d with %d members",
            worker.id,
            worker.crawl,
            epoch,
            len(members),
        )

    async def hosts_in_hand(self, member: str) -> list[str]:
        """The hosts of the pages ``member`` has read and not acknowledged (at most
        HELD_READ of them): its requests in flight, if it had any, are to those."""
        got = await self.persist(self.store.held, self.store.stream_of(member), count=HELD_READ)
        return sorted({host for _, payload in got if (host := _host_of(payload))})

    async def persist_join(
        self, info: dict[str, Any], replaces: Holder | None = None, in_hand: Sequence[str] = ()
    ) -> tuple[int, int, str]:
        """Join; taking ``replaces``'s place, leave floors for whoever owns its hosts
        next: those of the pages it had ``in_hand`` wait --timeout (``Store.join``)."""
        worker, join, settings = self.worker, self.store.join, self.settings
        return await self.caller.persist(
            join,
            worker.id,
            info,
            instance=worker.instance,
            replaces=replaces,
            lease_ms=int(settings.lease * 1000),
            in_hand=in_hand,
            timeout_ms=int(settings.timeout * 1000),
        )

    async def heartbeat_loop(self) -> None:
        while True:
            beat = await self.beat_once()
            if beat is not None and await self.ending(beat):
                self.nursery.cancel_scope.cancel()
                return
            with trio.move_on_after(self.beat_every()):
                if beat is not None and self.session.due().stopping:
                    await self.flushed.wait()
                else:
                    await trio.sleep_forever()

    def beat_every(self) -> float:
        """Seconds from one heartbeat to the next (a sharded crawl's other shards beat
        less often: ``_sharding.ShardDriver``)."""
        return self.settings.beat_interval

    async def ending(self, beat: Beat) -> bool:
        """Whether the membership ends after ``beat`` (one shard: ``ends_with``; a
        sharded crawl's ``_sharding.ShardDriver`` asks every shard)."""
        return self.ends_with(beat)

    def ends_with(self, beat: Beat) -> bool:
        """Whether the membership ends after ``beat``: the crawl is over, or this worker
        was asked to stop before this beat and has committed everything since. (A limit
        this beat finds reached ends the membership at a later beat.)"""
        due = self.session.due()
        self.check_limits()
        return due.finished or due.flushed

    async def beat_once(self) -> Beat | None:
        """One heartbeat: renew membership and learn the fleet's state; None on failure.

        Raises:
            Fenced: the worker is no longer a member.
            QueueError: no heartbeat got through for a whole lease.
        """
        resident_kib = int(_resident_mib() * 1024)
        beat: Beat | None = await self.carry_out(
            self.session.start(Renew(self.now(), resident_kib))
        )
        if beat is None:
            return None
        if _crawlconfig.newer(self.worker.crawl_settings, beat):
            self.settings_due.set()
        self.wake()
        return beat

    async def leave(self) -> None:
        """Hand every host back at once: out of the ring, stream drained to new owners
        (the core's ``Leaving``). Runs after every other task of the session has stopped.
        """
        lease = self.settings.lease
        try:
            with trio.fail_after(lease):
                await self.carry_out(self.session.start(Leave()))
        except trio.TooSlowError:
            raise QueueError(f"could not leave the crawl within a lease ({lease:g} s)") from None
        log.info("%s left the crawl", self.worker.id)

    async def settings_loop(self) -> None:
        """Take on the crawl's settings whenever a heartbeat names a new version."""
        await self.settings_due.turns(self.follow_settings)

    async def follow_settings(self) -> None:
        """Read the crawl's settings and take them on; stop the worker if they no
        longer fit it."""
        worker = self.worker
        try:
            new = await self.persist(_crawlconfig.read_running, self.store, worker.settings)
            taken = _crawlconfig.updated(worker.crawl, worker.crawl_settings, new, worker.settings)
        except ConfigError as exc:
            log.error("stopping: %s", exc)
            worker.refuse(exc)
            return
        if taken is not None:
            worker.take_settings(taken)
            worker.crawl_settings = new

    async def reader_loop(self) -> None:
        while not self.session.due().stopping:
            if self.session.due().backlogged:
                self.commit_soon.set()
                await self.changed.wait()
                continue
            try:
                await self.read_once(block_ms=self.read_block_ms)
            except QueueError as exc:
                log.debug("read failed: %s", exc)
                await trio.sleep(self.settings.beat_interval)

    async def read_once(self, *, block_ms: int) -> int:
        """One read of this worker's stream into its frontier; returns entries read.

        Raises:
            QueueError: the read failed (the intake reads its own pending entries next).
        """
        got = await self.carry_out(self.session.start(Read(block_ms)))
        self.wake()
        return len(got)

    async def unpark_loop(self) -> None:
        """Bring parked entries back as their hosts run short (checked a few times a second)."""
        while True:
            await self.unpark_turn()
            await trio.sleep(0.2)

    async def unpark_turn(self) -> list[str]:
        """One pass over the parked hosts; returns the hosts that took entries back."""
        took: list[str] = await self.carry_out(self.session.start(Unparks()))
        return took

    async def forget_loop(self) -> None:
        """Every few seconds, forget hosts long idle (``_session.forget_idle``)."""
        while True:
            await trio.sleep(FORGET_EVERY)
            self.session.start(Forget(self.now()))

    async def pace_loop(self) -> None:
        await self.pace_due.turns(self.pace_turn)

    async def pace_turn(self) -> list[str]:
        """Read the previous owners' pacing state for the hosts whose turn it is."""
        reading = self.session.start(PaceDue())
        if isinstance(reading, Idle):  # none due
            return []
        hosts: list[str] = await self.carry_out(reading)
        self.wake()
        return hosts
