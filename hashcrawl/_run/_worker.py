"""A worker: one member of the fleet, owning the hosts the ring gives it.

:class:`Worker` is the public face: it adopts the crawl's settings, makes the store and
the fetcher, and runs one membership after another (a fenced one rejoins under a new
id), each a :class:`~hashcrawl._run._driver.Driver` around a
:class:`~hashcrawl._core._session.Session`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import trio

from hashcrawl._browser._process import find_chromium
from hashcrawl._browser._reach import Reach
from hashcrawl._browser._render import Renderer
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._flags import header_pairs
from hashcrawl._core._names import check_name, incarnation
from hashcrawl._core._patterns import Patterns
from hashcrawl._core._session import Session
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._core._steps import renders
from hashcrawl._core._turns import shared_hosts
from hashcrawl._exceptions import ConfigError, Fenced, ShardsChanged, StateLost
from hashcrawl._output._sinks import Sink, archive_of, one_sink, sink_for
from hashcrawl._run._calls import StoreCaller
from hashcrawl._run._driver import Driver as Driver
from hashcrawl._run._handler import Handler, Parse
from hashcrawl._run._membership import _in_worker_thread
from hashcrawl._run._membership import unwrapped as unwrapped
from hashcrawl._run._metrics import Tally
from hashcrawl._run._notices import Notices
from hashcrawl._run._queue import check_start_urls, submit_start_requests
from hashcrawl._run._sharding import Sharded
from hashcrawl._run._turns import SharedRobots, SharedTurns
from hashcrawl._spiders._spider import Calls, Spider, scrapy_settings
from hashcrawl._store import _crawlconfig
from hashcrawl._store._base import WorkerStore
from hashcrawl._store._crawlconfig import CrawlSettings
from hashcrawl._store._redisurl import RedisURL, check_crawl_name
from hashcrawl._store._revisits import Revisits
from hashcrawl._store._shards import Shards, shard_tags, still_one_shard
from hashcrawl._store._store import LOST, Store
from hashcrawl._web._addresses import AddressPolicy
from hashcrawl._web._fetch import Fetcher, HttpxFetcher

log = logging.getLogger("hashcrawl")
T = TypeVar("T")
Spawn = Callable[..., None]  # starts a task: spawn(async_fn, *args)
Offload = Callable[..., Awaitable[Any]]  # runs blocking work: offload(fn, *args, limiter=)


def new_worker_id() -> str:
    host = socket.gethostname().split(".")[0][:24] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(2)}"


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
        sink: Sink | Sequence[Sink] | None = None,
        faults: Faults = NO_FAULTS,
        name: str | None = None,
        **settings: Any,
    ) -> None:
        """Args:
        redis: the Redis URL (``redis://``, ``rediss://``, ``redis+unix://``,
            ``redis+sentinel://``).
        crawl: the crawl's name; every worker of one crawl uses the same.
        fetcher: fetches requests (default: httpx); pacing and robots.txt still apply.
        parse: a callback from a response to items and requests to follow.
        spider: a :class:`Spider` (class or instance) instead of ``parse``.
        sink: where items go (default: JSON Lines on standard output); several sinks
            as a list, such as a ``JsonLinesSink`` and a ``WarcSink``.
        faults: deliberate bugs to switch on (tests and simulations only).
        name: the worker's name, unique in the crawl (default: one of its own per
            process). A worker started under the name of a member that has stopped
            takes its place and its hosts at once; under that of a running one, it is
            refused (``NameTaken``).
        settings: any field of :class:`Settings` (delay, per_host, concurrency, ...).

        Raises:
            ConfigError: a bad URL, crawl name, name or setting, or both parse and spider.
        """
        self.url = redis if isinstance(redis, RedisURL) else RedisURL.parse(redis, name="redis")
        self.crawl = check_crawl_name(crawl, called="crawl")
        settings = {**scrapy_settings(spider), **settings}  # what is given wins
        self.settings = Settings.of(settings)
        # The crawl settings given are checked against the crawl's at the start of run(),
        # which then adopts the crawl's: one value per crawl; a heartbeat may bring new ones.
        self.given_crawl = {k: getattr(self.settings, k) for k in settings if k in CRAWL}
        self.crawl_settings: CrawlSettings | None = None
        self.settings_refused: ConfigError | None = None  # why the crawl's stopped it
        self.name_flag = "name"
        self.name = None if name is None else check_name(name, called=self.name_flag)
        self.id = self.new_id()
        self.faults = faults
        self._fetcher = fetcher
        self.spider = spider() if isinstance(spider, type) else spider
        if parse is not None and self.spider is not None:
            raise ConfigError("give a Worker either parse or spider, not both")
        self.spider_name = _spider_name(self.spider, parse)
        calls = Calls(self.spider) if self.spider is not None else None
        self.handler = Handler(parse, spider=calls, settings=self.settings, name=self.spider_name)
        self.sink = one_sink(sink) if sink is not None else sink_for("-", fsync=self.settings.fsync)
        self.archive = archive_of(self.sink)  # handed every response, when there is one
        if self.archive is not None:
            self.archive.named_for(self.id)
        self.tally = Tally()  # counts across memberships, for status, /metrics and the summary
        self.notices = Notices()  # the refusals it has told of (or another worker did)
        self._stop_requested = False
        self.instance = ""  # the crawl's instance marker, learnt at the first join
        self.shared_robots: SharedRobots | None = None  # --render-fetch-hosts', once run

    def new_id(self) -> str:
        """A member id for a new membership: its name's next incarnation, if named."""
        if self.name is None:
            return new_worker_id()
        return incarnation(self.name, secrets.token_hex(3))

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

    _driver: Driver | Sharded | None = None
    _store: WorkerStore | None = None

    def membership(self, store: WorkerStore, fetcher: Fetcher, **seams: Any) -> Driver:
        """A new membership of this worker in the crawl of ``store``, made its current
        one: :meth:`stop` and new settings reach it. :meth:`run` runs one; a simulation
        drives one turn by turn, giving ``seams`` (``call=``, ``spawn=``, ``offload=``,
        ``revisits=``, ``place=``: see ``Driver``)."""
        driver = Driver(self, store, fetcher, **seams)
        self._driver = driver
        return driver

    def sharded_membership(self, shards: Shards, fetcher: Fetcher, **seams: Any) -> Sharded:
        """As :meth:`membership`, one membership in each of ``shards``."""
        sharded = Sharded(self, shards, fetcher, **seams)
        self._driver = sharded
        return sharded

    async def run(self) -> None:
        """Crawl until the fleet has been idle ``idle`` seconds, or until stopped.

        Raises:
            QueueError: Redis could not be reached for a whole lease.
            ConfigError: a crawl setting given differs from the crawl's, or the crawl's
                stored settings are not usable (see ``_crawlconfig``).
            NameTaken: a worker of this one's ``name`` is running (nothing was written).
        """
        if self.spider is not None:  # refused before anything is recorded in Redis
            urls = list(getattr(self.spider, "start_urls", None) or ())
            policy = AddressPolicy.of(self.settings.allow_nets, self.settings.allow_private)
            patterns = Patterns(self.settings.accept_regex, self.settings.reject_regex)
            await trio.to_thread.run_sync(check_start_urls, urls, policy, patterns)
        # Take the crawl's settings (or record these) before they are used.
        settings, self.crawl_settings = await trio.to_thread.run_sync(
            _crawlconfig.adopt_at, self.url, self.crawl, self.settings, self.given_crawl
        )
        self.take_settings(settings)
        metrics = self._serve_metrics()  # a port in use is a bad flag, found at once
        store: WorkerStore = Store(self.url, self.crawl, timeout=self.settings.answer_timeout)
        self._store = store
        own_fetcher = self._fetcher is None
        inner = self._fetcher or HttpxFetcher(
            user_agent=self.settings.user_agent,
            timeout=self.settings.timeout,
            max_body=self.settings.max_body,
            max_connections=self.settings.concurrency,
            max_per_host=self.settings.per_host,
            headers=header_pairs(self.settings.headers),
            allow_nets=self.settings.allow_nets,
            allow_private=self.settings.allow_private,
            keep_raw=self.archive is not None,
            proxies=self.settings.proxies,
            proxy_retry_status=self.settings.proxy_retry_status,
            allow_request_proxy=self.settings.allow_request_proxy,
        )
        reason = "finished"
        browser = contextlib.AsyncExitStack()  # the browser: started by the first render
        try:
            turns = SharedTurns(
                inner,
                take=self.take_turn,
                settings=self._settings,
                gap_of=self._gap,
                at_write=own_fetcher,  # the default fetcher's connections await the turn
            )
            self.shared_robots = SharedRobots(turns, self._settings)
            fetcher = await browser.enter_async_context(self._renderer(turns))
            shards = await self._shards(store)  # before anything is queued
            if self.handler.spider is not None:
                await trio.to_thread.run_sync(self.handler.spider.opened)
                into = store if shards is None else shards
                starts = await self.handler.spider.first_requests()  # the spider's code
                await trio.to_thread.run_sync(
                    submit_start_requests, into, self.handler.spider, starts
                )
            while True:
                # The crawl's --revisit is known only once the driver has joined: the
                # records are always at hand, and only used while the policy says so.
                revisits = Revisits.of(store) if isinstance(store, Store) else None
                if shards is not None:
                    driver: Driver | Sharded = self.sharded_membership(
                        shards, fetcher, revisits=revisits
                    )
                else:
                    check = _still_one_shard if isinstance(store, Store) else None
                    driver = self.membership(store, fetcher, revisits=revisits, after_join=check)
                if self._stop_requested:
                    return
                try:
                    await driver.run()
                    if self.settings_refused is not None:  # stopped by the crawl's settings
                        raise self.settings_refused
                    return
                except ShardsChanged as exc:
                    if self.settings.shards is not None:  # it asked for one shard: refuse
                        why = f"{exc}: its --shards {self.settings.shards} no longer fits"
                        raise ConfigError(why) from None
                    # It asked for nothing: it takes the crawl's shards, under a new id (it
                    # left shard 0 before fetching anything).
                    log.warning("%s; it joins them all instead", exc)
                    shards = await self._shards(store)
                    self.id = self.new_id()
                except Fenced as exc:
                    known = self.instance  # none yet: fenced before its first join
                    if known and await _marker_gone(store, known, self.settings.lease):
                        raise StateLost(f"{LOST}; worker {self.id} stops") from None
                    # Others took back what this worker held: start afresh under a new id.
                    log.warning("%s; rejoining as a new member", exc)
                    self.tally.fenced += 1
                    self.id = self.new_id()
        except BaseException as exc:
            reason = type(exc).__name__
            raise
        finally:
            self._driver = None
            if self.handler.spider is not None:
                stopped = self._stop_requested and reason == "finished"
                self.handler.spider.closed("shutdown" if stopped else reason)
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
            await browser.aclose()
            if own_fetcher:
                await inner.aclose()  # type: ignore[attr-defined]
            if self._shards_open is not None:
                self._shards_open.close()
            store.close()

    def _renderer(self, fetcher: Fetcher) -> contextlib.AbstractAsyncContextManager[Renderer]:
        """The worker's fetcher: ``fetcher``, with pages that ask rendered (and those the
        crawl's --render or --render-hosts choose) in a browser started when the first
        one comes.

        Raises:
            ConfigError: the crawl renders, and this worker has no Chromium.
        """
        s = self.settings
        renders_some = s.chromium or s.render or s.render_hosts
        return Renderer.open(
            fetcher,
            chromium=find_chromium(s.chromium) if renders_some else None,
            tabs=s.browser_tabs,
            render_timeout=s.render_timeout,
            max_mib=s.browser_max_mib,
            chosen=self._rendered,
            reach=Reach(upload_dir=s.browser_upload_dir, method=self._step_method),
            shared=lambda: shared_hosts(self.settings.render_fetch_hosts),
        )

    def _settings(self) -> Settings:
        return self.settings

    def _gap(self, host: str) -> float:
        """A shared host's gap between turns: --delay, or its Crawl-delay if longer."""
        robots = self.shared_robots
        return max(self.settings.delay, robots.crawl_delay(host) if robots is not None else 0.0)

    def _rendered(self, url: str) -> bool:
        """Whether the crawl's settings, as they are now, render ``url``'s page."""
        s = self.settings
        host = urlsplit(url).hostname or ""
        return renders(host, render=s.render, hosts=s.render_hosts)

    def _step_method(self, name: str) -> Any:
        """The spider's method a call step names, if one of its own classes has it."""
        calls = self.handler.spider
        return calls.step_method(name) if calls is not None else None

    _shards_open: Shards | None = None

    async def _shards(self, store: WorkerStore) -> Shards | None:
        """The crawl's shards if it has several (recording them if this worker starts a
        crawl with --shards); None for one shard, the crawl as it always was.

        Raises:
            ConfigError: --shards differs from the crawl's.
        """
        if not isinstance(store, Store):
            return None
        tags = await trio.to_thread.run_sync(shard_tags, store, self.settings.shards)
        if not tags:
            return None
        self._shards_open = Shards(store, tags, timeout=self.settings.answer_timeout)
        log.info("crawl %s runs on %d shards", self.crawl, len(self._shards_open))
        return self._shards_open

    def _serve_metrics(self) -> Any:
        if self.settings.metrics_port is None:
            return None
        from hashcrawl._run._metrics import serve

        return serve(self, self.settings.metrics_port, self.settings.metrics_addr)

    def take_page(self, cap: int) -> bool:
        """Take one of the crawl's ``cap`` pages (``Store.take_page``), counted by the
        crawl's one store, or a sharded crawl's first shard."""
        assert self._store is not None
        return self._store.take_page(cap)

    def give_back_page(self) -> None:
        """Give back a page :meth:`take_page` took for a request that never left."""
        assert self._store is not None
        self._store.give_back_page()

    def take_turn(
        self, host: str, *, gap: float, margin: float, most_wait: float
    ) -> tuple[bool, float]:
        """Reserve a shared host's next turn (``Store.take_turn``), in the crawl's one
        store, or a sharded crawl's first shard, as :meth:`take_page`."""
        assert isinstance(self._store, Store)
        return self._store.take_turn(host, gap=gap, margin=margin, most_wait=most_wait)

    def fleet_counters(self) -> dict[str, int]:
        """Fleet-wide counters from Redis, for a metrics scrape (never the page path)."""
        if self._store is None:
            return {}
        if self._shards_open is None:
            return self._store.fleet_counters()
        totals: dict[str, int] = {}
        for store in self._shards_open.stores:  # every shard's queue, summed
            for name, value in store.fleet_counters().items():
                totals[name] = totals.get(name, 0) + value
        return totals


def _spider_name(spider: Spider | None, parse: Parse | None) -> str:
    """What a worker records at join as its spider, so status shows a mixed fleet."""
    if spider is not None:
        return str(getattr(spider, "name", "") or type(spider).__qualname__)
    return getattr(parse, "__qualname__", "parse") if parse is not None else "-"


async def _marker_gone(store: WorkerStore, instance: str, lease: float) -> bool:
    """Whether the crawl's instance marker is no longer ``instance``, asked for a lease.

    Raises:
        QueueError: Redis did not answer for a whole lease.
    """
    caller = StoreCaller(_in_worker_thread, lambda: lease, trio.current_time)
    return await caller.persist(store.instance) != instance


async def _still_one_shard(driver: Driver) -> None:
    """A one-shard driver's check after its join (``_store._shards.still_one_shard``)."""
    store = driver.store
    assert isinstance(store, Store)
    await driver.persist(still_one_shard, store)
