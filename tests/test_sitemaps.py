"""Sitemaps: read safely within fixed bounds, and crawled like links with --sitemaps."""

from __future__ import annotations

import gzip
from html import escape
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._entry import Entry
from hashcrawl._spiders._sitemaps import (
    MAX_SITEMAP_DEPTH,
    MAX_SITEMAP_URLS,
    Sitemap,
    read_sitemap,
    sitemap_entries,
    sitemap_urls,
)
from testing.fleet import Crew, crawl_in_process, fast_settings, host, new_crawl_name
from testing.pagesets import FileServer, Logged

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BASE = "http://example.com/maps/index.xml"


def urlset(*locs: str) -> bytes:
    urls = "".join(f"<url><loc>{escape(loc)}</loc><priority>0.5</priority></url>" for loc in locs)
    return f"<?xml version='1.0'?><urlset xmlns='{NS}'>{urls}</urlset>".encode()


def index(*locs: str) -> bytes:
    maps = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f"<sitemapindex xmlns='{NS}'>{maps}</sitemapindex>".encode()


def test_a_urlset_lists_pages_as_urls_to_request() -> None:
    """<loc>s of a urlset are pages, resolved and sent as written (query kept as is)."""
    got = read_sitemap(urlset("http://example.com/a?b=1&a", " /rel.html "), BASE)
    assert got == Sitemap(pages=("http://example.com/a?b=1&a", "http://example.com/rel.html"))


def test_an_index_lists_sitemaps_and_gzip_is_read_by_its_magic() -> None:
    """A sitemap index gives sitemaps; a gzipped body is recognised whatever its headers."""
    got = read_sitemap(gzip.compress(index("http://example.com/s1.xml.gz")), BASE)
    assert got == Sitemap(sitemaps=("http://example.com/s1.xml.gz",))


def test_entities_are_not_expanded_and_nothing_external_is_read(tmp_path: Path) -> None:
    """Neither an internal nor an external (file) entity is expanded into a URL."""
    secret = tmp_path / "secret"
    secret.write_text("http://example.com/leaked")
    body = (
        "<?xml version='1.0'?><!DOCTYPE urlset [<!ENTITY int 'http://example.com/int'>"
        f"<!ENTITY ext SYSTEM 'file://{secret}'>]>"
        f"<urlset xmlns='{NS}'><url><loc>&int;</loc></url><url><loc>&ext;</loc></url>"
        "<url><loc>http://example.com/plain</loc></url></urlset>"
    ).encode()
    assert read_sitemap(body, BASE).pages == ("http://example.com/plain",)


def test_a_billion_laughs_body_gives_nothing_and_returns() -> None:
    """Nested entities that would expand to gigabytes are neither expanded nor fatal."""
    laughs = "".join(f"<!ENTITY l{i} '{f'&l{i - 1};' * 10}'>" for i in range(1, 10))
    body = (
        f"<?xml version='1.0'?><!DOCTYPE urlset [<!ENTITY l0 'http://example.com/x'>{laughs}]>"
        f"<urlset xmlns='{NS}'><url><loc>&l9;</loc></url></urlset>"
    ).encode()
    assert read_sitemap(body, BASE) == Sitemap()


def test_a_gzip_bomb_is_cut_at_the_size_bound() -> None:
    """A small gzip that inflates past the bound is read only up to it (no memory blow-up)."""
    head = f"<urlset xmlns='{NS}'><url><loc>http://example.com/first</loc></url>".encode()
    bomb = gzip.compress(head + b" " * (60 * 1024 * 1024), compresslevel=1)
    assert len(bomb) < 400_000
    assert read_sitemap(bomb, BASE).pages == ("http://example.com/first",)


def test_no_more_than_the_protocol_s_url_count_is_read() -> None:
    """A sitemap listing more URLs than the protocol allows gives the first 50,000."""
    body = urlset(*(f"/p{i}" for i in range(MAX_SITEMAP_URLS + 10)))
    pages = read_sitemap(body, BASE).pages
    assert len(pages) == MAX_SITEMAP_URLS and pages[-1].endswith(f"/p{MAX_SITEMAP_URLS - 1}")


def test_nesting_deeper_than_the_bound_is_dropped() -> None:
    """An index at the deepest level gives its pages' siblings nothing more to nest."""
    body = index("/deeper.xml")
    at_limit = Entry(url=BASE, sitemap=MAX_SITEMAP_DEPTH)
    assert sitemap_entries(at_limit, body, BASE) == []
    nested = sitemap_entries(Entry(url=BASE, sitemap=1, depth=2), body, BASE)
    assert nested == [Entry(url="http://example.com/deeper.xml", sitemap=2, depth=2)]


def test_a_host_s_sitemaps_are_its_robots_lines_then_sitemap_xml() -> None:
    """robots.txt's Sitemap: URLs come first, /sitemap.xml last, each once."""
    urls = sitemap_urls("http://h/page", ["http://h/a.xml", "http://h/sitemap.xml"])
    assert urls == ["http://h/a.xml", "http://h/sitemap.xml"]


@given(st.binary(max_size=2000))
def test_any_bytes_read_as_a_sitemap_never_raise(body: bytes) -> None:
    """Whatever a server sends as a sitemap, reading it returns (maybe nothing)."""
    got = read_sitemap(body, BASE)
    assert isinstance(got, Sitemap)


# --- a crawl with --sitemaps, judged by the server's log -----------------------------------


def write_site(root: Path) -> None:
    files: dict[str, bytes] = {
        "index.html": b"<html><body><a href='linked.html'>l</a></body></html>",
        "linked.html": b"<html><body>linked</body></html>",
        "robots.txt": b"User-agent: *\nDisallow: /private/\nSitemap: /maps/index.xml.gz\n",
        "maps/index.xml.gz": gzip.compress(index("/maps/pages.xml", "/private/map.xml")),
        "maps/pages.xml": urlset("/only-in-map.html?b=2&a=1", "/private/secret.html"),
        "sitemap.xml": urlset("/from-sitemap-xml.html"),
        "only-in-map.html": b"<html><body><a href='via-map.html'>v</a></body></html>",
        "via-map.html": b"<html><body>reached through a mapped page</body></html>",
        "from-sitemap-xml.html": b"<html><body>listed in /sitemap.xml</body></html>",
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)


def crawl(root: Path, redis_url: str, items: Path, **settings: object) -> list[Logged]:
    crew = Crew(redis_url, new_crawl_name(), items)
    with FileServer(root, host(0)) as server:
        trio.run(crawl_in_process, crew, [fast_settings(**settings)], [server.base + "/"])
        return server.requests()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mapped")
    write_site(root)
    return root


def test_with_sitemaps_the_listed_pages_are_crawled_and_robots_still_applies(
    site: Path, redis_url: str, tmp_path: Path
) -> None:
    """Pages found only in sitemaps (gzipped index, /sitemap.xml) are requested as listed;
    a disallowed sitemap or page is not requested at all."""
    requested = {r.target for r in crawl(site, redis_url, tmp_path, sitemaps=True)}
    assert requested == {
        "/robots.txt",
        "/",
        "/linked.html",
        "/maps/index.xml.gz",
        "/maps/pages.xml",
        "/sitemap.xml",
        "/only-in-map.html?b=2&a=1",
        "/via-map.html",
        "/from-sitemap-xml.html",
    }


def test_without_sitemaps_no_sitemap_is_requested(
    site: Path, redis_url: str, tmp_path: Path
) -> None:
    """The default crawl asks for no sitemap and finds only linked pages."""
    requested = {r.target for r in crawl(site, redis_url, tmp_path)}
    assert requested == {"/robots.txt", "/", "/linked.html"}
