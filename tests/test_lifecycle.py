"""Worker processes dying, stopping, losing Redis and ending: exit statuses and the server's log."""

from __future__ import annotations

import collections
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

from hashcrawl._store._server import RedisServer
from testing.fleet import (
    Gated,
    Process,
    Processes,
    flags,
    new_crawl_name,
    read_items,
    request_counts,
    status_of,
    submit,
    wait_until,
)
from testing.testsite import Request, Site, SiteServer, generate_site

PASSWORD = "s3cret"
CONCURRENCY = 8


@attrs.frozen
class Interrupted:
    """A crawl by three worker processes, one of which was signalled a third of the way in."""

    site: Site
    requests: list[Request]
    items: list[dict[str, Any]]
    signalled_at: float  # time.time() once signalled (SIGKILL: once the worker was reaped)
    signalled_exit: int | None  # None when the signal was SIGKILL
    survivor_exits: list[int]
    status: dict[str, Any]


def interrupted_crawl(
    redis_url: str, directory: Path, *, seed: int, lease: float, sig: signal.Signals
) -> Interrupted:
    """Three workers crawl a 150-page site; the busiest gets `sig` once a third is fetched."""
    site = generate_site(pages=150, hosts=6, seed=seed, port=0)
    crawl = new_crawl_name()
    worker_flags = flags(delay=0.02, lease=lease, idle=0.5, concurrency=CONCURRENCY, grace=5)
    gated = Gated(site)
    with SiteServer(gated) as server, Processes(redis_url, crawl, directory) as fleet:  # type: ignore[arg-type]
        # Submitted first, so no worker ends for want of work while the others start; the
        # site answers nothing until all three are in, so none crawls it alone.
        submit(redis_url, crawl, [server.site.root])
        try:
            for _ in range(3):
                fleet.join(*worker_flags)
            wait_until(lambda: status_of(redis_url, crawl)["workers"] == 3, what="3 members")
        finally:
            gated.open()
        third = len(server.site.expected()) // 3
        wait_until(lambda: len(server.requests()) >= third, what=f"{third} requests")
        victim = fleet.busiest_member()
        victim.signal(sig)
        killed = sig == signal.SIGKILL
        if killed:  # reaped: no request of the victim's reaches the server after this
            victim.wait()
        signalled_at = time.time()
        signalled_exit = None if killed else victim.wait()
        survivors = [p for p in fleet.started if p is not victim]
        exits = [p.wait() for p in survivors]
        return Interrupted(
            site=server.site,
            requests=server.requests(),
            items=read_items(fleet.outputs),
            signalled_at=signalled_at,
            signalled_exit=signalled_exit,
            survivor_exits=exits,
            status=fleet.status(),
        )


@pytest.fixture(scope="module")
def interrupted(
    shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Future[Interrupted]]:
    """The killed and the terminated crawl, run side by side (their processes mostly wait)."""
    runs = {"killed": (10, 2, signal.SIGKILL), "terminated": (11, 30, signal.SIGTERM)}
    with ThreadPoolExecutor(len(runs)) as pool:
        return {
            name: pool.submit(
                interrupted_crawl,
                shared_redis.url,
                tmp_path_factory.mktemp(name),
                seed=seed,
                lease=lease,
                sig=sig,
            )
            for name, (seed, lease, sig) in runs.items()
        }


# --- a worker is killed ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def killed(interrupted: dict[str, Future[Interrupted]]) -> Interrupted:
    """The busiest of three workers with a 2 s lease is SIGKILLed a third of the way in."""
    return interrupted["killed"].result()


def test_survivors_fetch_every_page_after_a_worker_is_killed(killed: Interrupted) -> None:
    """Once the dead worker's lease passes, the others fetch and write every page it had."""
    assert set(request_counts(killed.requests)) == killed.site.expected()
    assert {item["url"] for item in killed.items} == killed.site.expected()


def test_survivors_of_a_kill_exit_0_when_the_crawl_ends(killed: Interrupted) -> None:
    """The two survivors end by themselves once the crawl is idle, with status 0."""
    assert killed.survivor_exits == [0, 0]


def test_killed_workers_leases_are_reclaimed_and_the_crawl_ends(killed: Interrupted) -> None:
    """`hashcrawl status --json` counts the dead worker's held entries reclaimed, crawl ended."""
    assert killed.status["leases_reclaimed"] > 0
    assert killed.status["ended"] is True


def test_only_pages_the_killed_worker_had_taken_are_requested_twice(killed: Interrupted) -> None:
    """A page requested twice was first requested before the kill, and is not requested again."""
    counts = request_counts(killed.requests)
    first: dict[str, float] = {}
    for record in sorted(killed.requests, key=lambda r: r.time):
        first.setdefault(record.url, record.time)
    twice = {url: n for url, n in counts.items() if n > 1}
    assert {url: n for url, n in twice.items() if n > 2} == {}
    assert {url for url in twice if first[url] > killed.signalled_at} == set()


def test_a_killed_workers_refetches_are_at_most_its_concurrency(tmp_path: Path) -> None:
    """What a SIGKILLed worker fetched but had not committed is at most --concurrency pages.

    Redis is frozen (SIGSTOP), the worker killed, and Redis killed and restarted from its
    append-only file, so nothing the worker fetched after the freeze was committed: a
    worker that keeps fetching past its concurrency without committing leaves all of that
    to be fetched again.
    """
    concurrency = 2
    site = generate_site(pages=200, hosts=8, seed=14, port=0)
    crawl = new_crawl_name()
    worker_flags = flags(delay=0.02, lease=2, idle=0.5, concurrency=concurrency)
    durable = RedisServer(directory=tmp_path / "redis", appendonly=True, appendfsync="always")
    with (
        durable,
        SiteServer(site) as server,
        Processes(durable.url, crawl, tmp_path) as fleet,
    ):
        submit(durable.url, crawl, [server.site.root])
        victim = fleet.join(*worker_flags)
        wait_until(lambda: len(server.requests()) >= 20, what="20 requests")
        durable.pause()
        # A worker fetches at most a quarter lease past its last heartbeat: wait no longer.
        server.wait_for_requests(len(server.requests()) + 5 * concurrency, timeout=2)
        victim.signal(signal.SIGKILL)
        victim.wait()
        durable.kill()  # what the worker sent while Redis was frozen is never carried out
        durable.start()
        survivors = [fleet.join(*worker_flags) for _ in range(2)]
        assert [p.wait() for p in survivors] == [0, 0]
        counts = request_counts(server.requests())
    assert set(counts) == server.site.expected()
    assert sum(n - 1 for n in counts.values()) <= concurrency


# --- a worker is told to stop --------------------------------------------------------------


@pytest.fixture(scope="module")
def terminated(interrupted: dict[str, Future[Interrupted]]) -> Interrupted:
    """The busiest of three workers with a 30 s lease gets SIGTERM a third of the way in."""
    return interrupted["terminated"].result()


def test_terminated_worker_exits_0(terminated: Interrupted) -> None:
    """A worker given SIGTERM finishes its requests in flight, leaves, and exits 0."""
    assert terminated.signalled_exit == 0


def test_terminated_workers_hosts_move_without_waiting_for_its_lease(
    terminated: Interrupted,
) -> None:
    """The others take over its hosts at once: no lease is reclaimed, yet every page is fetched."""
    assert terminated.status["leases_reclaimed"] == 0
    assert set(request_counts(terminated.requests)) == terminated.site.expected()
    assert terminated.survivor_exits == [0, 0]
    assert terminated.status["ended"] is True


def test_terminated_worker_leaves_nothing_to_fetch_or_write_twice(terminated: Interrupted) -> None:
    """A stop hands over only what was not fetched: nothing is fetched or written twice."""
    twice = {url: n for url, n in request_counts(terminated.requests).items() if n > 1}
    assert twice == {}
    written = collections.Counter(item["url"] for item in terminated.items)
    assert {url: n for url, n in written.items() if n > 1} == {}


# --- Redis goes away ------------------------------------------------------------------------


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server that wants a password, which a test may kill or pause."""
    with RedisServer(directory=tmp_path / "redis", password=PASSWORD) as server:
        try:
            yield server
        finally:
            server.resume()


def crawling_worker(redis: RedisServer, server: SiteServer, fleet: Processes) -> Process:
    """A worker with a 3 s lease that is fetching pages."""
    submit(redis.url, fleet.crawl, [server.site.root])
    worker = fleet.join(*flags(delay=0.05, lease=3, idle="none"))
    wait_until(lambda: len(server.requests()) >= 10, what="10 requests")
    return worker


def test_worker_exits_1_with_one_line_when_redis_is_killed(
    locked_redis: RedisServer, tmp_path: Path
) -> None:
    """With Redis gone for a lease, the worker exits 1 with one line about it, password left out."""
    site = generate_site(pages=150, hosts=4, seed=12, port=0)
    with (
        SiteServer(site) as server,
        Processes(locked_redis.url, new_crawl_name(), tmp_path) as fleet,
    ):
        worker = crawling_worker(locked_redis, server, fleet)
        locked_redis.kill()
        code = worker.wait()
    lines = worker.error_lines()
    assert (code, len(lines)) == (1, 1), lines
    assert "redis" in lines[0].lower() and PASSWORD not in lines[0]


def test_worker_exits_1_with_one_line_when_redis_hangs(
    locked_redis: RedisServer, tmp_path: Path
) -> None:
    """With Redis answering nothing for a lease, the worker exits 1 with one line, no password."""
    site = generate_site(pages=150, hosts=4, seed=13, port=0)
    with (
        SiteServer(site) as server,
        Processes(locked_redis.url, new_crawl_name(), tmp_path) as fleet,
    ):
        worker = crawling_worker(locked_redis, server, fleet)
        locked_redis.pause()
        code = worker.wait()
    lines = worker.error_lines()
    assert (code, len(lines)) == (1, 1), lines
    assert "redis" in lines[0].lower() and PASSWORD not in lines[0]


# --- the end of a crawl ---------------------------------------------------------------------


# A page nobody answers, given up after one attempt: a crawl that begins and is done.
GONE = "http://127.0.0.250:9/"


def test_idle_fleet_with_nothing_left_exits_0_by_itself(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Two workers with --idle 1 and nothing left to crawl end by themselves with status
    0. (A crawl never fed has not begun: its workers wait, see test_worker.)"""
    submit(redis_url, crawl_name, [GONE])
    with Processes(redis_url, crawl_name, tmp_path) as fleet:
        more = {"max_attempts": 1}
        workers = [fleet.join(*flags(delay=0.02, lease=2, idle=1, **more)) for _ in range(2)]
        assert [w.wait() for w in workers] == [0, 0]
    assert status_of(redis_url, crawl_name)["ended"] is True


def test_idle_none_worker_runs_until_sigterm_then_exits_0(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """An --idle none worker outlives the idle crawl that ends an --idle 0.5 peer, until SIGTERM."""
    submit(redis_url, crawl_name, [GONE])
    with Processes(redis_url, crawl_name, tmp_path) as fleet:
        patient = fleet.join(*flags(delay=0.02, lease=2, idle="none", max_attempts=1))
        wait_until(lambda: heartbeat_of(redis_url, crawl_name, patient) > 0, what="its join")
        peer = fleet.join(*flags(delay=0.02, lease=2, idle=0.5, max_attempts=1))
        assert peer.wait() == 0
        ended_peer = heartbeat_of(redis_url, crawl_name, patient)
        # Still beating two of the peer's idle periods later: it did not take the end.
        wait_until(
            lambda: heartbeat_of(redis_url, crawl_name, patient) >= ended_peer + 1000,
            what="heartbeats after the peer ended",
        )
        assert patient.running()
        patient.signal(signal.SIGTERM)
        assert patient.wait() == 0


def heartbeat_of(redis_url: str, crawl: str, process: Process) -> int:
    """The server time (ms) of the process's last heartbeat; 0 when it is not a member."""
    members = status_of(redis_url, crawl)["members"]
    return max((m["last_heartbeat_ms"] for m in members if m["pid"] == process.pid), default=0)
