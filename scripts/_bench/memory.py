"""Memory benchmarks: the seen filter at millions of URLs, and a worker with a deep queue.

``seen_filter`` pushes distinct URLs through the commit script exactly as a submitter or
a worker does (``Store.commit`` with ``[target, entry, h1, h2, 1]`` adds, the fingerprint
from ``hashcrawl._core._urls.fingerprint``), then pushes new URLs and counts how many the filter
wrongly took for seen. The stream they are appended to is trimmed as it goes, as workers
would consume it, so that ``used_memory`` measures the filter and not the queue.

``queued_rss`` starts one worker, queues a million URLs over the site's hosts and
watches the worker's resident memory while it crawls with that backlog.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import redis as redis_py

from hashcrawl import Queue
from hashcrawl._core._batch import chunks
from hashcrawl._core._entry import Entry
from hashcrawl._core._urls import fingerprint
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Batch, Store

from .crawl import CRAWL, _join_command

TRIM_EVERY = 20  # batches between trims of the stream the URLs land in


def _urls(prefix: str, start: int, count: int) -> Iterator[str]:
    for i in range(start, start + count):
        yield f"http://h{i % 50_000}.example.com/{prefix}/{i}.html"


def _push_range(url: str, prefix: str, start: int, count: int, size: int) -> int:
    """Commit ``count`` URLs in batches of ``size``; returns how many the filter let in."""
    store = Store(RedisURL.parse(url), CRAWL, timeout=60)
    client = redis_py.Redis.from_url(url)
    added, batch, batches = 0, Batch(worker="", epoch=0), 0
    for u in _urls(prefix, start, count):
        h1, h2 = fingerprint(u)
        batch.add.append([store.inbox, Entry(url=u).encode(), h1, h2, 1])
        if len(batch.add) == size:
            added += _commit(store, batch)
            batch, batches = Batch(worker="", epoch=0), batches + 1
            if batches % TRIM_EVERY == 0:
                client.delete(store.inbox)  # as workers would take them away
    if batch.add:
        added += _commit(store, batch)
    client.delete(store.inbox)
    store.close()
    client.close()
    return added


def _push(url: str, prefix: str, count: int, size: int, pushers: int) -> int:
    """Push ``count`` URLs from ``pushers`` processes at once, as a fleet would."""
    share = -(-count // pushers)
    starts = range(0, count, share)
    with ProcessPoolExecutor(pushers) as pool:
        jobs = [pool.submit(_push_range, url, prefix, s, min(share, count - s), size)
                for s in starts]  # fmt: skip
        return sum(job.result() for job in jobs)


def _commit(store: Store, batch: Batch) -> int:
    result = store.commit(batch)
    if result.status != "ok":
        raise RuntimeError(f"commit refused: {result}")
    return result.added


def projected_bytes_per_url(urls: int, *, c0: int = 2**20, p: float = 1e-6) -> float:
    """Bytes per URL of the filter's bitmaps alone once ``urls`` URLs are in it.

    Layers fill in order (layer i holds c0 * 2^min(i, 6) URLs) and a layer's bitmap is
    full-sized as soon as its first high bit is set, so this is exact up to Redis's
    per-key overhead and allocator rounding.
    """
    total, left, i = 0, urls, 0
    while left > 0:
        k = math.ceil(math.log(2 ** (i + 1) / p) / math.log(2))
        capacity = c0 * 2 ** min(i, 6)
        total += math.ceil(capacity * k / math.log(2)) / 8
        left, i = left - capacity, i + 1
    return total / urls


def filter_shape(client: redis_py.Redis, prefix: str) -> list[dict[str, float]]:
    """Each layer's bits, hashes, fill and false-positive rate, as commit.lua shapes them."""
    meta = client.hgetall(prefix + "seenmeta")
    layers, c0, p = int(meta[b"L"]), int(meta[b"c0"]), float(meta[b"p"])
    out = []
    for i in range(layers):
        k = math.ceil(math.log(2 ** (i + 1) / p) / math.log(2))
        m = math.ceil(c0 * 2 ** min(i, 6) * k / math.log(2))
        ones = int(client.bitcount(f"{prefix}seen:{i}"))
        fill = ones / m
        out.append({"layer": i, "bits": m, "k": k, "fill": fill, "fp": fill**k})
    return out


def seen_filter(
    work: Path, *, urls: int, probes: int, batch: int, pushers: int = 2
) -> dict[str, Any]:
    """Redis memory per seen URL after ``urls`` distinct URLs; wrongly-seen rate on ``probes``."""
    server = RedisServer(directory=work / "redis-seen")
    server.start()
    try:
        client = redis_py.Redis.from_url(server.url)
        before = int(client.info("memory")["used_memory"])
        started = time.monotonic()
        added = _push(server.url, "seen", urls, batch, pushers)
        took = time.monotonic() - started
        memory = int(client.info("memory")["used_memory"]) - before
        layers = filter_shape(client, f"hc:{{{CRAWL}}}:")
        fresh = _push(server.url, "new", probes, batch, pushers)
        keep = 1.0
        for layer in layers:
            keep *= 1 - layer["fp"]
        client.close()
    finally:
        server.stop()
    return {
        "urls": urls,
        "batch": batch,
        "pushers": pushers,
        "seconds": took,
        "urls_per_s": urls / took,
        "added": added,
        "memory": memory,
        "bytes_per_url": memory / urls,
        "layers": layers,
        "probes": probes,
        "wrongly_seen": probes - fresh,
        "projected_10m": projected_bytes_per_url(10_000_000),
        "estimated_fp": 1 - keep,
        "bound": 1e-6,
    }


def queued_rss(
    work: Path, *, site_hosts: list[str], port: int, urls: int, watch: float
) -> dict[str, Any]:
    """Peak RSS of one worker crawling while ``urls`` URLs are queued for it.

    The URLs are pages the site does not have (404s, quick to serve), so that the
    worker goes on fetching with its queue deep for as long as it is watched.
    """
    server = RedisServer(directory=work / "redis-queued")
    server.start()
    out = work / "queued-items.jsonl"
    with open(work / "queued-worker.err", "wb") as err:
        command = _join_command(server.url, out, ["--idle", "none"])
        worker = subprocess.Popen(command, stdout=err, stderr=err)
    try:
        watcher = _Watcher(worker.pid)
        queue = Queue(server.url, CRAWL)
        while not queue.status()["workers"]:
            watcher.sample()
            time.sleep(0.1)
        started = time.monotonic()
        for chunk in chunks(_site_urls(site_hosts, port, urls), 10_000):
            # dont_filter: these URLs are all new, and the seen filter is measured apart.
            queue.submit(chunk, dont_filter=True, allow_private=True)
            watcher.sample()
        submitted = time.monotonic() - started
        end = time.monotonic() + watch
        while time.monotonic() < end:
            watcher.sample()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGKILL)
        _, _, rusage = os.wait4(worker.pid, 0)
        worker.returncode = -9
    try:
        status = queue.status()  # nothing moves now: streams and overflow sets add up
        queued = status["waiting"] + status["held"]  # overflow sets included
        fetched = int(status["fetched"])
        queue.close()
    finally:
        server.stop()
    return {
        "urls": urls,
        "submit_seconds": submitted,
        "queued_at_end": queued,
        "watched_seconds": watch,
        "fetched_meanwhile": fetched,
        "peak_rss_kb": max(rusage.ru_maxrss, watcher.peak_kb),
    }


def _site_urls(hosts: list[str], port: int, count: int) -> Iterator[str]:
    for i in range(count):
        yield f"http://{hosts[i % len(hosts)]}:{port}/q/{i}.html"


class _Watcher:
    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_kb = 0

    def sample(self) -> None:
        with contextlib.suppress(psutil.Error):  # it may have just exited
            self.peak_kb = max(self.peak_kb, self.process.memory_info().rss // 1024)


if __name__ == "__main__":
    import json

    result = seen_filter(Path(sys.argv[1]), urls=int(sys.argv[2]), probes=int(sys.argv[3]),
                         batch=int(sys.argv[4]))  # fmt: skip
    print(json.dumps(result, indent=1))
