"""Feed a running crawl from Python: submit URLs while a worker crawls, and watch status.

A worker runs in another process (on a fleet it would be ``hashcrawl join`` on other
machines). This process submits a first batch, waits until the crawl has taken it in,
then submits a second batch, in which a URL seen before is left out.

    python docs/examples/feed_with_queue.py [REDIS_URL [CRAWL]]
"""

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
OUTPUT = Path("feed_with_queue.jsonl")
BATCHES = [
    ["https://news.example/1", "https://news.example/2"],
    ["https://news.example/2", "https://news.example/3", "https://blog.example/1"],
]


def stub_page(request: hashcrawl.Request) -> hashcrawl.Response:
    """Every page exists and links nowhere, so only submitted URLs are crawled."""
    status = 404 if request.url.endswith("/robots.txt") else 200
    return hashcrawl.Response(url=request.url, status=status, headers={}, body=b"", request=request)


def work(redis: str, crawl: str) -> None:
    sink = hashcrawl.JsonLinesSink(OUTPUT)
    hashcrawl.Worker(
        redis, crawl, fetcher=hashcrawl.MockFetcher(stub_page), sink=sink, delay=0, idle=1
    ).run_sync()
    sink.close()


def wait_until_done(queue: hashcrawl.Queue) -> None:
    while (status := queue.status())["waiting"] or status["held"]:
        time.sleep(0.05)


def main(redis: str = REDIS, crawl: str = "feed-with-queue") -> None:
    OUTPUT.unlink(missing_ok=True)
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
        worker = multiprocessing.Process(target=work, args=(redis, crawl))
        worker.start()
        for batch in BATCHES:
            print(f"submitted {queue.submit(batch)} new of {len(batch)}")
            wait_until_done(queue)
        worker.join()
        print("status:", {k: queue.status()[k] for k in ("seen", "fetched", "ended")})
    for line in OUTPUT.read_text().splitlines():
        print("crawled", json.loads(line)["url"])


if __name__ == "__main__":
    main(*sys.argv[1:])
