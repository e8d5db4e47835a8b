#!/usr/bin/env python3
"""Per-host gaps, from the server's log: how long each host waits between the end of a
response and the start of its next request, for hashcrawl x1 and the bare loop.

With ``--per-host 1`` at most one request per host is in flight, so on a site of few
hosts every millisecond of that gap is throughput lost. nginx logs each request's end
(``$msec``) and duration (``$request_time``, so its start is end - duration), both to the
millisecond; the gaps are computed per host over every request after the host's first.
Contenders run interleaved, ``--rounds`` times each, in one script, so that a loaded
machine weighs on them alike: read the ratios, not the seconds.

    .venv-bench/bin/python scripts/bench_gaps.py --pages 2000 --hosts 20 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import bench_crawl
import bench_site


def gaps(log: Path) -> tuple[list[float], list[float]]:
    """(gaps between a host's response and its next request, request durations), in s."""
    spans: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    durations = []
    for end, _, host, _, seconds, _ in bench_site.read_spans(log):
        spans[host].append((end - seconds, end))
        durations.append(seconds)
    found = []
    for host_spans in spans.values():
        host_spans.sort()
        found += [b[0] - a[1] for a, b in itertools.pairwise(host_spans)]
    return found, durations


def summary(values: list[float]) -> str:
    if not values:
        return "none"
    q = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    ms = [1000 * v for v in (statistics.median(values), q[8], statistics.fmean(values))]
    return "median {:.1f} ms, p90 {:.1f} ms, mean {:.2f} ms".format(*ms)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=2000)
    p.add_argument("--hosts", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--before", type=Path, help="another checkout, run as 'x1 before'")
    p.add_argument("--parse-process", action="store_true")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hashcrawl-gaps-"))
    port = bench_site.free_port()
    seeds = bench_site.generate(work / "site", hosts=args.hosts, pages=args.pages, port=port)
    expected = len(seeds) * max(1, args.pages // args.hosts)
    site = bench_site.StaticServer(work / "site", work / "server", hosts=args.hosts, port=port)
    if site.kind != "nginx":
        print("needs nginx (the fallback server logs no durations)", file=sys.stderr)
        return 1
    contenders: list[tuple[str, Any]] = [("x1", bench_crawl.hashcrawl_launcher(seeds, 1))]
    if args.before:
        launch = bench_crawl.hashcrawl_launcher(seeds, 1, checkout=args.before)
        contenders.append(("x1 before", launch))
    if args.parse_process:
        env = {"HASHCRAWL_PARSE_PROCESS": "1"}
        contenders.append(("x1 +parse", bench_crawl.hashcrawl_launcher(seeds, 1, env=env)))
    contenders.append(("bare", bench_crawl.bare_launcher(seeds)))
    for round_ in range(args.rounds):
        for name, launch in contenders:
            label = f"{name} r{round_}"
            result = bench_crawl.measure(
                label, launch, site=site, work=work, expected_pages=expected,
                timeout=args.timeout,
            )  # fmt: skip
            found, durations = gaps(work / label.replace(" ", "-") / "access.log")
            print(
                f"{label:14} {result.pages_per_s:5.0f} pages/s, CPU {result.cpu_per_1k:.2f} "
                f"s/1k (main {result.main_cpu_per_1k:.2f}, "
                f"in the window {result.window_cpu_per_1k:.2f}, "
                f"busy {result.busy:.2f}), complete {result.complete}\n"
                f"{'':14} gap: {summary(found)}; request: {summary(durations)}",
                flush=True,
            )
    print(f"logs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
