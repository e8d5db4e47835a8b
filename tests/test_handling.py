"""A parse callback that raises fails only its page, and what it produced first is kept once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import hashcrawl
from hashcrawl._run import _callbacks
from hashcrawl._store._server import RedisServer
from testing.fleet import (
    Crawled,
    Scenarios,
    crawl_site,
    fast_settings,
    host,
    request_counts,
    root_and_two_pages,
    status_of,
)

ROOT_ERROR = "RuntimeError: a bug after the root's links"


def raising_generator(response: hashcrawl.Response) -> Iterator[Any]:
    yield {"url": response.url, "title": response.title()}
    if response.title() == "root":
        yield from response.links()
        raise RuntimeError("a bug after the root's links")


async def raising_async_generator(response: hashcrawl.Response) -> AsyncIterator[Any]:
    yield {"url": response.url, "title": response.title()}
    if response.title() == "root":
        for url in response.links():
            yield url
        raise RuntimeError("a bug after the root's links")


def yielding_a_number(response: hashcrawl.Response) -> Iterator[Any]:
    yield {"url": response.url, "title": response.title()}
    if response.title() == "root":
        yield from response.links()
        yield 42  # neither an item nor something to follow


def naming_an_unknown_callback(response: hashcrawl.Response) -> Iterator[Any]:
    yield {"url": response.url, "title": response.title()}
    if response.title() == "root":
        yield from response.links()
        yield hashcrawl.Request("/elsewhere", callback="parse_nothing")  # no spider has it


CALLBACKS: dict[str, Callable[[hashcrawl.Response], Any]] = {
    "generator": raising_generator,
    "async generator": raising_async_generator,
    "a bad thing": yielding_a_number,
    "an unknown callback": naming_an_unknown_callback,
}
RAISED = {
    "generator": ROOT_ERROR,
    "async generator": ROOT_ERROR,
    "a bad thing": "TypeError: an item must be a dict or an attrs instance, got int",
    "an unknown callback": "ConfigError: Request names an unknown callback 'parse_nothing'",
}
# A dead letter names the callback that failed: the fault is the spider's, not the site's.
ERRORS = {
    kind: f"the parse callback {CALLBACKS[kind].__qualname__} raised {error}"
    for kind, error in RAISED.items()
}
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def failed_roots(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    """For each kind of failing callback, a crawl of its own, all run side by side."""
    url, directory = shared_redis.url, tmp_path_factory.mktemp("failed-root")

    def crawl(parse: Callable[[hashcrawl.Response], Any]) -> Callable[[], Awaitable[Crawled]]:
        settings = fast_settings(parse=parse, max_attempts=MAX_ATTEMPTS)
        return lambda: crawl_site(url, directory, root_and_two_pages(), [settings])

    return Scenarios({kind: crawl(parse) for kind, parse in CALLBACKS.items()}).run()


@pytest.fixture(params=sorted(CALLBACKS))
def failed_root(request: pytest.FixtureRequest, failed_roots: Scenarios) -> tuple[Crawled, str]:
    """A crawl whose callback fails on the root after its item and links; with its kind."""
    return failed_roots[request.param], request.param


def test_a_failing_callback_retries_its_page_then_dead_letters_it(
    failed_root: tuple[Crawled, str],
) -> None:
    """The root is requested max_attempts times and ends in the dead letters with the error."""
    crawled, kind = failed_root
    root = crawled.site.root
    assert request_counts(crawled.requests)[root] == MAX_ATTEMPTS
    with hashcrawl.Queue(crawled.crew.redis_url, crawled.crew.crawl) as queue:
        dead = queue.dead()
    assert dead == {root: ERRORS[kind]}


def test_items_and_links_before_the_exception_are_kept_once(
    failed_root: tuple[Crawled, str],
) -> None:
    """The root's item is written once (not once per try) and its links are crawled once."""
    crawled, _ = failed_root
    titles = sorted(item["title"] for item in crawled.crew.items())
    assert titles == ["a", "b", "root"]
    counts = request_counts(crawled.requests)
    assert counts[crawled.site.url(host(0), "/a")] == 1
    assert counts[crawled.site.url(host(0), "/b")] == 1


def test_a_failing_callback_neither_ends_the_worker_nor_counts_as_a_bad_entry(
    failed_root: tuple[Crawled, str],
) -> None:
    """The worker ran until the crawl was idle; queue_bad stays 0 and the crawl ended."""
    crawled, _ = failed_root
    status = status_of(crawled.crew.redis_url, crawled.crew.crawl)
    assert (status["queue_bad"], status["dead"], status["ended"]) == (0, 1, True)
    assert crawled.crew.workers[0].tally.fetched == MAX_ATTEMPTS + 2


def test_a_callback_that_succeeds_on_retry_writes_its_items_once(
    redis_url: str, tmp_path: Path
) -> None:
    """A callback that fails once after yielding, then succeeds, leaves one item per page."""
    tries: list[str] = []

    def flaky(response: hashcrawl.Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.title()}
        yield from response.links()
        tries.append(response.url)
        if tries.count(response.url) == 1:
            raise ConnectionError("the database blinked")

    settings = fast_settings(parse=flaky, max_attempts=MAX_ATTEMPTS)
    crawled = trio.run(crawl_site, redis_url, tmp_path, root_and_two_pages(), [settings])
    assert sorted(item["title"] for item in crawled.crew.items()) == ["a", "b", "root"]
    assert max(request_counts(crawled.requests).values()) == 2
    assert status_of(redis_url, crawled.crew.crawl)["dead"] == 0


async def test_a_redirect_within_the_limit_is_followed_and_one_past_it_dead_lettered() -> None:
    """A 301 with hops to spare gives its target as a follow; at the limit it is dead."""
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._core._outcome import Kind
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    def moved(hops: int) -> Held:
        return Held("1-0", Entry(url="http://a.test/old", hops=hops, max_redirects=2), "a.test")

    response = Response(
        "http://a.test/old", 301, {"location": "/new"}, b"", Request("http://a.test/old")
    )
    origin = Origin("w1", None, False)
    followed = await Handler().handle(moved(1), response, origin)
    assert followed.kind is Kind.DONE
    assert [e.url for e in followed.follows] == ["http://a.test/new"]
    dead = await Handler().handle(moved(2), response, origin)
    assert dead.kind is Kind.DEAD and "more than 2 redirects" in dead.error


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308, 399])
async def test_every_3xx_with_a_location_is_followed_as_wget_follows_it(status: int) -> None:
    """Any 3xx with a Location is a redirect, 300 Multiple Choices included (its Location
    is the server's preferred choice, and wget follows it); a 2xx or 4xx with one is not."""
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    async def answer(code: int) -> list[str]:
        held = Held("1-0", Entry(url="http://a.test/old"), "a.test")
        response = Response(
            "http://a.test/old", code, {"location": "/new"}, b"", Request("http://a.test/old")
        )
        outcome = await Handler().handle(held, response, Origin("w1", None, False))
        return [e.url for e in outcome.follows]

    assert await answer(status) == ["http://a.test/new"]
    assert await answer(299 if status == 300 else 400) == []


async def test_a_redirects_item_says_where_it_went_and_has_no_title() -> None:
    """A 302 whose body is nginx's "302 Found" page: its item's final_url is the target,
    location the header as sent, and no title; a 200's item has location null."""
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    held = Held("1-0", Entry(url="http://a.test/old"), "a.test")
    body = b"<html><head><title>302 Found</title></head><body>nginx</body></html>"
    headers = {"location": "../new?x=1", "content-type": "text/html"}
    moved = Response("http://a.test/d/old", 302, headers, body, Request("http://a.test/d/old"))
    outcome = await Handler().handle(held, moved, Origin("w1"))
    (item,) = outcome.items
    assert (item["final_url"], item["location"]) == ("http://a.test/new?x=1", "../new?x=1")
    assert item["title"] is None and item["status"] == 302
    page = Response(
        "http://a.test/old", 200, {"content-type": "text/html"}, body, Request("http://a.test/old")
    )
    (item,) = (await Handler().handle(held, page, Origin("w1"))).items
    assert (item["final_url"], item["location"], item["title"]) == (
        "http://a.test/old",
        None,
        "302 Found",
    )


async def test_a_redirects_target_is_one_level_deeper_and_none_is_followed_past_max_depth() -> None:
    """--max-depth counts a redirect as a link: the target of a page at the limit is not
    followed, one above it is, at the next depth."""
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._core._settings import Settings
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    def moved(depth: int) -> Held:
        return Held("1-0", Entry(url="http://a.test/old", depth=depth), "a.test")

    response = Response(
        "http://a.test/old", 301, {"location": "/new"}, b"", Request("http://a.test/old")
    )
    handler = Handler(settings=Settings(max_depth=2))
    below = await handler.handle(moved(1), response, Origin("w1"))
    assert [(e.url, e.depth) for e in below.follows] == [("http://a.test/new", 2)]
    at_limit = await handler.handle(moved(2), response, Origin("w1"))
    assert at_limit.follows == []


async def test_a_page_whose_callback_never_asks_for_links_counts_none_dropped() -> None:
    """A callback that yields items only leaves no parse behind: nothing was dropped."""
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._core._outcome import Kind
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    def items_only(response: hashcrawl.Response) -> Iterator[Any]:
        yield {"url": response.url}

    held = Held("1-0", Entry(url="http://a.test/"), "a.test")
    page = b"<a href='/1'>1</a>"
    response = Response("http://a.test/", 200, {}, page, Request("http://a.test/"))
    outcome = await Handler(items_only).handle(held, response, Origin("w1"))
    assert outcome.kind is Kind.DONE and outcome.items == [{"url": "http://a.test/"}]
    assert outcome.dropped == 0


# -- the time a callback holds the event loop -----------------------------------------------------


class _Clock:
    """A monotonic clock that moves only when a callback says it spent time."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


async def test_a_callbacks_steps_add_up_exactly_the_time_they_held_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The call and each ``next`` are timed, from nothing: 0.25 s to start, 0.5 s for each
    of two things and 0.5 s more to find the end, 1.75 s in all (the warning's threshold
    is compared with exactly this sum)."""
    clock = _Clock()
    monkeypatch.setattr(_callbacks, "time", clock)

    def parse(response: object) -> Iterator[str]:
        clock.now += 0.25
        for thing in ("a", "b"):
            clock.now += 0.5
            yield thing
        clock.now += 0.5

    steps = _callbacks.Steps(parse, None, blocking=False)
    assert steps.held_loop == 0
    produced = [thing async for thing in steps.each()]
    assert produced == ["a", "b"]
    assert steps.held_loop == 1.75


async def test_links_the_worker_queued_already_are_counted_but_not_followed_again() -> None:
    """The default parse leaves out the links in the worker's seen cache (the commit would
    drop them): they count as found, and as kept where the rules would keep them, exactly
    as when the commit dropped them; at the depth limit none is kept."""
    from hashcrawl._core._batch import Batch
    from hashcrawl._core._entry import Entry
    from hashcrawl._core._frontier import Held
    from hashcrawl._core._outcome import Router, SeenCache
    from hashcrawl._core._ring import Ring
    from hashcrawl._core._robotsrules import Robots
    from hashcrawl._core._scope import Scope
    from hashcrawl._core._settings import Settings
    from hashcrawl._run._handler import Handler, Origin
    from hashcrawl._web._models import Request, Response

    queued = ["http://a.test/a", "http://a.test/private/c", "http://b.test/x"]
    seen = SeenCache()
    router = Router(Ring.of(1, ("w1",)), lambda w: w, "inbox", scope=Scope(span=True), seen=seen)
    batch = Batch(worker="w1", epoch=1)
    for url in queued:  # as a commit that queued them remembers them
        router.follow(batch, Entry(url=url))
    seen.remember(batch.add)
    links = "".join(f'<a href="{u}">x</a>' for u in ["/a", "/b", "/private/c", queued[2]])
    body = f"<html><title>t</title><body>{links}</body></html>".encode()
    response = Response(
        "http://a.test/", 200, {"content-type": "text/html"}, body, Request("http://a.test/")
    )
    robots = Robots.parse("User-agent: *\nDisallow: /private/\n", "hashcrawl")
    origin = Origin("w1", robots, False, seen)

    def held(depth: int) -> Held:
        return Held("1-0", Entry(url="http://a.test/", depth=depth), "a.test")

    outcome = await Handler(settings=Settings(max_depth=3)).handle(held(0), response, origin)
    assert [e.url for e in outcome.follows] == ["http://a.test/b"]
    assert (outcome.found, outcome.known) == (4, 2)  # /private/c is refused, as before
    without = await Handler().handle(held(0), response, Origin("w1", robots, False))
    assert [e.url for e in without.follows] == ["http://a.test/a", "http://a.test/b", queued[2]]
    assert len(without.follows) == outcome.known + len(outcome.follows)
    deepest = await Handler(settings=Settings(max_depth=3)).handle(held(3), response, origin)
    assert (deepest.follows, deepest.found, deepest.known) == ([], 4, 0)
