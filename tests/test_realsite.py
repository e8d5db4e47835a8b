"""A small documentation-like site crawled by two workers, judged by the server's log against
the pages an independent, wget-like reading of the served files reaches (testing/pagesets.py).

It has a frameset, an iframe, a meta refresh, <link rel=next/prev>, query strings without
"=", names that must be escaped, and non-HTML files (one of which looks like HTML).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, crawl_in_process, fast_settings, host, new_crawl_name, read_items
from testing.pagesets import FileServer, Logged, compare, expected_pages, written_links

FILES = {
    "index.html": "<html><head><title>Docs</title></head><frameset cols='20%,80%'>"
    "<frame src='nav.html'><frame src='index.html?java/lang/String.html' name='main'>"
    "</frameset></html>",
    "nav.html": "<html><head><title>Nav</title><link rel=stylesheet href='style.css'>"
    "<link rel=next href='chapter1.html'></head><body><img src='img/logo.png'>"
    "<a href='api/Thing.html'>Thing</a> <a href='files/data.csv'>data</a>"
    "<a href='files/notes.txt'>notes</a> <a href='index.html?x&amp;b=2&amp;a'>odd query</a>"
    "<a href='space page.html#s'>space</a> <a href='caf%C3%A9.html'>café</a>"
    "<a href='search.html?q=a b'>search</a> <a href='page.xhtml'>xhtml</a>"
    "<a href='mailto:docs@example.com'>mail</a></body></html>",
    "api/Thing.html": "<html><body><iframe src='../embedded.html'></iframe>"
    "<a href='../refresh.html'>old</a></body></html>",
    "embedded.html": "<html><body>embedded</body></html>",
    "refresh.html": "<html><head><meta http-equiv='refresh' content='0; url=moved/target.html'>"
    "</head></html>",
    "moved/target.html": "<html><body><a href='../index.html#top'>home</a></body></html>",
    "chapter1.html": "<html><head><link rel=prev href='nav.html'>"
    "<link rel=canonical href='http://docs.example/chapter1'></head><body>1</body></html>",
    "files/notes.txt": "<a href='/trap.html'>not a link: this is text/plain</a>",
    "files/data.csv": "a,b\n1,2\n",
    "trap.html": "<html><body>only a text file names me</body></html>",
    "space page.html": "<html><body>space</body></html>",
    "café.html": "<html><body>café</body></html>",
    "search.html": "<html><body>results</body></html>",
    "page.xhtml": "<?xml version='1.0'?><html xmlns='http://www.w3.org/1999/xhtml'><body>"
    "<a href='from-xhtml.html'>x</a></body></html>",
    "from-xhtml.html": "<html><body>reached from XHTML</body></html>",
    "img/logo.png": "not really a png",
    "style.css": "body { background: url(img/bg.png) }",
}


def write_site(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture(scope="module")
def crawled(
    shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[FileServer, list[Logged], Crew]:
    """The site crawled once by two in-process workers that stay on its host."""
    root = write_site(tmp_path_factory.mktemp("docsite"))
    crew = Crew(shared_redis.url, new_crawl_name(), tmp_path_factory.mktemp("items"))
    settings = fast_settings(span_hosts=False)  # worker settings: loopback, default scope
    with FileServer(root, host(0)) as server:
        trio.run(crawl_in_process, crew, [settings, settings], [server.base + "/"])
        return server, server.requests(), crew


def targets(log: list[Logged]) -> list[str]:
    return [r.target for r in log if r.target != "/robots.txt"]


def test_the_crawl_requests_exactly_the_pages_a_wget_like_reading_reaches(crawled) -> None:
    """Every page linked by a, area, frame, iframe, refresh or link rel is requested, once,
    and nothing else: not the image, stylesheet or the link inside a text file."""
    server, log, _ = crawled
    expected = expected_pages(server.root, server.base)
    assert sorted(targets(log)) == sorted(expected)
    result = compare(set(targets(log)), expected, written_links(server.root, server.base))
    assert result.ok, result.lines("hashcrawl", "expected")
    assert {"/files/data.csv", "/files/notes.txt", "/embedded.html", "/moved/target.html",
            "/chapter1.html", "/from-xhtml.html"} <= expected  # fmt: skip
    assert "/trap.html" not in expected and "/img/logo.png" not in expected


def test_urls_are_requested_as_the_page_wrote_them(crawled) -> None:
    """Query order, a query without "=", and valid escapes reach the server unchanged."""
    _, log, _ = crawled
    sent = set(targets(log))
    assert {
        "/index.html?java/lang/String.html",
        "/index.html?x&b=2&a",
        "/space%20page.html",
        "/caf%C3%A9.html",
        "/search.html?q=a%20b",
    } <= sent
    assert "/index.html?java%2Flang%2FString.html=" not in sent


def test_items_report_the_url_requested_with_type_length_and_canonical(crawled) -> None:
    """Each item's url is the URL sent; non-HTML pages have items too, with their type."""
    server, log, crew = crawled
    items = {item["url"].removeprefix(server.base): item for item in read_items(crew.outputs)}
    assert set(items) == set(targets(log))
    assert items["/files/data.csv"]["content_type"] == "text/csv"
    assert items["/files/data.csv"]["length"] == len(FILES["files/data.csv"])
    assert items["/chapter1.html"]["canonical"] == "http://docs.example/chapter1"
    assert items["/page.xhtml"]["content_type"] == "application/xhtml+xml"
