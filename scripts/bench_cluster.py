#!/usr/bin/env python3
"""What a Redis Cluster costs a crawl: the bench's crawl on one server, then on a cluster.

The bench's site (scripts/bench_site.py, nginx if installed) and its hashcrawl workers
(``--delay 0``, 64 requests in flight each), once against one private Redis server and
once against a local 3-primary cluster with a replica each (testing/cluster.py), the URL
naming a node that does not hold the crawl's slot. Printed for each: pages/s, Redis
commands per page (every primary's INFO commandstats, scripts' inner calls included, the
script's own INFO calls and the replicas' REPLCONF excluded), by command, and the Redis
CPU of the crawl's primary per 1,000 pages; then cluster / one server as ratios (the
machine is shared: compare the ratios, not the seconds).

    .venv/bin/python scripts/bench_cluster.py                 # 5,000 pages, 2 workers
    .venv/bin/python scripts/bench_cluster.py --pages 20000 --workers 4
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bench_crawl
import bench_site

from hashcrawl._cli._server import RedisServer
from testing.cluster import Cluster

Snapshot = Callable[[], tuple[dict[str, int], float]]


def main() -> int:
    args = _parser().parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hashcrawl-bench-cluster-"))
    print(f"work directory {work}; load average {_load()}", flush=True)
    port = bench_site.free_port()
    seeds = bench_site.generate(work / "site", hosts=args.hosts, pages=args.pages, port=port)
    site = bench_site.StaticServer(work / "site", work / "server", hosts=args.hosts, port=port)
    print(f"site: {args.pages} pages on {args.hosts} hosts, served by {site.kind}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for name, store in (("one server", _one_server), ("cluster", _cluster)):
        results[name] = _crawl(name, store, seeds, site, work, args)
        line = _line(name, results[name])
        print(f"{line}; load average {_load()}", flush=True)
    one, many = results["one server"], results["cluster"]
    print("\ncluster / one server:")
    print(f"  pages/s                 {_ratio(many['pages_per_s'], one['pages_per_s'])}")
    print(f"  Redis commands per page {_ratio(many['per_page'], one['per_page'])}")
    print(f"  Redis CPU per 1k pages  {_ratio(many['cpu_per_1k'], one['cpu_per_1k'])}")
    return 0 if many["complete"] and one["complete"] else 1


@contextlib.contextmanager
def _one_server(work: Path) -> Iterator[tuple[str, Snapshot]]:
    with RedisServer(directory=work / "redis") as server:
        yield server.url, lambda: _snapshot([server.url])


@contextlib.contextmanager
def _cluster(work: Path) -> Iterator[tuple[str, Snapshot]]:
    with Cluster(work / "cluster") as cluster:
        key = f"hc:{{{bench_crawl.CRAWL}}}:epoch"
        holder = cluster.primary_of(key)
        url = next(n.url for n in cluster.primaries() if n is not holder)
        primaries = [n.url for n in cluster.primaries()]
        yield url, lambda: _snapshot(primaries, cpu_of=holder.url)


def _snapshot(urls: list[str], *, cpu_of: str | None = None) -> tuple[dict[str, int], float]:
    """Calls per command summed over ``urls``, and the CPU seconds of ``cpu_of`` (or the
    only server)."""
    calls: dict[str, int] = {}
    cpu = 0.0
    for url in urls:
        got, _, seconds = bench_crawl.redis_snapshot(url)
        for name, count in got.items():
            calls[name] = calls.get(name, 0) + count
        if url == (cpu_of or urls[0]):
            cpu = seconds
    return calls, cpu


def _crawl(
    name: str,
    store: Callable[[Path], contextlib.AbstractContextManager[tuple[str, Snapshot]]],
    seeds: list[str],
    site: bench_site.StaticServer,
    work: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    run_dir = work / name.replace(" ", "-")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "access.log"
    site.start(log)
    try:
        with store(run_dir) as (url, snapshot):
            calls_before, cpu_before = snapshot()
            launch = bench_crawl.hashcrawl_launcher(seeds, args.workers)
            pids, _, _ = launch(url, run_dir)
            _, in_time = bench_crawl.wait_all(pids, time.monotonic() + args.timeout)
            calls_after, cpu_after = snapshot()
    finally:
        site.stop()
    pages, _, first, last = bench_crawl.served(log)
    calls = {k: v - calls_before.get(k, 0) for k, v in calls_after.items()}
    calls = {k: v for k, v in calls.items() if v > 0}
    # Replicas' acknowledgements to their primary are replication, not the crawl's.
    replication = calls.pop("replconf", 0)
    return {
        "pages": pages,
        "complete": float(in_time and pages >= args.pages),
        "pages_per_s": pages / (last - first) if last > first else 0.0,
        "per_page": sum(calls.values()) / max(pages, 1),
        "cpu_per_1k": (cpu_after - cpu_before) / max(pages, 1) * 1000,
        "replication": replication / max(pages, 1),
        "top": ", ".join(f"{k} {v / max(pages, 1):.2f}" for k, v in _ranked(calls)[:7]),
    }


def _ranked(calls: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(calls.items(), key=lambda kv: -kv[1])


def _line(name: str, r: dict[str, Any]) -> str:
    return (
        f"{name}: {r['pages']:.0f} pages, {r['pages_per_s']:.0f} pages/s, "
        f"{r['per_page']:.2f} Redis commands per page ({r['top']}; and replicas' "
        f"REPLCONF {r['replication']:.2f}), "
        f"{r['cpu_per_1k']:.3f} s Redis CPU per 1k pages"
        + ("" if r["complete"] else " (INCOMPLETE)")
    )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=5000, help="pages in the site")
    p.add_argument("--hosts", type=int, default=50, help="loopback hosts")
    p.add_argument("--workers", type=int, default=2, help="hashcrawl join processes")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per crawl")
    p.add_argument("--workdir", type=Path, help="keep everything here")
    return p


if __name__ == "__main__":
    sys.exit(main())
