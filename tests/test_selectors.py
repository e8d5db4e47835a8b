"""Response.css(), .xpath(), .json(), .follow() and .follow_all(), as Scrapy users write them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import hashcrawl
from hashcrawl._exceptions import ConfigError
from hashcrawl._store._server import RedisServer
from testing.fleet import crawl_site, fast_settings, host, href, make_site, page, request_counts
from testing.testsite import Resource

URL = "http://example.com/dir/page.html"
HTML = "text/html; charset=utf-8"
PAGE = b"""<html><head><title>T</title><base href="/base/"></head><body>
<h1 class="name">Widget <b>one</b></h1><p id="price">12.50</p>
<a href="next.html#top">next</a><a href="mailto:x@example.com">mail</a><a href="/abs">abs</a>
<img src="pic.png"></body></html>"""


def response(body: bytes, content_type: str = HTML, url: str = URL) -> hashcrawl.Response:
    return hashcrawl.Response(
        url, 200, {"content-type": content_type}, body, hashcrawl.Request(url)
    )


def test_css_and_xpath_select_as_in_scrapy() -> None:
    """::text, ::attr() and XPath give what parsel gives Scrapy's responses."""
    r = response(PAGE)
    assert r.css("h1.name::text").get() == "Widget "
    assert r.css("h1 b::text").getall() == ["one"]
    assert r.css("a::attr(href)").getall() == ["next.html#top", "mailto:x@example.com", "/abs"]
    assert r.xpath("//p[@id=$id]/text()", id="price").get() == "12.50"
    assert r.css("p#missing::text").get(default="none") == "none"


def test_selectors_reuse_the_parse_that_links_and_title_use() -> None:
    """css() after links() wraps the same lxml tree: the page is parsed once."""
    r = response(PAGE)
    r.links()
    page = r._parsed[0]
    assert page is not None and r.selector.root is page.root


def test_a_page_that_never_asks_for_a_selector_builds_none() -> None:
    """links() and title() alone leave the selector unbuilt."""
    r = response(PAGE)
    r.links()
    r.title()
    assert "selector" not in r._cache


def test_json_decodes_the_body_once() -> None:
    """json() returns the parsed body, the same object each time."""
    r = response(b'{"items": [{"id": 1}]}', "application/json")
    assert r.json() == {"items": [{"id": 1}]}
    assert r.json() is r.json()


def test_json_of_a_body_that_is_not_json_raises_value_error() -> None:
    """A non-JSON body raises ValueError, which fails the page like any callback error."""
    with pytest.raises(ValueError):
        response(b"<html></html>").json()


def test_xml_bodies_are_selected_as_xml() -> None:
    """An XML body (not parsed for links) gets an XML selector."""
    r = response(b"<feed><entry><id>7</id></entry></feed>", "application/atom+xml")
    assert r.xpath("//entry/id/text()").get() == "7"


def test_follow_resolves_against_the_base_href_as_the_crawler_does() -> None:
    """follow() drops the fragment and honours <base href>, as links() does."""
    r = response(PAGE)
    request = r.follow("next.html#top", callback="parse_item", meta={"k": 1})
    assert request.url == "http://example.com/base/next.html"
    assert (request.callback, request.meta) == ("parse_item", {"k": 1})
    assert request.url in r.links()


def test_follow_takes_a_selector_of_an_anchor() -> None:
    """An <a> element's selector is followed to its href."""
    r = response(PAGE)
    assert r.follow(r.css("a")[2]).url == "http://example.com/abs"


def test_follow_refuses_what_cannot_be_crawled_and_elements_without_href() -> None:
    """A mailto: link and an <img> are refused with a one-line ValueError."""
    r = response(PAGE)
    with pytest.raises(ValueError, match="nothing to crawl"):
        r.follow("mailto:x@example.com")
    with pytest.raises(ValueError, match="got <img>"):
        r.follow(r.css("img")[0])


def test_follow_all_with_css_skips_what_cannot_be_crawled() -> None:
    """follow_all(css=...) gives one request per crawlable link, in page order."""
    r = response(PAGE)
    urls = [q.url for q in r.follow_all(css="a", priority=3)]
    assert urls == ["http://example.com/base/next.html", "http://example.com/abs"]
    assert {q.priority for q in r.follow_all(xpath="//a/@href", priority=3)} == {3}


def test_follow_all_takes_exactly_one_source() -> None:
    """Giving both urls and css is a clear error."""
    with pytest.raises(ValueError, match="exactly one"):
        response(PAGE).follow_all(["/x"], css="a")


def test_a_callback_given_as_a_bound_method_travels_as_its_name() -> None:
    """callback=self.parse_item, as Scrapy users write it, names the method; a plain
    function cannot be named and is refused."""
    assert hashcrawl.Request("http://a.example/", callback=Shop().parse_item).callback == (
        "parse_item"
    )
    with pytest.raises(ConfigError, match="spider method or its name"):
        hashcrawl.Request("http://a.example/", callback=len)


class Shop(hashcrawl.Spider):
    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield from response.follow_all(css="ul a", callback=self.parse_item)

    def parse_item(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield {"url": response.url, "h1": response.css("title::text").get()}


def test_a_spider_extracts_with_css_and_follows_with_follow_all(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """A crawl whose callbacks use follow_all and css() writes one item per linked page."""
    a = host(0)
    site = make_site(
        {
            (a, "/"): page("root", href(a, "/p1"), href(a, "/p2")),
            (a, "/p1"): page("first"),
            (a, "/p2"): Resource(200, HTML, "<html><title>second</title></html>"),
        }
    )
    settings = fast_settings(spider=Shop())
    crawled = trio.run(crawl_site, shared_redis.url, tmp_path, site, [settings])
    assert sorted(i["h1"] for i in crawled.crew.items()) == ["first", "second"]
    assert request_counts(crawled.requests)[crawled.site.url(a, "/p1")] == 1
