"""A spider for pages built by JavaScript: each page is rendered in the worker's browser
(Chromium, sealed: it has no network of its own), its steps are done, and the callback
reads the DOM as it is then.

The site (``testing/jssite.py``) writes its items by script, and its "Load more" button
appends two more by ``fetch``: fetched plainly, those pages show none of them. Every
request the page makes (the script, the fetch) goes through the worker's own fetcher, at
the host's pace.

    python docs/examples/rendered_pages.py SITE_URL [REDIS_URL [CRAWL]]
"""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")


class Shop(hashcrawl.Spider):
    def parse(self, response: hashcrawl.Response) -> Iterator[hashcrawl.Request]:
        # Written by a script: rendered, nothing more to do.
        yield response.follow("/script", render=True, callback="items")
        # Behind "Load more": click it, then wait for the fourth item.
        yield response.follow(
            "/more",
            render=True,
            steps=[
                {"click": "#more"},
                {"wait_for": "#items li:nth-child(4)", "timeout": 10},
                {"evaluate": "document.querySelectorAll('li.item').length"},
            ],
            callback="items",
        )

    def items(self, response: hashcrawl.Response) -> Iterator[dict[str, Any]]:
        for name in response.css("li.item::text").getall():
            yield {"page": response.url.rsplit("/", 1)[1], "item": name}
        if response.render is not None and response.render.results:
            yield {"page": response.url.rsplit("/", 1)[1], "counted": response.render.results[0]}


def main(site: str, redis: str = REDIS, crawl: str = "rendered-pages", *nets: str) -> None:
    """Crawl ``site``; ``nets`` are non-public networks it may reach (a test site's)."""
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
        queue.submit([site], allow_nets=nets)
    output = Path("rendered_pages.jsonl")
    output.unlink(missing_ok=True)
    sink = hashcrawl.JsonLinesSink(output)
    hashcrawl.Worker(
        redis, crawl, spider=Shop, sink=sink, delay=0.05, idle=1, allow_nets=nets
    ).run_sync()
    sink.close()
    items = [json.loads(line) for line in output.read_text().splitlines()]
    for item in sorted(items, key=lambda i: (i["page"], str(i.get("item", "")))):
        print({key: value for key, value in item.items() if key != "url"})


if __name__ == "__main__":
    main(*sys.argv[1:])
