"""``MockFetcher`` and ``MemorySink``: the stand-ins for the network and the output that
tests and examples use in place of fetchers and sinks of their own."""

from __future__ import annotations

import threading

import pytest

import hashcrawl


def _ok(request: hashcrawl.Request) -> hashcrawl.Response:
    return hashcrawl.Response(url=request.url, status=200, headers={}, body=b"hi", request=request)


async def test_a_mock_fetcher_answers_with_its_handler_and_keeps_the_requests() -> None:
    """A sync handler's response is the fetch's; every request is kept, in order."""
    fetcher = hashcrawl.MockFetcher(_ok)
    first = await fetcher.fetch(hashcrawl.Request("https://a.example/1"))
    await fetcher.fetch(hashcrawl.Request("https://a.example/2"))
    assert (first.status, first.body) == (200, b"hi")
    assert fetcher.urls == ["https://a.example/1", "https://a.example/2"]


async def test_a_mock_fetchers_handler_may_be_async_and_may_fail() -> None:
    """A coroutine handler is awaited; a FetchError it raises is the fetch's."""

    async def failing(request: hashcrawl.Request) -> hashcrawl.Response:
        raise hashcrawl.FetchError("connection refused")

    with pytest.raises(hashcrawl.FetchError, match="refused"):
        await hashcrawl.MockFetcher(failing).fetch(hashcrawl.Request("https://a.example/"))


async def test_a_handler_that_returns_no_response_is_named() -> None:
    """A handler's mistake is a TypeError saying what it returned."""
    fetcher = hashcrawl.MockFetcher(lambda request: "page")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="must return a Response, got 'page'"):
        await fetcher.fetch(hashcrawl.Request("https://a.example/"))


async def test_pages_are_served_and_anything_else_is_a_404() -> None:
    """of_pages serves its bodies (str or bytes), robots.txt as text; the rest is 404."""
    fetcher = hashcrawl.MockFetcher.of_pages(
        {"https://a.example/": "<title>A</title>", "https://a.example/robots.txt": b"User-agent: *"}
    )
    page = await fetcher.fetch(hashcrawl.Request("https://a.example/"))
    robots = await fetcher.fetch(hashcrawl.Request("https://a.example/robots.txt"))
    missing = await fetcher.fetch(hashcrawl.Request("https://a.example/gone"))
    assert (page.status, page.body, page.headers["content-type"]) == (
        200,
        b"<title>A</title>",
        "text/html; charset=utf-8",
    )
    assert (robots.status, robots.headers["content-type"]) == (200, "text/plain")
    assert (missing.status, missing.body) == (404, b"")


def test_a_memory_sink_keeps_items_written_from_threads() -> None:
    """Items written from several threads at once are all kept, as copies."""
    sink = hashcrawl.MemorySink()
    item = {"url": "u"}

    def write(n: int) -> None:
        for i in range(200):
            sink.write([{"url": f"{n}-{i}"}])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.write([item])
    item["url"] = "changed"
    sink.flush()
    sink.close()
    assert len(sink.items) == 801 and sink.items[-1] == {"url": "u"} and sink.closed


def test_a_worker_crawls_mock_pages_into_a_memory_sink(redis_url: str, crawl_name: str) -> None:
    """The two together: a worker crawls a small site from memory and keeps its items."""
    pages = {
        "https://a.example/": '<title>Home</title><a href="/about">About</a>',
        "https://a.example/about": "<title>About</title>",
    }
    fetcher, sink = hashcrawl.MockFetcher.of_pages(pages), hashcrawl.MemorySink()
    with hashcrawl.Queue(redis_url, crawl_name) as queue:
        queue.submit(["https://a.example/"])
    worker = hashcrawl.Worker(redis_url, crawl_name, fetcher=fetcher, sink=sink, delay=0, idle=0.5)
    worker.run_sync()
    assert sorted(item["title"] for item in sink.items) == ["About", "Home"]
    assert set(fetcher.urls) == {*pages, "https://a.example/robots.txt"}
