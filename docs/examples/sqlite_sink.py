"""A sink of your own: items upserted into SQLite, one row per URL.

``parse`` makes one item per page (and follows its links); the sink stores the items.

A worker writes a batch of items, flushes, and only then marks the batch's pages done
in Redis. A worker that dies in between has its pages fetched again by another worker,
so delivery is at least once; a sink that upserts on the URL makes a repeat harmless.
Here the start page is crawled twice on purpose, and still has one row.

    python docs/examples/sqlite_sink.py [REDIS_URL [CRAWL]]
"""

import os
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
PAGES = {
    "https://example.com/": "<title>Home</title><a href=/a>A</a> <a href=/b>B</a>",
    "https://example.com/a": "<title>A</title><a href=/>Home</a>",
    "https://example.com/b": "<title>B</title><a href=/a>A</a>",
}


def parse(response: hashcrawl.Response) -> Iterator[dict[str, Any] | str]:
    yield {"url": response.url, "title": response.title(), "status": response.status}
    yield from response.links()


class SqliteSink:
    """Upserts each item into the table ``pages``, keyed by its URL."""

    def __init__(self, path: str) -> None:
        # The worker calls a sink from a thread, one call at a time.
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS pages"
            " (url TEXT PRIMARY KEY, title TEXT, status INTEGER, times INTEGER)"
        )

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.db.executemany(
            "INSERT INTO pages VALUES (:url, :title, :status, 1) ON CONFLICT (url) DO UPDATE"
            " SET title = excluded.title, status = excluded.status, times = times + 1",
            items,
        )

    def flush(self) -> None:
        self.db.commit()  # durable once this returns: only then are the pages acknowledged

    def close(self) -> None:
        self.db.close()


class DictFetcher:
    """Serves PAGES from memory, so that the example needs no network."""

    async def fetch(self, request: hashcrawl.Request) -> hashcrawl.Response:
        body = PAGES.get(request.url)
        return hashcrawl.Response(
            url=request.url,
            status=404 if body is None else 200,
            headers={"content-type": "text/html"},
            body=(body or "").encode(),
            request=request,
        )


def crawl_once(redis: str, crawl: str, sink: SqliteSink) -> None:
    worker = hashcrawl.Worker(
        redis, crawl, fetcher=DictFetcher(), parse=parse, sink=sink, delay=0, idle=0.5
    )
    worker.run_sync()


def main(redis: str = REDIS, crawl: str = "sqlite-sink") -> None:
    Path("pages.sqlite").unlink(missing_ok=True)  # start afresh on every run
    sink = SqliteSink("pages.sqlite")
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()
        queue.submit(["https://example.com/"])
        crawl_once(redis, crawl, sink)
        # As if a worker had died before acknowledging the start page: fetch it again.
        queue.submit(["https://example.com/"], dont_filter=True)
        crawl_once(redis, crawl, sink)
    for row in sink.db.execute("SELECT url, title, status, times FROM pages ORDER BY url"):
        print(*row)
    sink.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
