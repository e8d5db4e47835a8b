"""Tests for hashcrawl._fetch: the httpx fetcher, its pool per origin, and its check at send."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import trio
import trio.testing

from hashcrawl import FetchError, HttpxFetcher, Request
from hashcrawl._fetch import NotSent, OriginPools, sending_only_while
from tests.fleet import host, make_site, page
from tests.testsite import SiteServer


class Body(httpx.AsyncByteStream):
    """A body read as a network one is, so that closing it is left to the client."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


class Recorder(httpx.AsyncBaseTransport):
    """A pool stand-in that answers every request with its own number, and notes closing."""

    made: list[Recorder]

    def __init__(self, made: list[Recorder]) -> None:
        self.number, self.closed, self.urls = len(made), False, list[str]()
        made.append(self)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        return httpx.Response(200, stream=Body(str(self.number).encode()))

    async def aclose(self) -> None:
        self.closed = True


def pools(made: list[Recorder], max_connections: int = 8) -> OriginPools:
    """OriginPools whose pools are Recorders, appended to ``made`` as they are made."""
    return OriginPools(lambda: Recorder(made), max_connections=max_connections)


async def get(transport: httpx.AsyncBaseTransport, url: str) -> str:
    """One request through ``transport``, its body read and the response closed."""
    # Not `async with`: closing a client closes its transport too.
    return (await httpx.AsyncClient(transport=transport).get(url)).text


async def test_each_origin_gets_a_pool_of_its_own():
    """Scheme, host and port each tell origins apart; a repeated origin reuses its pool."""
    made: list[Recorder] = []
    transport = pools(made)
    urls = ["http://a.test/1", "http://b.test/", "http://a.test:81/", "https://a.test/"]
    assert [await get(transport, url) for url in urls] == ["0", "1", "2", "3"]
    assert await get(transport, "http://a.test/2") == "0"
    assert made[0].urls == ["http://a.test/1", "http://a.test/2"]


async def test_pools_beyond_max_connections_are_closed_least_recently_used_first():
    """A new pool past the limit closes the idle pool used longest ago."""
    made: list[Recorder] = []
    transport = pools(made, max_connections=2)
    for url in ["http://a.test/", "http://b.test/", "http://a.test/", "http://c.test/"]:
        await get(transport, url)
    assert [p.closed for p in made] == [False, True, False]


async def test_a_pool_with_a_response_open_is_never_closed():
    """A pool whose response is still being read survives however many others come."""
    made: list[Recorder] = []
    transport = pools(made, max_connections=2)
    async with httpx.AsyncClient(transport=transport).stream("GET", "http://open.test/"):
        for host in "bcd":
            await get(transport, f"http://{host}.test/")
    assert [p.closed for p in made] == [False, True, True, False]


async def test_requests_beyond_max_connections_wait_for_a_slot():
    """With every slot held by an open response, the next request waits until one closes."""
    made: list[Recorder] = []
    transport = pools(made, max_connections=1)
    answers: list[str] = []

    async def second() -> None:
        answers.append(await get(transport, "http://b.test/"))

    async with httpx.AsyncClient(transport=transport) as client, trio.open_nursery() as nursery:
        async with client.stream("GET", "http://a.test/"):
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            assert answers == []
            assert len(made) == 1
        await trio.testing.wait_all_tasks_blocked()
    assert answers == ["1"]


async def test_aclose_closes_every_pool():
    """Closing the transport closes the pools it made, busy or idle."""
    made: list[Recorder] = []
    transport = pools(made)
    for url in ["http://a.test/", "http://b.test/"]:
        await get(transport, url)
    await transport.aclose()
    assert [p.closed for p in made] == [True, True]


async def test_a_given_transport_serves_every_request():
    """``transport=`` replaces the pools per origin: a mock sees every request."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=b"<title>t</title>")

    fetcher = HttpxFetcher(transport=httpx.MockTransport(answer))
    response = await fetcher.fetch(Request("http://a.test/x"))
    await fetcher.fetch(Request("http://b.test/y"))
    await fetcher.aclose()
    assert (response.status, response.body) == (200, b"<title>t</title>")
    assert seen == ["http://a.test/x", "http://b.test/y"]


async def test_an_unreachable_origin_raises_fetch_error_and_frees_its_slot():
    """A connection refused is a FetchError, and the slot it held can be used again."""
    fetcher = HttpxFetcher(max_connections=1, timeout=5)
    for _ in range(2):
        try:
            await fetcher.fetch(Request("http://127.0.0.1:1/"))
        except FetchError as exc:
            assert "connection refused" in str(exc)
        else:
            raise AssertionError("a request to port 1 was answered")
    await fetcher.aclose()


class Refusing(Recorder):
    """A pool whose every request fails, as one to a host that refuses connections."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)


async def test_a_pool_whose_request_failed_can_be_closed():
    """A failed request leaves its pool idle: past the limit it is closed like any other."""
    made: list[Recorder] = []
    transport = OriginPools(lambda: Refusing(made), max_connections=2)
    client = httpx.AsyncClient(transport=transport)
    for name in "abc":
        with contextlib.suppress(httpx.ConnectError):
            await client.get(f"http://{name}.test/")
    assert [p.closed for p in made] == [True, False, False]


async def fetch_if(fetcher: HttpxFetcher, url: str, allowed: bool) -> int | None:
    """The status of ``url`` fetched while the check answers ``allowed``; None if not sent."""
    with sending_only_while(lambda: allowed):
        try:
            return (await fetcher.fetch(Request(url))).status
        except NotSent:
            return None


async def test_a_request_its_check_refuses_never_reaches_the_server():
    """Refused on a new connection or on a kept-alive one, nothing is sent; the pool recovers."""
    with SiteServer(make_site({(host(0), "/"): page("root")})) as server:
        fetcher = HttpxFetcher()
        url = server.site.root
        statuses = [await fetch_if(fetcher, url, allowed) for allowed in (False, True, False, True)]
        await fetcher.aclose()
        logged = server.requests()
    assert statuses == [None, 200, None, 200]
    assert [r.path for r in logged] == ["/", "/"]


async def test_a_request_is_checked_as_it_is_written_not_when_it_is_made():
    """The check's answer that counts is the one given once a connection is free.

    A worker checks that it still owns a host before it calls the fetcher; a request
    that then waits for a connection (or a paused process) must be checked again.
    """
    site = make_site({(host(0), "/"): page("a"), (host(1), "/"): page("b")})
    with SiteServer(site, latency=0.3) as server:
        fetcher = HttpxFetcher(max_connections=1)
        first, second = (f"http://{h}:{server.site.port}/" for h in (host(0), host(1)))
        allowed = True
        got: dict[str, int | None] = {}

        async def fetch(url: str) -> None:
            with sending_only_while(lambda: allowed):
                try:
                    got[url] = (await fetcher.fetch(Request(url))).status
                except NotSent:
                    got[url] = None

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetch, first)
            # The first is sent, and holds the one connection while the server waits.
            assert await trio.to_thread.run_sync(lambda: server.wait_for_requests(1, timeout=10.0))
            nursery.start_soon(fetch, second)
            await trio.testing.wait_all_tasks_blocked()  # the second waits for that connection
            allowed = False
        await fetcher.aclose()
        logged = server.requests()
    assert got == {first: 200, second: None}
    assert [r.host for r in logged] == [host(0)]


def test_the_default_pools_check_every_connection_they_open():
    """httpx hides its pool's network backend; if a new release moves it, this fails."""
    pools = OriginPools.of(max_connections=2, max_per_host=1)
    transport = pools._make_pool()
    assert type(transport._pool._network_backend).__name__ == "_GatedBackend"  # type: ignore[attr-defined]
