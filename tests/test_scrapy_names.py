"""Scrapy's names, each alone: status semantics, errback, cb_kwargs, start_requests,
closed, custom_settings, item pipelines, rules and link extractors, FormRequest; and what
travels through Redis for them, checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import trio

import hashcrawl
from hashcrawl import (
    CrawlSpider,
    DropItem,
    Failure,
    FetchError,
    FormRequest,
    HttpError,
    LinkExtractor,
    Request,
    Response,
    Rule,
    Spider,
)
from hashcrawl._cli._flagset import read_flags
from hashcrawl._core._entry import MAX_CB_KWARGS, BadEntry, Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Kind, Outcome
from hashcrawl._core._settings import Settings
from hashcrawl._core._urls import canonicalize, host_key
from hashcrawl._exceptions import ConfigError
from hashcrawl._run._handler import Handler, Origin
from hashcrawl._spiders._spider import Calls, scrapy_settings

SITE = "http://shop.example/"
MAX_ATTEMPTS = 3


def held(entry: Entry) -> Held:
    return Held("1-0", entry, host_key(canonicalize(entry.url)))


def response(entry: Entry, status: int = 200, body: str = "", **headers: str) -> Response:
    return Response(
        url=entry.url,
        status=status,
        headers={"content-type": "text/html", **headers},
        body=body.encode(),
        request=Request.from_entry(entry),
    )


def handle(
    handler: Handler, entry: Entry, status: int = 200, body: str = "", **headers: str
) -> Outcome:
    answer = response(entry, status, body, **headers)
    return trio.run(handler.handle, held(entry), answer, Origin("w"))


def handler_of(spider: Spider) -> Handler:
    return Handler(spider=Calls(spider), settings=Settings(max_attempts=MAX_ATTEMPTS))


class Recording(Spider):
    """Records every call; its errback yields what the failure held."""

    handle_httpstatus_list: ClassVar[list[int]] = [410]

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def parse(self, response: Response) -> Iterator[Any]:
        self.calls.append(("parse", response.status))
        yield {"parsed": response.status}

    def detail(self, response: Response, n: int, tag: str = "") -> Iterator[Any]:
        self.calls.append(("detail", (n, tag)))
        yield {"n": n, "tag": tag, "meta": response.meta, "kwargs": response.cb_kwargs}

    def failed(self, failure: Failure) -> Iterator[Any]:
        self.calls.append(("failed", failure.type.__name__))
        got = failure.value.response.status if failure.check(HttpError) else None
        yield {"failed": failure.request.url, "status": got, "error": failure.getErrorMessage()}
        yield Request(SITE + "after-failure")


# -- status semantics -----------------------------------------------------------------------


def test_a_followed_redirect_reaches_no_callback_and_keeps_what_the_request_carries() -> None:
    """A 302 is followed; no callback runs on it; the target keeps callback and cb_kwargs."""
    spider = Recording()
    entry = Entry(url=SITE + "old", callback="detail", cb_kwargs={"n": 1}, errback="failed")
    outcome = handle(handler_of(spider), entry, 302, location="/new")
    assert spider.calls == []
    assert outcome.items == []
    [target] = outcome.follows
    assert (target.url, target.callback, target.cb_kwargs, target.errback, target.hops) == (
        SITE + "new", "detail", {"n": 1}, "failed", 1
    )  # fmt: skip


def test_a_listed_redirect_reaches_the_callback_and_is_not_followed() -> None:
    """A request listing 302 gets the 302 itself, as Scrapy's handle_httpstatus_list."""
    spider = Recording()
    entry = Entry(url=SITE + "old", handle_httpstatus_list=(302,))
    outcome = handle(handler_of(spider), entry, 302, location="/new")
    assert spider.calls == [("parse", 302)]
    assert outcome.follows == []


def test_an_unlisted_status_goes_to_the_errback_with_the_response() -> None:
    """A 404 never reaches parse; the errback gets an HttpError holding the response, and
    what it yields (an item, a request) is kept; the page is done, not retried."""
    spider = Recording()
    entry = Entry(url=SITE + "gone", errback="failed")
    outcome = handle(handler_of(spider), entry, 404)
    assert spider.calls == [("failed", "HttpError")]
    assert outcome.kind is Kind.DONE
    assert outcome.items == [
        {"failed": SITE + "gone", "status": 404, "error": f"HTTP 404 is not handled: {SITE}gone"}
    ]
    assert [e.url for e in outcome.follows] == [SITE + "after-failure"]


def test_an_unlisted_status_without_an_errback_gives_nothing() -> None:
    """Without an errback a 404 is ignored, as in Scrapy: no item, no follow."""
    spider = Recording()
    outcome = handle(handler_of(spider), Entry(url=SITE + "gone"), 404, "<a href=/x>x</a>")
    assert (spider.calls, outcome.kind, outcome.items, outcome.follows) == ([], Kind.DONE, [], [])


def test_statuses_the_spider_or_the_request_lists_reach_the_callback() -> None:
    """The spider lists 410; a request lists 404 for itself."""
    spider = Recording()
    handler = handler_of(spider)
    handle(handler, Entry(url=SITE + "a"), 410)
    handle(handler, Entry(url=SITE + "b", handle_httpstatus_list=(404,)), 404)
    handle(handler, Entry(url=SITE + "c"), 404)
    assert spider.calls == [("parse", 410), ("parse", 404)]


def test_an_overloaded_answer_goes_to_the_errback_on_its_last_try_only() -> None:
    """A 503 is retried; on the last try the errback runs and the page is dead-lettered
    with what the errback gave kept."""
    spider = Recording()
    handler = handler_of(spider)
    early = handle(handler, Entry(url=SITE + "busy", errback="failed"), 503)
    assert (early.kind, early.items, spider.calls) == (Kind.RETRY, [], [])
    last = handle(handler, Entry(url=SITE + "busy", errback="failed", attempts=2), 503)
    assert last.kind is Kind.RETRY and last.error == "HTTP 503"
    assert [i["status"] for i in last.items] == [503]


def test_a_fetch_that_fails_for_good_calls_the_errback_with_the_error() -> None:
    """The fetch's own exception is the failure's value; earlier tries call nothing."""
    spider = Recording()
    handler = handler_of(spider)
    for attempts in (0, 2):
        entry = Entry(url=SITE + "down", errback="failed", attempts=attempts)
        failed = Outcome.retry(held(entry), "connection refused")
        got = trio.run(handler.failed, held(entry), failed, FetchError("connection refused"))
        assert got.kind is Kind.RETRY
    assert spider.calls == [("failed", "FetchError")]
    assert got.items == [{"failed": SITE + "down", "status": None, "error": "connection refused"}]


def test_the_default_parse_writes_an_item_for_every_answer_it_does_not_retry() -> None:
    """Without a spider or parse function, a 302 and a 404 each give their page item, and
    the 302 is followed too, as before."""
    handler = Handler(settings=Settings(max_attempts=MAX_ATTEMPTS))
    moved = handle(handler, Entry(url=SITE + "old"), 302, location="/new")
    gone = handle(handler, Entry(url=SITE + "gone"), 404)
    assert [i["status"] for i in moved.items + gone.items] == [302, 404]
    assert [e.url for e in moved.follows] == [SITE + "new"]


def test_a_parse_function_sees_every_answer_but_a_followed_redirect() -> None:
    """A plain parse function is called on a 404, never on a redirect it would follow."""
    seen: list[int] = []

    def parse(response: Response) -> None:
        seen.append(response.status)

    handler = Handler(parse, settings=Settings(max_attempts=MAX_ATTEMPTS))
    handle(handler, Entry(url=SITE + "old"), 301, location="/new")
    handle(handler, Entry(url=SITE + "gone"), 404)
    assert seen == [404]


# -- cb_kwargs and what travels -------------------------------------------------------------


def test_cb_kwargs_reach_the_callback_as_keyword_arguments() -> None:
    """The entry's cb_kwargs are the callback's arguments; response.meta and .cb_kwargs
    read the request's."""
    spider = Recording()
    entry = Entry(url=SITE + "d", callback="detail", cb_kwargs={"n": 3, "tag": "x"}, meta={"m": 1})
    outcome = handle(handler_of(spider), entry)
    assert outcome.items == [
        {"n": 3, "tag": "x", "meta": {"m": 1, "depth": 0}, "kwargs": {"n": 3, "tag": "x"}}
    ]


def test_a_request_and_its_entry_carry_the_same_fields_both_ways() -> None:
    """Every field a Request and an Entry share survives Request -> entry -> Redis text ->
    entry -> Request."""
    request = Request(
        SITE + "p",
        method="POST",
        headers={"X-A": "1"},
        body="a=1",
        timeout=5.0,
        max_redirects=2,
        priority=3,
        meta={"k": [1]},
        callback="detail",
        dont_filter=True,
        errback="failed",
        cb_kwargs={"n": 1},
        handle_httpstatus_list=[404, 410],
        rule=2,
    )
    entry = request.to_entry(SITE, depth=4)
    assert entry is not None
    back = Request.from_entry(Entry.decode(entry.encode()))
    assert back == hashcrawl.Request(**{**_fields(request), "depth": 4})


def _fields(request: Request) -> dict[str, Any]:
    import attrs

    return attrs.asdict(request, recurse=False)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"cb_kwargs": {"s": {1, 2}}}, "cb_kwargs must be JSON-serialisable"),
        ({"cb_kwargs": [1]}, "cb_kwargs must be a dict of names to values"),
        ({"cb_kwargs": {"s": "x" * MAX_CB_KWARGS}}, f"over the {MAX_CB_KWARGS} a request carries"),
        ({"handle_httpstatus_list": [700]}, "handle_httpstatus_list must be up to 64"),
        ({"errback": 3}, "must be a spider method or its name"),
    ],
)
def test_a_request_refuses_what_cannot_travel(given: dict[str, Any], message: str) -> None:
    """cb_kwargs that are not a JSON object (or too big), bad statuses, a bad errback."""
    with pytest.raises(ConfigError, match=message):
        Request(SITE, **given)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"e": 5}, "errback is not a name"),
        ({"S": [99]}, "statuses are not up to 64 HTTP statuses"),
        ({"S": "404"}, "statuses are not up to 64 HTTP statuses"),
        ({"R": -1}, "rule is not an index"),
        ({"R": "0"}, "rule is not an index"),
        ({"k": json.loads("[" * 40 + "]" * 40)}, "nest deeper"),
    ],
)
def test_an_entry_with_a_malformed_scrapy_field_is_a_bad_entry(
    fields: dict[str, Any], message: str
) -> None:
    """What no spider could read is refused when the entry is read, naming the field."""
    with pytest.raises(BadEntry, match=message):
        Entry.decode(json.dumps({"u": SITE, **fields}))


class Shop(CrawlSpider):
    rules = (Rule(LinkExtractor(allow="/c/")), Rule(LinkExtractor(allow="/p/"), callback="item"))

    def item(self, response: Response) -> Any:
        return {"url": response.url}

    def gone(self, failure: Failure) -> None:
        pass


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"errback": "nope"}, "spider Shop has no errback 'nope'"),
        ({"callback": "_private"}, "spider Shop has no callback '_private'"),
        ({"callback": "closed"}, "spider Shop has no callback 'closed'"),
        ({"rule": 2}, "spider Shop has no rule 2 (it has 2)"),
        ({"cb_kwargs": "not json {"}, "cb_kwargs are not a JSON object of at most 16384 bytes"),
        ({"cb_kwargs": {"x": "y" * MAX_CB_KWARGS}}, "cb_kwargs are not a JSON object"),
    ],
)
def test_what_an_entry_names_is_checked_against_the_spider(
    fields: dict[str, Any], reason: str
) -> None:
    """An unknown errback or callback, a rule index out of range, cb_kwargs that are not
    a JSON object or too big: each has its reason (the worker dead-letters it)."""
    why = Calls(Shop()).refusal(Entry(url=SITE, **fields))
    assert why is not None and why.startswith(reason)
    assert Calls(Shop()).refusal(Entry(url=SITE, rule=1, errback="gone")) is None


def test_a_yielded_request_naming_an_unknown_errback_fails_its_page() -> None:
    """Caught as it is yielded, like an unknown callback: the page fails with the name."""

    class Bad(Spider):
        def parse(self, response: Response) -> Iterator[Any]:
            yield Request(SITE + "x", errback="nowhere")

    outcome = handle(handler_of(Bad()), Entry(url=SITE))
    # The dead letter names the callback that yielded it: the fault is the spider's.
    assert outcome.error.startswith("the parse callback ")
    assert outcome.error.endswith(
        ".Bad.parse raised ConfigError: Request names an unknown errback 'nowhere'"
    )


# -- rules ----------------------------------------------------------------------------------

PAGE = """<html><body>
<nav><a href="/c/1">c1</a><a href="/about">about</a><a href="http://other.example/c/9">x</a></nav>
<div class="products"><a href="/p/1">One</a> <a href="/p/2" rel="nofollow">Two
  <b>bold</b></a><a href="/p/1">again</a><a href="/p/3.pdf">pdf</a></div>
<aside><a href="/p/9">side</a><area href="/p/10"></aside>
</body></html>"""


def page_response(body: str = PAGE) -> Response:
    return response(Entry(url=SITE + "c/0"), 200, body)


def urls(extractor: LinkExtractor) -> list[str]:
    return [link.url.removeprefix(SITE) for link in extractor.extract_links(page_response())]


def test_a_link_extractor_allows_denies_and_leaves_files_out() -> None:
    """allow and deny are regular expressions searched in the URL; deny wins; a .pdf is
    left out unless deny_extensions says otherwise; each URL once."""
    assert urls(LinkExtractor(allow="/p/")) == ["p/1", "p/2", "p/9", "p/10"]
    assert urls(LinkExtractor(allow="/p/", deny=r"/p/\d$")) == ["p/10"]
    assert urls(LinkExtractor(allow="/p/3", deny_extensions=[])) == ["p/3.pdf"]


def test_a_link_extractor_keeps_to_its_domains() -> None:
    """allow_domains keeps a host and its subdomains; deny_domains leaves them out."""
    assert urls(LinkExtractor(allow_domains="other.example")) == ["http://other.example/c/9"]
    assert "http://other.example/c/9" not in urls(LinkExtractor(deny_domains=["other.example"]))


def test_a_link_extractor_restricted_by_css_or_xpath_reads_only_those_regions() -> None:
    """restrict_css and restrict_xpaths select regions; only their links count."""
    assert urls(LinkExtractor(restrict_css="div.products")) == ["p/1", "p/2"]
    assert urls(LinkExtractor(restrict_xpaths="//aside")) == ["p/9", "p/10"]
    assert urls(LinkExtractor(restrict_css="aside", tags="a")) == ["p/9"]


def test_a_link_has_its_text_and_nofollow() -> None:
    """A link's text is its whitespace-collapsed text; rel=nofollow is noted."""
    links = LinkExtractor(restrict_css="div.products").extract_links(page_response())
    assert [(link.text, link.nofollow) for link in links] == [("One", False), ("Two bold", True)]


def test_a_crawl_spider_follows_its_rules_by_index_with_their_errback() -> None:
    """A start page's links become requests naming their rule by index, not a callback."""

    class Cat(CrawlSpider):
        rules = (Rule(LinkExtractor(restrict_css="div.products"), callback="item", errback="gone"),)

        def item(self, response: Response) -> Any:
            return {"item": response.url}

        def gone(self, failure: Failure) -> None:
            pass

    handler = handler_of(Cat())
    outcome = handle(handler, Entry(url=SITE + "c/0"), 200, PAGE)
    assert [(e.url, e.rule, e.callback, e.errback) for e in outcome.follows] == [
        (SITE + "p/1", 0, None, "gone"),
        (SITE + "p/2", 0, None, "gone"),
    ]
    product = handle(handler, outcome.follows[0], 200, PAGE)
    assert (product.items, product.follows) == ([{"item": SITE + "p/1"}], [])  # follow=False


def test_a_rule_follows_by_default_only_without_a_callback() -> None:
    """Scrapy's default: a rule with a callback does not follow, one without does."""
    assert Rule(LinkExtractor()).follows and not Rule(LinkExtractor(), callback="x").follows
    assert Rule(LinkExtractor(), callback="x", follow=True).follows


def test_a_rule_naming_a_method_the_spider_lacks_is_refused_at_start() -> None:
    """Caught when the worker is made, with the rule's index."""

    class Broken(CrawlSpider):
        rules = (Rule(LinkExtractor(), callback="parse_missing"),)

    with pytest.raises(ConfigError, match=r"Broken.rules\[0\]: callback 'parse_missing'"):
        Calls(Broken())


# -- FormRequest ----------------------------------------------------------------------------

FORMS = """<html><body>
<form name="search" action="/search"><input name="q" value="old"></form>
<form id="login" action="/login" method="post">
  <input type="hidden" name="csrf" value="t0k3n">
  <input name="user" value="">
  <input type="checkbox" name="remember" checked>
  <input type="checkbox" name="news" value="yes">
  <select name="lang"><option value="en">English</option>
    <option value="fr" selected>Fr</option></select>
  <textarea name="note">hi</textarea>
  <input type="submit" name="go" value="Sign in"><input type="submit" name="alt" value="Other">
</form></body></html>"""


def form_response() -> Response:
    return response(Entry(url=SITE + "forms/page"), 200, FORMS)


def test_from_response_keeps_hidden_inputs_and_formdata_overrides() -> None:
    """The CSRF token, a checked box, the selected option and the textarea are sent, with
    the first submit button, and formdata replaces the form's own value."""
    request = FormRequest.from_response(
        form_response(), formid="login", formdata={"user": "ann"}, callback="after"
    )
    assert (request.method, request.url, request.callback) == ("POST", SITE + "login", "after")
    assert dict(request.headers)["Content-Type"] == "application/x-www-form-urlencoded"
    assert request.body == b"csrf=t0k3n&remember=on&lang=fr&note=hi&go=Sign+in&user=ann"


@pytest.mark.parametrize(
    "choice",
    [
        {"formname": "search"},
        {"formnumber": 0},
        {"formcss": "input[name=q]"},
        {"formxpath": "//form[1]"},
    ],
)
def test_from_response_picks_the_form_by_name_number_css_or_xpath(choice: dict[str, Any]) -> None:
    """Each way of choosing finds the search form, a GET: its fields go in the query."""
    request = FormRequest.from_response(form_response(), formdata={"q": "lamps"}, **choice)
    assert (request.method, request.url, request.body) == ("GET", SITE + "search?q=lamps", b"")


def test_from_response_clicks_the_button_clickdata_names_or_none() -> None:
    """clickdata picks the button; dont_click sends none."""
    other = FormRequest.from_response(form_response(), formid="login", clickdata={"name": "alt"})
    none = FormRequest.from_response(form_response(), formid="login", dont_click=True)
    assert (
        other.body.endswith(b"alt=Other") and b"go=" not in none.body and b"alt=" not in none.body
    )


def test_from_response_says_which_form_it_could_not_find() -> None:
    """A missing form is a ValueError naming it."""
    with pytest.raises(ValueError, match="no form 'nope'"):
        FormRequest.from_response(form_response(), formid="nope")
    with pytest.raises(ValueError, match="formnumber 5 on a page of 2 forms"):
        FormRequest.from_response(form_response(), formnumber=5)


def test_a_form_request_made_by_hand_posts_its_fields() -> None:
    """FormRequest(url, formdata=...) is a urlencoded POST; a list value gives a field each."""
    request = FormRequest(SITE + "f", formdata={"a": "1", "b": ["2", "3"]})
    assert (request.method, request.body) == ("POST", b"a=1&b=2&b=3")
    assert FormRequest(SITE + "f?x=0", formdata={"a": "1"}, method="GET").url == SITE + "f?x=0&a=1"


# -- pipelines, custom_settings, start_requests, closed -------------------------------------

EVENTS: list[str] = []


class Tagging:
    def open_spider(self, spider: Spider) -> None:
        EVENTS.append("open")

    def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        if item.get("drop"):
            raise DropItem("unwanted")
        return {**item, "tagged": True}

    def close_spider(self, spider: Spider) -> None:
        EVENTS.append("close")


class Pricing:
    async def process_item(self, item: dict[str, Any], spider: Spider) -> dict[str, Any]:
        return {**item, "priced": item.get("tagged", False)}


class Piped(Spider):
    custom_settings: ClassVar[dict[str, Any]] = {
        "ITEM_PIPELINES": {Pricing: 500, "Tagging": 100},  # Tagging runs first
        "DOWNLOAD_DELAY": 0.25,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "RETRY_TIMES": 1,
        "DEPTH_LIMIT": 0,
        "idle": 0.5,
    }

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"keep": 1}
        yield {"drop": 1}

    def closed(self, reason: str) -> None:
        EVENTS.append(f"closed {reason}")


def test_pipelines_run_in_their_order_and_drop_items() -> None:
    """Tagging (100) then Pricing (500, async); a DropItem drops the item."""
    outcome = handle(handler_of(Piped()), Entry(url=SITE))
    assert outcome.items == [{"keep": 1, "tagged": True, "priced": True}]


def test_custom_settings_map_scrapys_names_to_the_crawls_settings() -> None:
    """DOWNLOAD_DELAY is delay, RETRY_TIMES one less than max_attempts, DEPTH_LIMIT 0 no
    limit; hashcrawl's own names pass as they are."""
    assert scrapy_settings(Piped) == {
        "delay": 0.25,
        "per_host": 1,
        "max_attempts": 2,
        "max_depth": None,
        "idle": 0.5,
    }


def test_allowed_domains_join_the_crawls_scope() -> None:
    """Scrapy's allowed_domains is hashcrawl's allow_domains (the crawl's scope)."""

    class Scoped(Spider):
        allowed_domains: ClassVar[list[str]] = ["shop.example", "cdn.example"]

    assert scrapy_settings(Scoped) == {"allow_domains": ("shop.example", "cdn.example")}


def test_a_worker_takes_custom_settings_and_what_it_is_given_wins() -> None:
    """Worker(spider=...) uses them; an argument given beside them wins."""
    worker = hashcrawl.Worker("redis://127.0.0.1:1/0", "c", spider=Piped, delay=1.5)
    assert (worker.settings.delay, worker.settings.max_attempts) == (1.5, 2)


def test_a_custom_setting_hashcrawl_lacks_is_refused_by_name() -> None:
    """FEEDS has no equivalent: a ConfigError names it, and the names it knows."""

    class Feeds(Spider):
        custom_settings: ClassVar[dict[str, Any]] = {"FEEDS": {"x.json": {}}}

    with pytest.raises(ConfigError, match="custom_settings: 'FEEDS' has no hashcrawl equivalent"):
        scrapy_settings(Feeds)


def test_a_pipeline_that_cannot_be_imported_is_refused_by_name() -> None:
    """A dotted name that imports nothing is a ConfigError naming it."""

    class Lost(Spider):
        custom_settings: ClassVar[dict[str, Any]] = {"ITEM_PIPELINES": {"no.such.Pipeline": 1}}

    with pytest.raises(ConfigError, match=r"ITEM_PIPELINES: cannot import 'no\.such\.Pipeline'"):
        Calls(Lost())


def test_opening_and_closing_call_the_pipelines_then_closed() -> None:
    """open_spider first; at the end close_spider, then closed(reason)."""
    EVENTS.clear()
    calls = Calls(Piped())
    calls.opened()
    calls.closed("finished")
    assert EVENTS == ["open", "close", "closed finished"]


def test_start_requests_default_to_the_start_urls() -> None:
    """Without an override, start_requests gives start_urls."""

    class Starts(Spider):
        start_urls: ClassVar[list[str]] = [SITE + "a", SITE + "b"]

    assert list(Starts().start_requests()) == [SITE + "a", SITE + "b"]


def test_a_flag_given_wins_over_custom_settings_and_a_default_does_not(tmp_path: Any) -> None:
    """join --spider: --concurrency 3 beats CONCURRENT_REQUESTS; the spider's delay is a
    crawl setting given; without the flag the spider's concurrency holds."""
    from hashcrawl._cli._checks import spider_of
    from hashcrawl._cli._parser import build_parser
    from hashcrawl._cli._workers import _worker_settings

    path = tmp_path / "spider.py"
    path.write_text(
        "import hashcrawl\n\n"
        "class S(hashcrawl.Spider):\n"
        "    custom_settings = {'CONCURRENT_REQUESTS': 4, 'DOWNLOAD_DELAY': 0.3}\n"
    )
    parser = build_parser()
    for flags, concurrency in ((["--concurrency", "3"], 3), ([], 4)):
        args = parser.parse_args(["join", "--crawl", "c", "--spider", str(path), *flags])
        got = _worker_settings(args, read_flags(args), spider_of(args))
        assert (got["concurrency"], got["delay"]) == (concurrency, 0.3)


def test_the_entry_module_imports_nothing_of_the_web_layer() -> None:
    """Entry <-> Request lives in _web._models: _core._entry needs no web, trio or lxml."""
    import subprocess
    import sys

    code = (
        "import sys, hashcrawl._core._entry\n"
        "bad = [m for m in sys.modules if m.startswith(('hashcrawl._web', 'trio', 'httpx',"
        " 'redis', 'lxml'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_scrapys_meta_keys_for_statuses_are_honoured_when_well_formed() -> None:
    """meta handle_httpstatus_list and handle_httpstatus_all, as a ported spider writes
    them; a malformed one lists nothing."""
    spider = Recording()
    handler = handler_of(spider)
    handle(handler, Entry(url=SITE + "a", meta={"handle_httpstatus_list": [404]}), 404)
    handle(handler, Entry(url=SITE + "b", meta={"handle_httpstatus_all": True}), 400)
    handle(handler, Entry(url=SITE + "c", meta={"handle_httpstatus_list": "404"}), 404)
    handle(handler, Entry(url=SITE + "d", meta={"handle_httpstatus_list": [True]}), 401)
    assert spider.calls == [("parse", 404), ("parse", 400)]


def test_a_request_takes_its_callback_second_and_replace_changes_it() -> None:
    """Request(url, self.parse_item) as in Scrapy; replace() as Scrapy's."""
    spider = Recording()
    request = Request(SITE, spider.detail)
    assert request.callback == "detail"
    assert request.replace(url=SITE + "x", priority=2) == Request(SITE + "x", "detail", priority=2)


def test_a_spider_has_a_logger_named_after_it() -> None:
    """self.logger, as Scrapy spiders use it."""

    class Named(Spider):
        name = "named"

    assert Named().logger.name == "named"


def test_a_start_request_naming_what_the_spider_lacks_stops_the_start() -> None:
    """Checked before anything is queued (no store is touched), naming the request."""
    from hashcrawl._run._queue import submit_start_requests

    class Starts(Spider):
        def start_requests(self) -> Iterator[Request]:
            yield Request(SITE + "a", callback="missing")

    no_store: Any = None
    with pytest.raises(
        ConfigError, match=r"start_requests gave .*/a': spider .*Starts has no callback 'missing'"
    ):
        submit_start_requests(no_store, Calls(Starts()), list(Starts().start_requests()))
