"""One crawl of the bench site by one contender, measured from outside.

Each run gets a fresh private Redis server and a fresh access log. What is measured:

- pages: distinct HTML pages the static server answered 200 for (robots.txt excluded);
- wall: from the first request the server saw to the last page it served (so neither
  interpreter start-up nor hashcrawl's ``--idle`` wait at the end counts);
- CPU and peak RSS of the crawler processes only, from ``wait4``'s rusage (threads
  included; user + system); and the CPU of each process's main thread alone (the
  event loop's, for hashcrawl), from /proc as it runs (Linux; 0 elsewhere);
- Redis: every command the server executed (INFO commandstats, commands called inside
  Lua scripts included, the bench's own INFO calls excluded), ``used_memory`` at the
  end minus at the start, and the server's own CPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import attrs
import redis as redis_py

from hashcrawl import Queue
from hashcrawl._store._server import RedisServer
from hashcrawl._store._server import _dies_with as dies_with

from .static_site import StaticServer, allow_flags, read_log

CRAWL = "bench"
SCRIPTS = Path(__file__).resolve().parent
_OWN_COMMANDS = {"info"}  # the snapshots themselves


@attrs.frozen(kw_only=True)
class Result:
    name: str
    processes: int
    pages: int
    requests: int
    wall: float
    cpu: float
    rss_kb: int
    redis_calls: dict[str, int]
    redis_memory: int
    redis_cpu: float
    seen: int
    items: int
    complete: bool
    main_cpu: float = 0.0  # the processes' main threads only (their event loops)
    window_cpu: float = 0.0  # the main threads' CPU between the first request and the last page

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.wall if self.wall > 0 else 0.0

    @property
    def cpu_per_1k(self) -> float:
        return self.cpu / self.pages * 1000 if self.pages else 0.0

    @property
    def main_cpu_per_1k(self) -> float:
        return self.main_cpu / self.pages * 1000 if self.pages else 0.0

    @property
    def window_cpu_per_1k(self) -> float:
        return self.window_cpu / self.pages * 1000 if self.pages else 0.0

    @property
    def busy(self) -> float:
        """The main threads' CPU in the crawl's window over its wall time: near 1 for one
        process, the event loop was never idle (CPU-bound); well under it, it waited."""
        return self.window_cpu / self.wall if self.wall > 0 else 0.0

    @property
    def calls_per_page(self) -> float:
        return sum(self.redis_calls.values()) / self.pages if self.pages else 0.0

    @property
    def memory_per_url(self) -> float:
        return self.redis_memory / self.seen if self.seen else 0.0

    def top_calls(self, count: int = 6) -> str:
        ranked = sorted(self.redis_calls.items(), key=lambda kv: -kv[1])[:count]
        return ", ".join(f"{name} {calls / max(self.pages, 1):.2f}" for name, calls in ranked)

    def as_dict(self) -> dict[str, Any]:
        derived = {
            "pages_per_s": self.pages_per_s,
            "cpu_per_1k": self.cpu_per_1k,
            "main_cpu_per_1k": self.main_cpu_per_1k,
            "window_cpu_per_1k": self.window_cpu_per_1k,
            "busy": self.busy,
            "calls_per_page": self.calls_per_page,
            "memory_per_url": self.memory_per_url,
        }
        return attrs.asdict(self) | derived


@attrs.define
class Usage:
    cpu: float = 0.0
    rss_kb: int = 0
    main_cpu: float = 0.0
    samples: list[tuple[float, float]] = attrs.Factory(list)  # (time.time(), main threads' CPU)
    in_time: bool = True  # every process exited with a status in ``ok`` before the deadline

    def main_cpu_between(self, start: float, end: float) -> float:
        """The main threads' CPU between two ``time.time()`` instants (interpolated)."""
        return _at(self.samples, end) - _at(self.samples, start)


def _at(samples: list[tuple[float, float]], when: float) -> float:
    before = [(t, c) for t, c in samples if t <= when] or samples[:1]
    after = [(t, c) for t, c in samples if t >= when] or samples[-1:]
    if not before:
        return 0.0
    (t0, c0), (t1, c1) = before[-1], after[0]
    return c0 if t1 <= t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def main_thread_cpu(pid: int) -> float | None:
    """CPU seconds of ``pid``'s main thread so far (Linux /proc), None if unknown."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def wait_all(
    pids: Sequence[int], deadline: float, ok: Collection[int] = (0,)
) -> tuple[Usage, bool]:
    """Reap ``pids`` with their rusage; kill what is left at ``deadline``.

    Returns the summed usage, and whether every process exited with a status in ``ok``
    before the deadline.
    """
    usage, left = Usage(), set(pids)
    try:
        _reap(usage, left, deadline, ok)
    finally:  # interrupted (Ctrl-C, SIGTERM, an error): no crawler outlives the bench
        for pid in left:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return usage, usage.in_time


def _reap(usage: Usage, left: set[int], deadline: float, ok: Collection[int]) -> None:
    """``wait_all``'s loop: it empties ``left`` as the processes exit."""
    main: dict[int, float] = {}  # each main thread's CPU at the last look (0.05 s apart)
    while left:
        for pid in list(left):
            seconds = main_thread_cpu(pid)
            if seconds is not None:
                main[pid] = seconds
            done, status, rusage = os.wait4(pid, os.WNOHANG)  # (main's last look kept)
            if done:
                left.discard(pid)
                usage.main_cpu += main.get(pid, 0.0)
                usage.in_time = usage.in_time and os.waitstatus_to_exitcode(status) in ok
                usage.cpu += rusage.ru_utime + rusage.ru_stime
                usage.rss_kb = max(usage.rss_kb, rusage.ru_maxrss)
        usage.samples.append((time.time(), sum(main.values())))
        if left and time.monotonic() > deadline:
            usage.in_time = False
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.05)


def redis_snapshot(url: str) -> tuple[dict[str, int], int, float]:
    """(calls per command, used_memory, server CPU seconds) right now."""
    client = redis_py.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
        memory = int(client.info("memory")["used_memory"])
        cpu = client.info("cpu")
    finally:
        client.close()
    calls = {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") not in _OWN_COMMANDS
    }
    return calls, memory, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def served(log: Path) -> tuple[int, int, float, float]:
    """(distinct pages answered 200, requests, first request time, last page time)."""
    pages: set[tuple[str, str]] = set()
    requests, first, last = 0, float("inf"), 0.0
    for at, status, host, uri in read_log(log):
        requests += 1
        first = min(first, at)
        if status == 200 and uri != "/robots.txt":
            pages.add((host, uri))
            last = max(last, at)
    return len(pages), requests, first, last


def count_lines(paths: Sequence[Path]) -> int:
    total = 0
    for path in paths:
        if path.exists():
            with open(path, "rb") as f:
                total += sum(1 for _ in f)
    return total


Launch = Callable[[str, Path], tuple[list[int], Callable[[str], int], list[Path]]]


def measure(
    name: str,
    launch: Launch,
    *,
    site: StaticServer,
    work: Path,
    expected_pages: int,
    timeout: float,
) -> Result:
    """Run one contender against a fresh Redis and a fresh access log."""
    run_dir = work / name.replace(" ", "-")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "access.log"
    site.start(log)
    try:
        with RedisServer(directory=run_dir / "redis") as server:
            _, memory_before, cpu_before = redis_snapshot(server.url)
            pids, seen_of, outputs = launch(server.url, run_dir)
            usage, in_time = wait_all(pids, time.monotonic() + timeout)
            calls, memory_after, cpu_after = redis_snapshot(server.url)
            seen = seen_of(server.url)
    finally:
        site.stop()
    pages, requests, first, last = served(log)
    return Result(
        name=name,
        processes=len(pids),
        pages=pages,
        requests=requests,
        wall=last - first,
        cpu=usage.cpu,
        rss_kb=usage.rss_kb,
        redis_calls=calls,
        redis_memory=memory_after - memory_before,
        redis_cpu=cpu_after - cpu_before,
        seen=seen,
        items=count_lines(outputs),
        complete=in_time and pages >= expected_pages,
        main_cpu=usage.main_cpu,
        window_cpu=usage.main_cpu_between(first, last),
    )


def hashcrawl_launcher(
    seeds: list[str],
    workers: int,
    extra: Sequence[str] = (),
    wrap: Sequence[str] = (),
    *,
    warc: bool = False,
    items: bool = True,
    checkout: Path | None = None,
    env: dict[str, str] | None = None,
) -> Launch:
    """Submit the seeds, then start ``workers`` ``hashcrawl join`` processes.

    ``wrap`` goes before each command (a profiler, say); with ``warc`` each worker also
    archives every fetch (``-o pages.warc.gz``) beside its items (without ``items``,
    alone: the items go to standard output, as with ``-o pages.warc.gz`` alone, which the
    bench sends to the worker's log file); ``env`` is added to the workers' environment
    (``HASHCRAWL_PARSE_PROCESS=1``, say); ``checkout`` is another
    checkout of hashcrawl to run instead of this one (an earlier commit, say).
    """

    def launch(url: str, run_dir: Path) -> tuple[list[int], Callable[[str], int], list[Path]]:
        with Queue(url, CRAWL) as queue:
            queue.submit(seeds, allow_private=True)
        outputs = [run_dir / f"items-{i}.jsonl" for i in range(workers)]
        archive = ["-o", str(run_dir / "pages.warc.gz")] if warc else []
        pids = [
            _spawn(
                [*wrap, *_join_command(url, out if items else None, [*extra, *archive])],
                run_dir / f"worker-{i}.err",
                checkout,
                env,
            )
            for i, out in enumerate(outputs)
        ]
        return pids, _hashcrawl_seen, outputs

    return launch


def _join_command(url: str, output: Path | None, extra: Sequence[str]) -> list[str]:
    items = ["-o", str(output)] if output is not None else []
    return [
        sys.executable, "-m", "hashcrawl", "join", "--redis", url, "--crawl", CRAWL,
        *items, "--delay", "0", "--per-host", "1", "--concurrency", "64",
        "--idle", "2", "--lease", "30", "--span-hosts", *allow_flags(), *extra,
    ]  # fmt: skip


def _hashcrawl_seen(url: str) -> int:
    with Queue(url, CRAWL) as queue:
        return int(queue.status()["seen"])


def bare_launcher(seeds: list[str]) -> Launch:
    """The bare trio + httpx + lxml loop (``_bench/bare.py``): no Redis, a set for dedupe."""

    def launch(url: str, run_dir: Path) -> tuple[list[int], Callable[[str], int], list[Path]]:
        output = run_dir / "pages.jsonl"
        command = [sys.executable, str(SCRIPTS / "bare.py"), "--concurrency", "64"]
        command += ["--per-host", "1", "-o", str(output), *seeds]
        return [_spawn(command, run_dir / "bare.err")], lambda _: 0, [output]

    return launch


def scrapy_launcher(seeds: list[str]) -> Launch:
    def launch(url: str, run_dir: Path) -> tuple[list[int], Callable[[str], int], list[Path]]:
        output = run_dir / "items.jsonl"
        command = [sys.executable, str(SCRIPTS / "scrapy_spider.py"), "--redis", url]
        command += ["--output", str(output), *seeds]
        return [_spawn(command, run_dir / "scrapy.err")], _scrapy_seen, [output]

    return launch


def _scrapy_seen(url: str) -> int:
    client = redis_py.Redis.from_url(url)
    try:
        return int(client.scard("bench:dupefilter"))
    finally:
        client.close()


def _spawn(
    command: list[str],
    err: Path,
    checkout: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> int:
    """Start a crawler; its pid is reaped by ``wait_all`` (for the rusage).

    With ``checkout``, ``python -m hashcrawl`` imports hashcrawl from there: it goes
    first on PYTHONPATH, and is the working directory (which ``-m`` puts first of all).
    """
    env = None if checkout is None else os.environ | {"PYTHONPATH": str(checkout)}
    if extra_env:
        env = (env or dict(os.environ)) | extra_env
    with open(err, "wb") as stderr:
        process = subprocess.Popen(
            command,
            stdout=stderr,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=checkout,
            preexec_fn=dies_with(os.getpid()),  # no crawler outlives a killed bench
        )
    process.returncode = 0  # reaped by wait4 in wait_all: keep Popen from reaping it
    return process.pid
