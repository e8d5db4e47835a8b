"""A parse callback that hangs is cancelled at --parse-timeout; one that blocks is run in a
thread when its spider says so, and reported with its URL when it holds the event loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import hashcrawl
from hashcrawl._run import _callbacks
from hashcrawl._store._server import RedisServer
from testing.fleet import crawl_site, fast_settings, host, request_counts, root_and_two_pages

MAX_ATTEMPTS = 2
TIMEOUT_ERROR = "the parse callback {} ran past --parse-timeout (0.3 s)"


async def hangs_on_the_root(response: hashcrawl.Response) -> AsyncIterator[Any]:
    yield {"title": response.title()}
    if response.title() == "root":
        for url in response.links():
            yield url
        await trio.sleep_forever()


def test_an_async_callback_past_parse_timeout_fails_its_page_then_dead_letters_it(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """The hung root is tried max_attempts times and dead-lettered; its item and links are
    kept once, and the other pages are crawled."""
    settings = fast_settings(parse=hangs_on_the_root, parse_timeout=0.3, max_attempts=2)
    crawled = trio.run(crawl_site, shared_redis.url, tmp_path, root_and_two_pages(), [settings])
    counts = request_counts(crawled.requests)
    assert counts[crawled.site.root] == MAX_ATTEMPTS
    assert counts[crawled.site.url(host(0), "/a")] == 1
    with hashcrawl.Queue(crawled.crew.redis_url, crawled.crew.crawl) as queue:
        assert queue.dead() == {crawled.site.root: TIMEOUT_ERROR.format("hangs_on_the_root")}
    assert sorted(i["title"] for i in crawled.crew.items()) == ["a", "b", "root"]


class BlockingSpider(hashcrawl.Spider):
    blocking = True
    release = threading.Event()

    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        on_loop = threading.current_thread() is threading.main_thread()
        yield {"title": response.title(), "on_loop": on_loop}
        if response.title() == "root":
            yield from response.links()
        if response.title() == "a":
            self.release.wait(30)  # blocks until the test ends: only a thread can do this


def test_a_blocking_spider_runs_in_a_thread_and_a_hung_one_is_abandoned(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """Callbacks of a spider with blocking = True run off the event loop, and one that
    blocks past --parse-timeout fails its page while the crawl goes on."""
    settings = fast_settings(spider=BlockingSpider, parse_timeout=0.3, max_attempts=2)
    try:
        crawled = trio.run(crawl_site, shared_redis.url, tmp_path, root_and_two_pages(), [settings])
    finally:
        BlockingSpider.release.set()
    items = crawled.crew.items()
    assert sorted(i["title"] for i in items) == ["a", "b", "root"]
    assert not any(i["on_loop"] for i in items)
    with hashcrawl.Queue(crawled.crew.redis_url, crawled.crew.crawl) as queue:
        expected = TIMEOUT_ERROR.format("BlockingSpider.parse")
        assert queue.dead() == {crawled.site.url(host(0), "/a"): expected}


def sleeps_on_the_root(response: hashcrawl.Response) -> Iterator[Any]:
    if response.title() == "root":
        time.sleep(0.2)  # holds the event loop: what is reported
        yield from response.links()
    yield {"title": response.title()}


def test_a_callback_that_holds_the_loop_is_reported_once_with_its_url(
    shared_redis: RedisServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One warning names the root, the only page whose callback held the loop too long."""
    monkeypatch.setattr(_callbacks, "LOOP_HOLD_WARNING", 0.1)
    settings = fast_settings(parse=sleeps_on_the_root)
    with caplog.at_level(logging.WARNING, logger="hashcrawl"):
        crawled = trio.run(crawl_site, shared_redis.url, tmp_path, root_and_two_pages(), [settings])
    held = [r.getMessage() for r in caplog.records if "held the event loop" in r.getMessage()]
    assert len(held) == 1
    assert held[0].endswith(
        f"on {crawled.site.root}: set blocking = True on the spider to run it in a thread"
    )
    assert sorted(i["title"] for i in crawled.crew.items()) == ["a", "b", "root"]
