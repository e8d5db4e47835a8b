"""Your own fetcher, two worker processes, and each page's item written once.

The two workers split the twenty hosts between them on the ring; every link goes to
its host's owner, and each page is fetched, and its item written, by one worker.

    python docs/examples/two_processes.py [REDIS_URL [CRAWL]]
"""

import collections
import json
import multiprocessing
import os
import sys
from pathlib import Path

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
PAGES = {f"https://site{h}.example/{n}" for h in range(20) for n in range(5)}
LINKS = "".join(f'<a href="{url}">{url}</a>' for url in sorted(PAGES)).encode()
OUTPUT = Path("two_processes.jsonl")


class MyFetcher:
    """Pages from memory; a headless browser, an API or a file store plugs in the same way."""

    async def fetch(self, request: hashcrawl.Request) -> hashcrawl.Response:
        found = request.url in PAGES
        return hashcrawl.Response(
            url=request.url,
            status=200 if found else 404,
            headers={"content-type": "text/html"},
            body=LINKS if found else b"",
            request=request,
        )


def work(redis: str, crawl: str) -> None:
    sink = hashcrawl.JsonLinesSink(OUTPUT)  # both processes append whole batches to one file
    hashcrawl.Worker(redis, crawl, fetcher=MyFetcher(), sink=sink, delay=0.1, idle=1).run_sync()
    sink.close()


def main(redis: str = REDIS, crawl: str = "two-processes") -> None:
    OUTPUT.unlink(missing_ok=True)
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
        queue.submit(["https://site0.example/0"], span_hosts=True)  # links lead to every site
    workers = [multiprocessing.Process(target=work, args=(redis, crawl)) for _ in range(2)]
    for process in workers:
        process.start()
    for process in workers:
        process.join()
    items = [json.loads(line) for line in OUTPUT.read_text().splitlines()]
    print("items:", len(items), "pages:", len({item["url"] for item in items}), "of", len(PAGES))
    print("per worker:", sorted(collections.Counter(item["worker"] for item in items).values()))


if __name__ == "__main__":
    main(*sys.argv[1:])
