"""Scrapy's documented spider API as its authors call it: ``follow``/``follow_all`` with a
positional callback, ``async def start()``, ``response.meta`` with what Scrapy's
middlewares put there, depth as Scrapy counts it, and errors naming the callback."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
import trio

from hashcrawl import CrawlSpider, Link, LinkExtractor, Request, Response, Rule, Spider
from hashcrawl._cli._workers import _starts_itself
from hashcrawl._core._entry import MAX_ENTRY_BYTES, Entry
from hashcrawl._core._respond import REDIRECT_URLS_BYTES, Facts, Reader, redirect_of
from hashcrawl._exceptions import ConfigError
from hashcrawl._spiders._spider import MAX_LINK_TEXT, Calls
from tests.test_scrapy_names import SITE, handle, handler_of, held, response

QUOTES = """<html><body>
<div class="quote"><span class="text">One</span>
  <span>by <small class="author">Ann</small> <a href="/author/Ann">(about)</a></span></div>
<ul class="pager"><li class="next"><a href="/page/2/">Next</a></li></ul>
</body></html>"""


class Authors(Spider):
    """The shape of Scrapy's tutorial AuthorSpider: callbacks given by position."""

    def parse(self, response: Response) -> Iterator[Request]:
        yield from response.follow_all(response.css(".author + a"), self.parse_author)
        yield from response.follow_all(css="li.next a", callback=self.parse)
        yield response.follow("/page/2/", self.parse, dont_filter=True)

    def parse_author(self, response: Response) -> Any:
        return {"name": response.css("h3::text").get()}


def test_follow_and_follow_all_take_the_callback_by_position_as_scrapys_tutorial() -> None:
    """``follow_all(links, self.parse_author)`` and ``follow(url, self.parse)`` give
    requests naming those callbacks, other keywords passed on."""
    outcome = handle(handler_of(Authors()), Entry(url=SITE + "page/1/"), 200, QUOTES)
    assert [(e.url, e.callback, e.dont_filter) for e in outcome.follows] == [
        (SITE + "author/Ann", "parse_author", False),
        (SITE + "page/2/", "parse", False),
        (SITE + "page/2/", "parse", True),
    ]


def test_follow_takes_a_link_extractors_link() -> None:
    """A Link (what a LinkExtractor gives) is followed to its URL, as in Scrapy."""
    page = response(Entry(url=SITE + "c/"), 200, QUOTES)
    [link] = LinkExtractor(allow="/author/").extract_links(page)
    assert page.follow(link, "parse_author").url == SITE + "author/Ann"
    assert page.follow(Link(url=SITE + "x", text="x")).url == SITE + "x"


def test_response_meta_is_a_dict_with_the_depth_even_when_the_request_had_none() -> None:
    """Scrapy's ``response.meta`` is ``{}`` at least: here it holds the depth, the
    fetch's latency when timed, and the same dict on every read."""
    page = response(Entry(url=SITE, depth=3), 200)
    assert page.meta == {"depth": 3}
    page.meta["seen"] = True
    assert page.meta["seen"] is True
    given = Request(SITE, meta={"k": 1}, depth=2)
    timed = Response(SITE, 200, {}, b"", given, latency=0.25)
    assert timed.meta == {"k": 1, "depth": 2, "download_latency": 0.25}
    assert given.meta == {"k": 1}  # the request's own meta is left as it was


def test_a_meta_that_is_not_a_dict_stays_on_the_request_only() -> None:
    """hashcrawl takes any JSON as meta; response.meta is a dict all the same."""
    page = Response(SITE, 200, {}, b"", Request(SITE, meta=["a"]))
    assert (page.meta, page.request.meta) == ({"depth": 0}, ["a"])


class Catalogue(CrawlSpider):
    rules = (Rule(LinkExtractor(restrict_css="div.quote"), callback="parse_item"),)

    def parse_item(self, response: Response) -> Any:
        return {"link_text": response.meta["link_text"], "depth": response.meta["depth"]}


def test_a_rules_request_carries_its_link_text_to_the_callbacks_meta() -> None:
    """CrawlSpider puts the link's text in meta, as Scrapy's rules do."""
    handler = handler_of(Catalogue())
    start = handle(handler, Entry(url=SITE), 200, QUOTES)
    [follow] = start.follows
    assert follow.meta == {"link_text": "(about)"}
    assert handle(handler, follow, 200, QUOTES).items == [{"link_text": "(about)", "depth": 1}]


def test_a_hostile_anchor_text_is_cut_before_it_travels() -> None:
    """A megabyte of link text reaches meta as its first MAX_LINK_TEXT characters, so
    the request's entry stays within what a reader takes."""
    page = f'<div class="quote"><a href="/x">{"w " * 500_000}</a></div>'
    [follow] = handle(handler_of(Catalogue()), Entry(url=SITE), 200, page).follows
    assert follow.meta == {"link_text": " ".join(["w"] * 500_000)[:MAX_LINK_TEXT]}
    assert len(follow.encode()) < MAX_ENTRY_BYTES


class Broken(CrawlSpider):
    rules = (Rule(LinkExtractor(), callback="parse_item"),)

    def parse_item(self, response: Response) -> Any:
        return response.meta["missing"]


def test_the_error_of_a_rule_callback_names_that_callback_not_parse() -> None:
    """A rule's callback that raises is named in the page's error (not ``parse``)."""
    outcome = handle(handler_of(Broken()), Entry(url=SITE + "p/1", rule=0), 200, QUOTES)
    assert outcome.error == "the parse callback Broken.parse_item raised KeyError: 'missing'"


def facts(entry: Entry, reader: Reader, status: int = 301) -> Facts:
    answer = {"location": "/new"}
    return Facts(status, entry.url, answer, held(entry), 0.0, 3, reader)


def test_a_spiders_redirect_keeps_its_depth_and_records_the_chain_in_meta() -> None:
    """Scrapy's DEPTH_LIMIT counts links, not redirects; the chain is in redirect_urls."""
    first = Entry(url=SITE + "a", depth=2, meta={"k": 1})
    target = redirect_of(facts(first, Reader.SPIDER))
    assert target is not None
    assert (target.depth, target.hops) == (2, 1)
    assert target.meta == {"k": 1, "redirect_urls": [SITE + "a"], "redirect_reasons": [301]}
    again = redirect_of(facts(target, Reader.SPIDER, 302))
    assert again is not None and again.depth == 2
    assert again.meta["redirect_urls"] == [SITE + "a", SITE + "new"]
    assert again.meta["redirect_reasons"] == [301, 302]


def test_the_default_crawls_redirect_still_costs_a_level_and_keeps_meta() -> None:
    """Without a spider a redirect is a level deeper (--max-depth bounds a chain)."""
    target = redirect_of(facts(Entry(url=SITE + "a", depth=2, meta="m"), Reader.DEFAULT))
    assert target is not None and (target.depth, target.meta) == (3, "m")


@pytest.mark.parametrize(
    "meta",
    [
        {"redirect_urls": "not a list", "redirect_reasons": {"x": 1}},
        {"redirect_urls": [1, None, "x" * 9000], "redirect_reasons": [None]},
        {"redirect_urls": ["u" * 8000] * 40, "redirect_reasons": [301] * 40},
    ],
)
def test_a_hostile_redirect_chain_in_meta_is_mended_and_bounded(meta: dict[str, Any]) -> None:
    """Whatever a queue entry's meta held, the chain stays lists of URLs and statuses
    within REDIRECT_URLS_BYTES (but for the last hop), and the next hop is recorded."""
    target = redirect_of(facts(Entry(url=SITE + "a", meta=meta), Reader.SPIDER))
    assert target is not None
    urls, reasons = target.meta["redirect_urls"], target.meta["redirect_reasons"]
    assert urls[-1] == SITE + "a" and reasons[-1] == 301
    assert all(isinstance(u, str) for u in urls) and len(reasons) <= len(urls)
    assert sum(len(u) for u in urls[:-1]) <= REDIRECT_URLS_BYTES


class Tagged(Spider):
    """The shape of Scrapy 2.13's tutorial spider: the first requests from start()."""

    tag = "humor"

    async def start(self) -> AsyncGenerator[Request, None]:
        await trio.lowlevel.checkpoint()
        yield Request(SITE + "tag/" + self.tag, self.parse)


def test_an_async_start_gives_the_first_requests() -> None:
    """``async def start()`` is honoured, and counts as the spider starting itself."""
    [request] = trio.run(Calls(Tagged()).first_requests)
    assert (request.url, request.callback) == (SITE + "tag/humor", "parse")
    assert _starts_itself(Tagged) and not _starts_itself(Spider)


def test_start_requests_still_give_the_first_requests_without_a_start() -> None:
    """A spider of Scrapy before 2.13 (start_requests only) starts as it did."""

    class Old(Spider):
        def start_requests(self) -> Iterator[str]:
            yield SITE + "old"

    assert trio.run(Calls(Old()).first_requests) == [SITE + "old"]


def test_an_item_from_start_is_refused_with_one_line() -> None:
    """hashcrawl queues requests only at the start: an item there is named and refused."""

    class Items(Spider):
        async def start(self) -> AsyncGenerator[Any, None]:
            yield {"foo": "bar"}

    with pytest.raises(ConfigError, match=r"Items.start\(\) gave \{'foo': 'bar'\}: "):
        trio.run(Calls(Items()).first_requests)


def test_held_pages_of_a_redirect_keep_the_callback() -> None:
    """A followed redirect's target still names the request's callback."""
    entry = Entry(url=SITE + "a", callback="parse_author")
    target = redirect_of(facts(entry, Reader.SPIDER))
    assert target is not None and target.callback == "parse_author"
