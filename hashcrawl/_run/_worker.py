"""A worker: one member of the fleet, owning the hosts the ring gives it.

:class:`Worker` is the public face; each membership (from join to leave, or to being
fenced) is a :class:`Driver` around a :class:`~hashcrawl._core._session.Session`. The session
decides everything and does no IO; the driver does the IO it asks for, in thin trio
loops under one nursery, each loop a repetition of one *turn* method:

- ``beat_turn``: renew membership, learn of epochs, end the crawl when idle;
- ``read_turn``: move entries from the worker's stream into its frontier;
- ``dispatch_one``: start a fetch when a host's pacing allows (``fetch_one`` then asks
  the session once more right before the request leaves);
- ``commit_turn``: write items, flush, then acknowledge and route links atomically;
- ``apply_turn``: hand over the hosts a new epoch takes away;
- ``drain_turn``: move departed workers' streams to their hosts' new owners;
- ``pace_turn`` and ``unpark_turn``: read carried-over pacing, take parked entries back.

Store calls go through ``call`` and fetches start through ``spawn``, both given to the
driver's constructor, so the simulations drive these same turns one at a time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import trio

from hashcrawl._core._batch import Status
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Outcome
from hashcrawl._core._page import Page, Step
from hashcrawl._core._ring import Ring
from hashcrawl._core._session import (
    COMMIT_EVERY,
    COMMIT_MAX,
    FORGET_EVERY,
    HANDOFF_WAIT,
    PARK_AT,
    UNPARK_BELOW,
    Commit,
    Counters,
    Handoff,
    Session,
)
from hashcrawl._exceptions import ConfigError, Fenced, FetchError, QueueError, Refused, StateLost
from hashcrawl._run._handling import Handler, Parse
from hashcrawl._run._metrics import Tally
from hashcrawl._run._queue import submit_urls
from hashcrawl._settings import CRAWL, Settings, header_pairs
from hashcrawl._store import _crawlconfig
from hashcrawl._store._base import WorkerStore
from hashcrawl._store._crawlconfig import CrawlSettings
from hashcrawl._store._redisurl import RedisURL, check_crawl_name
from hashcrawl._store._store import LOST, Beat, Store
from hashcrawl._web._cookies import Jars
from hashcrawl._web._fetch import Fetcher, HttpxFetcher, NotSent, sending_only_while
from hashcrawl._web._models import Request, Response
from hashcrawl._web._requests import request_of, set_cookies
from hashcrawl._web._robots import Robots, RobotsFetch, Unreachable
from hashcrawl._web._sinks import Sink, sink_for
from hashcrawl._web._spider import Spider, callback_of

log = logging.getLogger("hashcrawl")
T = TypeVar("T")
Call = Callable[..., Awaitable[Any]]  # runs a blocking store call: call(fn, *args, **kwargs)
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


def new_worker_id() -> str:
    host = socket.gethostname().split(".")[0][:24] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


class Signal:
    """Wakes every task waiting for "something changed"; waiters re-check their condition."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class Worker:
    """One member of a crawl fleet. ``await worker.run()`` under trio, or ``run_sync()``."""

    def __init__(
        self,
        redis: str | RedisURL,
        crawl: str,
        *,
        fetcher: Fetcher | None = None,
        parse: Parse | None = None,
        spider: Spider | type[Spider] | None = None,
        sink: Sink | None = None,
        faults: Faults = NO_FAULTS,
        **settings: Any,
    ) -> None:
        """Args:
        redis: the Redis URL (``redis://``, ``rediss://``, ``redis+unix://``).
        crawl: the crawl's name; every worker of one crawl uses the same.
        fetcher: fetches requests (default: httpx); pacing and robots.txt still apply.
        parse: a callback from a response to items and requests to follow.
        spider: a :class:`Spider` (class or instance) instead of ``parse``.
        sink: where items go (default: JSON Lines on standard output).
        faults: deliberate bugs to switch on (tests and simulations only).
        settings: any field of :class:`Settings` (delay, per_host, concurrency, ...).

        Raises:
            ConfigError: a bad URL, crawl name or setting, or both parse and spider.
        """
        self.url = redis if isinstance(redis, RedisURL) else RedisURL.parse(redis)
        self.crawl = check_crawl_name(crawl)
        self.settings = Settings.of(settings)
        # The crawl settings given are checked against the crawl's at the start of run(),
        # which then adopts the crawl's: one value per crawl; a heartbeat may bring new ones.
        self.given_crawl = {k: getattr(self.settings, k) for k in settings if k in CRAWL}
        self.crawl_settings: CrawlSettings | None = None
        self.settings_refused: ConfigError | None = None  # why the crawl's stopped it
        self.id = new_worker_id()
        self.faults = faults
        self._fetcher = fetcher
        self.spider = spider() if isinstance(spider, type) else spider
        if parse is not None and self.spider is not None:
            raise ConfigError("give a Worker either parse or spider, not both")
        if self.spider is not None:
            self.handler = Handler(
                self.spider.parse,
                callbacks=functools.partial(callback_of, self.spider),
                blocking=bool(self.spider.blocking),
                settings=self.settings,
            )
        else:
            self.handler = Handler(parse, settings=self.settings)
        self.sink = sink if sink is not None else sink_for("-", fsync=self.settings.fsync)
        self.counters = Counters()  # counts across memberships
        self.tally = Tally()  # counts across memberships, for /metrics and the heartbeat
        self._stop_requested = False
        self.instance = ""  # the crawl's instance marker, learnt at the first join
        self.spider_name = _spider_name(self.spider, parse)

    def run_sync(self) -> None:
        """Run until the crawl ends or a stop is requested (blocking)."""
        trio.run(self.run)

    def stop(self) -> None:
        """Ask for a graceful stop: finish what is in flight, hand hosts back, return."""
        self._stop_requested = True
        if self._driver is not None:
            self._driver.request_stop()

    def take_settings(self, settings: Settings) -> None:
        """Use ``settings`` from now on: here, in the handler and in the membership."""
        self.settings = settings
        self.handler.settings = settings
        if self._driver is not None:
            self._driver.take_settings(settings)

    def refuse(self, why: ConfigError) -> None:
        """Stop, because the crawl's settings no longer fit; :meth:`run` raises ``why``."""
        self.settings_refused = why
        self.stop()

    @property
    def stop_requested(self) -> bool:
        """Whether a stop was asked for (by :meth:`stop`, or by a --max-* limit)."""
        return self._stop_requested

    @property
    def session(self) -> Session | None:
        """The current membership's state, if the worker is a member now."""
        return self._driver.session if self._driver is not None else None

    _driver: Driver | None = None
    _store: WorkerStore | None = None

    async def run(self) -> None:
        """Crawl until the fleet has been idle ``idle`` seconds, or until stopped.

        Raises:
            QueueError: Redis could not be reached for a whole lease.
            ConfigError: a crawl setting given differs from the crawl's, or the crawl's
                stored settings are not usable (see ``_crawlconfig``).
        """
        # Take the crawl's settings (or record these) before they are used.
        settings, self.crawl_settings = await trio.to_thread.run_sync(
            _crawlconfig.adopt_at, self.url, self.crawl, self.settings, self.given_crawl
        )
        self.take_settings(settings)
        metrics = self._serve_metrics()  # a port in use is a bad flag, found at once
        store: WorkerStore = Store(self.url, self.crawl, timeout=self.settings.answer_timeout)
        self._store = store
        own_fetcher = self._fetcher is None
        fetcher = self._fetcher or HttpxFetcher(
            user_agent=self.settings.user_agent,
            timeout=self.settings.timeout,
            max_body=self.settings.max_body,
            max_connections=self.settings.concurrency,
            max_per_host=self.settings.per_host,
            headers=header_pairs(self.settings.headers),
            allow_nets=self.settings.allow_nets,
            allow_private=self.settings.allow_private,
        )
        try:
            if self.spider is not None and self.spider.start_urls:
                urls = list(self.spider.start_urls)
                await trio.to_thread.run_sync(submit_urls, store, urls)
            while True:
                self._driver = Driver(self, store, fetcher)
                if self._stop_requested:
                    return
                try:
                    await self._driver.run()
                    if self.settings_refused is not None:  # stopped by the crawl's settings
                        raise self.settings_refused
                    return
                except Fenced as exc:
                    known = self.instance  # none yet: fenced before its first join
                    if known and await _marker_gone(store, known, self.settings.lease):
                        raise StateLost(f"{LOST}; worker {self.id} stops") from None
                    # Others took back what this worker held: start afresh under a new id.
                    log.warning("%s; rejoining as a new member", exc)
                    self.counters.fenced += 1
                    self.id = new_worker_id()
        finally:
            self._driver = None
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
            if own_fetcher:
                await fetcher.aclose()  # type: ignore[attr-defined]
            store.close()

    def _serve_metrics(self) -> Any:
        if self.settings.metrics_port is None:
            return None
        from hashcrawl._run._metrics import serve

        return serve(self, self.settings.metrics_port, self.settings.metrics_addr)

    def fleet_counters(self) -> dict[str, int]:
        """Fleet-wide counters from Redis, for a metrics scrape (never the page path)."""
        if self._store is None:
            return {}
        return self._store.fleet_counters()


def _spider_name(spider: Spider | None, parse: Parse | None) -> str:
    """What a worker records at join as its spider, so status shows a mixed fleet."""
    if spider is not None:
        return str(getattr(spider, "name", "") or type(spider).__qualname__)
    return getattr(parse, "__qualname__", "parse") if parse is not None else "-"


async def _in_worker_thread(
    fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter | None = None
) -> T:
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter)


async def _marker_gone(store: WorkerStore, instance: str, lease: float) -> bool:
    """Whether the crawl's instance marker is no longer ``instance``, asked for a lease.

    Raises:
        QueueError: Redis did not answer for a whole lease.
    """
    deadline = trio.current_time() + lease
    while True:
        try:
            return await trio.to_thread.run_sync(store.instance) != instance
        except QueueError:
            if trio.current_time() > deadline:
                raise
            await trio.sleep(1.0)


class Driver:
    """One membership of a worker under trio: the IO its :class:`Session` asks for.

    Args:
        worker: the worker this membership is of (its id, settings, handler, sink).
        store: the crawl's Redis store.
        fetcher: fetches requests.
        call: runs one blocking store call (default: in a worker thread).
        spawn: starts a fetch task (default: in this membership's nursery).
        offload: runs other blocking work, parsing a robots.txt or writing items
            (default: in a worker thread, off the event loop).
    """

    def __init__(
        self,
        worker: Worker,
        store: WorkerStore,
        fetcher: Fetcher,
        *,
        call: Call | None = None,
        spawn: Spawn | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.worker = worker
        self.settings = worker.settings
        self.store = store
        self.fetcher = fetcher
        self.limiter = trio.CapacityLimiter(4)
        self.robots_limiter = trio.CapacityLimiter(2)  # threads checking heavy robots.txt
        self.call: Call = call if call is not None else self._in_thread
        self._spawn = spawn
        self.offload: Offload = offload if offload is not None else _in_worker_thread
        self.session = Session(
            worker=worker.id,
            settings=worker.settings,
            stream_of=store.stream_of,
            inbox=store.inbox,
            accepts=worker.handler.accepts,
            spider_name=worker.spider_name,
            counters=worker.counters,
            tally=worker.tally,
            jars=Jars(),
            now=self.now(),
            faults=worker.faults,
        )
        self.scopes: dict[str, trio.CancelScope] = {}  # fetches a handoff may cut short
        self.changed = Signal()
        self.epoch_changed = trio.Event()
        self.orphans_waiting = trio.Event()
        self.pace_due = trio.Event()
        self.commit_soon = trio.Event()
        self.flushed = trio.Event()
        self.settings_due = trio.Event()  # a heartbeat named new crawl settings

    # -- plumbing ------------------------------------------------------------------------

    async def _in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call in a thread; cancellable at once."""
        return await trio.to_thread.run_sync(
            lambda: fn(*args, **kwargs), limiter=self.limiter, abandon_on_cancel=True
        )

    async def persist(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Retry a store call at most a second apart until it succeeds.

        Raises:
            QueueError: it kept failing for a whole lease.
        """
        failing_since = None
        lease = self.settings.lease
        while True:
            try:
                return await self.call(fn, *args, **kwargs)  # type: ignore[no-any-return]
            except Fenced:
                raise
            except QueueError as exc:
                now = self.now()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > lease:
                    # Redis answers heartbeats but refuses this (out of memory, say):
                    # stop rather than keep work nobody else can take over.
                    raise QueueError(f"{exc}; still failing after a lease ({lease:g} s)") from None
                log.debug("retrying: %s", exc)
                await trio.sleep(self.settings.beat_interval)

    def now(self) -> float:
        return trio.current_time()

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._spawn is not None:
            self._spawn(fn, *args)
        else:
            self.nursery.start_soon(fn, *args)

    def wake(self) -> None:
        """Wake the loops whose turn the session's state now asks for."""
        session = self.session
        if session.epoch_waiting:
            self.epoch_changed.set()
        if session.orphans_waiting:
            self.orphans_waiting.set()
        if session.carry.due:
            self.pace_due.set()
        self.changed.notify()

    def take_settings(self, settings: Settings) -> None:
        self.settings = settings
        self.session.take_settings(settings)

    def request_stop(self) -> None:
        self.session.stopping = True
        self.wake()

    def check_limits(self) -> None:
        settings = self.settings
        memory = _resident_mib() if settings.max_memory else 0.0
        if self.session.check_limits(self.now(), memory):
            self.worker.stop()

    # -- the session -----------------------------------------------------------------------

    async def run(self) -> None:
        await self.begin()
        try:
            async with unwrapped(), trio.open_nursery() as nursery:
                self.nursery = nursery
                for loop in (
                    self.heartbeat_loop,
                    self.reader_loop,
                    self.dispatch_loop,
                    self.commit_loop,
                    self.apply_loop,
                    self.drain_loop,
                    self.pace_loop,
                    self.unpark_loop,
                    self.forget_loop,
                    self.settings_loop,
                ):
                    nursery.start_soon(loop)
            await self.leave()
        finally:
            self.worker.sink.flush()

    async def begin(self) -> None:
        """Join the ring, adopt its epoch and learn the crawl's scope and parked hosts."""
        worker, session = self.worker, self.session
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(time.time()),
            "lease_ms": int(self.settings.lease * 1000),  # so status can tell a stale member
            "spider": worker.spider_name,
        }
        if not worker.instance:
            warning = await self.persist(self.store.durability_warning)
            if warning:
                log.warning("%s", warning)
        sent = self.now()
        now_ms, _, worker.instance = await self.persist_join(info)
        session.joined(sent, self.now(), now_ms)
        await self.persist(self.store.widen_scope, session.own_scope())
        await self.read_scope()
        epoch, members = await self.persist(self.store.members)
        session.members_read(epoch, members, first=True)
        await self.find_parked()
        log.info(
            "%s joined crawl %s at epoch %d with %d members",
            session.id,
            worker.crawl,
            epoch,
            len(members),
        )

    async def persist_join(self, info: dict[str, Any]) -> tuple[int, int, str]:
        deadline = self.now() + self.settings.lease
        while True:
            try:
                worker = self.worker
                joined = self.store.join
                return await self.call(joined, worker.id, info, instance=worker.instance)  # type: ignore[no-any-return]
            except Fenced:
                raise
            except QueueError:
                if self.now() > deadline:
                    raise
                await trio.sleep(1.0)

    async def read_scope(self) -> None:
        """Learn the crawl's scope (at join, and when a commit finds that it has grown)."""
        self.session.scope_read(await self.persist(self.store.scope))

    async def find_parked(self) -> None:
        """Learn which hosts this owner has overflow sets for (at join and on handoffs)."""
        self.session.parked_read(await self.persist(self.store.parked_hosts))

    async def read_members(self) -> None:
        epoch, members = await self.persist(self.store.members)
        self.session.members_read(epoch, members)

    # -- heartbeat and the end ---------------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        while True:
            beat = await self.beat_once()
            if beat is not None and self.ends_with(beat):
                self.nursery.cancel_scope.cancel()
                return
            with trio.move_on_after(self.settings.beat_interval):
                if beat is not None and self.session.stopping:
                    await self.flushed.wait()
                else:
                    await trio.sleep_forever()

    def ends_with(self, beat: Beat) -> bool:
        """Whether the membership ends after ``beat``: the crawl is over, or this worker
        was asked to stop before this beat and has committed everything since. (A limit
        this beat finds reached ends the membership at a later beat.)"""
        session = self.session
        flushed = session.flushed()
        self.check_limits()
        return session.finished(beat) or flushed

    async def beat_once(self) -> Beat | None:
        """One heartbeat: renew membership and learn the fleet's state; None on failure.

        Raises:
            Fenced: the worker is no longer a member.
            QueueError: no heartbeat got through for a whole lease.
        """
        session = self.session
        sent = self.now()
        asked = session.beat_request(sent, resident_kib=int(_resident_mib() * 1024))
        try:
            beat: Beat = await self.call(
                self.store.heartbeat, session.id, **asked, instance=self.worker.instance
            )
        except QueueError as exc:
            session.beat_failed(sent, exc)
            log.info("heartbeat failed: %s", exc)
            return None
        session.beat_answered(beat, sent, self.now())
        if _crawlconfig.newer(self.worker.crawl_settings, beat):
            self.settings_due.set()
        self.wake()
        return beat

    async def leave(self) -> None:
        """Hand every host back at once: out of the ring, stream drained to new owners.

        Runs after every other task of the session has stopped.
        """
        session = self.session
        session.stopping = True
        lease = self.settings.lease
        try:
            with trio.fail_after(lease):
                await self.flush_now()
                pace = session.pace_records(session.leaving_hosts(), self.now())
                await self.persist(self.store.leave, session.id, pace)
                await self.drain(session.stream)
        except trio.TooSlowError:
            raise QueueError(f"could not leave the crawl within a lease ({lease:g} s)") from None
        log.info("%s left the crawl", session.id)

    async def settings_loop(self) -> None:
        """Take on the crawl's settings whenever a heartbeat names a new version."""
        while True:
            await self.settings_due.wait()
            self.settings_due = trio.Event()
            await self.follow_settings()

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

    # -- reading the stream --------------------------------------------------------------------

    async def reader_loop(self) -> None:
        while not self.session.stopping:
            if self.session.backlogged():
                self.commit_soon.set()
                await self.changed.wait()
                continue
            try:
                await self.read_once(block_ms=500)
            except QueueError as exc:
                log.debug("read failed: %s", exc)
                await trio.sleep(self.settings.beat_interval)

    async def read_once(self, *, block_ms: int) -> int:
        """One read of this worker's stream into its frontier; returns entries read."""
        session = self.session
        read = session.read_request()
        try:
            got = await self.call(
                self.store.read, session.id, count=read.count, block_ms=block_ms, after=read.after
            )
        except QueueError:
            session.read_failed()
            raise
        session.read_answered(read, got)
        self.wake()
        return len(got)

    async def unpark_loop(self) -> None:
        """Bring parked entries back as their hosts run short (checked a few times a second)."""
        while True:
            await self.unpark_turn()
            await trio.sleep(0.2)

    async def unpark_turn(self) -> list[str]:
        """One pass over the parked hosts; returns the hosts that took entries back."""
        session, took = self.session, []
        for name in session.unpark_wanted():
            wanted = session.may_unpark(name)
            if wanted is None:
                break
            if not wanted:
                continue
            status, moved, left = await self.persist(
                self.store.unpark, session.id, session.latest.epoch, name, PARK_AT - UNPARK_BELOW
            )
            session.unparked(name, status, left)
            if moved:
                took.append(name)
        return took

    async def forget_loop(self) -> None:
        """Every few seconds, forget hosts long idle (see ``Session.forget_idle``)."""
        while True:
            await trio.sleep(FORGET_EVERY)
            self.session.forget_idle(self.now())

    async def pace_loop(self) -> None:
        while True:
            await self.pace_due.wait()
            self.pace_due = trio.Event()
            await self.pace_turn()

    async def pace_turn(self) -> list[str]:
        """Read the previous owners' pacing state for the hosts whose turn it is."""
        session = self.session
        hosts = session.take_due_pace()
        if hosts:
            settled = session.settled
            records = await self.persist(self.store.pace, hosts)
            session.pace_loaded(hosts, records, settled)
            self.wake()
        return hosts

    # -- dispatching ---------------------------------------------------------------------------

    async def dispatch_loop(self) -> None:
        session = self.session
        while not session.stopping:
            wake = self.dispatch_turn()
            with trio.move_on_at(max(wake, self.now() + 0.001)):
                await self.changed.wait()
        with trio.move_on_after(self.settings.grace):
            while session.in_flight:
                await self.changed.wait()
        # Past the grace period: what is still in flight stays pending in the stream,
        # and goes to the hosts' new owners with the rest.
        for scope in self.scopes.values():
            scope.cancel()

    def dispatch_turn(self) -> float:
        """Start every fetch the session allows now; returns when to look again."""
        while isinstance(got := self.dispatch_one(), Held):
            pass
        return got

    def dispatch_one(self) -> Held | float:
        """Start the next fetch the session allows, or say when to look again."""
        got = self.session.next_fetch(self.now())
        if isinstance(got, Held):
            self.scopes[got.eid] = trio.CancelScope()
            self.spawn(self.fetch_one, got)
        return got

    async def fetch_one(self, held: Held) -> None:
        session = self.session
        outcome = None
        scope = self.scopes.setdefault(held.eid, trio.CancelScope())
        try:
            with scope:
                noted = session.fetch_started(held)
                if noted is not None:
                    await self.persist(self.store.note_in_flight, session.id, *noted)
                outcome = await self.fetch_guarded(held)
            if scope.cancelled_caught:
                outcome = session.put_back(held, self.now())
        finally:
            del self.scopes[held.eid]
            commit_now = session.fetch_ended(held, outcome, self.now())
            self.wake()
        if commit_now:
            self.commit_soon.set()
        self.check_limits()

    async def fetch_guarded(self, held: Held) -> Outcome | None:
        """:meth:`fetch_and_handle`, where nothing the network or user code raises gets
        out: it fails this page only. A handoff may cut the fetch short (see apply)."""
        try:
            return await self.fetch_and_handle(held)
        except Exception as exc:  # e.g. a LookupError from a bogus charset
            log.exception("fetching %s failed", held.entry.url)
            return self.session.failed(
                held, f"{type(exc).__name__}: {exc}", kind="other", now=self.now()
            )

    async def fetch_and_handle(self, held: Held) -> Outcome | None:
        """Do the steps the core's :class:`Page` asks for, in its order, until it is done."""
        page = Page(self.session, held, self.now())
        response = None  # the page's, from SEND to HANDLE
        while page.step is not Step.DONE:
            if page.step is Step.HANDLE:
                assert response is not None
                await self.handle(page, response)
            elif page.step is Step.CHECK_RULES:
                assert page.rules is not None
                page.checked(await self.robots_allow(page.rules, held.entry.url))
            elif not self.may_send(held):
                page.not_sent(self.now())
            elif page.step is Step.FETCH_ROBOTS:
                try:
                    page.robots_fetched(await self.fetch_robots(held), self.now())
                except NotSent:
                    page.not_sent(self.now())
            else:
                response = await self.send_page(page)
        return page.outcome

    async def send_page(self, page: Page) -> Response | None:
        """Send ``page``'s request; returns the response, if one came."""
        held = page.held
        request = request_of(held.entry, page.cookie)
        page.sending()
        sent = self.now()
        try:
            response = await self.send(held, request)
        except NotSent:
            page.not_sent(self.now())
            return None
        except Exception as exc:  # a user's fetcher may raise anything: a failed page
            if not isinstance(exc, FetchError):
                log.exception("fetcher failed on %s", held.entry.url)
            page.send_failed(exc, self.now() - sent, self.now())
            return None
        page.answered(response, self.now() - sent, self.now(), set_cookies(response))
        return response

    async def handle(self, page: Page, response: Response) -> None:
        assert page.origin is not None
        try:
            page.handled(await self.worker.handler.handle(page.held, response, page.origin))
        except Exception as exc:  # a parse callback's bug fails its page, not the worker
            log.exception("parsing %s failed", page.held.entry.url)
            page.handle_failed(exc, self.now())

    def may_send(self, held: Held) -> bool:
        """Ask the session, right before a request leaves, whether it still may."""
        if "send_unchecked" in self.worker.faults:  # a deliberate bug the end-to-end tests catch
            return True
        return self.session.may_send(held, self.now())

    async def send(self, held: Held, request: Request) -> Response:
        """Fetch ``request`` on ``held``'s behalf, asking :meth:`may_send` once more as
        the request is written (with the default fetcher): a wait for a connection, or
        a pause, can come between the worker's check and the socket.

        Raises:
            NotSent: the check said no; nothing reached the host.
        """
        with sending_only_while(lambda: self.may_send(held)):
            return await self.fetcher.fetch(request)

    async def fetch_robots(self, held: Held) -> Robots | Unreachable:
        """Fetch a host's robots.txt, per RFC 9309 (see ``_robots``): the rules, or why
        it is unreachable. Nothing a robots.txt or its server does raises out of here: a
        fetcher's failure counts as an unreachable robots.txt.

        Raises:
            NotSent: this worker may no longer fetch the host; nothing was asked.
        """
        fetch = RobotsFetch(held.entry.url, self.settings.user_agent)
        got: str | Robots | Unreachable = fetch.url
        while isinstance(got, str):
            if fetch.hops:  # a redirect: its target waits the delay, as any request would
                await trio.sleep(self.settings.delay)
            try:
                response = await self.send(held, Request(got))
                # Parsing 500 KiB of rules takes a good part of a second: not on the loop.
                answered = functools.partial(fetch.answered, truncated=response.truncated)
                got = await self.offload(
                    answered, response.status, response.headers, response.body, time.time()
                )
            except NotSent:
                raise
            except Refused:  # a hop to an address not allowed: no file there
                got = Robots.allow_all()
            except Exception as exc:  # a user's fetcher may raise anything: unreachable
                if not isinstance(exc, FetchError):
                    log.exception("fetcher failed on %s", got)
                got = fetch.failed(f"{type(exc).__name__}: {exc}")
        return got

    async def robots_allow(self, robots: Robots, url: str) -> bool:
        if not robots.heavy:
            return robots.allowed(url)
        return await self.offload(robots.allowed, url, limiter=self.robots_limiter)  # type: ignore[no-any-return]

    # -- committing ----------------------------------------------------------------------------

    async def commit_loop(self) -> None:
        session = self.session
        while True:
            if session.outcomes:
                await self.commit_turn()
            if session.flushed():
                self.flushed.set()
            if len(session.outcomes) < COMMIT_MAX:
                with trio.move_on_after(COMMIT_EVERY):
                    await self.commit_soon.wait()
            self.commit_soon = trio.Event()

    async def flush_now(self) -> None:
        while self.session.outcomes:
            await self.commit_turn()

    async def commit_turn(self) -> int:
        """Write the oldest outcomes' items, then acknowledge and route them atomically;
        returns how many outcomes were committed."""
        session = self.session
        commit = session.next_commit()
        if not commit.outcomes:
            return 0
        write_first = "ack_before_write" not in self.worker.faults  # off: a deliberate bug to catch
        if commit.items and write_first:
            await self.write_items(commit)
        session.commit_written(commit)
        while True:
            batch = session.commit_batch(commit, self.now())
            sent = self.now()
            result = await self.persist(self.store.commit, batch)
            status = session.committed(commit, batch, result, self.now() - sent)
            if status is Status.OK:
                break
            if status is Status.RESCOPE:
                await self.read_scope()
                continue
            await self.read_members()
            self.wake()
        if commit.items and not write_first:
            await self.write_items(commit)
        self.wake()
        return len(commit.outcomes)

    async def write_items(self, commit: Commit) -> None:
        sink = self.worker.sink

        def write() -> None:
            sink.write(commit.items)
            sink.flush()

        await self.offload(write)
        self.session.items_written(len(commit.items))

    # -- membership changes -------------------------------------------------------------------

    async def apply_loop(self) -> None:
        while True:
            await self.epoch_changed.wait()
            self.epoch_changed = trio.Event()
            await self.apply_turn()

    async def apply_turn(self) -> Ring | None:
        """Apply the newest epoch, if one waits; returns it."""
        ring = self.session.take_epoch()
        if ring is not None:
            await self.apply(ring)
        return ring

    async def apply(self, ring: Ring) -> None:
        """Adopt a new epoch: stop the hosts it takes away, then hand them over.

        A request still out to a host given away gets a short wait, then the handoff
        goes ahead without it: the request is cancelled at the latest --grace (or
        --timeout, if sooner) seconds from now, and the host's pace record says it was
        busy until then, so its new owner waits for that before its own first request.
        The entry stays this worker's until the request ends, then is committed as usual
        (or, cancelled, forwarded to the new owner). So no slow server holds up the
        fleet's epoch.
        """
        session, settings = self.session, self.settings
        handoff = session.handoff_begin(ring)
        with trio.move_on_after(min(HANDOFF_WAIT, settings.grace)):
            while session.handoff_busy(handoff):
                await self.changed.wait()
        # A request outlives neither --grace nor its own --timeout: the sooner bounds how
        # long the new owner must take the host for busy.
        self.cut_short(handoff, self.now() + min(settings.grace, settings.timeout))
        batch = session.handoff_batch(handoff, self.now())
        result = await self.persist(self.store.commit, batch)
        if not session.handoff_committed(handoff, result):
            # A newer epoch exists: read it now and apply that one (not this one again).
            await self.read_members()
            self.wake()
            return
        await self.find_parked()
        session.handoff_done(handoff)
        self.wake()

    def cut_short(self, handoff: Handoff, deadline: float) -> None:
        for eid in self.session.cut_short(handoff, deadline):
            scope = self.scopes.get(eid)
            if scope is not None:
                scope.deadline = min(scope.deadline, deadline)

    async def drain_loop(self) -> None:
        while True:
            await self.orphans_waiting.wait()
            self.orphans_waiting = trio.Event()
            await self.drain_turn()

    async def drain_turn(self) -> list[str]:
        """Drain every departed worker's stream there is; returns the streams drained."""
        drained: list[str] = []
        if not self.session.orphans_waiting:
            return drained
        self.session.orphans_waiting = False
        while (stream := await self.persist(self.store.orphan)) is not None:
            await self.drain(stream)
            drained.append(stream)
        return drained

    async def drain(self, stream: str) -> None:
        """Move every entry left in ``stream`` to its host's owner (see
        ``Session.orphans_batch``), then release the stream."""
        session = self.session
        departed = session.departed(stream)
        dying = await self.persist(self.store.in_flight_of, stream) if departed else None
        while True:
            got = await self.persist(self.store.entries, stream, count=500)
            if not got:
                if await self.persist(self.store.release, stream):
                    return
                continue
            epoch, members = await self.persist(self.store.members)
            batch = session.orphans_batch(stream, got, Ring.of(epoch, members), dying, self.now())
            session.drained(await self.persist(self.store.commit, batch))
