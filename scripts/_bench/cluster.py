"""What a Redis Cluster costs a crawl, and what shards spread: the bench's crawl on one
server and on local clusters, with and without --shards.

The bench's site (scripts/_bench/static_site.py, nginx if installed) and its hashcrawl workers
(``--delay 0``, 64 requests in flight each), once per run of ``--runs``: P:S is P
primaries (1: one private Redis server; 3 or 6: a local cluster with a replica each,
testing/cluster.py, the URL naming a node that does not hold the crawl's slot) and S
shards. Printed for each: pages/s, Redis commands per page (every primary's INFO
commandstats, scripts' inner calls included, the script's own INFO calls and the
replicas' REPLCONF excluded), by command, each primary's Redis CPU per 1,000 pages and
the busiest against the mean, and the coordinator's capacity: pages per second of the
busiest primary's CPU (a fleet is capped where that primary's core runs out); then each
run against the first as ratios (the machine is shared: compare the ratios, not the
seconds).

    scripts/bench --cluster                 # 5,000 pages, 2 workers
    scripts/bench --cluster --runs 1:1,3:6,6:12 --pages 20000 --workers 4
    scripts/bench --cluster --runs 3:1,3:default     # what a cluster does by default
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hashcrawl._run._queue import Queue
from hashcrawl._store._server import RedisServer
from testing.cluster import Cluster

from . import crawl, static_site

Snapshot = Callable[[], tuple[dict[str, int], dict[str, float]]]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hashcrawl-bench-cluster-"))
    try:
        return _runs(args, work)
    finally:  # an interrupted run too: the site and the nodes' files stay only if asked
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _runs(args: argparse.Namespace, work: Path) -> int:
    print(f"work directory {work}; load average {_load()}", flush=True)
    port = static_site.free_port()
    seeds = static_site.generate(work / "site", hosts=args.hosts, pages=args.pages, port=port)
    site = static_site.StaticServer(work / "site", work / "server", hosts=args.hosts, port=port)
    print(f"site: {args.pages} pages on {args.hosts} hosts, served by {site.kind}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    runs = [_run_of(text) for text in args.runs.split(",")]
    for primaries, shards, checkout in runs:
        name = _name(primaries, shards, checkout)
        again = sum(n == name or n.startswith(name + " #") for n in results)
        name += f" #{again + 1}" if again else ""  # the same run again, interleaved
        store = _one_server if primaries == 1 else functools.partial(_cluster, primaries)
        results[name] = _crawl(name, store, seeds, site, work, args, shards, checkout)
        print(f"{_line(name, results[name])}; load average {_load()}", flush=True)
    first = results[_name(*runs[0])]
    print(f"\nagainst {_name(*runs[0])}:")
    for name, r in list(results.items())[1:]:
        print(
            f"  {name}: pages/s {_ratio(r['pages_per_s'], first['pages_per_s'])}, "
            f"Redis commands per page {_ratio(r['per_page'], first['per_page'])}, "
            f"coordinator capacity {_ratio(r['capacity'], first['capacity'])}"
        )
    return 0 if all(r["complete"] for r in results.values()) else 1


def _run_of(text: str) -> tuple[int, int | None, str]:
    """``P:S`` or ``P:S@DIR`` (P primaries, 1 for one server; S shards, or ``default``
    for none given, as a user who never read of --shards runs it; the workers run
    hashcrawl from checkout DIR, an earlier commit say) as numbers and the checkout."""
    text, _, checkout = text.partition("@")
    primaries, _, shards = text.partition(":")
    return int(primaries), None if shards == "default" else int(shards or 1), checkout


def _name(primaries: int, shards: int | None, checkout: str = "") -> str:
    where = "one server" if primaries == 1 else f"{primaries} primaries"
    if shards is None:
        name = f"{where}, default shards"
    else:
        name = f"{where}, {shards} shard{'s' if shards > 1 else ''}"
    return name + (f" @{Path(checkout).name}" if checkout else "")


@contextlib.contextmanager
def _one_server(work: Path) -> Iterator[tuple[str, Snapshot]]:
    with RedisServer(directory=work / "redis") as server:
        yield server.url, lambda: _snapshot([server.url])


@contextlib.contextmanager
def _cluster(primaries: int, work: Path) -> Iterator[tuple[str, Snapshot]]:
    with Cluster(work / "cluster", primaries=primaries) as cluster:
        key = f"hc:{{{crawl.CRAWL}}}:epoch"
        holder = cluster.primary_of(key)
        url = next(n.url for n in cluster.primaries() if n is not holder)
        nodes = [n.url for n in cluster.primaries()]
        yield url, lambda: _snapshot(nodes)


def _snapshot(urls: list[str]) -> tuple[dict[str, int], dict[str, float]]:
    """Calls per command summed over ``urls``, and each one's CPU seconds."""
    calls: dict[str, int] = {}
    cpu: dict[str, float] = {}
    for url in urls:
        got, _, seconds = crawl.redis_snapshot(url)
        for name, count in got.items():
            calls[name] = calls.get(name, 0) + count
        cpu[url] = seconds
    return calls, cpu


def _crawl(
    name: str,
    store: Callable[[Path], contextlib.AbstractContextManager[tuple[str, Snapshot]]],
    seeds: list[str],
    site: static_site.StaticServer,
    work: Path,
    args: argparse.Namespace,
    shards: int | None,
    checkout: str = "",
) -> dict[str, Any]:
    run_dir = work / name.replace(" ", "-").replace(",", "")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "access.log"
    site.start(log)
    try:
        with store(run_dir) as (url, snapshot):
            calls_before, cpu_before = snapshot()
            # Each shard gets its share of --concurrency: 64 each, as one shard has.
            extra = ["--shards", str(shards), "--concurrency", str(64 * (shards or 1))]
            extra = extra if shards is not None and shards > 1 else []
            with Queue(url, crawl.CRAWL, shards=shards) as queue:
                queue.submit([])  # records the shards before the launcher submits
            where = Path(checkout) if checkout else None
            launch = crawl.hashcrawl_launcher(seeds, args.workers, extra, checkout=where)
            pids, _, _ = launch(url, run_dir)
            _, in_time = crawl.wait_all(pids, time.monotonic() + args.timeout)
            calls_after, cpu_after = snapshot()
    finally:
        site.stop()
    pages, _, first, last = crawl.served(log)
    calls = {k: v - calls_before.get(k, 0) for k, v in calls_after.items()}
    calls = {k: v for k, v in calls.items() if v > 0}
    # Replicas' acknowledgements to their primary are replication, not the crawl's.
    replication = calls.pop("replconf", 0)
    per_1k = [(cpu_after[u] - cpu_before[u]) / max(pages, 1) * 1000 for u in cpu_after]
    mean = sum(per_1k) / len(per_1k)
    return {
        "pages": pages,
        "complete": float(in_time and pages >= args.pages),
        "pages_per_s": pages / (last - first) if last > first else 0.0,
        "per_page": sum(calls.values()) / max(pages, 1),
        "cpu_per_1k": per_1k,
        "spread": max(per_1k) / mean if mean else 0.0,
        # The fleet's ceiling is where the busiest primary's core runs out: pages per
        # second of that primary's CPU (a model, not a saturated run).
        "capacity": 1000 / max(per_1k) if max(per_1k) else 0.0,
        "replication": replication / max(pages, 1),
        # Every command at 0.005 per page or more, so before and after compare whole.
        "top": ", ".join(
            f"{k} {v / max(pages, 1):.3f}" for k, v in _ranked(calls) if v / max(pages, 1) >= 0.001
        ),
    }


def _ranked(calls: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(calls.items(), key=lambda kv: -kv[1])


def _line(name: str, r: dict[str, Any]) -> str:
    cpus = " ".join(f"{c:.3f}" for c in r["cpu_per_1k"])
    return (
        f"{name}: {r['pages']:.0f} pages, {r['pages_per_s']:.0f} pages/s, "
        f"{r['per_page']:.3f} Redis commands per page ({r['top']}; and replicas' "
        f"REPLCONF {r['replication']:.2f}); Redis CPU per 1k pages, each primary: {cpus} s "
        f"(busiest / mean {r['spread']:.2f}); capacity {r['capacity']:.0f} pages per "
        "second of the busiest primary's CPU" + ("" if r["complete"] else " (INCOMPLETE)")
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/bench --cluster", description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=5000, help="pages in the site")
    p.add_argument("--hosts", type=int, default=50, help="loopback hosts")
    p.add_argument("--workers", type=int, default=2, help="hashcrawl join processes")
    p.add_argument(
        "--runs",
        default="1:1,3:1,3:6",
        help="crawls to run, P:S each (P primaries, 1 for one server; S --shards, or "
        "default for none given), or "
        "P:S@DIR to run the workers from checkout DIR, comma-separated; the first is the "
        "baseline (default: %(default)s)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per crawl")
    p.add_argument("--workdir", type=Path, help="keep everything here")
    return p
