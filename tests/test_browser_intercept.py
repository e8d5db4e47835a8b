"""A rendered page's paused requests, against the fake peer and a fake fetcher: what is
fetched, what is refused, and that nothing refused reaches the fetcher."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
import trio
import trio.testing

from hashcrawl import Refused, Request, Response
from hashcrawl._browser._fake import FakeBrowser
from hashcrawl._browser._intercept import BLOCKED_TYPES, Interceptor, Traffic, Verdict, verdict
from hashcrawl._browser._pace import HostPace
from hashcrawl._web._models import Exchange


@pytest.mark.parametrize(
    ("url", "kind", "expected"),
    [
        ("http://a.test/api", "Fetch", Verdict.FETCH),
        ("https://a.test/app.js", "Script", Verdict.FETCH),
        ("file:///etc/passwd", "Document", Verdict.SCHEME),
        ("data:text/html,x", "Fetch", Verdict.SCHEME),
        ("ws://a.test/ws", "WebSocket", Verdict.SCHEME),
        ("http://a.test/i.png", "Image", Verdict.TYPE),
        ("http://a.test/s.css", "Stylesheet", Verdict.TYPE),
        ("http://a.test/beacon", "Ping", Verdict.TYPE),
        ("http://a.test/favicon.ico", "Other", Verdict.TYPE),
        ("http://b.test/api", "Fetch", Verdict.HOST),
        ("http://127.0.0.3/frame", "Document", Verdict.HOST),
        ("http://a.test.b.test/", "Fetch", Verdict.HOST),
    ],
)
def test_only_http_requests_of_needed_types_to_the_pages_own_host_are_fetched(
    url: str, kind: str, expected: Verdict
) -> None:
    """The verdict on each paused request."""
    assert verdict(url, kind, "a.test", BLOCKED_TYPES) is expected


class Recorder:
    """A fetcher that answers every request with its URL, and records them."""

    def __init__(self, refuse: str = "", exchange: Exchange | None = None) -> None:
        self.asked: list[str] = []
        self.refuse, self.exchange = refuse, exchange

    async def fetch(self, request: Request) -> Response:
        self.asked.append(request.url)
        if self.refuse and self.refuse in request.url:
            raise Refused("an address not allowed")
        headers = {"content-type": "text/plain", "content-encoding": "gzip"}
        body = request.url.encode()
        return Response(request.url, 200, headers, body, request, exchange=self.exchange)


def document() -> Response:
    request = Request("http://a.test/")
    return Response(request.url, 200, {"content-type": "text/html"}, b"<p>doc</p>", request)


async def answer_all(paused: list[dict[str, Any]], fetcher: Recorder) -> tuple[Any, Interceptor]:
    """Each paused request answered in turn; the fake's commands and the interceptor."""
    fake = FakeBrowser(lambda method, params, session: {})
    interceptor = Interceptor(
        connection=fake.connection,
        fetcher=fetcher,
        pace=HostPace(),
        page_host="a.test",
        main_frame="F1",
        document=document(),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        for n, params in enumerate(paused):
            await interceptor.answer({"requestId": f"r{n}", **params}, "S")
        nursery.cancel_scope.cancel()
    return fake.received, interceptor


def paused(url: str, kind: str, frame: str = "F1") -> dict[str, Any]:
    return {
        "request": {"url": url, "method": "GET", "headers": {}},
        "resourceType": kind,
        "frameId": frame,
    }


async def test_the_document_is_served_once_from_the_fetch_already_made() -> None:
    """The main frame's document gets the page's response without a second fetch; a
    second document request for the main frame is judged like any other."""
    fetcher = Recorder()
    sent, _ = await answer_all(
        [paused("http://a.test/", "Document"), paused("http://a.test/next", "Document")], fetcher
    )
    (first, first_params, _), (second, _, _) = sent
    assert (
        first == "Fetch.fulfillRequest" and base64.b64decode(first_params["body"]) == b"<p>doc</p>"
    )
    assert second == "Fetch.fulfillRequest"
    assert fetcher.asked == ["http://a.test/next"]


async def test_refused_requests_never_reach_the_fetcher_and_are_failed_in_the_browser() -> None:
    """Another host, a file, an image, a beacon: failed as blocked, never fetched; each
    is recorded with why."""
    fetcher = Recorder()
    sent, interceptor = await answer_all(
        [
            paused("http://127.0.0.3:9/frame", "Document", frame="F2"),
            paused("file:///etc/passwd", "Fetch"),
            paused("http://a.test/i.png", "Image"),
            paused("http://a.test/beacon", "Ping"),
        ],
        fetcher,
    )
    assert fetcher.asked == []
    assert [(method, params["errorReason"]) for method, params, _ in sent] == [
        ("Fetch.failRequest", "BlockedByClient")
    ] * 4
    assert [why for _, why in interceptor.requests] == [
        Verdict.HOST.value,
        Verdict.SCHEME.value,
        Verdict.TYPE.value,
        Verdict.TYPE.value,
    ]


async def test_a_fetched_sub_request_is_handed_back_decoded_without_its_encoding_header() -> None:
    """The fetcher's body is decoded already: the browser is not told it is gzip."""
    sent, _ = await answer_all([paused("http://a.test/api", "Fetch")], Recorder())
    (method, params, session) = sent[0]
    names = {header["name"].lower() for header in params["responseHeaders"]}
    assert (method, session, params["responseCode"]) == ("Fetch.fulfillRequest", "S", 200)
    assert "content-encoding" not in names and "content-type" in names
    assert base64.b64decode(params["body"]) == b"http://a.test/api"


async def test_a_sub_request_the_fetcher_refuses_is_denied_in_the_browser() -> None:
    """The worker's address policy (the fetcher's Refused) applies to a page's requests."""
    fetcher = Recorder(refuse="/private")
    sent, interceptor = await answer_all([paused("http://a.test/private", "Fetch")], fetcher)
    assert [(m, p["errorReason"]) for m, p, _ in sent] == [("Fetch.failRequest", "AccessDenied")]
    assert interceptor.requests[0][1].startswith("refused: an address not allowed")


@pytest.mark.parametrize(
    ("status", "kind", "rendered"),
    [
        (200, "text/html; charset=utf-8", True),
        (200, "application/xhtml+xml", True),
        (200, "application/xml", False),
        (200, "text/plain", False),
        (301, "text/html", False),
        (404, "text/html", False),
    ],
)
def test_only_a_2xx_html_page_is_rendered(status: int, kind: str, rendered: bool) -> None:
    """robots.txt, sitemaps, redirects and errors come as fetched, even with --render."""
    from hashcrawl._browser._render import _renderable

    request = Request("http://a.test/")
    assert (
        _renderable(Response(request.url, status, {"content-type": kind}, b"", request)) is rendered
    )


async def test_a_pages_requests_fetched_with_their_exchange_are_kept_for_the_archive() -> None:
    """With the worker archiving (the fetcher keeps each exchange), every sub-request the
    page made is kept for the WARC beside the document; refused ones are not."""
    wire = Exchange(
        request_head=b"GET /api HTTP/1.1\r\n\r\n",
        request_body=b"",
        response_head=b"HTTP/1.1 200 OK\r\n\r\n",
        body=b"x",
        started=datetime.datetime.now(datetime.UTC),
    )
    _, interceptor = await answer_all(
        [paused("http://a.test/api", "Fetch"), paused("http://b.test/api", "Fetch")],
        Recorder(exchange=wire),
    )
    assert [response.url for response in interceptor.archived] == ["http://a.test/api"]


async def test_a_wait_for_quiet_traffic_waits_only_for_requests_begun_after_its_mark() -> None:
    """A request begun before the mark (a long poll) is not waited for; one begun after
    is, until it is answered."""
    traffic = Traffic()
    long_poll = traffic.begin()
    mark = traffic.begun
    answered: list[str] = []

    async def wait() -> None:
        await traffic.quiet_since(mark)
        answered.append("quiet")

    async with trio.open_nursery() as nursery:
        scrolled = traffic.begin()
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert answered == []
        traffic.end(scrolled)
    assert answered == ["quiet"]
    assert traffic.open_since(0) == 1  # the long poll, still open
    traffic.end(long_poll)
    assert traffic.open_since(0) == 0


class Refusals(HostPace):
    """A pace that records the requests refused for their host (the worker's counts
    and tells them)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def refused(self, url: str, why: str) -> None:
        self.urls.append(url)


def test_a_shared_host_is_fetched_from_any_page_and_only_a_shared_host() -> None:
    """The crawl's shared hosts pass, by host key (port included); others do not."""
    shared = frozenset({"cdn.test", "127.0.0.9:8080"})
    assert verdict("https://cdn.test/lib.js", "Script", "a.test", BLOCKED_TYPES, shared) is (
        Verdict.FETCH
    )
    assert verdict("http://127.0.0.9:8080/x.js", "Script", "a.test", BLOCKED_TYPES, shared) is (
        Verdict.FETCH
    )
    for other in ("http://127.0.0.9:8081/x.js", "http://cdn.test.evil/x.js", "http://b.test/"):
        assert verdict(other, "Script", "a.test", BLOCKED_TYPES, shared) is Verdict.HOST
    assert verdict("https://cdn.test/i.png", "Image", "a.test", BLOCKED_TYPES, shared) is (
        Verdict.TYPE
    )


async def test_a_request_to_another_host_is_reported_to_the_pace_once_each() -> None:
    """The worker's pace hears of every refused host request (to count and tell it);
    of nothing else."""
    fake = FakeBrowser(lambda method, params, session: {})
    pace = Refusals()
    interceptor = Interceptor(
        connection=fake.connection,
        fetcher=Recorder(),
        pace=pace,
        page_host="a.test",
        main_frame="F1",
        document=document(),
        shared=frozenset({"cdn.test"}),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fake.serve)
        nursery.start_soon(fake.connection.run)
        for n, url in enumerate(["http://b.test/x.js", "http://cdn.test/x.js", "file:///x"]):
            await interceptor.answer({"requestId": f"r{n}", **paused(url, "Script")}, "S")
        nursery.cancel_scope.cancel()
    assert pace.urls == ["http://b.test/x.js"]
    assert [why for _, why in interceptor.requests] == [
        Verdict.HOST.value,
        Verdict.FETCH.value,
        Verdict.SCHEME.value,
    ]
