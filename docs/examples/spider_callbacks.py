"""A spider with two callbacks: category pages lead to products, carrying meta along.

``parse`` reads a category page and asks for each product with
``Request(url, callback="parse_product", meta={...})``; the request travels through
Redis (to whichever worker owns the product's host), and ``parse_product`` finds the
meta again on ``response.request.meta``.

    python docs/examples/spider_callbacks.py [REDIS_URL [CRAWL]]

Against a real site, a spider runs on a fleet with the default fetcher through
``hashcrawl join --redis URL --crawl NAME --spider path/to/file.py:ClassName``.
"""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
PAGES = {
    "https://shop.example/books": '<a href="/p/dune">Dune</a> <a href="/p/emma">Emma</a>',
    "https://shop.example/games": '<a href="/p/go">Go</a>',
    "https://shop.example/p/dune": "<title>Dune</title><a href=/games>Games</a>",
    "https://shop.example/p/emma": "<title>Emma</title>",
    "https://shop.example/p/go": "<title>Go</title>",
}


class Shop(hashcrawl.Spider):
    start_urls = ["https://shop.example/books", "https://shop.example/games"]

    def parse(self, response: hashcrawl.Response) -> Iterator[hashcrawl.Request]:
        category = response.url.rsplit("/", 1)[-1]
        for url in response.links():
            yield hashcrawl.Request(url, callback="parse_product", meta={"category": category})

    def parse_product(self, response: hashcrawl.Response) -> Iterator[dict[str, Any]]:
        yield {"name": response.title(), "category": response.request.meta["category"]}


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


def main(redis: str = REDIS, crawl: str = "spider-callbacks") -> None:
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
    output = Path("spider_callbacks.jsonl")
    output.unlink(missing_ok=True)
    sink = hashcrawl.JsonLinesSink(output)
    hashcrawl.Worker(
        redis, crawl, spider=Shop, fetcher=DictFetcher(), sink=sink, delay=0, idle=0.5
    ).run_sync()
    sink.close()
    for line in output.read_text().splitlines():
        print(json.loads(line))


if __name__ == "__main__":
    main(*sys.argv[1:])
