"""What the sinks' fsync costs: items/s with it and without it, in one run, as ratios.

    .venv/bin/python scripts/bench_fsync.py [--pages 3000] [--rounds 3] [--dir DIR]

Two measures, on the disk that holds ``--dir`` (default: a temporary directory in the
current one, so a real disk rather than a tmpfs where fsync costs nothing):

- sink: a JsonLinesSink alone, flushed once per batch of items, for batch sizes a commit
  may carry (a worker commits every 0.2 s or 200 pages, whichever comes first);
- crawl: one in-process worker on a private Redis, its pages served from memory (no
  network), so that fsync's share of the time is as large as a crawl can make it. Items/s
  run from the first item written to the last one flushed.

Rounds alternate fsync on and off, so drift on a shared machine hits both alike. The
figure to read is "with / without": 1.00 means fsync costs nothing.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hashcrawl
from hashcrawl._cli._server import RedisServer

HOSTS = 20
LINKS = 8
SINK_FLUSHES = 300


def page_url(number: int) -> str:
    return f"https://h{number % HOSTS}.example/p{number}"


class MemoryFetcher:
    """Serves ``pages`` pages from memory as a tree: page n links to pages nL+1 ... nL+L."""

    def __init__(self, pages: int) -> None:
        self.pages = pages

    async def fetch(self, request: hashcrawl.Request) -> hashcrawl.Response:
        number = int(request.url.rpartition("/p")[2])
        links = " ".join(
            f'<a href="{page_url(n)}">{n}</a>'
            for n in range(number * LINKS + 1, min((number + 1) * LINKS + 1, self.pages))
        )
        body = f"<title>Page {number}</title>{links}".encode()
        return hashcrawl.Response(
            url=request.url,
            status=200,
            headers={"content-type": "text/html; charset=utf-8"},
            body=body,
            request=request,
        )


class TimedSink:
    """A JsonLinesSink that notes when the first item came and the last flush ended."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self.inner = hashcrawl.JsonLinesSink(path, fsync=fsync)
        self.items = 0
        self.flushes = 0
        self.first: float | None = None
        self.last = 0.0

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.first = self.first or time.perf_counter()
        self.items += len(items)
        self.inner.write(items)

    def flush(self) -> None:
        self.inner.flush()
        self.flushes += 1
        self.last = time.perf_counter()

    def close(self) -> None:
        self.inner.close()

    def rate(self) -> float:
        return self.items / (self.last - self.first) if self.first else 0.0


def sink_rate(directory: Path, *, batch: int, fsync: bool) -> float:
    """Items/s through a JsonLinesSink flushed SINK_FLUSHES times, every ``batch`` items."""
    path = directory / f"sink-{batch}-{fsync}.jsonl"
    path.unlink(missing_ok=True)
    sink = hashcrawl.JsonLinesSink(path, fsync=fsync)
    item = {"url": page_url(1), "status": 200, "title": "Page 1", "worker": "w" * 12}
    started = time.perf_counter()
    for _ in range(SINK_FLUSHES):
        sink.write([item] * batch)
        sink.flush()
    elapsed = time.perf_counter() - started
    sink.close()
    return SINK_FLUSHES * batch / elapsed


def crawl_rate(server: RedisServer, directory: Path, *, pages: int, fsync: bool, run: int) -> Any:
    """Items/s of one worker crawling ``pages`` in-memory pages into a JSON Lines file."""
    crawl = f"fsync-{run}"
    with hashcrawl.Queue(server.url, crawl) as queue:
        queue.clear()
        queue.submit([page_url(0)], span_hosts=True)  # pages spread over HOSTS hosts
    sink = TimedSink(directory / f"crawl-{run}.jsonl", fsync=fsync)
    worker = hashcrawl.Worker(
        server.url,
        crawl,
        fetcher=MemoryFetcher(pages),
        sink=sink,
        delay=0,
        idle=0.5,
        concurrency=32,
        per_host=4,
        obey_robots=False,
    )
    worker.run_sync()
    sink.close()
    if sink.items != pages:
        raise SystemExit(f"crawl {run} wrote {sink.items} items, expected {pages}")
    return sink


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    # The bench's own Redis runs without appendonly on purpose: fsync here is the sink's.
    logging.getLogger("hashcrawl").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="bench-fsync-", dir=args.dir) as name:
        directory = Path(name)
        print(f"disk of {directory}; {args.rounds} rounds, fsync on and off alternating")
        for batch in (1, 20, 200):
            on, off = [], []
            for _ in range(args.rounds):
                on.append(sink_rate(directory, batch=batch, fsync=True))
                off.append(sink_rate(directory, batch=batch, fsync=False))
            report(f"sink, {batch:>3} items per flush", on, off)
        with RedisServer(directory=directory / "redis") as server:
            on, off, flushes = [], [], []
            for run in range(args.rounds):
                for fsync, rates in ((True, on), (False, off)):
                    sink = crawl_rate(
                        server, directory, pages=args.pages, fsync=fsync, run=2 * run + fsync
                    )
                    rates.append(sink.rate())
                    flushes.append(sink.flushes)
            report(f"crawl, {args.pages} pages, 1 worker", on, off)
            print(f"  flushes per crawl: {statistics.median(flushes):.0f} (median)")
    return 0


def report(what: str, on: list[float], off: list[float]) -> None:
    with_, without = statistics.median(on), statistics.median(off)
    ratios = sorted(on_ / off_ for on_, off_ in zip(on, off, strict=True))
    print(
        f"{what}: {with_:10,.0f} items/s with fsync, {without:10,.0f} without;"
        f" with / without = {with_ / without:.2f} (rounds {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


if __name__ == "__main__":
    sys.exit(main())
