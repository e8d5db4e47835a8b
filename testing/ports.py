"""The spiders of docs/examples/from_scrapy, crawled by two hashcrawl workers of which the
one fetching the site is stopped mid-crawl (the other takes the site over, its cookies
included). ``scripts/scrapy_parity`` compares what they give with Scrapy's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from hashcrawl._core._urls import canonicalize, host_key
from hashcrawl._run._worker import Worker
from hashcrawl._spiders._spider import Spider, load_spider
from testing.fleet import DEADLINE, Crew, await_until, fast_settings, new_crawl_name
from testing.scrapysite import ScrapySite

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples" / "from_scrapy"
PORTS = ("books", "login", "catalogue")
DEFAULT_SITE = "http://127.0.0.2:8000/"  # what the spiders read without $DEMO_SITE


def port_of(name: str, site: ScrapySite) -> type[Spider]:
    """The hashcrawl port ``name``, its start URLs on ``site``."""
    spider = load_spider(str(EXAMPLES / f"{name}.py"))
    starts = [url.replace(DEFAULT_SITE, site.root) for url in spider.start_urls]
    return type(spider.__name__, (spider,), {"start_urls": starts})


def original_of(name: str) -> Path:
    """The Scrapy spider the port ``name`` was made from."""
    return EXAMPLES / "scrapy_originals" / f"{name}.py"


def as_set(items: list[dict[str, Any]]) -> set[str]:
    """Items as a set of canonical JSON texts, comparable across crawlers."""
    return {json.dumps(item, sort_keys=True) for item in items}


def owner(workers: list[Worker], site: ScrapySite) -> Worker:
    """The worker that owns the site's host now."""
    host = host_key(canonicalize(site.root))
    for worker in workers:
        session = worker.session
        if session is not None and session.epochs.latest.owner_of(host) == session.id:
            return worker
    raise AssertionError(f"no worker owns {host}")


async def crawl_with_a_stop(
    redis_url: str, directory: Path, spider: type[Spider], site: ScrapySite, stop_after: int
) -> Crew:
    """Two workers crawl ``site`` with ``spider``; once the site has answered
    ``stop_after`` requests, the worker fetching it is stopped (gracefully)."""
    crew = Crew(redis_url, new_crawl_name(), directory)
    settings = fast_settings(spider=spider, delay=0.1, idle=1.0)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            workers = [crew.hire(settings), crew.hire(settings)]
            for worker in workers:
                nursery.start_soon(crew.run, worker)
            await await_until(lambda: len(site.seen()) >= stop_after, what="the crawl's start")
            owner(workers, site).stop()
    return crew
