"""Crawl with your own fetcher: pages come from a dict here, not from the network.

Swap the dict for a headless browser, a paid API, a file store or a client that signs
its requests: the fetcher only fetches, and hashcrawl still paces each host, obeys its
robots.txt, retries, leases and routes. URLs stay http(s): they name each page and its
host, which is what pacing and routing go by.

    python docs/examples/custom_fetcher.py [REDIS_URL [CRAWL]]
"""

import json
import os
import sys
from pathlib import Path

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
PAGES = {
    "https://example.com/": "<title>Home</title><a href=/about>About</a> <a href=/gone>Gone</a>",
    "https://example.com/about": "<title>About</title><a href=/private/x>x</a>"
    ' <a href="https://other.example/">Elsewhere</a> <a href=/>Home</a>',
    "https://example.com/robots.txt": "User-agent: *\nDisallow: /private/",
    "https://other.example/": "<title>Other</title>",
}


class DictFetcher:
    """Serves PAGES; anything else is a 404 (so a missing robots.txt allows all)."""

    async def fetch(self, request: hashcrawl.Request) -> hashcrawl.Response:
        print("fetch", request.url)
        body = PAGES.get(request.url)
        return hashcrawl.Response(
            url=request.url,
            status=404 if body is None else 200,
            headers={"content-type": "text/html; charset=utf-8"},
            body=(body or "").encode(),
            request=request,
        )


def main(redis: str = REDIS, crawl: str = "custom-fetcher") -> None:
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
        # A crawl stays on its submitted hosts; other.example is allowed as well.
        queue.submit(["https://example.com/"], allow_domains=["other.example"])
    output = Path("custom_fetcher.jsonl")
    output.unlink(missing_ok=True)
    sink = hashcrawl.JsonLinesSink(output)
    worker = hashcrawl.Worker(redis, crawl, fetcher=DictFetcher(), sink=sink, delay=0, idle=0.5)
    worker.run_sync()
    sink.close()
    for line in output.read_text().splitlines():
        item = json.loads(line)
        print("item", item["status"], item["url"], item["title"])


if __name__ == "__main__":
    main(*sys.argv[1:])
