"""What every loop of one membership shares: the worker, its session, the store and its
one caller, the clock, and the wake-ups (see ``_driver``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

import trio

from hashcrawl._core._exchanges import (
    AwaitChange,
    CommitBatch,
    CutShort,
    Done,
    Flush,
    LeaveRing,
    Limits,
    NextOrphan,
    Process,
    PutRevisits,
    ReadEntries,
    ReadInFlight,
    ReadMembers,
    ReadPaces,
    ReadParked,
    ReadScope,
    ReadStream,
    Release,
    SendHeartbeat,
    Step,
    TakeDue,
    Unpark,
    WidenScope,
    WriteItems,
)
from hashcrawl._core._faults import Faults
from hashcrawl._core._gate import Pool
from hashcrawl._core._parents import FULL, MAX_PARENTS
from hashcrawl._core._session import COMMIT_EVERY, COMMIT_MAX, Session
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import ConfigError, Fenced, QueueError
from hashcrawl._output._sinks import Archive, Sink
from hashcrawl._run._calls import Call, Signal, StoreCaller, Wakeup
from hashcrawl._run._handler import Handler
from hashcrawl._run._inbound import Inbound, Parcel
from hashcrawl._run._metrics import Tally
from hashcrawl._run._notices import Notices
from hashcrawl._run._turns import SharedRobots
from hashcrawl._store._base import RevisitStore, WorkerStore
from hashcrawl._store._crawlconfig import CrawlSettings
from hashcrawl._web._cookies import Jars

log = logging.getLogger("hashcrawl")
T = TypeVar("T")
Spawn = Callable[..., None]  # starts a task: spawn(async_fn, *args)
Offload = Callable[..., Awaitable[Any]]  # runs blocking work: offload(fn, *args, limiter=)


@contextlib.asynccontextmanager
async def unwrapped() -> AsyncIterator[None]:
    """Let the error that ended a session through as itself, not inside a group."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        for wanted in (Fenced, QueueError, Exception):
            for exc in leaves:
                if isinstance(exc, wanted):
                    raise exc from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def _resident_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _in_worker_thread(
    fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter | None = None
) -> T:
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter)


class Member(Protocol):
    """What a membership needs of its worker (a :class:`~hashcrawl.Worker`), named here
    so that the worker may import the driver."""

    id: str
    name: str | None  # given with --name: the ring place it keeps across incarnations
    name_flag: str  # how the name was given, for messages: --name, or name=
    crawl: str
    settings: Settings
    instance: str
    faults: Faults
    spider_name: str
    handler: Handler
    sink: Sink
    archive: Archive | None  # the part of the sink that keeps every response, if any
    tally: Tally
    notices: Notices
    crawl_settings: CrawlSettings | None
    shared_robots: SharedRobots | None  # robots.txt of --render-fetch-hosts, once it runs

    def refuse(self, why: ConfigError) -> None: ...

    def stop(self) -> None: ...

    def take_page(self, cap: int) -> bool: ...

    def give_back_page(self) -> None: ...

    def take_settings(self, settings: Settings) -> None: ...


#: Why a --no-parent worker stops in a crawl whose start directories were not all kept.
UNKNOWN_PARENTS = (
    f"--no-parent: more than {MAX_PARENTS:,} start directories were submitted to this crawl "
    "before it had --no-parent, and only those are kept: it cannot tell which links are "
    "under a start URL (hashcrawl configure --reset no-parent, or start the crawl again)"
)


class Membership:
    """The plumbing of one membership of a worker, shared by its loops.

    Args:
        worker: the worker this membership is of (its id, settings, handler, sink).
        store: the crawl's store.
        call: runs one blocking store call (default: in a worker thread).
        spawn: starts a fetch task (default: in this membership's nursery).
        offload: runs other blocking work, parsing a robots.txt or writing items
            (default: in a worker thread, off the event loop).
        revisits: the crawl's revisit records, with ``--revisit`` (None: none).
        pool: a sharded worker's slots, shared by its shards' sessions (None: one shard).
        foreign: a sharded crawl's test of a host being another shard's (None: one shard).
    """

    nursery: trio.Nursery  # the membership's, once it runs
    flush_now: Callable[[], Awaitable[None]]  # commits everything held (the committer's)

    def __init__(
        self,
        worker: Member,
        store: WorkerStore,
        *,
        call: Call | None = None,
        spawn: Spawn | None = None,
        offload: Offload | None = None,
        revisits: RevisitStore | None = None,
        pool: Pool | None = None,
        foreign: Callable[[str], bool] | None = None,
    ) -> None:
        self.worker = worker
        self.revisits = revisits
        self.settings = worker.settings
        self.store = store
        self.limiter = trio.CapacityLimiter(4)
        self.call: Call = call if call is not None else self._in_thread
        self.caller = StoreCaller(self.call, lambda: self.settings.lease, self.now)
        self._spawn = spawn
        self.offload: Offload = offload if offload is not None else _in_worker_thread
        self.session = Session(
            worker=worker.id,
            settings=worker.settings,
            stream_of=store.stream_of,
            inbox=store.inbox,
            refuses=worker.handler.refusal,
            screen=worker.handler.screen,
            tally=worker.tally,
            jars=Jars(worker.settings.max_cookie_bytes),
            now=self.now(),
            faults=worker.faults,
            pool=pool,
            foreign=foreign,
        )
        self.scopes: dict[str, trio.CancelScope] = {}  # fetches a handoff may cut short
        self.changed = Signal()
        self.epoch_changed = Wakeup()
        self.orphans_waiting = Wakeup()
        self.pace_due = Wakeup()
        self.commit_soon = Wakeup()
        self.settings_due = Wakeup()  # a heartbeat named new crawl settings
        self.flushed = trio.Event()  # stays set: the membership may end at the next beat
        self.inbound = Inbound()  # links of other shards' pages for this one's commits

    async def _in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call in a thread; cancellable at once."""
        return await trio.to_thread.run_sync(
            lambda: fn(*args, **kwargs), limiter=self.limiter, abandon_on_cancel=True
        )

    async def persist(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call, tried again a heartbeat apart until it has failed for a lease
        (see ``StoreCaller``)."""
        return await self.caller.persist(fn, *args, every=self.settings.beat_interval, **kwargs)

    def now(self) -> float:
        return trio.current_time()

    async def carry_out(self, process: Process) -> Any:
        """Do ``process``'s steps until it is done (see ``_exchanges``); returns its
        result."""
        while not isinstance(step := process.next_step(self.now()), Done):
            try:
                reply = await self.perform(step)
            except QueueError as exc:
                process.failed(exc, self.now())  # raises it, or goes on without it
                continue
            process.answered(reply, self.now())
            if isinstance(step, ReadMembers):
                self.wake()  # a newer epoch may wait to be applied
        return process.result

    async def perform(self, step: Step) -> Any:
        """Do one step a process of the session asks for; returns the reply."""
        store, worker = self.store, self.worker.id
        if isinstance(step, SendHeartbeat):  # once: the next heartbeat is the retry
            instance = self.worker.instance
            return await self.call(store.heartbeat, worker, **step.fields, instance=instance)
        if isinstance(step, ReadStream):  # once: the reader reads again
            count, after, block_ms = step.count, step.after, step.block_ms
            return await self.call(store.read, worker, count=count, block_ms=block_ms, after=after)
        if isinstance(step, CommitBatch):
            return await self.persist(store.commit, step.batch)
        if isinstance(step, ReadMembers):
            return await self.persist(store.members)
        if isinstance(step, WidenScope):
            return await self.persist(store.widen_scope, step.members)
        if isinstance(step, ReadPaces):
            return await self.persist(store.pace, step.hosts)
        if isinstance(step, Unpark):
            return await self.persist(store.unpark, worker, step.epoch, step.host, step.count)
        if isinstance(step, Flush):
            return await self.flush_now()
        if isinstance(step, LeaveRing):
            return await self.persist(store.leave, worker, step.pace)
        if isinstance(step, WriteItems):
            return await self.offload(self.write_items, step.items)
        if isinstance(step, PutRevisits):
            assert self.revisits is not None
            return await self.persist(self.revisits.put, step.fetches)
        if isinstance(step, ReadScope):
            return await self.read_scope()
        if isinstance(step, TakeDue):
            assert self.revisits is not None
            return await self.persist(self.revisits.take, requeue_s=step.requeue_s)
        if isinstance(step, ReadParked):
            return await self.persist(store.parked_hosts)
        if isinstance(step, NextOrphan):
            return await self.persist(store.orphan)
        if isinstance(step, ReadInFlight):
            return await self.persist(store.in_flight_of, step.stream)
        if isinstance(step, ReadEntries):
            return await self.persist(store.entries, step.stream, count=step.count)
        if isinstance(step, Release):
            return await self.persist(store.release, step.stream)
        if isinstance(step, AwaitChange):
            with trio.move_on_at(step.until):
                await self.changed.wait()
            return None
        assert isinstance(step, CutShort), step
        for eid in step.eids:  # a request still out to a host handed over
            scope = self.scopes.get(eid)
            if scope is not None:
                scope.deadline = min(scope.deadline, step.deadline)
        return None

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._spawn is not None:
            self._spawn(fn, *args)
        else:
            self.nursery.start_soon(fn, *args)

    def next_commit_at(self) -> float:
        """When the committer commits next unless woken sooner: COMMIT_EVERY from now
        (a sharded crawl's drivers commit together: ``_sharding.ShardDriver``)."""
        return self.now() + COMMIT_EVERY

    def wake(self) -> None:
        """Wake the loops whose turn the session's state now asks for."""
        due = self.session.due()
        if due.apply:
            self.epoch_changed.set()
        if due.drain:
            self.orphans_waiting.set()
        if due.pace:
            self.pace_due.set()
        self.changed.notify()

    def take_settings(self, settings: Settings) -> None:
        self.settings = settings
        self.session.take_settings(settings)

    def request_stop(self) -> None:
        self.session.stop()
        self.wake()

    def check_limits(self) -> None:
        settings = self.settings
        memory = _resident_mib() if settings.max_memory else 0.0
        if self.session.start(Limits(self.now(), memory)).result:
            self.worker.stop()

    async def committable(self) -> int:
        """How many of the oldest outcomes a commit may acknowledge now: all (a sharded
        crawl's, only those whose links of other shards are in: ``_sharding``)."""
        return COMMIT_MAX

    def carried(self, parcels: list[Parcel]) -> None:
        """A commit added ``parcels`` (links other shards' pages found), confirmed."""
        for parcel in parcels:
            parcel.done = True

    async def deliveries_awaited(self) -> None:
        """Wait for a commit of another shard to carry links (one shard: none to wait for)."""
        await trio.lowlevel.checkpoint()

    def write_items(self, items: list[Any]) -> None:
        """Write ``items`` and flush every sink (in a thread: see ``perform``): an
        archive flushes the records of every response fetched so far (the commit's
        pages' among them), which the dispatcher handed it as they came."""
        sink = self.worker.sink
        if items:
            sink.write(items)
        sink.flush()

    async def read_scope(self) -> set[str]:
        """Read the crawl's scope (at join, and when a commit finds that it has grown);
        a --no-parent worker stops if the start directories were not all kept."""
        stored: set[str] = await self.persist(self.store.scope)
        if self.worker.settings.no_parent and FULL in stored:
            self.worker.refuse(ConfigError(UNKNOWN_PARENTS))
        return stored
