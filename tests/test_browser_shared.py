"""A shared host with the real Chromium: two workers render the pages of their own
loopback hosts, every page loading a script from a third host (the "CDN") that the
crawl also crawls as plain pages, judged from the CDN server's own log.

Skipped, with the reason, where no Chromium is installed (as ``test_browser``).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import socket
import struct
import threading
import uuid
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
TOLERANCE = 0.001  # the kernel stamps arrivals a few microseconds after the worker sends
STAMPS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value, where Python lacks the name
PAGES = 4  # pages of each rendered host, beside its root
PAGE = """<!doctype html><html><body><ul id="items"><li class="item">own</li></ul>
{links}<script src="http://{cdn}/lib.js"></script><script src="http://{cdn}/private.js">
</script></body></html>"""
LIB_JS = """{ const li = document.createElement("li"); li.className = "item";
  li.textContent = "%s"; document.getElementById("items").appendChild(li); }"""


class Site:
    """A loopback host serving fixed paths from a process of its own, logging when each
    request arrived as the kernel stamped its first bytes (``SO_TIMESTAMPNS``), so that
    no scheduling delay of the server's own, on a busy machine, moves a stamp."""

    def __init__(self, host: str, pages: dict[str, tuple[str, str]], directory: Path) -> None:
        self.pages = pages
        self.log_path = directory / f"log-{host}-{uuid.uuid4().hex[:6]}.txt"
        context = multiprocessing.get_context("spawn")
        here, there = context.Pipe()
        self.process = context.Process(
            target=serve, args=(host, pages, str(self.log_path), there), daemon=True
        )
        self.process.start()
        self.host = f"{host}:{here.recv()}"
        self.log: list[tuple[str, float]] = []

    def close(self) -> None:
        self.process.terminate()
        self.process.join()
        self.process.close()
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        self.log = [(path, float(at)) for at, path in (line.split(" ", 1) for line in lines)]


def serve(host: str, pages: dict[str, tuple[str, str]], log_path: str, ready: Any) -> None:
    """Serve ``pages`` on ``host`` (a free port, sent on ``ready``), one log line a
    request: the kernel's stamp of its first bytes, and its path."""
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    listener = socket.create_server((host, 0))
    listener.setsockopt(socket.SOL_SOCKET, STAMPS, 1)  # accepted sockets inherit it
    ready.send(listener.getsockname()[1])
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=answer, args=(connection, pages, log), daemon=True).start()


def answer(connection: socket.socket, pages: dict[str, tuple[str, str]], log: Any) -> None:
    with connection:
        data, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(16))
        if not data:  # closed unused: a request whose turn went by is not sent
            return
        stamps = [
            raw for level, kind, raw in ancillary if (level, kind) == (socket.SOL_SOCKET, STAMPS)
        ]
        while b"\r\n\r\n" not in data and (more := connection.recv(65536)):
            data += more
        path = data.split(b" ", 2)[1].decode() if data.count(b" ") >= 2 else "?"
        seconds, nanoseconds = struct.unpack("qq", stamps[0]) if stamps else (-1, 0)
        log.write(f"{seconds + nanoseconds / 1e9} {path}\n")  # unstamped: -1, a gap < 0
        body, kind = pages.get(path, ("", ""))
        status = "200 OK" if kind else "404 Not Found"
        head = f"HTTP/1.0 {status}\r\nContent-Type: {kind or 'text/plain'}\r\n"
        head += f"Content-Length: {len(body.encode())}\r\nConnection: close\r\n\r\n"
        connection.sendall(head.encode() + body.encode())


def rendered_site(address: str, cdn: str, directory: Path) -> Site:
    links = "".join(f'<a href="/p/{n}">p{n}</a>' for n in range(PAGES))
    pages = {"/": (PAGE.format(links=links, cdn=cdn), "text/html")}
    for n in range(PAGES):
        pages[f"/p/{n}"] = (PAGE.format(links="", cdn=cdn), "text/html")
    return Site(address, pages, directory)


def cdn_site(directory: Path) -> Site:
    links = "".join(f'<a href="/c/{n}">c{n}</a>' for n in range(PAGES))
    pages = {"/": (f'<ul><li class="item">cdn</li></ul>{links}', "text/html")}
    for n in range(PAGES):
        pages[f"/c/{n}"] = ('<ul><li class="item">cdn</li></ul>', "text/html")
    pages["/lib.js"] = (LIB_JS % "lib-js", "text/javascript")
    pages["/private.js"] = (LIB_JS % "private", "text/javascript")
    pages["/robots.txt"] = ("User-agent: *\nDisallow: /private.js\n", "text/plain")
    return Site("127.0.0.4", pages, directory)


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
    cdn = cdn_site(directory)
    sites = [
        rendered_site("127.0.0.2", cdn.host, directory),
        rendered_site("127.0.0.3", cdn.host, directory),
    ]
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
