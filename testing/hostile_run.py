"""The hostile run: worker processes crawl `testing.hostile`'s cases beside a normal site.

`run_hostile` starts the servers, a Redis and the workers, follows the crawl until it
ends (or every rule holds, or time is up), and judges it: each case from the hostile
server's log, the normal site with `testing.testsite.judge`, and the workers' peak RSS,
exit codes and Redis's SLOWLOG. `scripts/hostile` prints the verdict; the slow test in
`tests/test_hostile.py` runs a small one.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import redis as redis_py

from hashcrawl._run._queue import Queue
from hashcrawl._store._server import RedisServer
from testing.fleet import DEADLINE, Process, Processes, status_of, wait_until
from testing.hostile import (
    Case,
    CaseResult,
    Hit,
    HostileServer,
    judge_cases,
    make_cases,
    routes_of,
)
from testing.testsite import SiteServer, Verdict, generate_site, judge

CRAWL = "hostile"


def fetch_layer_hardened() -> bool:
    """Whether the fetch layer refuses private addresses (hostile-fetch's work is in)."""
    from hashcrawl._core._settings import Settings

    return "allow_nets" in attrs.fields_dict(Settings)


def merged_work() -> set[str]:
    """The sibling branches of issue 10 whose work this checkout has.

    A case's rule that needs one of them is judged only once it is in; scripts/hostile
    judges every rule whatever is in.
    """
    from hashcrawl import _exceptions

    merged = {"hostile-fetch"} if fetch_layer_hardened() else set()
    return merged | ({"store-entries"} if hasattr(_exceptions, "StateLost") else set())


@attrs.frozen
class HostileRun:
    """Everything a hostile run is judged on, and the judgement."""

    results: list[CaseResult]
    normal: Verdict
    exits: list[int]
    peak_rss_mib: list[float]
    slowest: tuple[float, str]  # ms, and the command
    too_close: list[str]
    seconds: float

    def failures(self, *, without: set[str] = set(), timed: bool = True) -> list[str]:  # noqa: B006
        """What failed, leaving out the rules that need a branch named in ``without``, and
        the slowest Redis command's time unless ``timed`` (a time depends on the machine's
        load: scripts/hostile judges it, the test suite does not)."""
        out = [
            f"{r.name}: {r.problem} (rule: {r.rule})"
            for r in self.results
            if not r.ok and r.needs not in without
        ]
        n = self.normal
        if n.missing or n.too_close or n.forbidden_fetched:
            out.append(
                f"normal site: {len(n.missing)} missing, {n.too_close} too close, "
                f"{len(n.forbidden_fetched)} forbidden fetched"
            )
        out += [f"hostile host {pair} requested closer than --delay" for pair in self.too_close]
        out += [f"worker {i + 1} exited {code}" for i, code in enumerate(self.exits) if code != 0]
        out += [
            f"worker {i + 1} peak RSS {mib:.0f} MiB (limit {RSS_LIMIT_MIB})"
            for i, mib in enumerate(self.peak_rss_mib)
            if mib >= RSS_LIMIT_MIB
        ]
        if timed and self.slowest[0] >= SLOWLOG_LIMIT_MS and "store-entries" not in without:
            out.append(f"slowest Redis command {self.slowest[0]:.1f} ms: {self.slowest[1]}")
        return out

    def lines(self) -> list[str]:
        rows = [f"{'case':24} {'verdict':7} rule / problem"]
        for r in self.results:
            tag = "ok" if r.ok else ("FAIL" + ("*" if r.needs else ""))
            rows.append(f"{r.name:24} {tag:7} {r.problem or r.rule}")
        rows.append("  (* needs the fetch layer's work, branch hostile-fetch)")
        rows += [f"normal site: {line}" for line in self.normal.lines()]
        rows.append(f"worker exits: {self.exits}")
        rows.append("peak RSS MiB: " + ", ".join(f"{m:.0f}" for m in self.peak_rss_mib))
        rows.append(
            f"slowest Redis command: {self.slowest[0]:.1f} ms: {self.slowest[1]}"
            " (split commits: branch store-entries)"
        )
        rows.append(f"crawl took {self.seconds:.0f} s")
        return rows


RSS_LIMIT_MIB = 150
SLOWLOG_LIMIT_MS = 50.0


def run_hostile(
    workdir: Path,
    *,
    workers: int = 3,
    pages: int = 100,
    hosts: int = 6,
    delay: float = 0.2,
    attempts: int = 3,
    bomb_mib: int = 1024,
    robots_mib: int = 10,
    pages_per_host: int = 60,
    max_run: float = 150.0,
    progress: Callable[[str], None] = print,
) -> HostileRun:
    """Crawl the hostile hosts and a normal site with ``workers`` processes, and judge it.

    The crawl ends when the workers go idle, when every rule holds (then they are asked
    to stop, gracefully), or after ``max_run`` seconds (likewise).
    """
    cases = make_cases(
        attempts=attempts,
        bomb_mib=bomb_mib,
        robots_mib=robots_mib,
        max_pages_per_host=pages_per_host,
    )
    site = generate_site(pages=pages, hosts=hosts, seed=7, port=0)
    workdir.mkdir(parents=True, exist_ok=True)
    with (
        SiteServer(site, log_path=workdir / "normal-requests.jsonl") as normal,
        HostileServer(routes_of(cases)) as hostile,
        RedisServer(directory=workdir / "redis") as redis,
        Processes(redis.url, CRAWL, workdir) as pool,
    ):
        raw = redis_py.Redis.from_url(redis.url)
        raw.config_set("slowlog-log-slower-than", 1000)
        raw.config_set("slowlog-max-len", 100_000)
        raw.slowlog_reset()
        flags = _worker_flags(delay, attempts, pages_per_host)
        procs = [pool.join(*flags) for _ in range(workers)]
        wait_until(lambda: status_of(redis.url, CRAWL)["workers"] == workers, what="joins")
        _submit(redis.url, normal.site.root, hostile, cases)
        progress(f"{workers} workers crawling {len(cases)} hostile hosts and {site.hosts} ...")
        started = time.monotonic()
        peaks = _watch(procs, redis.url, cases, hostile, normal, max_run, progress)
        for proc in procs:
            if proc.running():
                proc.signal(signal.SIGTERM)
        exits = [proc.popen.wait(timeout=DEADLINE) for proc in procs]
        peaks = [max(a, b) for a, b in zip(peaks, _peaks(procs, peaks), strict=True)]
        seconds = time.monotonic() - started
        slowest = _slowest(raw.slowlog_get(100_000))
        raw.close()
        evidence = _evidence(redis.url, pool, workdir)
        results = judge_cases(cases, hostile.hits(), *evidence)
        verdict = judge(normal.site, normal.requests(), pool.outputs, delay=delay)
        close = _too_close(hostile.hits(), delay)
    return HostileRun(results, verdict, exits, peaks, slowest, close, seconds)


def _worker_flags(delay: float, attempts: int, pages_per_host: int) -> list[str]:
    out = ["--delay", str(delay), "--lease", "10", "--idle", "3", "--grace", "2"]
    out += ["--timeout", "2", "--max-attempts", str(attempts)]
    out += ["--max-pages-per-host", str(pages_per_host), "--span-hosts", "-v"]
    if fetch_layer_hardened():
        out += ["--allow-net", "127.0.0.0/24", "--allow-net", "127.0.1.0/24"]
    return out


def _submit(redis_url: str, root: str, hostile: HostileServer, cases: list[Case]) -> None:
    with Queue(redis_url, CRAWL) as queue:
        starts = [root] + [hostile.url(c.host, c.start) for c in cases if not c.dont_filter]
        queue.submit(starts, span_hosts=True, allow_private=True)
        looped = [hostile.url(c.host, c.start) for c in cases if c.dont_filter]
        queue.submit(looped, dont_filter=True, span_hosts=True, allow_private=True)


def _watch(
    procs: list[Process],
    redis_url: str,
    cases: list[Case],
    hostile: HostileServer,
    normal: SiteServer,
    max_run: float,
    progress: Callable[[str], None],
) -> list[float]:
    """Follow the crawl until it ends or every rule holds; returns each worker's peak RSS."""
    peaks = [0.0] * len(procs)
    deadline = time.monotonic() + max_run
    next_look = time.monotonic() + 2
    while any(p.running() for p in procs) and time.monotonic() < deadline:
        peaks = _peaks(procs, peaks)
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + 2
            with Queue(redis_url, CRAWL) as queue:
                dead, status = queue.dead(), queue.status()
            results = judge_cases(cases, hostile.hits(), dead, "", status)
            expected = normal.site.expected()
            done = expected <= {r.url for r in normal.requests()}
            failing = [r.name for r in results if not r.ok]
            progress(f"normal site done: {done}; cases failing: {', '.join(failing) or 'none'}")
            if done and not failing:
                break
        time.sleep(0.25)  # a sampling period for RSS, not a wait for a condition
    return peaks


def _peaks(procs: list[Process], peaks: list[float]) -> list[float]:
    out = []
    for proc, peak in zip(procs, peaks, strict=True):
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            out.append(peak)
            continue
        hwm = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("VmHWM")), "0")
        out.append(max(peak, int(hwm) / 1024))
    return out


def _evidence(
    redis_url: str, pool: Processes, workdir: Path
) -> tuple[dict[str, str], str, dict[str, Any]]:
    with Queue(redis_url, CRAWL) as queue:
        dead, status = queue.dead(), queue.status()
    texts = [p.read_text(errors="replace") for p in sorted(workdir.glob("worker-*")) if p.is_file()]
    texts += [json.dumps(dead), json.dumps(status)]
    return dead, "\n".join(texts), status


def _slowest(entries: list[dict[str, Any]]) -> tuple[float, str]:
    """The slowest SLOWLOG entry: milliseconds, and the command's first words."""
    if not entries:
        return 0.0, ""
    worst = max(entries, key=lambda e: e["duration"])
    words = worst.get("command", b"")
    words = words.decode(errors="replace") if isinstance(words, bytes) else str(words)
    return worst["duration"] / 1000, words[:60]


def _too_close(hits: list[Hit], delay: float) -> list[str]:
    times: dict[str, list[float]] = {}
    for hit in hits:
        times.setdefault(hit.host, []).append(hit.time)
    close = []
    for host, stamps in times.items():
        stamps.sort()
        close += [
            f"{host} ({b - a:.3f} s)" for a, b in itertools.pairwise(stamps) if b - a < delay - 0.01
        ]
    return close
