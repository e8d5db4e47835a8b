"""The three Scrapy spiders of docs/examples/from_scrapy, ported by changing imports only,
crawl the loopback site with two workers, the one fetching it stopped mid-crawl; judged
from the site's own request log. (scripts/scrapy_parity compares them with Scrapy's.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis as redis_py
import trio

import hashcrawl
from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, crawl_in_process, fast_settings, new_crawl_name
from testing.formsite import Seen
from testing.ports import PORTS, as_set, crawl_with_a_stop, original_of, port_of
from testing.scrapysite import (
    BOOKS,
    CATEGORIES,
    GONE_BOOK,
    LISTING_PAGES,
    MEMBER_PAGES,
    MOVED_BOOK,
    PER_CATEGORY_PAGE,
    PER_PAGE,
    SIDEBAR_ONLY,
    ScrapySite,
    price,
)

STOP_AFTER = 6  # requests the site answers before the worker fetching it is stopped


class Ported:
    def __init__(self, crew: Crew, seen: list[Seen], root: str, reasons: list[str]) -> None:
        self.crew, self.seen, self.root, self.reasons = crew, seen, root, reasons
        self.items = crew.items()


def recording_closed(spider: type[hashcrawl.Spider], reasons: list[str]) -> type[hashcrawl.Spider]:
    """``spider`` with a closed() that records its reason."""

    def closed(self: hashcrawl.Spider, reason: str) -> None:
        reasons.append(reason)

    return type(spider.__name__, (spider,), {"closed": closed})


@pytest.fixture(scope="module")
def ported(
    shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Ported]:
    """Each port's crawl, two workers, one stopped once the site answered a few requests."""
    crawls = {}
    for name in PORTS:
        reasons: list[str] = []
        with ScrapySite() as site:
            directory = tmp_path_factory.mktemp(name)
            spider = recording_closed(port_of(name, site), reasons)
            crew = trio.run(
                crawl_with_a_stop, shared_redis.url, directory, spider, site, STOP_AFTER
            )
            crawls[name] = Ported(crew, site.seen(), site.root, reasons)
    return crawls


def pages(seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if s.path != "/robots.txt"]


@pytest.mark.parametrize("name", PORTS)
def test_a_port_changes_only_the_imports_of_the_scrapy_spider(name: str) -> None:
    """Every line but the imports is the Scrapy original's, as the tutorial promises."""
    port = (original_of(name).parent.parent / f"{name}.py").read_text().splitlines()
    original = original_of(name).read_text().splitlines()

    def body(lines: list[str]) -> list[str]:
        return [line for line in lines if not re.match(r"(import|from) (scrapy|hashcrawl)\b", line)]

    assert body(port) == body(original)
    assert port != original


@pytest.mark.parametrize("name", PORTS)
def test_both_workers_fetched_and_one_was_stopped_mid_crawl(
    ported: dict[str, Ported], name: str
) -> None:
    """The stop came mid-crawl: the stopped worker and the other each fetched pages."""
    workers = ported[name].crew.workers
    assert sorted(w.stop_requested for w in workers) == [False, True]
    assert all(w.tally.fetched > 0 for w in workers)


@pytest.mark.parametrize("name", PORTS)
def test_no_page_was_fetched_twice(ported: dict[str, Ported], name: str) -> None:
    """The handover lost and repeated nothing: each page was requested once."""
    requested = [(s.method, s.path) for s in pages(ported[name].seen)]
    assert len(requested) == len(set(requested))
    assert len(ported[name].items) == len(as_set(ported[name].items))


def test_the_listing_gives_every_book_with_its_page_through_cb_kwargs(
    ported: dict[str, Ported],
) -> None:
    """Each book's item has the listing page and price its listing passed as cb_kwargs;
    the moved book is reached through its 301, the gone one goes to the errback."""
    crawl = ported["books"]
    expected = [
        {
            "title": f"Book {n}",
            "upc": f"upc-{n:04d}",
            "price": price(n),
            "listed": price(n),
            "page": (n - 1) // PER_PAGE + 1,
        }
        for n in range(1, BOOKS + 1)
    ]
    gone = {"gone": f"{crawl.root}books/item/{GONE_BOOK}", "status": 404}
    assert as_set(crawl.items) == as_set([*expected, gone])
    moved = [(s.path, s.status) for s in crawl.seen if s.path.endswith(f"/{MOVED_BOOK}")]
    assert moved == [(f"/books/old/{MOVED_BOOK}", 301), (f"/books/item/{MOVED_BOOK}", 200)]
    assert len([s for s in crawl.seen if "/page/" in s.path]) == LISTING_PAGES


def test_the_login_302_reaches_no_callback_and_every_later_request_has_the_session(
    ported: dict[str, Ported],
) -> None:
    """The form's CSRF token was posted (with the submit button, as a browser and Scrapy
    send it); the 302 reached no callback (one user item, from
    /account); every request after the POST carried the session cookie and was let in."""
    crawl = ported["login"]
    seen = pages(crawl.seen)
    [form] = [s for s in seen if s.path == "/signin" and s.method == "GET"]
    [post] = [s for s in seen if s.method == "POST"]
    assert post.status == 302
    sent = r"csrf=[0-9a-f]{16}&go=Sign\+in&user=ann&password=hunter2"
    assert re.fullmatch(sent, post.body.decode())
    later = seen[seen.index(post) + 1 :]
    assert [s.path for s in later if s.path == "/account"] == ["/account"]
    assert len(later) == 1 + MEMBER_PAGES
    assert all("session=" in s.cookie and s.status == 200 for s in later)
    users = [i for i in crawl.items if "user" in i]
    assert users == [{"user": "ann", "status": 200}]
    assert sorted(i["member"] for i in crawl.items if "member" in i) == sorted(
        f"Member page {n}" for n in range(1, MEMBER_PAGES + 1)
    )
    assert form.status == 200


def test_the_catalogue_rules_follow_allowed_links_and_never_request_denied_ones(
    ported: dict[str, Ported],
) -> None:
    """Products of every category page but the denied third ones; no cart, review, about
    or sidebar-only product was requested."""
    crawl = ported["catalogue"]
    reached = set()
    for products in CATEGORIES.values():
        reached |= set(list(products)[: 2 * PER_CATEGORY_PAGE])  # pages 1 and 2
    names = {i["name"] for i in crawl.items}
    assert names == {f"Product {n}" for n in reached}
    paths = [s.path for s in pages(crawl.seen)]
    assert not [p for p in paths if re.search(r"/cart|/reviews|/about|/page/3", p)]
    assert not [p for p in paths if p in {f"/shop/product/{n}" for n in SIDEBAR_ONLY}]


# -- hostile entries through Redis ----------------------------------------------------------


class Catalogue(hashcrawl.CrawlSpider):
    rules = (hashcrawl.Rule(hashcrawl.LinkExtractor(allow="/shop/category/")),)

    def product(self, response: hashcrawl.Response, n: int = 0) -> Any:
        return {"n": n}

    def gone(self, failure: hashcrawl.Failure) -> None:
        pass


def test_entries_naming_what_the_spider_lacks_are_dead_lettered_with_the_reason(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """An unknown errback, cb_kwargs that are not a JSON object, a rule index out of range:
    each is dead-lettered with its reason, never fetched, and the crawl goes on."""
    crawl = new_crawl_name()
    with ScrapySite() as site:
        bad = {
            "shop/product/1": {"c": "product", "e": "nowhere"},
            "shop/product/2": {"c": "product", "k": "{not json"},
            "shop/product/3": {"R": 5},
            "shop/product/4": {"c": "product", "k": [1, 2]},
        }
        raw = redis_py.Redis.from_url(shared_redis.url)
        for path, fields in bad.items():
            entry = json.dumps({"u": site.root + path, **fields})
            raw.xadd(f"hc:{{{crawl}}}:inbox", {"r": entry})
        good = json.dumps({"u": site.root + "shop/product/5", "c": "product", "k": {"n": 5}})
        raw.xadd(f"hc:{{{crawl}}}:inbox", {"r": good})
        raw.close()
        crew = Crew(shared_redis.url, crawl, tmp_path)
        trio.run(crawl_in_process, crew, [fast_settings(spider=Catalogue)], [site.root + "shop/"])
        seen, root = site.seen(), site.root
    with hashcrawl.Queue(shared_redis.url, crawl) as queue:
        dead = {url.removeprefix(root): why for url, why in queue.dead().items()}
    assert dead == {
        "shop/product/1": "spider Catalogue has no errback 'nowhere'",
        "shop/product/2": 'cb_kwargs are not a JSON object of at most 16384 bytes: "{not json"',
        "shop/product/3": "spider Catalogue has no rule 5 (it has 1)",
        "shop/product/4": "cb_kwargs are not a JSON object of at most 16384 bytes: [1, 2]",
    }
    assert not [s for s in seen if s.path in {f"/{p}" for p in bad}]
    assert {"n": 5} in crew.items()
    assert len([s for s in seen if s.path.startswith("/shop/category/")]) > 0


# -- start_requests, pipelines and closed, in a crawl ---------------------------------------

LIFE: list[str] = []


class Counting:
    def open_spider(self, spider: hashcrawl.Spider) -> None:
        LIFE.append("open_spider")

    def process_item(self, item: dict[str, Any], spider: hashcrawl.Spider) -> dict[str, Any]:
        if item["n"] % 2:
            raise hashcrawl.DropItem("odd")
        return {**item, "kept": True}

    def close_spider(self, spider: hashcrawl.Spider) -> None:
        LIFE.append("close_spider")


class Members(hashcrawl.Spider):
    custom_settings: ClassVar[dict[str, Any]] = {"ITEM_PIPELINES": {Counting: 1}}
    root = ""

    def start_requests(self) -> Iterator[hashcrawl.Request]:
        for n in range(1, 5):
            url = f"{self.root}books/item/{n}"
            yield hashcrawl.Request(url, callback=self.book, cb_kwargs={"n": n})

    def book(self, response: hashcrawl.Response, n: int) -> Iterator[Any]:
        yield {"n": n, "title": response.css("h1::text").get()}

    def closed(self, reason: str) -> None:
        LIFE.append(f"closed {reason}")


def test_start_requests_pipelines_and_closed_in_a_crawl(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """start_requests' requests carry their callback and cb_kwargs; odd items are dropped by
    the pipeline, the rest changed by it; open_spider, close_spider, closed("finished")."""
    LIFE.clear()
    crew = Crew(shared_redis.url, new_crawl_name(), tmp_path)
    with ScrapySite() as site:
        spider = type("Members", (Members,), {"root": site.root})
        trio.run(crawl_in_process, crew, [fast_settings(spider=spider)], [])
        seen = site.seen()
    assert sorted(s.path for s in pages(seen)) == [f"/books/item/{n}" for n in range(1, 5)]
    assert sorted(crew.items(), key=lambda i: i["n"]) == [
        {"n": 2, "title": "Book 2", "kept": True},
        {"n": 4, "title": "Book 4", "kept": True},
    ]
    assert LIFE == ["open_spider", "close_spider", "closed finished"]


@pytest.mark.parametrize("name", PORTS)
def test_a_stopped_worker_closes_its_spider_with_shutdown(
    ported: dict[str, Ported], name: str
) -> None:
    """closed() hears why: the stopped worker's spider "shutdown", the other "finished"."""
    assert sorted(ported[name].reasons) == ["finished", "shutdown"]
