"""A spider as Scrapy users write one: it logs in with a POST, searches with a form,
reads a JSON API and extracts fields with css().

The site (``testing/formsite.py``, which ``python -m testing.formsite`` serves on loopback)
sets a session cookie on ``POST /login`` and requires it for ``/search``; its JSON API
wants an ``Accept`` header. The login cookie is kept by the worker that owns the site's
host, and handed over with the host if it moves to another worker.

    python docs/examples/login_search_api.py SITE_URL [REDIS_URL [CRAWL]]

The password is in the spider, so it travels through Redis in the login request's
body; a token that every request needs belongs in ``--header`` (``Worker(headers=...)``),
which never leaves the worker.
"""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hashcrawl

REDIS = os.environ.get("HASHCRAWL_REDIS", "redis://localhost:6379/0")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Catalogue(hashcrawl.Spider):
    def parse(self, response: hashcrawl.Response) -> Iterator[hashcrawl.Request]:
        # The start page: log in. The session cookie comes back with the response.
        yield response.follow(
            "/login",
            method="POST",
            headers=FORM,
            body="user=ann&password=hunter2",
            callback="logged_in",
        )

    def logged_in(self, response: hashcrawl.Response) -> Iterator[hashcrawl.Request]:
        # A search form, POSTed; two searches to one URL are two requests.
        for words in ("widget", "gadget"):
            yield response.follow(
                "/search", method="POST", headers=FORM, body=f"q={words}", callback="results"
            )
        # A JSON API that wants to be asked for JSON.
        yield response.follow(
            "/api/items?q=widget", headers={"Accept": "application/json"}, callback="api"
        )

    def results(self, response: hashcrawl.Response) -> Iterator[hashcrawl.Request]:
        yield from response.follow_all(css="ul.results a", callback="item")

    def api(self, response: hashcrawl.Response) -> Iterator[dict[str, Any]]:
        for found in response.json()["items"]:
            yield {"from": "api", "name": found["name"]}

    def item(self, response: hashcrawl.Response) -> Iterator[dict[str, Any]]:
        yield {
            "from": "page",
            "name": response.css("h1.name::text").get(),
            "price": float(response.css("span.price::text").get("nan")),
        }


def main(site: str, redis: str = REDIS, crawl: str = "login-search-api", *nets: str) -> None:
    """Crawl ``site``; ``nets`` are non-public networks it may reach (a test site's)."""
    with hashcrawl.Queue(redis, crawl) as queue:
        queue.clear()  # start afresh on every run
        queue.submit([site], allow_nets=nets)
    output = Path("login_search_api.jsonl")
    output.unlink(missing_ok=True)
    sink = hashcrawl.JsonLinesSink(output)
    hashcrawl.Worker(
        redis, crawl, spider=Catalogue, sink=sink, delay=0.05, idle=1, allow_nets=nets
    ).run_sync()
    sink.close()
    items = [json.loads(line) for line in output.read_text().splitlines()]
    for item in sorted(items, key=lambda i: (i["from"], i["name"])):
        print(item)


if __name__ == "__main__":
    main(*sys.argv[1:])
