"""The contract of docs/tutorial.md's "Coming from Scrapy": spiders written against
Scrapy's documented API run under hashcrawl with the port the tutorial describes and
nothing else (``testing.scrapy_docs.port``), and give the items Scrapy gives.

Each spider below is written in the shape of one of Scrapy's documentation at
scrapy/scrapy@11079cb1c85b9e75a39a7269943c69d1a975d485 (``testing.scrapy_docs.DOCUMENTED``
names the file and line of each): the same calls, in the same forms (a callback by
position, ``async def start()``, ``response.meta["link_text"]``...), against the same
sites. Scrapy's own text is not copied here; ``scripts/scrapy_parity --docs DIR`` runs
the documented spiders themselves, read from a Scrapy checkout, under Scrapy and under a
hashcrawl fleet with a stop and a kill. The expected items are derived from the site's
data (``testing.quotesite``), so this suite needs no Scrapy.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio

import hashcrawl
from hashcrawl._core._outcome import failure_wait
from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, Scenarios, crawl_in_process, fast_settings, new_crawl_name
from testing.quotesite import AUTHORS, PAGES, QuoteSite
from testing.scrapy_docs import DOCUMENTED, expected, load, port

SPIDERS = {
    "tutorial_quotes": """
import scrapy


class Pages(scrapy.Spider):
    name = "pages"
    start_urls = ["https://quotes.toscrape.com/page/1/", "https://quotes.toscrape.com/page/2/"]

    def parse(self, response):
        for block in response.css("div.quote"):
            yield {
                "text": block.css("span.text::text").get(),
                "author": block.css("small.author::text").get(),
                "tags": block.css("div.tags a.tag::text").getall(),
            }
""",
    "tutorial_next_page": """
import scrapy


class Paging(scrapy.Spider):
    name = "paging"
    start_urls = ["https://quotes.toscrape.com/page/1/"]

    def parse(self, response):
        for block in response.css("div.quote"):
            yield {
                "text": block.css("span.text::text").get(),
                "author": block.css("small.author::text").get(),
                "tags": block.css("div.tags a.tag::text").getall(),
            }
        href = response.css("li.next a::attr(href)").get()
        if href is not None:
            yield scrapy.Request(response.urljoin(href), callback=self.parse)
""",
    "tutorial_follow": """
import scrapy


class Following(scrapy.Spider):
    name = "following"
    start_urls = ["https://quotes.toscrape.com/page/1/"]

    def parse(self, response):
        for block in response.css("div.quote"):
            yield {
                "text": block.css("span.text::text").get(),
                "author": block.css("span small::text").get(),
                "tags": block.css("div.tags a.tag::text").getall(),
            }
        for link in response.css("li.next a"):
            yield response.follow(link, self.parse)
""",
    "tutorial_authors": """
import scrapy


class Writers(scrapy.Spider):
    name = "writers"
    start_urls = ["https://quotes.toscrape.com/"]

    def parse(self, response):
        yield from response.follow_all(response.css(".author + a"), self.parse_writer)
        yield from response.follow_all(css="li.next a", callback=self.parse)

    def parse_writer(self, response):
        def first(query):
            return response.css(query).get(default="").strip()

        yield {
            "name": first("h3.author-title::text"),
            "birthdate": first(".author-born-date::text"),
            "bio": first(".author-description::text"),
        }
""",
    "tutorial_start": """
import scrapy


class ByTag(scrapy.Spider):
    name = "by_tag"

    async def start(self):
        tag = getattr(self, "tag", None)
        yield scrapy.Request(
            "https://quotes.toscrape.com/" + (f"tag/{tag}" if tag else ""), self.parse
        )

    def parse(self, response):
        for block in response.css("div.quote"):
            yield {
                "text": block.css("span.text::text").get(),
                "author": block.css("small.author::text").get(),
            }
        href = response.css("li.next a::attr(href)").get()
        if href is not None:
            yield response.follow(href, self.parse)
""",
    "spiders_h3": """
import scrapy


class Headings(scrapy.Spider):
    name = "headings"
    allowed_domains = ["example.com"]
    start_urls = ["http://www.example.com/1.html", "http://www.example.com/3.html"]

    def parse(self, response):
        for heading in response.xpath("//h3").getall():
            yield {"title": heading}
        for href in response.xpath("//a/@href").getall():
            yield scrapy.Request(response.urljoin(href), self.parse)
""",
    "spiders_crawl": """
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class Items(CrawlSpider):
    name = "items"
    allowed_domains = ["example.com"]
    start_urls = ["http://www.example.com/category.php?id=1"]
    rules = (
        Rule(LinkExtractor(allow=(r"category\\.php",), deny=(r"subsection\\.php",))),
        Rule(LinkExtractor(allow=(r"item\\.php",)), callback="parse_item"),
    )

    def parse_item(self, response):
        item = {
            "id": response.xpath('//td[@id="item_id"]/text()').re(r"ID: (\\d+)"),
            "name": response.xpath('//td[@id="item_name"]/text()').get(),
            "description": response.xpath('//td[@id="item_description"]/text()').get(),
            "link_text": response.meta["link_text"],
        }
        more = response.xpath('//td[@id="additional_data"]/@href').get()
        return response.follow(more, self.parse_more, cb_kwargs=dict(item=item))

    def parse_more(self, response, item):
        item["additional_data"] = response.xpath('//p[@id="additional_data"]/text()').get()
        return item
""",
}


def as_set(items: list[dict[str, Any]]) -> set[str]:
    return {json.dumps(item, sort_keys=True) for item in items}


@pytest.fixture(scope="module")
def crawled(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    """Each spider, ported, crawled by one worker (side by side): its items."""

    def scenario(name: str) -> Callable[[], Awaitable[list[dict[str, Any]]]]:
        async def crawl() -> list[dict[str, Any]]:
            directory = tmp_path_factory.mktemp(name)
            with QuoteSite() as site:
                spider = load(port(SPIDERS[name], site), directory, name)
                crew = Crew(shared_redis.url, new_crawl_name(), directory)
                await crawl_in_process(crew, [fast_settings(spider=spider)], [])
            return crew.items()

        return crawl

    return Scenarios({name: scenario(name) for name in SPIDERS}).run()


def test_every_documented_spider_has_its_stand_in_here() -> None:
    """The suite covers each spider the docs run names, and no other."""
    assert set(SPIDERS) == set(DOCUMENTED)


def test_the_port_changes_only_the_imports_and_the_sites() -> None:
    """``import scrapy`` and ``from scrapy.x import`` become hashcrawl's; the
    documentation's sites become the loopback site; every other line is kept."""
    with QuoteSite() as site:
        for source in SPIDERS.values():
            ported = port(source, site).splitlines()
            original = source.splitlines()
            changed = [(a, b) for a, b in zip(original, ported, strict=True) if a != b]
            for was, now in changed:
                site_moved = site.root in now or f'"{site.host}"' in now
                assert ("scrapy" in was and "hashcrawl" in now) or site_moved, was


@pytest.mark.parametrize("name", sorted(SPIDERS))
def test_a_ported_spider_gives_scrapys_items(crawled: Scenarios, name: str) -> None:
    """The items, as a set and each once, are those Scrapy gives on the same site."""
    items = crawled[name]
    assert as_set(items) == as_set(expected(name))
    assert len(items) == len(as_set(items))


# -- a callback that raises is not the server's fault ---------------------------------------

ATTEMPTS = 3


class Raising(hashcrawl.Spider):
    """Quotes pages parse; every author page's callback raises."""

    start_urls: ClassVar[list[str]] = []

    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield from response.follow_all(response.css(".author + a"), self.parse_author)
        yield from response.follow_all(css="li.next a", callback=self.parse)

    def parse_author(self, response: hashcrawl.Response) -> Any:
        return {"name": response.meta["no such key"]}


def test_a_raising_callback_retries_and_dead_letters_its_pages_and_the_host_keeps_its_pace(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """Each author page is fetched ATTEMPTS times and dead-lettered naming
    ``Raising.parse_author`` and its error; every listing page once. The host was never
    backed off: the median gap the server saw after a failed parse is under the 1 s the
    first backoff would have forced (before, 1, 2, 4 s: every such gap at least that)."""
    crawl = new_crawl_name()
    with QuoteSite() as site:
        spider = type("Raising", (Raising,), {"start_urls": [site.root]})
        crew = Crew(shared_redis.url, crawl, tmp_path)
        settings = fast_settings(spider=spider, delay=0.05, max_attempts=ATTEMPTS)
        trio.run(crawl_in_process, crew, [settings], [])
        seen, root = [s for s in site.seen() if s.path != "/robots.txt"], site.root
    counts = Counter(s.path for s in seen)
    authors = {f"/author/{a.slug}" for a in AUTHORS}
    assert {p: n for p, n in counts.items() if p in authors} == dict.fromkeys(authors, ATTEMPTS)
    assert {p: n for p, n in counts.items() if p not in authors} == {
        "/": 1,
        **{f"/page/{n}/": 1 for n in range(2, PAGES + 1)},
    }
    with hashcrawl.Queue(shared_redis.url, crawl) as queue:
        dead = queue.dead()
    error = "the parse callback Raising.parse_author raised KeyError: 'no such key'"
    assert dead == {root + path.lstrip("/"): error for path in authors}
    after_failure = [
        later.at - failed.at for failed, later in pairwise(seen) if failed.path in authors
    ]
    assert statistics.median(after_failure) < failure_wait(0)
