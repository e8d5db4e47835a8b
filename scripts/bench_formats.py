"""What each item format costs a commit: items/s through each sink, flushed once per
batch as a worker's commits flush, fsync on; and what the repair after a crash costs.

    .venv/bin/python scripts/bench_formats.py [--flushes 1000] [--batch 50] [--dir DIR]

``--dir`` (default: a temporary directory in the current one, a real disk rather than
a tmpfs where fsync costs nothing) holds the files. Items are the page items hashcrawl
writes (10 fields). Rounds go format by format, then again in the other order, so drift
on a shared machine hits all alike; the figure is the better of the two.

The repair: a JSON, XML and CSV file of about ``--repair-mb`` MB, its last flush torn,
opened by a new sink (the repair looks back from the end for JSON and XML; a CSV sink
looks at every row it has not seen, the whole file for a new sink).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hashcrawl._web._parquet import ParquetSink  # noqa: E402
from hashcrawl._web._sinks import sink_for  # noqa: E402

FORMATS = ("jsonl", "json", "csv", "xml", "parquet")
TORN = {  # a flush's first bytes, and the length of the closing tail they go over
    "json": (b',\n{"url": "torn', 2),
    "xml": (b"<item><url>torn</url><title>a", 8),
    "csv": (b'torn,"a title\n', 0),
}


def item(n: int) -> dict[str, Any]:
    return {
        "url": f"https://h{n % 50}.example/p{n}",
        "final_url": f"https://h{n % 50}.example/p{n}",
        "status": 200,
        "content_type": "text/html; charset=utf-8",
        "length": 5120 + n % 1000,
        "title": f"Page {n}: a title of some length, as pages have",
        "canonical": None,
        "depth": n % 7,
        "fetched_at": "2026-12-06T12:00:00.000+00:00",
        "worker": "vm-12345-abcd",
    }


def rate(directory: Path, ending: str, flushes: int, batch: int) -> float:
    """Items per second through one sink, flushed every ``batch`` items."""
    path = directory / f"items-{time.monotonic_ns()}.{ending}"
    sink = ParquetSink(path) if ending == "parquet" else sink_for(str(path))
    started = time.perf_counter()
    for f in range(flushes):
        sink.write([item(f * batch + k) for k in range(batch)])
        sink.flush()
    took = time.perf_counter() - started
    sink.close()
    return flushes * batch / took


def repair(directory: Path, ending: str, megabytes: int) -> float:
    """Seconds a new sink takes to open a torn file of ``megabytes`` and flush once."""
    path = directory / f"torn.{ending}"
    sink = sink_for(str(path))
    n = 0
    while not path.exists() or path.stat().st_size < megabytes << 20:
        sink.write([item(n + k) for k in range(2000)])
        sink.flush()
        n += 2000
    sink.close()
    torn, tail = TORN[ending]
    with path.open("r+b") as file:  # a flush cut short, over the closing tail
        file.seek(-tail, os.SEEK_END)
        file.write(torn)
    started = time.perf_counter()
    sink = sink_for(str(path))
    sink.write([item(0)])
    sink.flush()
    took = time.perf_counter() - started
    sink.close()
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flushes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--repair-mb", type=int, default=100)
    p.add_argument("--dir", type=Path, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or Path.cwd()) as tmp:
        directory = Path(tmp)
        best: dict[str, float] = {}
        for order in (FORMATS, FORMATS[::-1]):
            for ending in order:
                got = rate(directory, ending, args.flushes, args.batch)
                best[ending] = max(best.get(ending, 0.0), got)
        print(f"{args.flushes} flushes of {args.batch} items, fsync on, in {directory.parent}:")
        for ending in FORMATS:
            ratio = best[ending] / best["jsonl"]
            print(f"  {ending:8} {best[ending]:9,.0f} items/s  ({ratio:.2f} of JSON Lines')")
        for ending in ("json", "xml", "csv"):
            took = repair(directory, ending, args.repair_mb)
            print(f"  repair of a torn {args.repair_mb} MB .{ending}: {took:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
