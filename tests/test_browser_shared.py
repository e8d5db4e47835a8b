"""A shared host with the real Chromium: two workers render the pages of their own
loopback hosts, every page loading a script from a third host (the "CDN") that the
crawl also crawls as plain pages, judged from the CDN server's own log.

Skipped, with the reason, where no Chromium is installed (as ``test_browser``).
"""

from __future__ import annotations

import http.server
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

import hashcrawl
from hashcrawl._core._ring import Ring, name_of
from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, crawl_in_process, fast_settings, new_crawl_name
from tests.test_browser import CHROMIUM, MARK, ended, live_chromium

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (scripts/test installs it)"),
]
DELAY = 0.25
TOLERANCE = 0.01  # the server's clock reads arrivals a little after the worker sends
PAGES = 4  # pages of each rendered host, beside its root
PAGE = """<!doctype html><html><body><ul id="items"><li class="item">own</li></ul>
{links}<script src="http://{cdn}/lib.js"></script><script src="http://{cdn}/private.js">
</script></body></html>"""
LIB_JS = """{ const li = document.createElement("li"); li.className = "item";
  li.textContent = "%s"; document.getElementById("items").appendChild(li); }"""


class Site:
    """A loopback host serving fixed paths, logging each request's arrival."""

    def __init__(self, host: str) -> None:
        self.pages: dict[str, tuple[str, str]] = {}
        self.log: list[tuple[str, float]] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                site.log.append((self.path, time.monotonic()))
                body, kind = site.pages.get(self.path, ("", ""))
                self.send_response(200 if kind else 404)
                self.send_header("Content-Type", kind or "text/plain")
                self.send_header("Content-Length", str(len(body.encode())))
                self.end_headers()
                self.wfile.write(body.encode())

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = "{}:{}".format(*self.server.socket.getsockname()[:2])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def rendered_site(address: str, cdn: str) -> Site:
    site = Site(address)
    links = "".join(f'<a href="/p/{n}">p{n}</a>' for n in range(PAGES))
    site.pages["/"] = (PAGE.format(links=links, cdn=cdn), "text/html")
    for n in range(PAGES):
        site.pages[f"/p/{n}"] = (PAGE.format(links="", cdn=cdn), "text/html")
    return site


def cdn_site() -> Site:
    cdn = Site("127.0.0.4")
    links = "".join(f'<a href="/c/{n}">c{n}</a>' for n in range(PAGES))
    cdn.pages["/"] = (f'<ul><li class="item">cdn</li></ul>{links}', "text/html")
    for n in range(PAGES):
        cdn.pages[f"/c/{n}"] = ('<ul><li class="item">cdn</li></ul>', "text/html")
    cdn.pages["/lib.js"] = (LIB_JS % "lib-js", "text/javascript")
    cdn.pages["/private.js"] = (LIB_JS % "private", "text/javascript")
    cdn.pages["/robots.txt"] = ("User-agent: *\nDisallow: /private.js\n", "text/plain")
    return cdn


class ItemSpider(hashcrawl.Spider):
    """Every ``li.item`` of a page, by its URL's path and host; every link followed."""

    name = "items"

    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        parts = urlsplit(response.url)
        for name in response.css("li.item::text").getall():
            yield {"page": f"{parts.netloc}{parts.path}", "item": name}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href)


def names_apart(hosts: list[str]) -> list[str]:
    """Two worker names whose places on the ring give each one of ``hosts``."""
    for n in itertools.count():
        names = [f"w{n}", f"v{n}"]
        ring = Ring.of(1, [f"{name}~x" for name in names])
        if len({name_of(ring.owner_of(host) or "") for host in hosts}) == 2:
            return names
    raise AssertionError("unreachable")


def crawl(server: RedisServer, directory: Path, *, share: bool) -> tuple[Crew, list[Site], Site]:
    """Two named workers, each owning one rendered host; the CDN is crawled too, and
    shared if ``share``."""
    cdn = cdn_site()
    sites = [rendered_site("127.0.0.2", cdn.host), rendered_site("127.0.0.3", cdn.host)]
    try:
        crew = Crew(server.url, new_crawl_name(), directory)
        base = fast_settings(
            spider=ItemSpider,
            delay=DELAY,
            max_attempts=1,
            idle=1.0,
            render_hosts="127.0.0.2,127.0.0.3",
            render_fetch_hosts=cdn.host if share else None,
            render_fetch_margin=0.1,
        )
        names = names_apart([site.host for site in sites])
        urls = [f"http://{site.host}/" for site in [*sites, cdn]]
        settings = [{**base, "name": name} for name in names]
        trio.run(crawl_in_process, crew, settings, urls)
    finally:
        for site in [*sites, cdn]:
            site.close()
    return crew, sites, cdn


def items_by_page(crew: Crew) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for item in crew.items():
        found.setdefault(item["page"], set()).add(item["item"])
    return found


@pytest.fixture(autouse=True)
def no_browser_left() -> Iterator[None]:
    """After the test, no Chromium it started is alive."""
    os.environ[MARK[0]] = MARK[1]
    try:
        yield
        assert trio.run(ended, live_chromium()) == set()
    finally:
        del os.environ[MARK[0]]


def test_a_shared_cdn_keeps_its_delay_across_workers_and_every_page_renders_whole(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """With the CDN shared, each page holds the item its CDN script writes, the script
    robots.txt disallows is never asked for, and the CDN's log (two workers' renders and
    its owner's own pages) has no two requests closer than --delay. Without the setting,
    the CDN script is refused, counted, and never reaches the CDN."""
    crew, sites, cdn = crawl(shared_redis, tmp_path, share=True)
    rendered = {f"{site.host}{path}" for site in sites for path in site.pages}
    crawled = {f"{cdn.host}/"} | {f"{cdn.host}/c/{n}" for n in range(PAGES)}
    found = items_by_page(crew)
    assert {page: found.get(page) for page in rendered} == {
        key: {"own", "lib-js"} for key in rendered
    }
    assert {page: found.get(page) for page in crawled} == {key: {"cdn"} for key in crawled}
    assert all(worker.tally.fetched for worker in crew.workers)  # both rendered their own
    paths = [path for path, _ in cdn.log]
    assert paths.count("/lib.js") >= 1 and "/private.js" not in paths
    stamps = sorted(at for _, at in cdn.log)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(gaps) >= len(crawled) + 1
    assert [gap for gap in gaps if gap < DELAY - TOLERANCE] == []
    assert sum(worker.tally.sub_refused for worker in crew.workers) == 0

    crew, sites, cdn = crawl(shared_redis, tmp_path, share=False)
    found = items_by_page(crew)
    rendered = {f"{site.host}{path}" for site in sites for path in site.pages}
    assert {page: found.get(page) for page in rendered} == {key: {"own"} for key in rendered}
    assert [path for path, _ in cdn.log if path.endswith(".js")] == []
    # Each rendered page asked for two CDN scripts, each refused and counted.
    assert sum(worker.tally.sub_refused for worker in crew.workers) == 2 * len(rendered)
