"""The practice run: workers crawl a generated site, one is killed mid-crawl and replaced.

The run is judged from outside, by the test server's request log and the workers' output
files (see `testing.testsite.judge`). `scripts/practice` is a command line over `run_practice`,
and `tests/test_practice.py` runs a small one.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import attrs
from redis import Redis

from hashcrawl._core._ring import Ring
from hashcrawl._core._shards import shard_name
from hashcrawl._store._server import RedisServer
from testing.cluster import Cluster
from testing.sentinel import Sentinels
from testing.takeover import takeover_line
from testing.testsite import (
    SITE_FLAGS,
    Request,
    Site,
    SiteServer,
    Verdict,
    generate_site,
    judge,
)

REPO = Path(__file__).resolve().parent.parent
CRAWL = "practice"
MAX_DUPLICATES = 64  # refetches of what the killed worker held when it died
MAX_ROBOTS_PER_HOST = 3  # one fetch, plus one per change of a host's owner
_PROGRESS_EVERY = 5.0  # seconds between progress lines while waiting
_COMMAND_TIMEOUT = 60.0

Progress = Callable[[str], None]
Disrupt = Callable[[Progress], None]  # done to the cluster mid-crawl: a failover, a reshard


@attrs.frozen
class WorkerExit:
    """How one worker process ended; `killed` marks the one the run killed on purpose."""

    label: str
    code: int | None
    killed: bool = False


def run_practice(
    *,
    pages: int,
    hosts: int,
    workers: int,
    delay: float,
    lease: float,
    idle: float,
    replace_after: float,
    workdir: Path,
    kill: bool = True,
    seed: int = 1,
    timeout: float = 900.0,
    latency: float = 0.0,
    tolerance: float = 0.0,
    verbose: bool = False,
    progress: Progress = print,
    cluster: bool = False,
    fail_primary: bool = False,
    reshard: bool = False,
    shards: int = 1,
    sentinel: bool = False,
    submit_all: bool = False,
    same_name: bool = False,
    worker_flags: Sequence[str] = (),
) -> tuple[Verdict, list[WorkerExit]]:
    """Crawl a generated site with `workers` processes, SIGKILL one a third of the way in.

    Args:
        replace_after: seconds between the kill and the start of a replacement worker.
        workdir: holds the request log, the Redis directory, worker logs and output files.
        timeout: seconds the whole crawl may take; then every worker is killed.
        tolerance: seconds a per-host gap may fall short of `delay` (clock jitter).
        verbose: workers log their progress (to worker-N.log in `workdir`).
        cluster: the crawl's Redis is a 3-primary Redis Cluster (`testing.cluster`), its
            URL naming a node that does not hold the crawl's slot.
        fail_primary: on a cluster, SIGKILL the primary holding the most keys half-way
            through the crawl (under Sentinel, the primary); the run goes on once its
            replica is promoted.
        reshard: on a cluster, half-way through the crawl move the slot of every shard
            of the crawl, keys and all, to another primary (``Cluster.move_slot_of``).
        shards: the crawl's ``--shards`` (given to every worker and to the submit).
        sentinel: the crawl's Redis is a primary, a replica and three sentinels
            (`testing.sentinel`), named by a ``redis+sentinel://`` URL.
        same_name: every worker is started with ``--name worker-N``, and the replacement
            under the killed worker's name: it takes its place (`testing.takeover`).
        submit_all: submit every URL the site has at the start (each page due from then,
            whatever the kill loses), not only the root.
        worker_flags: more flags for every ``join`` (``--timeout 10``, say).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    site = generate_site(pages=pages, hosts=hosts, seed=seed, port=0)
    log_path = workdir / "requests.jsonl"
    with (
        SiteServer(site, latency=latency, log_path=log_path) as server,
        _store(workdir, cluster=cluster, sentinel=sentinel) as stored,
    ):
        redis_url, failover, moves, commands = stored
        expected = len(server.site.expected())
        progress(f"site: {expected} expected URLs on {hosts} hosts at {server.site.root}")
        flags = ["--delay", str(delay), "--lease", str(lease), "--idle", str(idle), *SITE_FLAGS]
        flags.append("--span-hosts")  # the site's hosts are linked from the first one's root
        flags += [*worker_flags, *(["-v"] if verbose else [])]
        sharding = ["--shards", str(shards)] if shards > 1 else []
        pool = _Workers(redis_url, workdir, flags + sharding, progress, sharding)
        pool.same_name = same_name
        disrupted: list[float] = []  # when the failover or reshard began (time.time())
        chosen = failover if fail_primary else moves if reshard else None

        def disrupt(progress: Progress) -> None:
            assert chosen is not None
            disrupted.append(time.time())
            chosen(progress)

        try:
            _crawl(
                server,
                pool,
                workers=workers,
                kill=kill,
                replace_after=replace_after,
                target=expected // 3,
                deadline=time.monotonic() + timeout,
                failover=None if chosen is None else disrupt,
                submit_all=submit_all,
            )
        finally:
            pool.kill_remaining()
        _report_status(redis_url, progress)
        requests = server.requests()
        progress(
            f"Redis commands per request logged: {commands() / max(len(requests), 1):.2f} "
            f"({commands()} commands on the primaries, scripts' inner calls included; "
            f"{len(requests)} requests; a failed primary's own count is lost with it)"
        )
        if pool.killed_at is not None:
            stall, host = longest_stall(server.site, requests, pool.outputs, pool.killed_at)
            progress(
                f"the longest time a host the killed worker did not own went without a "
                f"request after the kill: {stall:.1f} s ({host or 'none'})"
            )
        if pool.replaced_at is not None and pool.killed_at is not None:
            progress(takeover_line(requests, pool.outputs, pool.killed_at, pool.replaced_at))
        if disrupted:
            pause, began = longest_pause([r.time for r in requests], disrupted[0])
            progress(
                f"the longest time without any request after the failover (or reshard) "
                f"began: {pause:.1f} s, from {began - disrupted[0]:+.1f} s"
            )
    verdict = judge(server.site, requests, pool.outputs, delay=delay, tolerance=tolerance)
    return verdict, pool.exits


@contextlib.contextmanager
def _store(
    workdir: Path, *, cluster: bool, sentinel: bool = False
) -> Iterator[tuple[str, Disrupt, Disrupt, Callable[[], int]]]:
    """The crawl's Redis URL, how to fail the primary holding its slot (a cluster's), how
    to move every shard's slot to another primary, and how many commands the primaries
    have run so far."""
    if sentinel:
        yield from _sentinel_store(workdir)
        return
    if not cluster:
        with RedisServer(directory=workdir / "redis") as redis:
            nothing: Disrupt = lambda progress: None  # noqa: E731
            yield redis.url, nothing, nothing, lambda: _commands_run(redis.url)
        return
    key = f"hc:{{{CRAWL}}}:epoch"
    with Cluster(workdir / "cluster") as nodes:
        holder = nodes.primary_of(key)
        url = next(n.url for n in nodes.primaries() if n is not holder)

        def failover(progress: Progress) -> None:
            aim = _most_keys(nodes, key)
            started = time.monotonic()
            dead = nodes.kill_primary_of(aim)
            took = time.monotonic() - started
            progress(
                f"killed the primary holding the most keys (port {dead.port}) with SIGKILL; "
                f"its replica (port {nodes.primary_of(aim).port}) took over in {took:.1f} s"
            )

        def moves(progress: Progress) -> None:
            for name in _shard_names(nodes, key):
                shard_key = f"hc:{{{name}}}:epoch"
                source = nodes.primary_of(shard_key)
                to = next(n for n in nodes.primaries() if n is not source)
                started = time.monotonic()
                # Ten keys a MIGRATE, as redis-cli --cluster reshard's default pipeline.
                moved = nodes.move_slot_of(shard_key, to, batch=10)
                progress(
                    f"moved the slot of {name!r} ({moved} keys) from port {source.port} "
                    f"to {to.port} in {time.monotonic() - started:.2f} s"
                )

        def commands() -> int:
            return sum(_commands_run(node.url) for node in nodes.primaries())

        yield url, failover, moves, commands


def _sentinel_store(workdir: Path) -> Iterator[tuple[str, Disrupt, Disrupt, Callable[[], int]]]:
    """As `_store`, under Sentinel: its failover SIGKILLs the primary; there is no
    reshard."""
    with Sentinels(workdir / "sentinel") as nodes:

        def failover(progress: Progress) -> None:
            started, killed_at = time.monotonic(), time.time()
            dead = nodes.kill_primary()
            took = time.monotonic() - started
            progress(
                f"killed the primary (port {dead.port}) with SIGKILL at {killed_at:.3f}; "
                f"the sentinels promoted its replica (port {nodes.primary().port}), which "
                f"took over in {took:.1f} s"
            )

        def commands() -> int:
            return _commands_run(nodes.primary().url)

        nothing: Disrupt = lambda progress: None  # noqa: E731
        yield nodes.url, failover, nothing, commands


def longest_pause(requests: Sequence[float], after: float) -> tuple[float, float]:
    """The longest time without a request that ends after ``after`` (a time.time()), and
    when it began: how long a failover held the crawl up, judged by the server's log."""
    stamps = sorted(requests)
    gaps = [(b - a, a) for a, b in itertools.pairwise(stamps) if b > after]
    return max(gaps, default=(0.0, after))


def longest_stall(
    site: Site, requests: Sequence[Request], outputs: Sequence[Path], killed_at: float
) -> tuple[float, str]:
    """The longest time between two requests to one host, the second after the kill,
    while the host had a page due, among the hosts the killed worker (the first
    output's) did not own: how long a live member's host went unfetched. A page is due
    from a second after the last request to a page linking to it (its links committed; a
    page requested twice was the dead worker's, whose links its death lost);
    the owners come from the ring of the workers that wrote items before the kill."""
    ids = [_worker_ids(path, before=killed_at) for path in outputs]
    dead = ids[0] if ids else set()
    ring = Ring.of(0, tuple(set().union(*ids)))
    first: dict[str, float] = {}
    last: dict[str, float] = {}  # a page fetched again was one whose links a death lost
    for r in sorted(requests, key=lambda r: r.time):
        first.setdefault(r.url, r.time)
        last[r.url] = r.time
    found: dict[str, float] = {}  # url -> when it was due
    for url, at in last.items():
        for link in site._links_from(url):
            found[link] = min(found.get(link, math.inf), at + 1.0)
    by_host: dict[str, list[tuple[float, str]]] = {}
    for url, at in first.items():
        by_host.setdefault(urlsplit(url).netloc, []).append((at, url))
    stalls = [(0.0, "")]
    for host, fetched in by_host.items():
        if ring.owner_of(host) in dead:
            continue
        fetched.sort()
        for (a, _), (b, _) in itertools.pairwise(fetched):
            due = any(found.get(u, math.inf) <= a for at, u in fetched if at >= b)
            if b > killed_at and due:
                stalls.append((b - a, host))
    return max(stalls)


def _worker_ids(path: Path, *, before: float) -> set[str]:
    """The worker ids in an item file's items fetched before ``before``."""
    if not path.exists():
        return set()
    ids = set()
    for line in path.read_text().splitlines():
        item = json.loads(line)
        fetched = datetime.datetime.fromisoformat(item["fetched_at"]).timestamp()
        if fetched < before:
            ids.add(str(item["worker"]))
    return ids


def _most_keys(nodes: Cluster, key: str) -> str:
    """A shard's epoch key on the primary that holds the most keys (``DBSIZE``): with
    one shard, the crawl's own."""
    keys = [f"hc:{{{name}}}:epoch" for name in _shard_names(nodes, key)]

    def size(shard_key: str) -> int:
        with nodes.client(nodes.primary_of(shard_key)) as client:
            return int(client.dbsize())

    return max(keys, key=size)


def _shard_names(nodes: Cluster, key: str) -> list[str]:
    """The crawl's name and its other shards' (their tags are in shard 0's ``shards``)."""
    with nodes.client(nodes.primary_of(key)) as client:
        tags = str(client.get(f"hc:{{{CRAWL}}}:shards") or "").split()
    return [CRAWL, *(shard_name(CRAWL, tag) for tag in tags)]


def _commands_run(url: str) -> int:
    """Commands a server has run since it started (``INFO commandstats``)."""
    with Redis.from_url(url) as client:
        stats = client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


def practice_failures(
    verdict: Verdict,
    exits: Sequence[WorkerExit],
    *,
    max_duplicates: int = MAX_DUPLICATES,
    max_robots_per_host: int = MAX_ROBOTS_PER_HOST,
) -> list[str]:
    """The acceptance criteria the run missed, each as a sentence; empty if it passed."""
    checks = [
        (not verdict.missing, f"{len(verdict.missing)} expected URLs were never requested"),
        (not verdict.missing_from_output, f"{len(verdict.missing_from_output)} URLs have no item"),
        (verdict.too_close == 0, f"{verdict.too_close} request pairs came closer than the delay"),
        (not verdict.forbidden_fetched, f"{len(verdict.forbidden_fetched)} forbidden fetches"),
        (
            verdict.robots_fetches_per_host <= max_robots_per_host,
            f"robots.txt fetched {verdict.robots_fetches_per_host} times on one host "
            f"(at most {max_robots_per_host})",
        ),
        (
            verdict.duplicates <= max_duplicates,
            f"{verdict.duplicates} duplicate requests (at most {max_duplicates})",
        ),
    ]
    failures = [message for passed, message in checks if not passed]
    failures += [
        f"{worker.label} exited with {worker.code}, expected 0"
        for worker in exits
        if not worker.killed and worker.code != 0
    ]
    return failures


def _crawl(
    server: SiteServer,
    pool: _Workers,
    *,
    workers: int,
    kill: bool,
    replace_after: float,
    target: int,
    deadline: float,
    failover: Callable[[Progress], None] | None = None,
    submit_all: bool = False,
) -> None:
    for _ in range(workers):
        pool.start()
    pool.submit(*(sorted(server.site.expected()) if submit_all else [server.site.root]))
    if kill and _wait_for_requests(server, pool, target, deadline):
        killed = pool.kill_one()
        time.sleep(replace_after)  # the run's specified pause, not a wait for a condition
        pool.start(name=killed if pool.same_name else None)
    step = "the primary's death (or the reshard)"
    if failover is not None and _wait_for_requests(
        server, pool, target * 3 // 2, deadline, step=step
    ):
        failover(pool.progress)
    pool.wait_all(deadline, lambda: f"{len(server.requests())} requests so far")


def _wait_for_requests(
    server: SiteServer, pool: _Workers, target: int, deadline: float, *, step: str = "the kill"
) -> bool:
    """Wait until the server has logged `target` requests; False if every worker exited first."""
    pool.progress(f"waiting for {target} requests before {step}")
    while time.monotonic() < deadline and pool.running():
        wait = min(_PROGRESS_EVERY, max(0.0, deadline - time.monotonic()))
        if server.wait_for_requests(target, timeout=wait):
            return True
        pool.progress(f"{len(server.requests())} requests so far")
    pool.progress(f"no {step.removeprefix('the ')}: the workers stopped or the time ran out first")
    return False


class _Workers:
    """The worker processes of one run, with their logs and output files."""

    def __init__(
        self,
        redis_url: str,
        workdir: Path,
        flags: list[str],
        progress: Progress,
        submit_flags: Sequence[str] = (),
    ):
        self.submit_flags = list(submit_flags)
        self.redis_url = redis_url
        self.workdir = workdir
        self.flags = flags
        self.progress = progress
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[str] = set()
        self.killed_at: float | None = None  # time.time() of the kill
        self.outputs: list[Path] = []
        self.same_name = False  # each worker has --name LABEL, a replacement its victim's
        self.replaced_at: float | None = None  # time.time() of a start under a taken name

    def start(self, name: str | None = None) -> None:
        """Start a worker; ``name``: under that worker's name (a killed one's)."""
        number = len(self.processes) + 1
        label, output = f"worker-{number}", self.workdir / f"items-{number}.jsonl"
        command = ["join", "--redis", self.redis_url, "--crawl", CRAWL, "-o", str(output)]
        if self.same_name:
            command += ["--name", name or label]
            if name is not None:
                self.replaced_at = time.time()
        with (self.workdir / f"{label}.log").open("wb") as log:
            self.processes[label] = _hashcrawl(command + self.flags, stdout=log)
        self.outputs.append(output)
        self.progress(f"started {label} (pid {self.processes[label].pid})")

    def submit(self, *urls: str) -> None:
        command = ["submit", "--new", "--redis", self.redis_url, "--crawl", CRAWL, *SITE_FLAGS]
        command += [*self.submit_flags, *urls]
        result = _run(command)
        if result.returncode != 0:
            raise RuntimeError(f"hashcrawl submit exited {result.returncode}: {result.stdout!r}")
        self.progress(f"submitted {urls[0]}" + (f" and {len(urls) - 1} more" if urls[1:] else ""))

    def kill_one(self) -> str:
        """SIGKILL the first worker; returns its label (its --name, if named)."""
        label, process = next(iter(self.processes.items()))
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.killed_at = time.time()
        self.killed.add(label)
        self.progress(f"killed {label} with SIGKILL")
        return label

    def running(self) -> bool:
        return any(process.poll() is None for process in self.processes.values())

    def wait_all(self, deadline: float, status: Callable[[], str]) -> None:
        """Wait for every worker to exit by itself, until `deadline`."""
        for label, process in self.processes.items():
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    process.wait(timeout=min(_PROGRESS_EVERY, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.progress(f"waiting for {label} to finish: {status()}")
            if process.returncode is not None:
                self.progress(f"{label} exited with {process.returncode}")
        if self.running():
            self.progress("timed out: killing the workers still running")

    def kill_remaining(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    @property
    def exits(self) -> list[WorkerExit]:
        return [
            WorkerExit(label, process.returncode, killed=label in self.killed)
            for label, process in self.processes.items()
        ]


def _hashcrawl(arguments: list[str], *, stdout: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hashcrawl", *arguments],
        cwd=REPO,
        env=_environment(),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
    )


def _run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hashcrawl", *arguments],
        cwd=REPO,
        env=_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=_COMMAND_TIMEOUT,
        check=False,
    )


def _environment() -> dict[str, str]:
    """The environment for hashcrawl commands: the repository importable, installed or not."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def _report_status(redis_url: str, progress: Progress) -> None:
    result = _run(["status", "--redis", redis_url, "--crawl", CRAWL, "--json"])
    progress(f"hashcrawl status (exit {result.returncode}): {result.stdout.strip()[:2000]}")
