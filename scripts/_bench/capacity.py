"""The capacity plan's inputs, measured, and its prediction checked against a crawl.

docs/operations.md ("Sizing a crawl") sizes a crawl of N pages a second and M URLs from
per-unit costs. This scenario measures them and checks the plan against a crawl:

1. **Per-unit memory**, each on a private Redis as the `used_memory` growth over many
   of one kind, written as the crawl writes them: the seen filter after ``--seen-urls``
   URLs through ``commit.lua`` (predicted from its layers' shapes beside), a stream
   entry, the same entry held (pending in the group), an entry parked in its host's
   overflow set, a host's pace record and scope member, a dead letter.
2. **Per-page costs** from a crawl of the bench's site of ``--calibrate`` pages:
   Redis commands and CPU, the worker's CPU, the peak of entries queued against the
   pages, the URLs seen against the pages, and what the crawl keeps in Redis beside its
   seen filter; and **per parked entry** from the same crawl again with ``--max-buffer``
   scaled down by ``--calibrate`` / ``--pages``, so that it parks entries as the checked
   crawl will (sizing.Costs).
3. **The check**: the plan's prediction for a crawl of ``--pages`` pages on the same
   kind of site, printed beside what that crawl measured (Redis commands and CPU, memory
   at the end and at its peak), with the ratio; then the plan for ``--rate`` pages a
   second at 1M to 1B URLs.

Memory is sampled every 0.25 s during a crawl (INFO memory, and ``outstanding`` of
``seenmeta``; those HGETs are taken off the command counts).

    scripts/bench --capacity                                   # 200,000 pages
    scripts/bench --capacity --pages 20000 --calibrate 5000    # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis as redis_py

from hashcrawl import Queue
from hashcrawl._core._entry import Entry
from hashcrawl._core._outcome import dead_letter
from hashcrawl._store._server import RedisServer

from . import crawl, memory, static_site
from .sizing import MAX_BUFFER, Costs, Crawl, Units, plan, predict, seen_filter_bytes

KEY = f"hc:{{{crawl.CRAWL}}}:"


# -- per-unit memory -------------------------------------------------------------------


def measure_units(work: Path, *, seen_urls: int, count: int, port: int) -> Units:
    with RedisServer(directory=work / "redis-units") as server:
        client = redis_py.Redis.from_url(server.url)
        grow = _grower(client)
        seen = grow(lambda: memory._push(server.url, "seen", seen_urls, 1000, 2))
        layers = client.keys(KEY + "seen:*")
        seen_keys = sum(int(client.memory_usage(key) or 0) for key in layers)
        client.flushall()
        payloads = list(_payloads(count, port))
        stream = grow(lambda: _stream(client, payloads)) / count
        held = grow(lambda: _hold(client, count)) / count
        client.flushall()
        parked = grow(lambda: _park(client, payloads)) / count
        client.flushall()
        host = grow(lambda: _hosts(client, count)) / count
        client.flushall()
        dead = grow(lambda: _dead(client, payloads)) / count
        client.close()
    return Units(
        seen_urls=seen_urls,
        seen_bytes=seen,
        seen_keys=seen_keys,
        stream_entry=stream,
        held_entry=held,
        parked_entry=parked,
        host=host,
        dead_letter=dead,
    )


def _grower(client: redis_py.Redis) -> Callable[[Callable[[], object]], int]:
    """A measure of ``used_memory``'s growth over a call."""

    def grow(fill: Callable[[], object]) -> int:
        before = int(client.info("memory")["used_memory"])
        fill()
        return int(client.info("memory")["used_memory"]) - before

    return grow


def _payloads(count: int, port: int) -> Iterator[str]:
    """Entries as the bench's crawl queues them: a page of one of 50 hosts, a depth."""
    rng = random.Random(7)
    for i in range(count):
        url = f"http://127.0.0.{2 + i % 50}:{port}/p/{rng.randrange(4000)}.html"
        yield Entry(url=url, depth=rng.randrange(1, 1000)).encode()


def _stream(client: redis_py.Redis, payloads: list[str]) -> None:
    pipe = client.pipeline(transaction=False)
    for n, payload in enumerate(payloads, 1):
        pipe.xadd(KEY + "q:w", {"r": payload})
        if n % 1000 == 0:
            pipe.execute()
    pipe.execute()
    client.xgroup_create(KEY + "q:w", "g", id="0")


def _hold(client: redis_py.Redis, count: int) -> None:
    for _ in range(0, count, 1000):
        client.xreadgroup("g", "w", {KEY + "q:w": ">"}, count=1000)


def _park(client: redis_py.Redis, payloads: list[str]) -> None:
    pipe, ms = client.pipeline(transaction=False), 1_765_000_000_000
    for n, payload in enumerate(payloads):
        host = f"127.0.0.{2 + n % 50}"  # as _payloads made it
        pipe.zadd(f"{KEY}park:{host}", {f"{ms + n}-0 {payload}": ms + n})
        pipe.sadd(KEY + "parked", host)
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()


def _hosts(client: redis_py.Redis, count: int) -> None:
    pipe, ms = client.pipeline(transaction=False), 1_765_000_000_000
    for n in range(count):
        host = f"www.site{n}.example.com"
        pipe.hset(KEY + "pace", host, f"{ms + n},0,0,{n % 5000}")
        pipe.sadd(KEY + "scope", host)
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()


def _dead(client: redis_py.Redis, payloads: list[str]) -> None:
    pipe = client.pipeline(transaction=False)
    for n, payload in enumerate(payloads):
        url = json.loads(payload)["u"]
        key, record = dead_letter(Entry(url=url), "ConnectTimeout: timed out", 1_765_000_000)
        pipe.hset(KEY + "dead", key, record)
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()


# -- a crawl, sampled -----------------------------------------------------------------------


def measured_crawl(
    work: Path, *, pages: int, hosts: int, workers: int, timeout: float, max_buffer: int
) -> Crawl:
    """Crawl a fresh bench site of ``pages`` pages to its end, sampling Redis as it goes."""
    port = static_site.free_port()
    seeds = static_site.generate(work / "site", hosts=hosts, pages=pages, port=port)
    expected = len(seeds) * max(1, pages // hosts)
    site = static_site.StaticServer(work / "site", work / "server", hosts=hosts, port=port)
    site.start(work / "access.log")
    try:
        with RedisServer(directory=work / "redis") as server:
            calls0, memory0, cpu0 = crawl.redis_snapshot(server.url)
            with _Sampler(server.url) as sampler:
                extra = ["--max-buffer", str(max_buffer)]
                launch = crawl.hashcrawl_launcher(seeds, workers, extra)
                pids, _, _ = launch(server.url, work)
                usage, in_time = crawl.wait_all(pids, time.monotonic() + timeout)
            calls1, memory1, cpu1 = crawl.redis_snapshot(server.url)
            with Queue(server.url, crawl.CRAWL) as queue:
                seen = int(queue.status()["seen"])
            stats = redis_py.Redis.from_url(server.url).hget(KEY + "stats", "parks")
    finally:
        site.stop()
    served, _, first, last = crawl.served(work / "access.log")
    calls = {k: v - calls0.get(k, 0) for k, v in calls1.items()}
    calls["hget"] = calls.get("hget", 0) - sampler.hgets  # the sampler's own
    return Crawl(
        pages=served,
        workers=workers,
        wall=last - first,
        seen=seen,
        commands=sum(calls.values()),
        redis_cpu=cpu1 - cpu0,
        worker_cpu=usage.cpu,
        memory_end=memory1 - memory0,
        memory_peak=max(sampler.peak, memory1) - memory0,
        queued_peak=sampler.queued,
        parked=int(stats or 0),
        max_buffer=max_buffer,
        calls={k: v for k, v in calls.items() if v > 0},
        complete=in_time and served >= expected,
    )


class _Sampler:
    """A thread that reads ``used_memory`` and ``outstanding`` every 0.25 s."""

    def __init__(self, url: str) -> None:
        self.client = redis_py.Redis.from_url(url)
        self.peak = self.queued = self.hgets = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()

    def _run(self) -> None:
        while not self.stop.wait(0.25):
            self.peak = max(self.peak, int(self.client.info("memory")["used_memory"]))
            outstanding = self.client.hget(KEY + "seenmeta", "outstanding")
            self.hgets += 1
            self.queued = max(self.queued, int(outstanding or 0))


# -- the scenario ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hashcrawl-bench-capacity-"))
    try:
        return _run(args, work)
    finally:  # an interrupted run too: its sites can take gigabytes
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path) -> int:
    say = _sayer()
    say(f"work directory {work}; load average {_load()}")
    port = static_site.free_port()
    units = measure_units(work, seen_urls=args.seen_urls, count=args.entries, port=port)
    say(f"per-unit memory measured; load average {_load()}")
    print("\n".join(_unit_lines(units)), flush=True)
    small = max(100, MAX_BUFFER * args.calibrate // args.pages)  # parks as the check will
    runs = {}
    for name, pages, buffer in (
        ("calibration", args.calibrate, MAX_BUFFER),
        ("parking", args.calibrate, small),
        ("check", args.pages, MAX_BUFFER),
    ):
        runs[name] = measured_crawl(
            work / name,
            pages=pages,
            hosts=args.hosts,
            workers=args.workers,
            timeout=args.timeout,
            max_buffer=buffer,
        )
        say(f"{name} crawl: {_crawl_line(runs[name])}; load average {_load()}")
    costs = Costs.of(runs["calibration"], runs["parking"], units, args.hosts)
    print("\n".join(_cost_lines(costs)))
    print("\n".join(_check_lines(costs, runs, units, args.hosts)))
    print("\n".join(_plan_lines(costs, units, args)))
    return 0 if all(run.complete for run in runs.values()) else 1


def _cost_lines(costs: Costs) -> list[str]:
    return [
        "",
        f"per page: {costs.commands_page:.3f} Redis commands, {costs.cpu_page * 1000:.4f} ms "
        f"of Redis CPU, {costs.worker_cpu_page * 1000:.3f} ms of worker CPU; "
        f"{costs.seen_page:.3f} URLs seen; the frontier peaks at {costs.queued_page:.3f} "
        "entries a page of the crawl",
        f"per entry parked (past the workers' --max-buffer): {costs.commands_parked:.2f} "
        f"Redis commands and {costs.cpu_parked * 1e6:.1f} us of Redis CPU more; "
        f"{costs.parked_share:.2f} entries parked per URL beyond what the workers hold"
        + (
            ""
            if costs.parked_share
            else " (THE PARKING CRAWL PARKED NOTHING: its frontier stayed within its "
            "--max-buffer, so the plan counts no parking; on this site a crawl of under "
            "about 70,000 pages a worker parks nothing, nor does its scaled calibration)"
        ),
        f"a crawl's own keys beside its filter and hosts: {costs.base / 2**10:,.0f} KiB",
    ]


def _check_lines(costs: Costs, runs: dict[str, Crawl], units: Units, hosts: int) -> list[str]:
    lines = [""]
    for name, run in runs.items():
        want = predict(costs, units, run=run, hosts=hosts)
        sample = "in sample" if name != "check" else "out of sample"
        lines += [
            f"{name} ({sample}): {run.pages:,} pages, {run.workers} worker(s), --max-buffer "
            f"{run.max_buffer:,}; the plan's prediction against what the crawl measured:",
            "| figure | predicted | measured | measured / predicted |",
            "|---|--:|--:|--:|",
        ]
        for figure, unit, got in (
            ("Redis commands", 1, run.commands),
            ("Redis CPU s", 1, run.redis_cpu),
            ("URLs seen", 1, run.seen),
            ("entries parked", 1, run.parked),
            ("entries queued at the peak", 1, run.queued_peak),
            ("Redis memory at the end, MiB", 2**20, run.memory_end),
            ("Redis memory at the peak, MiB", 2**20, run.memory_peak),
        ):
            key = _KEYS[figure]
            ratio = f"{got / want[key]:.2f}" if want[key] else "-"
            lines.append(f"| {figure} | {want[key] / unit:,.2f} | {got / unit:,.2f} | {ratio} |")
        lines += [f"commands a page, by command: {run.top_calls()}", ""]
    return lines


_KEYS = {
    "Redis commands": "commands",
    "Redis CPU s": "redis_cpu",
    "URLs seen": "seen",
    "entries parked": "parked",
    "entries queued at the peak": "queued_peak",
    "Redis memory at the end, MiB": "memory_end",
    "Redis memory at the peak, MiB": "memory_peak",
}


def _unit_lines(units: Units) -> list[str]:
    model = seen_filter_bytes(units.seen_urls)
    return [
        "",
        "per-unit Redis memory (used_memory growth):",
        f"  seen filter at {units.seen_urls:,} URLs: predicted by the layers' shapes "
        f"{model / 2**20:.2f} MiB ({model / units.seen_urls:.2f} B/URL); its layers' keys "
        f"measured {units.seen_keys / 2**20:.2f} MiB ({units.seen_keys / model:.2f}x); "
        f"used_memory grew {units.seen_bytes / 2**20:.2f} MiB "
        f"({units.seen_bytes / units.seen_urls:.2f} B/URL, {units.seen_bytes / model:.2f}x: "
        "with the scripts and the crawl's other keys)",
        f"  a queued entry in a stream: {units.stream_entry:.1f} B; held (pending) as well: "
        f"+{units.held_entry:.1f} B; parked in its host's overflow set instead: "
        f"{units.parked_entry:.1f} B",
        f"  a host's pace record and scope member: {units.host:.1f} B; "
        f"a dead letter: {units.dead_letter:.1f} B",
    ]


def _crawl_line(run: Crawl) -> str:
    return (
        f"{run.pages:,} pages in {run.wall:.1f} s ({run.pages / max(run.wall, 1e-9):.0f} "
        f"pages/s), {run.per_page(run.commands):.3f} Redis commands and "
        f"{run.per_page(run.redis_cpu) * 1000:.4f} ms of Redis CPU a page, "
        f"worker CPU {run.per_page(run.worker_cpu) * 1000:.3f} ms a page, "
        f"{run.seen:,} URLs seen, peak queued {run.queued_peak:,}"
        + ("" if run.complete else " (INCOMPLETE)")
    )


def _plan_lines(costs: Costs, units: Units, args: argparse.Namespace) -> list[str]:
    share = costs.queued_page
    lines = [
        "",
        f"the plan at {args.rate:,.0f} pages/s, one host per {args.urls_per_host:,} URLs, "
        f"primaries of {args.primary_gib:g} GiB, a frontier peaking at {share:.2f} of the URLs "
        "(this site's) and at all of them (the worst case; workers, primaries and the total "
        "are the worst case's):",
        "| URLs | workers | primaries | Redis cmds/page | seen filter | queue (site's share) "
        "| queue (all) | hosts | total |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for urls in (10**6, 10**7, 10**8, 10**9):
        hosts = max(1, urls // args.urls_per_host)
        each = {"rate": args.rate, "urls": urls, "hosts": hosts}
        memory = args.primary_gib * 2**30
        typical = plan(costs, units, queued=share * urls, primary_bytes=memory, **each)
        worst = plan(costs, units, queued=urls, primary_bytes=memory, **each)
        lines.append(
            f"| {urls:,} | {worst.workers} | {worst.primaries} | {worst.commands_page:.2f} | "
            f"{_size(worst.seen)} | {_size(typical.queue)} | {_size(worst.queue)} | "
            f"{_size(worst.hosts)} | {_size(worst.total)} |"
        )
    return lines


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:.0f} B"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _sayer() -> Callable[[str], None]:
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {text}", flush=True)

    return say


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/bench --capacity", description=__doc__.splitlines()[0]
    )
    p.add_argument("--pages", type=int, default=200_000, help="pages of the checked crawl")
    p.add_argument("--calibrate", type=int, default=20_000, help="pages of the calibration")
    p.add_argument("--hosts", type=int, default=50, help="loopback hosts of both sites")
    p.add_argument("--workers", type=int, default=1, help="hashcrawl join processes")
    p.add_argument("--seen-urls", type=int, default=1_000_000, help="URLs in the filter test")
    p.add_argument("--entries", type=int, default=200_000, help="of each kind, per-unit tests")
    p.add_argument("--rate", type=float, default=5000.0, help="the plan's pages a second")
    p.add_argument("--urls-per-host", type=int, default=1000, help="the plan's hosts")
    p.add_argument("--primary-gib", type=float, default=8.0, help="memory of one primary")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds allowed per crawl")
    p.add_argument("--workdir", type=Path, help="keep everything here")
    return p
