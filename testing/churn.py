"""The churn run: the fleet changes under a crawl, and Redis restarts once.

Two workers start on the practice site. At set shares of the expected URLs three more join,
two are stopped with SIGTERM (one of the first two, one of the joiners), one is paused with
SIGSTOP until the others expel it and then resumed (it rejoins as a new member), and Redis
restarts from its AOF. Every worker must then end by itself, with status 0.

A second, shorter phase (``run_lost_state``) restarts Redis *without* persistence in
mid-crawl: every worker must then exit 1 with one line saying the crawl's state was lost,
and none may exit 0 (before the instance marker, they rejoined an empty crawl and ended
"successfully" with nothing fetched).

Judged like the practice run, from the test server's request log and the output files. The
only duplicates allowed are refetches of what the paused worker held: pages first requested
just before the pause and again after it, no more of them than its --concurrency.
`scripts/churn` is a command line over `run_churn`, and `tests/test_churn.py` runs a small one.
"""

from __future__ import annotations

import collections
import itertools
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import redis as redis_py

from hashcrawl._store._server import RedisServer
from testing.fleet import is_report
from testing.practice import (
    CRAWL,
    Progress,
    WorkerExit,
    _report_status,
    _run,
    _wait_for_requests,
    _Workers,
    practice_failures,
)
from testing.testsite import SITE_FLAGS, Request, Site, SiteServer, Verdict, generate_site, judge

FIRST = 2  # workers at the start
JOINERS = 3  # workers added at JOIN_AT
JOIN_AT, STOP_AT, PAUSE_AT, RESTART_AT = 0.15, 0.35, 0.50, 0.65  # shares of expected URLs
STOPPED = ("worker-1", "worker-3")  # SIGTERMed: one of the first two, one of the joiners
PAUSED = "worker-4"  # SIGSTOPped past its lease, then SIGCONTed
# A host's robots.txt is fetched once per owner: at most once at the start and once per
# membership change (3 joins, 2 leaves, 1 expulsion, 1 rejoin).
MAX_ROBOTS_PER_HOST = 1 + JOINERS + len(STOPPED) + 2
# What the paused worker held was requested at most a response time (the server's latency)
# plus this long before the pause: it commits what it fetched every 50 ms.
HELD_FOR = 1.0
_POLL = 1.0  # seconds between two looks at the membership (each look costs 0.2 s of CPU)
_SLACK = 15.0  # seconds beyond the lease (or grace) that a membership change may take


@attrs.frozen
class Step:
    """One thing the run did to the fleet: seconds after the start, and requests by then."""

    at: float
    requests: int
    what: str


@attrs.frozen
class Duplicate:
    """A page requested more than once: when (seconds after the start), and whether the
    paused worker held it (first requested just before the pause, again after it)."""

    url: str
    times: tuple[float, ...]
    held: bool
    senders: tuple[str, ...] = ()  # the worker that sent each request, where known


@attrs.frozen
class Churn:
    """What a churn run found: the judge's verdict, how each worker ended, and the steps."""

    verdict: Verdict
    exits: tuple[WorkerExit, ...]
    roles: Mapping[str, str]  # label -> what the run did to that worker
    steps: tuple[Step, ...]
    missed: tuple[str, ...]  # steps of the scenario that did not happen as planned
    concurrency: int
    paused_at: float | None  # seconds after the start, on the request log's clock
    duplicates: tuple[Duplicate, ...]
    too_close: tuple[str, ...]  # each pair of requests to a host closer than its delay
    footprint: str = ""  # Redis memory once the crawl has ended (and what is still queued)

    def lines(self) -> list[str]:
        """The steps, duplicates and too-close pairs, one per line."""
        lines = [f"[{s.at:7.2f}s] {s.requests:6d} requests: {s.what}" for s in self.steps]
        for duplicate in sorted(self.duplicates, key=lambda d: d.times):
            stamps = ", ".join(
                f"{t:.2f}s" + (f" by {who}" if who else "")
                for t, who in itertools.zip_longest(duplicate.times, duplicate.senders)
            )
            why = "held by the paused worker" if duplicate.held else "NOT held by the paused worker"
            lines.append(f"duplicate: {duplicate.url} at {stamps} ({why})")
        return lines + [f"too close: {pair}" for pair in self.too_close]


def run_churn(
    *,
    pages: int,
    hosts: int,
    delay: float,
    lease: float,
    idle: float,
    grace: float,
    concurrency: int,
    workdir: Path,
    seed: int = 1,
    timeout: float = 600.0,
    latency: float = 0.0,
    tolerance: float = 0.0,
    verbose: bool = False,
    progress: Progress = print,
) -> Churn:
    """Crawl a generated site while workers join, leave, stall and Redis restarts.

    Args:
        workdir: holds the request log, the Redis directory, worker logs and output files.
        timeout: seconds the whole crawl may take; then every worker is killed.
        latency: seconds the server waits before each response (to make the crawl last).
        tolerance: seconds a per-host gap may fall short of `delay` (clock jitter).
        verbose: workers log joins, handoffs and leaves (to worker-N.log in `workdir`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    site = generate_site(pages=pages, hosts=hosts, seed=seed, port=0)
    with (
        SiteServer(site, latency=latency, log_path=workdir / "requests.jsonl", who=True) as server,
        RedisServer(directory=workdir / "redis", appendonly=True) as redis,
    ):
        expected = len(server.site.expected())
        progress(f"site: {expected} expected URLs on {hosts} hosts at {server.site.root}")
        flags = ["--delay", str(delay), "--lease", str(lease), "--idle", str(idle), *SITE_FLAGS]
        flags.append("--span-hosts")  # the site's hosts are linked from the first one's root
        flags += ["--grace", str(grace), "--concurrency", str(concurrency)]
        pool = _Workers(redis.url, workdir, flags + (["-v"] if verbose else []), progress)
        limits = _Limits(lease=lease, grace=grace, deadline=time.monotonic() + timeout)
        scenario = _Scenario(server, redis, pool, limits)
        try:
            scenario.play(expected)
        finally:
            pool.kill_remaining()
        _report_status(redis.url, progress)
        footprint = redis_footprint(redis.url)
        progress(footprint)
        requests = server.requests()
    verdict = judge(server.site, requests, pool.outputs, delay=delay, tolerance=tolerance)
    return Churn(
        verdict=verdict,
        exits=tuple(pool.exits),
        roles=_roles(pool.processes),
        steps=tuple(scenario.steps),
        missed=tuple(scenario.missed),
        concurrency=concurrency,
        paused_at=scenario.paused_at,
        duplicates=_duplicates(
            requests, scenario.started, scenario.paused_at, latency, _labels(pool)
        ),
        too_close=_too_close(
            server.site, requests, delay - tolerance, scenario.started, _labels(pool)
        ),
        footprint=footprint,
    )


def redis_footprint(redis_url: str) -> str:
    """Redis memory, the crawl's keys and what is still queued, in one line."""
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        used = int(raw.info("memory")["used_memory"])
        keys = sorted(raw.scan_iter(match=f"hc:{{{CRAWL}}}:*", count=1000))
        queued = sum(raw.xlen(k) for k in keys if raw.type(k) == "stream")
        queued += sum(raw.zcard(k) for k in keys if ":park:" in k)
        sizes = sorted(((raw.memory_usage(k) or 0), k) for k in keys)
        biggest = ", ".join(
            f"{k.rpartition(':')[2]} {size / 1024:.0f} KiB" for size, k in sizes[-4:]
        )
        hashes = {name: raw.hlen(f"hc:{{{CRAWL}}}:{name}") for name in ("pace", "dead")}
        workers = raw.scard(f"hc:{{{CRAWL}}}:workers")
    finally:
        raw.close()
    return (
        f"Redis used_memory {used / 2**20:.1f} MiB; {len(keys)} keys; {queued} entries queued; "
        f"pace {hashes['pace']}, dead {hashes['dead']}, workers {workers}; biggest: {biggest}"
    )


@attrs.frozen
class LostState:
    """How the workers ended after Redis came back empty: exit codes and their log lines."""

    exits: tuple[WorkerExit, ...]
    logs: Mapping[str, tuple[str, ...]]  # label -> the lines the worker wrote
    steps: tuple[str, ...]


def run_lost_state(
    *,
    pages: int,
    hosts: int,
    workers: int,
    delay: float,
    lease: float,
    workdir: Path,
    latency: float = 0.0,
    timeout: float = 120.0,
    progress: Progress = print,
) -> LostState:
    """Crawl until a third of the site is fetched, then restart Redis without persistence.

    The server starts with an AOF (so the workers join without a warning about it) and
    comes back without one: its data is gone, as after a restart of a Redis without
    persistence. The workers log warnings only, so their logs hold just what they say.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    site = generate_site(pages=pages, hosts=hosts, seed=3, port=0)
    steps: list[str] = []
    with (
        SiteServer(site, latency=latency) as server,
        RedisServer(directory=workdir / "redis", appendonly=True) as server_redis,
    ):
        flags = ["--delay", str(delay), "--lease", str(lease), "--idle", "none", *SITE_FLAGS]
        flags.append("--span-hosts")  # the site's hosts are linked from the first one's root
        pool = _Workers(server_redis.url, workdir, flags, progress)
        deadline = time.monotonic() + timeout
        try:
            for _ in range(workers):
                pool.start()
            pool.submit(server.site.root)
            target = len(server.site.expected()) // 3
            if _wait_for_requests(server, pool, target, deadline, step="the restart"):
                server_redis.appendonly = False
                server_redis.restart()
                steps.append(f"Redis restarted without persistence after {target} requests")
            pool.wait_all(deadline, lambda: f"{len(server.requests())} requests so far")
        finally:
            pool.kill_remaining()
    logs = {
        label: tuple(
            line
            for line in (workdir / f"{label}.log").read_text().splitlines()
            if not is_report(line)  # join's lines on what it does are not what it says
        )
        for label in pool.processes
    }
    return LostState(exits=tuple(pool.exits), logs=logs, steps=tuple(steps))


def lost_state_failures(lost: LostState) -> list[str]:
    """What the lost-state phase missed: a restart, an exit 1, or the one line."""
    failures = [] if lost.steps else ["Redis was not restarted: the crawl ended first"]
    for worker in lost.exits:
        lines = lost.logs[worker.label]
        if worker.code != 1:
            failures.append(f"{worker.label} exited {worker.code}, not 1")
        if len(lines) != 1 or "state in Redis is gone" not in lines[0]:
            failures.append(
                f"{worker.label} did not say in one line that the state was lost: {lines}"
            )
    return failures


def churn_failures(churn: Churn) -> list[str]:
    """The acceptance criteria the run missed, each as a sentence; empty if it passed."""
    failures = practice_failures(
        churn.verdict,
        churn.exits,
        max_duplicates=churn.concurrency,
        max_robots_per_host=MAX_ROBOTS_PER_HOST,
    )
    failures += [f"the scenario went wrong: {what}" for what in churn.missed]
    stray = [duplicate.url for duplicate in churn.duplicates if not duplicate.held]
    if stray:
        failures.append(
            f"{len(stray)} duplicate requests are not of pages the paused worker held, "
            f"e.g. {stray[0]}"
        )
    return failures


@attrs.frozen(kw_only=True)
class _Limits:
    """How long the scenario's waits may last: the workers' lease and grace, the run's end."""

    lease: float
    grace: float
    deadline: float  # on time.monotonic()'s clock

    def within(self, seconds: float) -> float:
        """The deadline for a wait that should take `seconds`, with some slack."""
        return min(self.deadline, time.monotonic() + seconds + _SLACK)


class _Scenario:
    """Drives the fleet through the churn steps and records what happened when."""

    def __init__(
        self, server: SiteServer, redis: RedisServer, pool: _Workers, limits: _Limits
    ) -> None:
        self.server = server
        self.redis = redis
        self.pool = pool
        self.limits = limits
        self.started = time.time()  # the request log's clock
        self.steps: list[Step] = []
        self.missed: list[str] = []
        self.paused_at: float | None = None

    def play(self, expected: int) -> None:
        for _ in range(FIRST):
            self.pool.start()
        self.pool.submit(self.server.site.root)
        self.note(f"started {FIRST} workers and submitted the root")
        for share, step, act in (
            (JOIN_AT, "the joins", self.join),
            (STOP_AT, "the SIGTERMs", self.stop),
            (PAUSE_AT, "the pause", self.pause),
            (RESTART_AT, "the Redis restart", self.restart),
        ):
            target = int(expected * share)
            if _wait_for_requests(self.server, self.pool, target, self.limits.deadline, step=step):
                act()
            else:
                self.missed.append(f"{step} did not happen: the crawl ended or timed out first")
        self.pool.wait_all(self.limits.deadline, self.requests_so_far)
        self.note("every worker has exited" if not self.pool.running() else "timed out")

    def note(self, what: str) -> None:
        self.steps.append(Step(time.time() - self.started, len(self.server.requests()), what))
        self.pool.progress(what)

    def requests_so_far(self) -> str:
        return f"{len(self.server.requests())} requests so far"

    def join(self) -> None:
        for _ in range(JOINERS):
            self.pool.start()
        self.note(f"started {JOINERS} more workers")
        # Stopping a worker that has not joined yet would test its start-up, not its leave.
        pids = {process.pid for process in self.pool.processes.values()}
        if self.await_members(lambda members: pids <= members, self.limits.lease):
            self.note(f"all {len(pids)} workers are members")
        else:
            self.missed.append(f"not all {len(pids)} workers joined within a lease")

    def stop(self) -> None:
        for label in STOPPED:
            self.pool.processes[label].send_signal(signal.SIGTERM)
        self.note(f"sent SIGTERM to {' and '.join(STOPPED)}")
        until = self.limits.within(self.limits.grace)
        for label in STOPPED:
            code = _exit_by(self.pool.processes[label], until)
            self.note(f"{label} exited with {code}" if code is not None else f"{label} runs on")

    def pause(self) -> None:
        process = self.pool.processes[PAUSED]
        process.send_signal(signal.SIGSTOP)
        self.paused_at = time.time() - self.started
        self.note(f"sent SIGSTOP to {PAUSED} (pid {process.pid})")
        try:
            expelled = self.await_members(lambda pids: process.pid not in pids, self.limits.lease)
        finally:
            process.send_signal(signal.SIGCONT)
        if expelled:
            self.note(f"{PAUSED} is gone from the members")
        else:
            self.missed.append(f"{PAUSED} was not expelled within a lease")
        self.note(f"sent SIGCONT to {PAUSED}")
        if self.await_members(lambda pids: process.pid in pids, self.limits.lease):
            self.note(f"{PAUSED} is a member again (under a new id)")
        else:
            self.missed.append(f"{PAUSED} did not rejoin within a lease")

    def restart(self) -> None:
        began = time.monotonic()
        self.note("restarting Redis")
        self.redis.restart()
        self.note(f"Redis is back after {time.monotonic() - began:.2f} s")

    def await_members(self, condition: Callable[[set[int]], bool], seconds: float) -> bool:
        """Poll `hashcrawl status --json` until its members' pids meet `condition`."""
        until = self.limits.within(seconds)
        while time.monotonic() < until:
            pids = _member_pids(self.redis.url)
            if pids is not None and condition(pids):
                return True
            time.sleep(_POLL)  # another process's state: there is nothing to await here
        return False


def _roles(labels: Iterable[str]) -> dict[str, str]:
    special = {label: "stopped with SIGTERM" for label in STOPPED}
    special[PAUSED] = "paused past its lease, then resumed"
    return {label: special.get(label, "ran to the end") for label in labels}


def _exit_by(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def _member_pids(redis_url: str) -> set[int] | None:
    """The process ids of the crawl's members, or None if `hashcrawl status` failed."""
    result = _run(["status", "--redis", redis_url, "--crawl", CRAWL, "--json"])
    if result.returncode != 0:
        return None
    try:
        return {member["pid"] for member in json.loads(result.stdout)["members"]}
    except (ValueError, KeyError, TypeError):
        return None


def _duplicates(
    requests: Sequence[Request],
    started: float,
    paused_at: float | None,
    latency: float,
    labels: Mapping[int, str],
) -> tuple[Duplicate, ...]:
    """Pages requested more than once, each judged: was it held by the paused worker?"""
    made: dict[str, list[Request]] = collections.defaultdict(list)
    for request in sorted(requests, key=lambda r: r.time):
        if not request.is_robots:
            made[request.url].append(request)
    duplicates = []
    for url, twice in sorted(made.items()):
        if len(twice) > 1:
            first, *later = [request.time - started for request in twice]
            held = (
                paused_at is not None
                and len(later) == 1
                and paused_at - latency - HELD_FOR <= first <= paused_at < later[0]
            )
            senders = tuple(_sender(request, labels) for request in twice)
            duplicates.append(Duplicate(url, (first, *later), held, senders))
    return tuple(duplicates)


def _sender(request: Request, labels: Mapping[int, str]) -> str:
    if request.pid is None:
        return "?"
    return labels.get(request.pid, f"pid {request.pid}")


def _labels(pool: _Workers) -> dict[int, str]:
    return {process.pid: label for label, process in pool.processes.items()}


def _too_close(
    site: Site,
    requests: Sequence[Request],
    least: float,
    started: float,
    labels: Mapping[int, str],
) -> tuple[str, ...]:
    """Each pair of consecutive requests to a host less than `least` (or its Crawl-delay)
    apart, each request with the worker that sent it (``labels``: by pid) where known."""
    by_host: dict[str, list[Request]] = collections.defaultdict(list)
    for request in sorted(requests, key=lambda r: r.time):
        by_host[request.host].append(request)
    pairs = []
    for host, made in sorted(by_host.items()):
        limit = max(least, site.crawl_delays.get(host, 0.0))
        for a, b in itertools.pairwise(made):
            if b.time - a.time < limit:
                by = [_sender(r, labels) for r in (a, b)]
                pairs.append(
                    f"{host}: {a.path} at {a.time - started:.3f}s by {by[0]}, {b.path} at "
                    f"{b.time - started:.3f}s by {by[1]} ({b.time - a.time:.4f} s apart)"
                )
    return tuple(pairs)
