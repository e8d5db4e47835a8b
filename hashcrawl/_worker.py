"""A worker: one member of the fleet, owning the hosts the ring gives it.

One nursery owns every task of a worker session:

- the heartbeat renews membership, learns of epochs and ends the crawl when idle;
- the reader moves entries from the worker's stream into its frontier (or forwards
  entries of hosts it does not own);
- the dispatcher starts fetches when a host's pacing allows, and only while this
  worker's membership is fresh and every member has applied the epoch it owns by;
- the committer writes items, flushes, then acknowledges and routes links atomically;
- the applier hands over the hosts a new epoch takes away;
- the drainer moves departed workers' streams to their hosts' new owners.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

import attrs
import httpx
import trio

from . import _crawlconfig
from ._cookies import Jars
from ._crawlconfig import CrawlSettings
from ._entry import BadEntry, Entry
from ._exceptions import (
    ConfigError,
    Fenced,
    FetchError,
    InvalidURL,
    QueueError,
    Refused,
    StateLost,
)
from ._faults import FAULTS
from ._fetch import Fetcher, HttpxFetcher, NotSent, sending_only_while
from ._frontier import Frontier, Held, Host
from ._handling import Handler, Outcome, Parse, dead_letter, retry_wait
from ._metrics import Tally
from ._models import Request, Response
from ._queue import submit_urls
from ._redisurl import RedisURL, check_crawl_name
from ._ring import Ring
from ._robots import RULES_TTL, Robots, RobotsFetch, Unreachable
from ._scope import Scope
from ._scope import members as scope_members
from ._settings import CRAWL, Settings, header_pairs
from ._sinks import Sink, sink_for
from ._sitemaps import first_sitemaps
from ._spider import Spider
from ._store import LOST, Batch, Beat, Store
from ._urls import fingerprint, host_key

log = logging.getLogger("hashcrawl")
T = TypeVar("T")
SEEN_CACHE = 200_000
# A commit costs ~10 Redis commands however few pages it carries, so waiting 200 ms
# keeps a worker with few hosts near 1 command per page; one whose --concurrency fills
# up commits at once anyway (saturated() below), so the fetcher never waits on this.
COMMIT_EVERY = 0.2
COMMIT_MAX = 200
HANDOFF_WAIT = 1.0  # seconds a handoff waits for requests out to the hosts it gives away
# A host with nothing queued or in flight is forgotten after this long idle, and beyond
# this many such hosts at once, the least recently used: its robots.txt rules (tens of
# KiB once parsed) and pacing are rebuilt if it comes back.
IDLE_HOST_SECONDS = 300.0
IDLE_HOSTS_KEPT = 1000
FORGET_EVERY = 2.0
PARK_AT = 16  # with memory full, a host with this many queued parks the rest
UNPARK_BELOW = 4  # a parked host with fewer queued takes some back


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


@attrs.define
class Counters:
    fetched: int = 0
    failed: int = 0
    items: int = 0
    robots_denied: int = 0
    fenced: int = 0
    links_dropped: int = 0
    host_capped: int = 0


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
        **settings: Any,
    ) -> None:
        """Args:
        redis: the Redis URL (``redis://``, ``rediss://``, ``redis+unix://``).
        crawl: the crawl's name; every worker of one crawl uses the same.
        fetcher: fetches requests (default: httpx); pacing and robots.txt still apply.
        parse: a callback from a response to items and requests to follow.
        spider: a :class:`Spider` (class or instance) instead of ``parse``.
        sink: where items go (default: JSON Lines on standard output).
        settings: any field of :class:`Settings` (delay, per_host, concurrency, ...).

        Raises:
            ConfigError: a bad URL, crawl name or setting, or both parse and spider.
        """
        self.url = redis if isinstance(redis, RedisURL) else RedisURL.parse(redis)
        self.crawl = check_crawl_name(crawl)
        self.settings = Settings.of(settings)
        # Issue 12: the crawl settings given are checked against the crawl's at the start
        # of run(), which then adopts the crawl's; a heartbeat may bring new ones.
        self.given_crawl = {k: getattr(self.settings, k) for k in settings if k in CRAWL}
        self.crawl_settings: CrawlSettings | None = None
        self.settings_refused: ConfigError | None = None  # why the crawl's stopped it
        self.following_settings = False
        self.id = new_worker_id()
        self._fetcher = fetcher
        self.spider = spider() if isinstance(spider, type) else spider
        if parse is not None and self.spider is not None:
            raise ConfigError("give a Worker either parse or spider, not both")
        if self.spider is not None:
            self.handler = Handler(
                self.spider.parse,
                callbacks=self.spider._callback,
                blocking=bool(self.spider.blocking),
            )
        else:
            self.handler = Handler(parse)
        self.sink = sink if sink is not None else sink_for("-", fsync=self.settings.fsync)
        self.counters = Counters()
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
        if self._session is not None:
            self._session.request_stop()

    _session: _Session | None = None
    _store: Store | None = None

    async def run(self) -> None:
        """Crawl until the fleet has been idle ``idle`` seconds, or until stopped.

        Raises:
            QueueError: Redis could not be reached for a whole lease.
            ConfigError: a crawl setting given differs from the crawl's, or the crawl's
                stored settings are not usable (see ``_crawlconfig``).
        """
        # Issue 12: take the crawl's settings (or record these), before they are used.
        self.settings, self.crawl_settings = await trio.to_thread.run_sync(
            _crawlconfig.adopt_at, self.url, self.crawl, self.settings, self.given_crawl
        )
        metrics = self._serve_metrics()  # a port in use is a bad flag, found at once
        store = self._store = Store(self.url, self.crawl, timeout=self.settings.answer_timeout)
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
                self._session = _Session(self, store, fetcher)
                if self._stop_requested:
                    return
                try:
                    await self._session.run()
                    _crawlconfig.refused(self)  # issue 12: stopped by the crawl's settings
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
            self._session = None
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
            if own_fetcher:
                await fetcher.aclose()  # type: ignore[attr-defined]
            store.close()

    def _serve_metrics(self) -> Any:
        if self.settings.metrics_port is None:
            return None
        from ._metrics import serve

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


async def _marker_gone(store: Store, instance: str, lease: float) -> bool:
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


class _Session:
    """One membership of a worker, from join to leave (or to being fenced)."""

    def __init__(self, worker: Worker, store: Store, fetcher: Fetcher) -> None:
        self.w = worker
        self.id = worker.id
        self.s = worker.settings
        self.store = store
        self.fetcher = fetcher
        self.stream = store.stream_of(self.id)
        self.frontier = Frontier(delay=self.s.delay, per_host=self.s.per_host)
        self.ring = Ring.of(0, ())
        self.latest = self.ring
        self.applied = 0
        self.settled = 0
        self.offset_ms = 0.0
        self.rtt = 0.0
        self.confirmed_at = -math.inf
        self.joined_ms = 0
        self.robots: dict[str, Robots] = {}
        self.scope = Scope()
        self.sitemapped: set[str] = set()  # hosts whose sitemaps this session queued
        self.robots_busy: dict[str, trio.Event] = {}
        # Requests under way: entry id -> (host, the scope a handoff may cancel them by).
        self.fetching: dict[str, tuple[str, trio.CancelScope]] = {}
        self.taken: dict[str, int] = {}  # host -> page requests (with --max-pages-per-host)
        self.robots_limiter = trio.CapacityLimiter(2)  # threads checking heavy robots.txt
        self.outcomes: list[Outcome] = []
        self.in_flight = 0
        self.seen_cache: dict[tuple[int, int], None] = {}
        self.stopping = False
        self.changed = Signal()
        self.epoch_changed = trio.Event()
        self.orphans_waiting = trio.Event()
        self.flushed = trio.Event()
        self.done_fetching = trio.Event()
        self.limiter = trio.CapacityLimiter(4)
        self.counters = worker.counters = Counters()
        self.tally_base = worker.tally.counts()  # the heartbeat reports this membership's
        self.parked: set[str] = set()
        self.unpaced: set[str] = set()  # hosts whose pace record is not to be read yet
        self.pace_read: dict[str, str] = {}  # pace records read: the next commit deletes them
        self.jars = Jars()  # the cookies of the hosts this worker owns
        self.last_read = "0"  # the newest entry id this reader has taken in
        self.unsure = False  # a read failed: Redis may have delivered what never came
        self.suspects: set[str] = set()
        self.suspects_noted = 0  # records of them made, so a late one loses to a newer
        self.isolating = False
        self.written: set[int] = set()
        self.uncommitted = 0
        self.slotted: set[int] = set()  # ids of outcomes counted in uncommitted
        self.commit_soon = trio.Event()
        self.items_pending = 0
        self.started = trio.current_time()

    # -- plumbing ------------------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
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
        while True:
            try:
                return await self.call(fn, *args, **kwargs)
            except Fenced:
                raise
            except QueueError as exc:
                now = self.now()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > self.s.lease:
                    # Redis answers heartbeats but refuses this (out of memory, say):
                    # stop rather than keep work nobody else can take over.
                    raise QueueError(
                        f"{exc}; still failing after a lease ({self.s.lease:g} s)"
                    ) from None
                log.debug("retrying: %s", exc)
                await trio.sleep(min(1.0, self.s.beat_interval))

    def now(self) -> float:
        return trio.current_time()

    def poke(self) -> None:
        self.changed.notify()

    def request_stop(self) -> None:
        self.stopping = True
        self.poke()

    # -- the session -----------------------------------------------------------------

    async def run(self) -> None:
        await self.begin()
        try:
            async with unwrapped(), trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self.heartbeat_loop)
                nursery.start_soon(self.reader_loop)
                nursery.start_soon(self.dispatch_loop)
                nursery.start_soon(self.commit_loop)
                nursery.start_soon(self.apply_loop)
                nursery.start_soon(self.drain_loop)
                nursery.start_soon(self.unpark_loop)
                nursery.start_soon(self.forget_loop)
            await self.leave()
        finally:
            self.w.sink.flush()

    async def begin(self) -> None:
        """Join the ring and adopt its epoch (the first step of a session)."""
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": int(time.time()),
            "lease_ms": int(self.s.lease * 1000),  # so status can tell a stale member
            "spider": self.w.spider_name,
        }
        if not self.w.instance:
            warning = await self.persist(self.store.durability_warning)
            if warning:
                log.warning("%s", warning)
        sent = self.now()
        now_ms, epoch, self.w.instance = await self.persist_join(info)
        self._clock_sample(sent, now_ms)
        self.joined_ms = now_ms
        own = scope_members(domains=self.s.allow_domains, span=self.s.span_hosts)
        await self.persist(self.store.widen_scope, own)
        await self.read_scope()
        epoch, members = await self.persist(self.store.members)
        self.ring = self.latest = Ring.of(epoch, members)
        # Applied, but not settled: until a heartbeat says every member has applied this
        # epoch, a host gained by joining may still be in its previous owner's hands.
        self.applied, self.settled = epoch, 0
        self.confirmed_at = sent
        log.info(
            "%s joined crawl %s at epoch %d with %d members",
            self.id,
            self.w.crawl,
            epoch,
            len(members),
        )

    async def persist_join(self, info: dict[str, Any]) -> tuple[int, int, str]:
        deadline = self.now() + self.s.lease
        while True:
            try:
                return await self.call(self.store.join, self.id, info, instance=self.w.instance)
            except Fenced:
                raise
            except QueueError:
                if self.now() > deadline:
                    raise
                await trio.sleep(1.0)

    async def read_scope(self) -> None:
        """Learn the crawl's scope (at join, and when a commit finds that it has grown)."""
        self.scope = Scope.from_members(await self.persist(self.store.scope))

    def _clock_sample(self, sent: float, server_ms: int) -> None:
        received = self.now()
        self.rtt = received - sent
        self.offset_ms = server_ms - (sent + received) / 2 * 1000

    def local_time(self, server_ms: float) -> float:
        return (server_ms - self.offset_ms) / 1000

    def server_ms(self, local: float) -> int:
        return int(local * 1000 + self.offset_ms)

    # -- heartbeat and the end -------------------------------------------------------

    async def heartbeat_loop(self) -> None:
        while True:
            beat = await self.beat_once()
            if beat is None:
                await trio.sleep(min(1.0, self.s.beat_interval))
                continue
            self.check_limits()
            if self.finished(beat) or (self.stopping and self.flushed.is_set()):
                self.nursery.cancel_scope.cancel()
                return
            with trio.move_on_after(self.s.beat_interval):
                await self._stopped_fetching_or_never()

    async def beat_once(self) -> Beat | None:
        """One heartbeat: renew membership and learn the fleet's state; None on failure.

        Raises:
            Fenced: the worker is no longer a member.
            QueueError: no heartbeat got through for a whole lease.
        """
        sent = self.now()
        try:
            beat = await self.call(
                self.store.heartbeat,
                self.id,
                lease_ms=int(self.s.lease * 1000),
                # Expiring members that are not silent is a deliberate bug to catch.
                expire_ms=0 if "reclaim_live" in FAULTS else None,
                applied=self.applied,
                known_epoch=self.latest.epoch,
                stats=self.stats(),
                instance=self.w.instance,
            )
        except QueueError as exc:
            if sent - self.confirmed_at > self.s.lease:
                raise QueueError(
                    f"{exc}; gave up after a lease ({self.s.lease:g} s) without a heartbeat"
                ) from None
            log.info("heartbeat failed: %s", exc)
            return None
        if beat.lost:
            raise StateLost(f"{LOST}; worker {self.id} stops")
        if not beat.alive:
            raise Fenced(
                f"worker {self.id} was silent longer than its lease and lost its membership"
            )
        self.on_beat(beat, sent)
        return beat

    async def _stopped_fetching_or_never(self) -> None:
        if self.stopping:
            await self.flushed.wait()
        else:
            await trio.sleep_forever()

    def on_beat(self, beat: Beat, sent: float) -> None:
        self._clock_sample(sent, beat.now_ms)
        self.confirmed_at = sent
        if beat.members is not None and beat.epoch != self.latest.epoch:
            self.latest = Ring.of(beat.epoch, beat.members)
            self.epoch_changed.set()
        if beat.settled != self.settled:
            self.settled = beat.settled
            self.pace_hosts(())
            self.poke()
        if beat.orphans:
            self.orphans_waiting.set()
        _crawlconfig.on_beat(self, beat)  # issue 12: apply the crawl's settings if changed
        self.last_beat = beat
        self.poke()

    def finished(self, beat: Beat) -> bool:
        if self.s.idle is None or beat.idle_since < 0 or self.busy():
            return False
        quiet_ms = beat.now_ms - max(beat.idle_since, self.joined_ms)
        return quiet_ms >= self.s.idle * 1000

    def busy(self) -> bool:
        return bool(self.frontier.size or self.in_flight or self.outcomes)

    def stats(self) -> dict[str, int | str]:
        return {
            **attrs.asdict(self.counters),
            "hosts": len(self.frontier.hosts),
            "in_flight": self.in_flight,
            "held": self.held(),
            "frontier": self.frontier.size,
            "rss_kib": int(_resident_mib() * 1024),
            **self.w.tally.beat_fields(self.now(), self.frontier, since=self.tally_base),
        }

    def held(self) -> int:
        """Entries read from this worker's stream and not yet committed."""
        return self.frontier.size + self.in_flight + len(self.outcomes)

    async def leave(self) -> None:
        """Hand every host back at once: out of the ring, stream drained to new owners.

        Runs after every other task of the session has stopped.
        """
        self.stopping = True
        try:
            with trio.fail_after(self.s.lease):
                await self.flush_now()
                hosts = {**self.frontier.hosts, **self.taken, **dict.fromkeys(self.jars.hosts())}
                pace = self.pace_records(list(hosts))
                await self.persist(self.store.leave, self.id, pace)
                await self.drain(self.stream)
        except trio.TooSlowError:
            raise QueueError(
                f"could not leave the crawl within a lease ({self.s.lease:g} s)"
            ) from None
        log.info("%s left the crawl", self.id)

    # -- reading the stream ------------------------------------------------------------

    async def reader_loop(self) -> None:
        while not self.stopping:
            if len(self.outcomes) >= 2 * COMMIT_MAX:
                # What was read must be committed (parked, forwarded) before reading on,
                # or memory grows with the stream after all.
                self.commit_soon.set()
                await self.changed.wait()
                continue
            try:
                await self.read_once(block_ms=500)
            except QueueError as exc:
                log.debug("read failed: %s", exc)
                await trio.sleep(min(1.0, self.s.beat_interval))

    async def read_once(self, *, block_ms: int) -> int:
        """One read of this worker's stream into its frontier; returns entries read.

        A read that fails may still have delivered entries, which are then pending for
        this reader and never delivered again. So after a failure the reader reads its
        own pending entries past the newest one it took in (entries come in id order),
        until none is left, and only then reads new ones again.
        """
        full = self.frontier.size >= self.s.max_buffer
        count = 100 if full else min(200, self.s.max_buffer - self.frontier.size)
        after = self.last_read if self.unsure else None
        try:
            got = await self.call(
                self.store.read, self.id, count=count, block_ms=block_ms, after=after
            )
        except QueueError:
            self.unsure = True
            raise
        if got:
            self.last_read = got[-1][0]
            self.take_in(got, parking=full)
        elif after is not None:
            self.unsure = False
        return len(got)

    def take_in(self, got: list[tuple[str, bytes | None]], *, parking: bool = False) -> None:
        """Queue what was read; with memory full, park what a host has enough of.

        An entry for another owner's host goes there whatever it names; one this owner
        cannot read is counted as bad, and one naming a callback its spider lacks is
        dead-lettered with the reason (another worker's spider may know it).
        """
        fresh: list[str] = []
        for eid, payload in got:
            try:
                entry = Entry.decode(payload)
                host = host_key(entry.canonical)
            except (BadEntry, InvalidURL) as exc:
                log.warning("dropping a bad entry %s: %s", eid, exc)
                self.outcomes.append(Outcome.bad(eid, str(exc)))
                continue
            held = Held(eid, entry, host)
            if self.latest.owner_of(host) != self.id:
                self.outcomes.append(Outcome.forward(held, entry.encode()))
                continue
            if not self.w.handler.accepts(entry):
                why = f"spider {self.w.spider_name} has no callback {entry.callback!r:.80}"
                self.outcomes.append(Outcome.dead(held, why))
                continue
            queued = self.frontier.hosts.get(host)
            if parking and queued is not None and len(queued.queue) >= PARK_AT:
                self.outcomes.append(Outcome.park(held, entry.encode()))
                self.parked.add(host)
                continue
            if queued is None:
                fresh.append(host)
            self.frontier.add(held, epoch=self.latest.epoch)
        self.pace_hosts(fresh)
        self.poke()

    async def unpark_loop(self) -> None:
        """Bring parked entries back as their hosts run short (checked a few times a second)."""
        await self.find_parked()
        while True:
            await self.unpark_once()
            await trio.sleep(0.2)

    async def unpark_once(self) -> list[str]:
        """One pass over the parked hosts; returns the hosts that took entries back."""
        took: list[str] = []
        for name in sorted(self.parked):
            host = self.frontier.hosts.get(name)
            if self.frontier.size >= self.s.max_buffer:
                break
            if host is not None and len(host.queue) >= UNPARK_BELOW:
                continue
            status, moved, left = await self.persist(
                self.store.unpark, self.id, self.latest.epoch, name, PARK_AT - UNPARK_BELOW
            )
            if status == "fenced":
                raise Fenced(f"worker {self.id} lost its membership while unparking")
            if status == "ok" and left == 0:
                self.parked.discard(name)
            if moved:
                took.append(name)
        return took

    async def forget_loop(self) -> None:
        """Every few seconds, forget hosts long idle (see :meth:`forget_idle`)."""
        while True:
            await trio.sleep(FORGET_EVERY)
            self.forget_idle()

    def forget_idle(self) -> list[str]:
        """Drop the state of hosts idle a while, or beyond the most idle hosts kept, so
        memory follows the hosts at work, not every host ever seen. A host that comes
        back is made afresh: its robots.txt is fetched again, its pacing is exact (only
        hosts free to be fetched now are forgotten)."""
        now = self.now()
        gone = self.frontier.evict_idle(now, idle_for=IDLE_HOST_SECONDS, keep=IDLE_HOSTS_KEPT)
        for name in gone:
            self.robots.pop(name, None)
            self.sitemapped.discard(name)  # queued again if it comes back: the filter drops them
        return gone

    async def find_parked(self) -> None:
        """Learn which hosts this owner has overflow sets for (at join and on handoffs)."""
        hosts = await self.persist(self.store.parked_hosts)
        self.parked = {h for h in hosts if self.latest.owner_of(h) == self.id}

    def pace_hosts(self, names: Iterable[str]) -> None:
        """Have the pacing state of hosts new to this owner read, once it is there to read.

        The previous owner writes a host's pace record when it applies the epoch that
        moves the host, so the record is read only once every member has applied the
        epoch this owner has the host from (``settled``); before, it may be missing.
        """
        self.unpaced.update(names)
        hosts = self.frontier.hosts
        due = sorted(n for n in self.unpaced if n in hosts and hosts[n].since <= self.settled)
        self.unpaced = {n for n in self.unpaced if n in hosts} - set(due)
        if due:
            self.nursery.start_soon(self.load_pace, due)

    async def load_pace(self, hosts: list[str]) -> None:
        """Read the previous owners' pacing state for hosts new to this owner."""
        settled = self.settled
        records = await self.persist(self.store.pace, hosts)
        later = []
        for name in hosts:
            host = self.frontier.hosts.get(name)
            if host is None:
                continue
            if host.since > settled:  # it changed hands again meanwhile: read it again
                later.append(name)
                continue
            if name in records:
                self.apply_pace(host, records[name])
                self.pace_read[name] = records[name]
            host.paced = True
            self.frontier.reschedule(name)
        self.pace_hosts(later)  # at once if the fleet has settled while this read was out
        self.poke()

    def apply_pace(self, host: Host, record: str) -> None:
        """Adopt a previous owner's record: ``last_ms,backoff_ms,crawl_delay[,taken]``,
        then ``;`` and the host's cookies if it has any (see ``_cookies``)."""
        pace, _, cookies = record.partition(";")
        if cookies and self.s.cookies:
            self.jars.adopt(host.name, cookies)
        try:
            last_ms, backoff_ms, crawl_delay, *more = (float(x) for x in pace.split(","))
            taken = int(more[0]) if more else 0
        except (ValueError, OverflowError):
            return
        if taken:
            self.taken[host.name] = max(self.taken.get(host.name, 0), taken)
        margin = self.rtt + 0.005  # the two clocks agree to within a round trip
        host.last_end = max(host.last_end, self.local_time(last_ms) + margin)
        host.last_start = max(host.last_start, host.last_end)
        host.backoff_until = max(host.backoff_until, self.local_time(backoff_ms) + margin)
        host.crawl_delay = max(host.crawl_delay, crawl_delay)

    def pace_records(self, names: list[str]) -> dict[str, str]:
        records: dict[str, str] = {}
        if "drop_pace" in FAULTS:  # a deliberate bug to catch: the pacing stays behind
            return records
        now = self.now()
        for name in names:
            taken = self.taken.get(name, 0)
            host = self.frontier.hosts.get(name)
            cookies = self.jars.record(name)
            if cookies:  # the session goes with the host (at most MAX_JAR_BYTES)
                records[name] = ";" + cookies
            if host is None:  # forgotten while idle: only its page count is left
                if taken or cookies:
                    records[name] = f"0,0,0,{taken}" + records.get(name, "")
                continue
            gap = max(self.s.delay, host.crawl_delay)
            if max(host.last_end + gap, host.backoff_until) > now or taken:
                # This worker's clock offset is right to within half its last round trip:
                # the record errs late by that, as the reader's margin errs on its side.
                late = self.rtt / 2
                last = self.server_ms(host.last_end + late) if host.last_end > 0 else 0
                backoff = self.server_ms(host.backoff_until + late) if host.backoff_until > 0 else 0
                records[name] = (
                    f"{last},{backoff},{host.crawl_delay}"
                    + (f",{taken}" if taken else "")
                    + records.get(name, "")
                )
            elif cookies:
                records[name] = f"0,0,{host.crawl_delay}" + records[name]
        return records

    # -- dispatching -------------------------------------------------------------------

    def may_fetch(self, host: Host) -> bool:
        return (
            self.suspect_may_start(host)
            and host.paced
            and self.settled >= host.since
            and self.ring.epoch == self.latest.epoch
            and self.latest.owner_of(host.name) == self.id
        )

    def suspect_may_start(self, host: Host) -> bool:
        """A suspect already blamed for a death is fetched alone among suspects.

        Then if it kills this worker too, the in-flight record names it and no other.
        """
        if not host.queue:
            return True
        entry = host.queue[0][2].entry
        if not entry.suspect:
            return True
        return not self.isolating and not (entry.attempts and self.suspects)

    def fresh(self) -> bool:
        return self.now() - self.confirmed_at < self.s.fresh_for

    async def dispatch_loop(self) -> None:
        async with trio.open_nursery() as fetches:
            await self.dispatch(fetches)
            with trio.move_on_after(self.s.grace):
                while self.in_flight:
                    await self.changed.wait()
            # Past the grace period: what is still in flight stays pending in the stream,
            # and goes to the hosts' new owners with the rest.
            fetches.cancel_scope.cancel()
        self.done_fetching.set()

    async def dispatch(self, fetches: trio.Nursery) -> None:
        while not self.stopping:
            timeout = math.inf
            while not self.saturated() and self.fresh():
                got = self.frontier.take(self.now(), self.may_fetch)
                if isinstance(got, Held):
                    self.in_flight += 1
                    fetches.start_soon(self.fetch_one, got)
                    continue
                if got is not None:
                    timeout = got - self.now()
                break
            if not self.fresh():
                timeout = min(timeout, self.s.beat_interval)
            with trio.move_on_after(max(timeout, 0.001)):
                await self.changed.wait()

    async def fetch_one(self, held: Held) -> None:
        self.fetching[held.eid] = (held.host, trio.CancelScope())
        try:
            if held.entry.suspect:
                self.suspects.add(held.eid)
                self.isolating = self.isolating or held.entry.attempts > 0
                self.suspects_noted += 1
                noted, eids = self.suspects_noted, sorted(self.suspects)
                await self.persist(self.store.note_in_flight, self.id, noted, eids)
            outcome = await self.fetch_guarded(held)
            if outcome is not None and outcome.kind == "done":
                outcome.follows.extend(self.sitemaps_of(held))
        finally:
            self.finish(held, self.now())
            self.in_flight -= 1
            self.suspects.discard(held.eid)
            if held.entry.suspect and held.entry.attempts > 0:
                self.isolating = False
            self.poke()
        if outcome is not None:
            self.outcomes.append(outcome)
            self.uncommitted += 1
            self.slotted.add(id(outcome))
            self.items_pending += len(outcome.items)
            if self.saturated():
                self.commit_soon.set()
        self.check_limits()

    def sitemaps_of(self, held: Held) -> list[Entry]:
        """With --sitemaps, the sitemaps of a host this session has not queued yet."""
        if not self.s.sitemaps or held.host in self.sitemapped or held.entry.sitemap:
            return []
        self.sitemapped.add(held.host)
        robots = self.robots.get(held.host)
        return first_sitemaps(held.entry, robots.sitemaps if robots is not None else ())

    async def fetch_guarded(self, held: Held) -> Outcome | None:
        """:meth:`fetch_and_handle`, where nothing the network or user code raises gets
        out: it fails this page only. A handoff may cut the fetch short (see apply)."""
        _, scope = self.fetching[held.eid]
        outcome = None
        with scope:
            try:
                outcome = await self.fetch_and_handle(held)
            except Exception as exc:  # e.g. a LookupError from a bogus charset
                log.exception("fetching %s failed", held.entry.url)
                outcome = self.failed(held, f"{type(exc).__name__}: {exc}", kind="other")
        if scope.cancelled_caught:
            return self.put_back(held)
        return outcome

    def finish(self, held: Held, at: float) -> None:
        """``held``'s request is over (or was never made): count its host free, once."""
        if self.fetching.pop(held.eid, None) is not None:
            self.frontier.done(held.host, at)

    def failed(self, held: Held, reason: str, *, kind: str, took: float | None = None) -> Outcome:
        """A page that failed: its host is given time (1, 2, 4... s, at most a minute),
        then it is tried again, or dead-lettered once out of attempts.

        Args:
            reason: what the dead letter says if this was the last attempt.
            kind: the error as the metrics count it (see ``_metrics.error_kind``).
        """
        self.finish(held, self.now())
        self.counters.failed += 1
        self.w.tally.error(kind, took)
        self.frontier.back_off(held.host, self.now() + retry_wait(held.entry.attempts, None))
        return Outcome.retry(held, reason)

    def check_limits(self) -> None:
        """Stop this worker (not the crawl) once a --max-* limit is reached."""
        if self.stopping:
            return
        c, s = self.counters, self.s
        reached = (
            ("--max-pages", s.max_pages, c.fetched),
            ("--max-items", s.max_items, c.items + self.items_pending),
            ("--max-errors", s.max_errors, c.failed),
            ("--max-time", s.max_time, self.now() - self.started),
            ("--max-memory", s.max_memory, _resident_mib() if s.max_memory else 0),
        )
        for flag, limit, value in reached:
            if limit is not None and value >= limit:
                log.warning("stopping: %s %g reached; handing hosts back", flag, limit)
                self.w._stop_requested = True
                self.request_stop()
                return

    def may_send(self, held: Held) -> bool:
        return self.fresh() and self.latest.owner_of(held.host) == self.id

    def still_may_send(self, held: Held) -> bool:
        """Check again just before a request leaves: the task may have waited (a pause,
        a slow Redis) since the dispatcher allowed it. Otherwise the entry waits again."""
        return self.may_send(held)

    def put_back(self, held: Held) -> Outcome | None:
        """``held`` was not fetched after all: it waits for its host's next turn, or goes
        to the host's new owner if this worker has handed the host over meanwhile."""
        host = self.frontier.hosts.get(held.host)
        self.finish(held, host.last_end if host is not None else self.now())
        if host is None or host.revoked:
            return Outcome.forward(held, held.entry.encode())
        self.frontier.add(held, epoch=host.since)
        return None

    async def send(self, held: Held, request: Request) -> Response:
        """Fetch ``request`` on ``held``'s behalf, asking :meth:`may_send` once more as
        the request is written (with the default fetcher): a wait for a connection, or
        a pause, can come between the worker's check and the socket.

        Raises:
            NotSent: the check said no; nothing reached the host.
        """
        with sending_only_while(lambda: self.may_send(held)):
            return await self.fetcher.fetch(request)

    async def fetch_and_handle(self, held: Held) -> Outcome | None:
        host = self.frontier.hosts[held.host]
        if self.s.obey_robots and held.entry.url.startswith(("http://", "https://")):
            robots = self.robots.get(held.host)
            if robots is None or robots.expired(self.now()):
                if not self.still_may_send(held):
                    return self.put_back(held)
                try:
                    unreachable = await self.fetch_robots(held)
                except NotSent:
                    return self.put_back(held)
                if unreachable is not None:  # nothing may be fetched yet: try again later
                    return self.failed(held, unreachable, kind="robots_unreachable")
                self.finish(held, self.now())
                # The robots.txt request used this slot: the page waits its turn again.
                return self.put_back(held)
            if not await self.robots_allow(robots, held.entry.url):
                self.finish(held, host.last_start)
                self.counters.robots_denied += 1
                return Outcome.done(held, [], [])
        if self.host_is_full(held.host):
            self.finish(held, host.last_start)
            self.counters.host_capped += 1
            return Outcome.done(held, [], [])
        headers = held.entry.headers
        if self.s.cookies and not any(name.lower() == "cookie" for name, _ in headers):
            cookie = self.jars.header(held.host, held.entry.method, held.entry.url)
            headers = (*headers, ("Cookie", cookie)) if cookie else headers
        request = Request(
            held.entry.url,
            priority=held.entry.priority,
            meta=held.entry.meta,
            callback=held.entry.callback,
            dont_filter=held.entry.dont_filter,
            depth=held.entry.depth,
            method=held.entry.method,
            headers=headers,
            body=held.entry.body,
            timeout=held.entry.timeout,
            max_redirects=held.entry.max_redirects,
        )
        if not self.still_may_send(held):
            return self.put_back(held)
        if self.s.max_pages_per_host is not None:
            self.taken[held.host] = self.taken.get(held.host, 0) + 1
        sent = self.now()
        try:
            response = await self.send(held, request)
        except NotSent:
            return self.put_back(held)
        except Exception as exc:  # a user's fetcher may raise anything: a failed page
            if not isinstance(exc, FetchError):
                log.exception("fetcher failed on %s", held.entry.url)
            kind = str(exc) if isinstance(exc, FetchError) else "fetcher"
            if isinstance(exc, Refused):  # a rule said no: trying again cannot help
                self.finish(held, self.now())
                self.counters.failed += 1
                self.w.tally.error(kind, self.now() - sent)
                return Outcome.dead(held, str(exc))
            error = str(exc) or type(exc).__name__
            return self.failed(held, error, kind=kind, took=self.now() - sent)
        self.finish(held, self.now())
        self.counters.fetched += 1
        self.w.tally.response(response.status, len(response.body), self.now() - sent)
        if self.s.cookies and "set-cookie" in response.headers:
            set_cookies = httpx.Headers(response.headers).get_list("set-cookie")
            if self.latest.owner_of(held.host) == self.id:  # not once handed over
                self.jars.take(held.host, request.method, response.url, set_cookies)
        try:
            return await self.w.handler.handle(self, held, response)
        except Exception as exc:  # a parse callback's bug fails its page, not the worker
            log.exception("parsing %s failed", held.entry.url)
            return self.failed(held, f"{type(exc).__name__}: {exc}", kind="parse")

    def host_is_full(self, name: str) -> bool:
        """Whether a host has had its --max-pages-per-host page requests."""
        cap = self.s.max_pages_per_host
        return cap is not None and self.taken.get(name, 0) >= cap

    async def fetch_robots(self, held: Held) -> str | None:
        """Fetch and keep a host's robots.txt, per RFC 9309 (see ``_robots``).

        Returns None once rules are kept, or why robots.txt is unreachable: then the
        host is backed off, and its pages wait (or keep the rules they had, if any).
        Nothing a robots.txt or its server does raises out of here: a fetcher's
        failure counts as an unreachable robots.txt.

        Raises:
            NotSent: this worker may no longer fetch the host; nothing was asked.
        """
        fetch = RobotsFetch(held.entry.url, self.s.user_agent)
        got: str | Robots | Unreachable = fetch.url
        while isinstance(got, str):
            if fetch.hops:  # a redirect: its target waits the delay, as any request would
                await trio.sleep(self.s.delay)
            try:
                response = await self.send(held, Request(got))
                # Parsing 500 KiB of rules takes a good part of a second: not on the loop.
                answered = functools.partial(fetch.answered, truncated=response.truncated)
                got = await trio.to_thread.run_sync(
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
        stale = self.robots.get(held.host)
        if isinstance(got, Unreachable):
            wait = got.wait(held.entry.attempts)
            self.frontier.back_off(held.host, self.now() + wait)
            if stale is None:
                return got.reason
            got = stale  # RFC 9309 2.4: a cached copy may serve while unreachable
            self.robots[held.host] = got.kept_until(self.now() + wait)
            return None
        self.robots[held.host] = got.kept_until(self.now() + RULES_TTL)
        host = self.frontier.hosts.get(held.host)  # gone if handed over meanwhile
        if got.crawl_delay and host is not None:
            host.crawl_delay = min(got.crawl_delay, self.s.lease / 2)
        return None

    async def robots_allow(self, robots: Robots, url: str) -> bool:
        if not robots.heavy:
            return robots.allowed(url)
        return await trio.to_thread.run_sync(robots.allowed, url, limiter=self.robots_limiter)

    # -- committing --------------------------------------------------------------------

    async def commit_loop(self) -> None:
        while True:
            if self.outcomes:
                await self.commit_now()
            if self.stopping and not self.outcomes and self.in_flight == 0:
                self.flushed.set()
            if len(self.outcomes) < COMMIT_MAX:
                with trio.move_on_after(COMMIT_EVERY):
                    await self.commit_soon.wait()
            self.commit_soon = trio.Event()

    def saturated(self) -> bool:
        """Every slot is taken by a request in flight or a page not yet committed.

        Counting the uncommitted keeps what a killed worker held, and so what is
        fetched twice, within --concurrency.
        """
        return self.in_flight + self.uncommitted >= self.s.concurrency

    async def flush_now(self) -> None:
        while self.outcomes:
            await self.commit_now()

    async def commit_now(self) -> None:
        """Write the oldest outcomes' items, then acknowledge and route them atomically.

        Outcomes leave ``self.outcomes`` only once committed, so a commit cut short (by
        a stop, say) is done again by the next one, without writing its items twice.
        """
        outcomes = self.outcomes[:COMMIT_MAX]
        unwritten = [o for o in outcomes if id(o) not in self.written]
        items = [item for o in unwritten for item in o.items]
        write_first = "ack_before_write" not in FAULTS  # off: a deliberate bug to catch
        if items and write_first:
            await trio.to_thread.run_sync(self._write_items, items)
        self.written.update(id(o) for o in unwritten)
        while True:
            batch = self.batch_of(outcomes, self.latest)
            sent = self.now()
            result = await self.persist(self.store.commit, batch)
            if result.status == "ok":
                self.w.tally.committed(outcomes, self.s.max_attempts, self.now() - sent)
                self.scope = attrs.evolve(self.scope, version=result.scope)
                if items and not write_first:
                    await trio.to_thread.run_sync(self._write_items, items)
                del self.outcomes[: len(outcomes)]
                for name in batch.unpace[::2]:
                    self.pace_read.pop(name, None)
                slots = [o for o in outcomes if id(o) in self.slotted]
                self.uncommitted -= len(slots)
                self.slotted.difference_update(id(o) for o in slots)
                self.poke()
                self.written.difference_update(id(o) for o in outcomes)
                self.remember(outcomes)
                return
            if result.status == "fenced":
                raise Fenced(f"worker {self.id} lost its membership before committing")
            if result.status == "rescope":
                await self.read_scope()
                continue
            epoch, members = await self.persist(self.store.members)
            if epoch != self.latest.epoch:
                self.latest = Ring.of(epoch, members)
                self.epoch_changed.set()

    def _write_items(self, items: list[Any]) -> None:
        self.w.sink.write(items)
        self.w.sink.flush()
        self.counters.items += len(items)
        self.items_pending -= len(items)

    def batch_of(self, outcomes: list[Outcome], ring: Ring) -> Batch:
        hosts = {h for o in outcomes for h in o.widen}
        # Filtered by the widened scope; the commit stores the hosts, or is refused.
        self.scope = self.scope.widened(hosts)
        batch = Batch(worker=self.id, epoch=ring.epoch, src=self.stream, scope=self.scope.version)
        batch.widen = sorted(scope_members(hosts=hosts))
        batch.unpace = [x for pair in sorted(self.pace_read.items()) for x in pair]
        for o in outcomes:
            o.add_to(batch, self, ring)
        return batch

    def target_of(self, ring: Ring, host: str) -> str:
        owner = ring.owner_of(host)
        return self.store.stream_of(owner) if owner else self.store.inbox

    def in_scope(self, entry: Entry) -> bool:
        return self.scope.allows(host_key(entry.canonical))

    def is_cached(self, fp: tuple[int, int]) -> bool:
        return fp in self.seen_cache

    def remember(self, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            for entry in o.follows:
                if not entry.dont_filter and self.in_scope(entry):
                    self.seen_cache[fingerprint(entry.key)] = None
        while len(self.seen_cache) > SEEN_CACHE:
            del self.seen_cache[next(iter(self.seen_cache))]

    # -- membership changes -------------------------------------------------------------

    async def apply_loop(self) -> None:
        while True:
            await self.epoch_changed.wait()
            self.epoch_changed = trio.Event()
            await self.apply(self.latest)

    async def apply(self, ring: Ring) -> None:
        """Adopt a new epoch: stop the hosts it takes away, then hand them over.

        A request still out to a host given away gets a short wait, then the handoff
        goes ahead without it: the request is cancelled at the latest --grace (or
        --timeout, if sooner) seconds from now, and the host's pace record says it was
        busy until then, so its new
        owner waits for that before its own first request. The entry stays this
        worker's until the request ends, then is committed as usual (or, cancelled,
        forwarded to the new owner). So no slow server holds up the fleet's epoch.
        """
        if self.id not in ring:
            raise Fenced(f"worker {self.id} is no longer a member at epoch {ring.epoch}")
        skipped = ring.epoch != self.ring.epoch + 1
        lost = [name for name in self.frontier.hosts if ring.owner_of(name) != self.id]
        for name, host in self.frontier.hosts.items():
            if name in lost:
                continue
            if skipped or host.revoked:
                # Someone may have owned it in the epochs skipped: pace it from their record.
                host.since, host.paced = ring.epoch, False
                self.unpaced.add(name)
            if host.revoked:  # revoked by a handoff that a newer epoch overtook
                host.revoked = False
                self.frontier.reschedule(name)
        for name in lost:
            self.frontier.revoke(name)
        self.ring = ring
        with trio.move_on_after(min(HANDOFF_WAIT, self.s.grace)):
            while any(self.frontier.hosts[name].in_flight for name in lost):
                await self.changed.wait()
        # A request outlives neither --grace nor its own --timeout: the sooner bounds how
        # long the new owner must take the host for busy.
        self.cut_short(lost, self.now() + min(self.s.grace, self.s.timeout))
        lost_counts = [h for h in self.taken if ring.owner_of(h) != self.id]
        lost_counts += [h for h in self.jars.hosts() if ring.owner_of(h) != self.id]
        batch = Batch(worker=self.id, epoch=ring.epoch, src=self.stream, applied=ring.epoch)
        others = dict.fromkeys(h for h in lost_counts if h not in lost)
        records = self.pace_records([*lost, *others])
        batch.pace = [x for pair in records.items() for x in pair]
        for name in lost:
            for held in self.frontier.hosts[name].queue:
                h = held[2]
                batch.mv.append([h.eid, self.target_of(ring, name), h.entry.encode()])
        result = await self.persist(self.store.commit, batch)
        if result.status == "fenced":
            raise Fenced(f"worker {self.id} lost its membership during a handoff")
        if result.status == "stale":
            # A newer epoch exists: read it now and apply that one (not this one again).
            epoch, members = await self.persist(self.store.members)
            if epoch != self.latest.epoch:
                self.latest = Ring.of(epoch, members)
            self.epoch_changed.set()
            return
        for name in lost:
            self.frontier.drop(name)
            self.robots.pop(name, None)
            self.sitemapped.discard(name)
        for name in lost_counts:
            self.taken.pop(name, None)
            self.jars.pop(name)  # written into its pace record above
        await self.find_parked()
        self.applied = ring.epoch
        self.pace_hosts(())
        log.info("%s applied epoch %d: handed over %d hosts", self.id, ring.epoch, len(lost))
        self.poke()

    def cut_short(self, names: list[str], deadline: float) -> None:
        """Have requests still out to ``names`` cancelled by ``deadline``, and their
        hosts' pacing say they were busy until then (see :meth:`apply`)."""
        busy = set(names)
        for name, scope in self.fetching.values():
            if name in busy:
                scope.deadline = min(scope.deadline, deadline)
                host = self.frontier.hosts[name]
                host.last_end = max(host.last_end, deadline)

    async def drain_loop(self) -> None:
        while True:
            await self.orphans_waiting.wait()
            self.orphans_waiting = trio.Event()
            while (stream := await self.persist(self.store.orphan)) is not None:
                await self.drain(stream)

    async def drain(self, stream: str) -> None:
        """Move every entry left in a departed worker's stream to its host's owner.

        Entries of a worker that did not leave by itself become suspects, and those it
        said it was fetching when it died use up an attempt: a page that kills every
        worker that fetches it ends in the dead letters instead of killing them all.
        """
        own = stream == self.stream
        departed = not own and stream != self.store.inbox
        dying = await self.persist(self.store.in_flight_of, stream) if departed else set()
        while True:
            got = await self.persist(self.store.entries, stream, count=500)
            if not got:
                if await self.persist(self.store.release, stream):
                    return
                continue
            epoch, members = await self.persist(self.store.members)
            batch = Batch(worker="" if own else self.id, epoch=epoch, src=stream)
            self.route_orphans(batch, Ring.of(epoch, members), got, dying if departed else None)
            result = await self.persist(self.store.commit, batch)
            if result.status == "fenced":
                raise Fenced(f"worker {self.id} lost its membership while draining")

    def route_orphans(
        self, batch: Batch, ring: Ring, got: list[tuple[str, bytes | None]], dying: set[str] | None
    ) -> None:
        for eid, payload in got:
            try:
                entry = Entry.decode(payload)
                host = host_key(entry.canonical)
            except (BadEntry, InvalidURL) as exc:
                batch.bad.append([eid, f"{eid}: {exc}"[:300]])
                continue
            if dying is not None:
                attempts = entry.attempts + (eid in dying)
                entry = attrs.evolve(entry, suspect=True, attempts=attempts)
                if attempts >= self.s.max_attempts:
                    batch.ack.append(eid)
                    batch.dead += dead_letter(entry, "its worker died while fetching it")
                    continue
            batch.mv.append([eid, self.target_of(ring, host), entry.encode()])
