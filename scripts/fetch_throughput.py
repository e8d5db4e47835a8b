"""Pages per CPU second through HttpxFetcher alone, for a before/after of the fetch layer.

Serves the benchmark's generated site (bench_site: nginx, or its asyncio fallback) and,
in a fresh process per round, fetches every page of it once with 16 requests in flight
and one per host, as a worker would, reading each response's links. Prints the median
pages per second of the fetching process's CPU time (on a shared machine, wall time
says more about the neighbours than about the code). ``--code DIR`` runs the
hashcrawl package found in DIR (an older checkout: ``git archive REV hashcrawl | tar
-x -C DIR``).

    .venv/bin/python scripts/fetch_throughput.py [--code DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_site import StaticServer, free_port, generate, hosts_for, page_path

CHILD = r"""
import inspect, sys, time, trio
from hashcrawl import HttpxFetcher, Request
urls = sys.argv[1:]
options = {"max_connections": 16, "max_per_host": 1}
if "allow_nets" in inspect.signature(HttpxFetcher).parameters:
    options["allow_nets"] = ["127.0.0.0/24"]
async def main():
    fetcher = HttpxFetcher(**options)
    queue = list(reversed(urls))
    async def one():
        while queue:
            response = await fetcher.fetch(Request(queue.pop()))
            response.links()
    started = time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(16):
            nursery.start_soon(one)
    print(len(urls) / (time.process_time() - started))
    await fetcher.aclose()
trio.run(main)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", help="directory holding the hashcrawl package to run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--hosts", type=int, default=40)
    args = parser.parse_args()
    code = args.code or str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": code}
    with tempfile.TemporaryDirectory(prefix="fetch-throughput-") as work:
        port = free_port()
        generate(Path(work) / "site", hosts=args.hosts, pages=args.pages, port=port)
        per_host = max(1, args.pages // args.hosts)
        urls = [
            f"http://{h}:{port}{page_path(i)}"
            for i in range(per_host)
            for h in hosts_for(args.hosts)
        ]
        server = StaticServer(
            Path(work) / "site", Path(work) / "server", hosts=args.hosts, port=port
        )
        server.start(Path(work) / "access.log")
        try:
            rates = []
            for _ in range(args.rounds):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, *urls],
                    env=env,
                    cwd=code,  # "-c" puts the working directory first on the path
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                rates.append(float(out))
        finally:
            server.stop()
    print(f"hashcrawl from {code} ({server.kind}): {len(urls)} pages on {args.hosts} hosts")
    print(
        f"pages per CPU second over {args.rounds} rounds: median {statistics.median(rates):.0f}, "
        f"all {', '.join(f'{r:.0f}' for r in rates)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
