"""A fleet-scale simulation: hundreds of worker sessions in one process, no HTTP.

    python -m simulations.fleet                          200 workers, 10,000 hosts, 1M URLs
    python -m simulations.fleet --workers 50 --hosts 1000 --pages 50   a smaller one

Every worker is a real ``Driver`` and ``Session`` on the real Store and scripts, against a
Redis server of its own; the web answers at once from a generated URL space (each host a tree of
pages, with links across hosts that the seen filter must catch). Simulated time moves in
ticks; at each tick every worker takes one turn of each of its driver's loops. Churn comes at a
steady pace: a worker joins, one is killed (its Redis state stays), one leaves.

It reports what the issue asks of a fleet: the share of hosts that move when a worker
joins, how long a dead worker's entries take to come back (lease, detection, drain), Redis
commands per page and Redis memory per URL.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from hashcrawl._core._ring import Ring
from hashcrawl._run._driver import Driver
from hashcrawl._run._queue import submit_urls
from hashcrawl._run._worker import Worker
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Store
from simulations.figures import Figures
from simulations.loop import inline
from simulations.observe import Observer
from simulations.web import DoneSink, FleetWeb, SimFetcher, Tally

TICK = 0.25  # simulated seconds between turns
SETTINGS: dict[str, Any] = {
    "delay": 1.0,
    "span_hosts": True,  # the simulated webs link across their hosts
    "lease": 8.0,
    "timeout": 2.0,
    "grace": 4.0,
    "idle": 3.0,
    "max_attempts": 3,
    "concurrency": 64,
    "obey_robots": False,
}


def hosts_moved_per_join(*, members: int, hosts: int) -> float:
    """The share of ``hosts`` whose owner changes when a worker joins ``members`` others."""
    names = [f"worker-{i}" for i in range(members + 1)]
    keys = [f"h{i}.fleet" for i in range(hosts)]
    return _moved(Ring.of(1, names[:-1]), Ring.of(2, names), keys)


def _moved(before: Ring, after: Ring, keys: list[str]) -> float:
    return sum(before.owner_of(k) != after.owner_of(k) for k in keys) / len(keys)


class FleetWorker:
    """One worker session, driven a turn at a time (create inside the trio run)."""

    def __init__(self, fleet: Fleet, name: str) -> None:
        self.fleet = fleet
        self.name = name
        self.store = Store(fleet.url, fleet.crawl, timeout=30.0, clock=fleet.now_ms)
        fleet.stores.append(self.store)
        fetcher = SimFetcher(fleet.web, name, fleet.tally, timeout=2.0, hold=False)
        worker = Worker(
            fleet.url_text, fleet.crawl, fetcher=fetcher, sink=fleet.sink, **fleet.settings
        )
        worker.id = name
        self.pending: list[Callable[[], Awaitable[None]]] = []  # fetches started, run inline
        self.driver = Driver(
            worker, self.store, fetcher, call=fleet.call, spawn=self._start, offload=inline
        )
        self.last_beat = float("-inf")
        self.done = False

    def _start(self, fetch: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.pending.append(functools.partial(fetch, *args))

    async def join(self) -> None:
        await self.driver.begin()
        self.last_beat = self.driver.now()

    async def turn(self) -> None:
        """A turn of each of the driver's loops; the web answers every fetch at once."""
        driver = self.driver
        if driver.now() - self.last_beat >= driver.settings.beat_interval - 1e-9:
            self.last_beat = driver.now()
            beat = await driver.beat_once()
            if beat is not None and driver.ends_with(beat):
                await driver.leave()
                self.done = True
                return
        await driver.drain_turn()
        await driver.apply_turn()
        await driver.pace_turn()
        await self.read()
        driver.dispatch_turn()
        while self.pending:
            await self.pending.pop(0)()
        await driver.flush_now()

    async def read(self) -> None:
        driver, session = self.driver, self.driver.session
        while (
            session.frontier.size < driver.settings.max_buffer
            and self.fleet.observer.undelivered(session.stream)
        ):
            if not await driver.read_once(block_ms=1):
                return

    async def leave(self) -> None:
        await self.driver.leave()
        self.done = True


class Fleet:
    """One fleet-scale crawl: build it, ``run()`` it, read the figures."""

    def __init__(
        self,
        *,
        workers: int,
        hosts: int,
        pages_per_host: int,
        seed: int = 1,
        churn_every: float = 5.0,
        settings: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> None:
        self.size = workers
        self.progress = progress
        self.web = FleetWeb(hosts, pages_per_host, seed)
        self.rng = random.Random(seed)
        self.churn_every = churn_every
        self.settings = dict(settings or SETTINGS)
        self.crawl = "fleet" + uuid.uuid4().hex[:8]
        self.tally = Tally(self.settings["delay"])
        self.sink = DoneSink(self.web)
        self.workers: list[FleetWorker] = []
        self.stores: list[Store] = []  # every worker's, those that left or died too
        self.expired: set[str] = set()
        self.churned = 0
        self.names = iter(f"f{i}" for i in range(1, 10**9))
        self.figures = Figures(
            workers=workers,
            hosts=hosts,
            pages_total=hosts * pages_per_host,
            lease=self.settings["lease"],
        )

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """A driver's ``call``, inline and counted: one Store call is one or two round trips."""
        self.figures.store_calls += 1
        return fn(*args, **kwargs)

    def now_ms(self) -> int:
        return round(self.clock.current_time() * 1000)

    def run(self, *, churn: bool = True) -> Figures:
        directory = Path(tempfile.mkdtemp(prefix="hashcrawl-fleet-"))
        started = time.monotonic()
        try:
            with RedisServer(directory=directory, extra={"hz": "100"}) as server:
                self.url_text = server.url
                self.url = RedisURL.parse(server.url)
                self.observer = Observer(server.url, self.crawl)
                try:
                    self.clock = trio.testing.MockClock()
                    trio.run(self._crawl, churn, clock=self.clock)
                finally:
                    for store in self.stores:
                        store.close()
                    self.observer.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self.figures.real = time.monotonic() - started
        return self.figures

    async def _crawl(self, churn: bool) -> None:
        f = self.figures
        memory0 = self.observer.used_memory()
        calls0 = self.observer.command_calls()
        sent0 = Counter(self.observer.sent)
        for _ in range(self.size):
            await self._join(count=False)
        submit_urls(self.workers[0].store, self.web.roots())
        crashed: dict[str, float] = {}
        next_churn = self.churn_every
        while self.workers:
            for w in list(self.workers):
                await w.turn()
                if w.done:
                    self.workers.remove(w)
            now = self.clock.current_time()
            if churn and now >= next_churn and self._unfinished():
                next_churn += self.churn_every
                await self._churn(crashed)
            if crashed:
                self._watch_reclaims(crashed)
            if int(now / TICK) % 20 == 0:
                self._sample_memory()
            if self.progress and int(now / TICK) % 80 == 0:
                done = sum(self.sink.done)
                print(f"  t={now:5.0f} s: {done} pages, {len(self.workers)} workers", flush=True)
            self.clock.jump(TICK)
        calls = self.observer.command_calls()
        observed = Counter(self.observer.sent) - sent0
        by_name = {k: v - calls0.get(k, 0) - observed[k] for k, v in calls.items()}
        f.commands_by_name = {k: v for k, v in by_name.items() if v > 0}
        f.commands = sum(f.commands_by_name.values())
        f.memory_end = self.observer.used_memory() - memory0
        f.memory_peak = max(f.memory_peak - memory0, f.memory_end)
        f.pages_done = sum(self.sink.done)
        f.items = self.sink.items
        f.requests = self.tally.requests
        f.too_soon = self.tally.too_soon
        f.urls_seen = f.pages_total  # every URL of this web is distinct and reachable
        f.simulated = self.clock.current_time()

    def _unfinished(self) -> bool:
        return sum(self.sink.done) < self.figures.pages_total

    async def _join(self, *, count: bool = True) -> None:
        before = Ring.of(0, [w.name for w in self.workers])
        w = FleetWorker(self, next(self.names))
        await w.join()
        self.workers.append(w)
        if count and self.workers:
            self.figures.joins += 1
            after = Ring.of(0, [w.name for w in self.workers])
            keys = [f"h{i}.fleet" for i in range(self.web.hosts)]
            self.figures.moved_per_join.append(_moved(before, after, keys))

    async def _churn(self, crashed: dict[str, float]) -> None:
        """In turn: a worker is killed, one joins, one leaves, one joins."""
        kind = ("kill", "join", "leave", "join")[self.churned % 4]
        self.churned += 1
        if kind == "join" or len(self.workers) < 2:
            await self._join()
            return
        victim = self.rng.choice(self.workers)
        self.workers.remove(victim)
        if kind == "kill":
            self.figures.crashes += 1
            crashed[victim.name] = self.clock.current_time()
        else:
            self.figures.leaves += 1
            await victim.leave()

    def _watch_reclaims(self, crashed: dict[str, float]) -> None:
        members = self.observer.members()
        for name, at in list(crashed.items()):
            stream = self.observer.stream_of(name)
            if name not in members and name not in self.expired:
                self.expired.add(name)
                self.figures.expiry_seconds.append(self.clock.current_time() - at)
            self.observer.sent["exists"] += 1
            if name not in members and not self.observer.r.exists(stream):
                self.figures.reclaim_seconds.append(self.clock.current_time() - at)
                del crashed[name]

    def _sample_memory(self) -> None:
        used = self.observer.used_memory()
        if used > self.figures.memory_peak:
            self.figures.memory_peak = used
            self.observer.sent["hget"] += 1
            self.figures.queued_at_peak = int(
                self.observer.r.hget(self.observer.prefix + "seenmeta", "outstanding") or 0
            )


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM ends the run like Ctrl-C: the Redis servers it started stop with it.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(prog="python -m simulations.fleet", description=__doc__)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--pages", type=int, default=100, help="pages per host")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--churn-every", type=float, default=5.0, help="simulated seconds")
    parser.add_argument("--no-churn", action="store_true")
    args = parser.parse_args(argv)
    print("hosts moved when a worker joins a ring of N (10,000 hosts):")
    for n in (3, 10, 50, 100, 200):
        moved = hosts_moved_per_join(members=n, hosts=10_000)
        print(f"  N={n}: {moved:.2%} (ideal {1 / (n + 1):.2%})")
    fleet = Fleet(
        workers=args.workers,
        hosts=args.hosts,
        pages_per_host=args.pages,
        seed=args.seed,
        churn_every=args.churn_every,
        progress=True,
    )
    figures = fleet.run(churn=not args.no_churn)
    print("\n".join(figures.lines()))
    return 0 if figures.pages_done == figures.pages_total and figures.too_soon == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
