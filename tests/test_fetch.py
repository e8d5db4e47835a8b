"""Tests for hashcrawl._web._fetch: the httpx fetcher, its per-origin pool, its check at send."""

from __future__ import annotations

import contextlib
import gzip
import json
import ssl
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
import trustme

from hashcrawl import FetchError, HttpxFetcher, Queue, Request, Response
from hashcrawl._exceptions import Refused
from hashcrawl._web._pools import NotSent, OriginPools, sending_only_while
from testing.fleet import (
    Crew,
    crawl_in_process,
    fast_settings,
    host,
    href,
    make_site,
    new_crawl_name,
    page,
    redirect,
)
from testing.rawserver import RawServer, bomb, response
from testing.testsite import SiteServer


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


async def test_the_fetcher_keeps_no_cookie_a_server_sets():
    """A Set-Cookie answer is the worker's to keep (per host), not the client's: the next
    request carries only the Cookie header its request names."""
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, headers={"Set-Cookie": "session=1; Path=/"}, text="ok")

    fetcher = HttpxFetcher(transport=httpx.MockTransport(answer))
    try:
        first = await fetcher.fetch(Request("http://a.test/"))
        await fetcher.fetch(Request("http://a.test/next"))
        await fetcher.fetch(Request("http://a.test/", headers=[("Cookie", "mine=2")]))
    finally:
        await fetcher.aclose()
    assert first.headers.get("set-cookie") == "session=1; Path=/"
    assert seen == [None, None, "mine=2"]


async def test_an_unreachable_origin_raises_fetch_error_and_frees_its_slot():
    """A connection refused is a FetchError, and the slot it held can be used again."""
    fetcher = HttpxFetcher(max_connections=1, timeout=5, allow_nets=["127.0.0.1"])
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
        fetcher = HttpxFetcher(allow_nets=[host(0)])
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
        fetcher = HttpxFetcher(max_connections=1, allow_nets=[host(0), host(1)])
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


@pytest.mark.parametrize(
    "request_",
    [
        Request("/"),
        Request("/a;b/%7E/ä ö?q=ü&r=%20#frag"),
        Request("/", headers=[("Cookie", "k=v"), ("user-agent", "mine"), ("X-One", "1")]),
        Request("/form", method="POST", body=b"a=1&b=2"),
        Request("/empty", method="POST"),
        Request("/put", method="PUT", body="é", headers=[("Content-Length", "2")]),
        Request("/gone", method="DELETE", headers=[("Host", "example.test")]),
    ],
    ids=["plain", "odd-url", "headers", "post", "empty-post", "put", "host-given"],
)
async def test_the_pools_send_the_bytes_httpx_s_client_sends(request_: Request):
    """The fetcher's own pools speak httpcore directly; what reaches the server, and the
    response made of the answer, are what httpx's client makes of the same request."""
    answer = response(201, b"<title>t</title>", Set_Cookie="a=1", Content_Type="text/html")
    got: list[tuple[bytes, Response]] = []
    with RawServer(lambda path: answer) as server:
        url = server.url() + request_.url.removeprefix("/")
        sent = request_.replace(url=url)
        every = [("Accept", "text/html"), ("Authorization", "Bearer s")]
        direct = HttpxFetcher(allow_nets=[server.host], headers=every, user_agent="ua/1")
        through_httpx = HttpxFetcher(
            transport=httpx.AsyncHTTPTransport(), headers=every, user_agent="ua/1"
        )
        for fetcher in (direct, through_httpx):
            fetched = await fetcher.fetch(sent)
            await fetcher.aclose()
            got.append((server.heads[-1], fetched))
    (head, mine), (httpx_head, theirs) = got
    assert head == httpx_head
    assert (mine.url, mine.status, mine.headers.multi_items(), mine.body) == (
        theirs.url,
        theirs.status,
        theirs.headers.multi_items(),
        theirs.body,
    )


# bounded cost per response


async def fetch_from(answer: Callable[[str], Iterable[bytes | float]], **options: Any) -> Response:
    """Fetch "/" from a RawServer on 127.0.0.2 giving ``answer``, with a fetcher allowed there."""
    with RawServer(answer) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host], **options)
        try:
            return await fetcher.fetch(Request(server.url()))
        finally:
            await fetcher.aclose()


def drip(path: str) -> list[bytes | float]:
    """Headers at once, then a 100-byte body a byte every 0.1 s: each read is quick."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nContent-Type: text/html\r\n\r\n"
    return [head, *[part for _ in range(100) for part in (0.1, b"x")]]


async def test_the_timeout_is_a_deadline_for_the_whole_exchange_body_included():
    """A server that drips its body, each byte well inside the timeout, fails at the timeout.

    httpx's own timeouts are per read, so without the deadline this fetch would succeed.
    """
    with pytest.raises(FetchError, match=r"no whole answer within the timeout \(1 s\)"):
        await fetch_from(drip, timeout=1.0)


async def test_a_gzip_bomb_is_inflated_only_up_to_max_body():
    """A tiny gzip body that inflates to 64 MiB gives max_body bytes, marked truncated."""
    body = bomb(64 * 2**20)
    answer = response(200, body, Content_Encoding="gzip", Content_Type="text/html")
    got = await fetch_from(lambda path: answer, max_body=100_000)
    assert len(body) < 100_000
    assert (len(got.body), got.truncated, set(got.body)) == (100_000, True, {0})


async def test_a_body_within_max_body_is_whole_and_not_truncated():
    """gzip and deflate (zlib or raw) bodies are decoded; the response is not truncated."""
    text = b"<title>hello</title>" * 100
    raw_deflate = zlib.compressobj(wbits=-15)
    for coding, data in [
        ("gzip", gzip.compress(text)),
        ("deflate", zlib.compress(text)),
        ("deflate", raw_deflate.compress(text) + raw_deflate.flush()),
        ("identity", text),
    ]:
        answer = response(200, data, Content_Encoding=coding, Content_Type="text/html")
        got = await fetch_from(lambda path, answer=answer: answer, max_body=len(text))
        assert (got.body, got.truncated, got.title()) == (text, False, "hello")


async def test_a_plain_body_over_max_body_is_cut_there():
    """Without compression too, what is past max_body is not kept."""
    answer = response(200, b"x" * 300_000)
    got = await fetch_from(lambda path: answer, max_body=1000)
    assert (len(got.body), got.truncated) == (1000, True)


@pytest.mark.parametrize("coding", ["gzip, gzip", "gzip,deflate", "br", "zstd", "compress"])
async def test_stacked_or_unasked_encodings_are_refused(coding: str):
    """A body in two codings, or in one not asked for, is Refused, not decoded."""
    answer = response(200, bomb(10_000, layers=2), Content_Encoding=coding)
    with pytest.raises(Refused, match="Content-Encoding"):
        await fetch_from(lambda path: answer)


async def test_only_the_encodings_decoded_under_the_cap_are_asked_for():
    """The request's Accept-Encoding names gzip and deflate, nothing else."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["accept-encoding"])
        return httpx.Response(200)

    fetcher = HttpxFetcher(transport=httpx.MockTransport(answer))
    await fetcher.fetch(Request("http://a.test/"))
    await fetcher.aclose()
    assert seen == ["gzip, deflate"]


# private addresses


async def test_a_private_address_is_refused_before_anything_is_sent():
    """Without an allow, a loopback server gets no request at all, and the error says why."""
    with RawServer(lambda path: response(200, b"secret")) as server:
        fetcher = HttpxFetcher()
        with pytest.raises(Refused, match=r"127\.0\.0\.2 is not a public address.*--allow-net"):
            await fetcher.fetch(Request(server.url()))
        await fetcher.aclose()
    assert server.paths == []


async def test_an_allowed_network_is_reached_and_its_neighbours_are_not():
    """Allowing 127.0.0.2 reaches it; 127.0.5.7, also loopback, is refused unreached."""
    with (
        RawServer(lambda path: response(200, b"ok")) as allowed,
        RawServer(lambda path: response(200, b"internal"), host="127.0.5.7") as internal,
    ):
        fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"])
        assert (await fetcher.fetch(Request(allowed.url()))).body == b"ok"
        with pytest.raises(Refused):
            await fetcher.fetch(Request(f"http://127.0.5.7:{internal.port}/admin"))
        await fetcher.aclose()
    assert (allowed.paths, internal.paths) == (["/"], [])


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
        "http://100.100.100.200/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0:9/",
        "http://224.0.0.1/",
        "http://localhost:9/",
    ],
)
async def test_every_kind_of_non_public_address_is_refused(url: str):
    """Metadata, private, CGNAT, loopback (v4, v6, mapped, by name), ULA, unspecified and
    multicast addresses are all refused before a connection is tried."""
    fetcher = HttpxFetcher(timeout=5)
    with pytest.raises(Refused, match="not a public address"):
        await fetcher.fetch(Request(url))
    await fetcher.aclose()


async def test_allow_private_reaches_any_address():
    """allow_private opens every network."""
    with RawServer(lambda path: response(200, b"ok"), host="127.0.5.7") as server:
        fetcher = HttpxFetcher(allow_private=True)
        assert (await fetcher.fetch(Request(server.url()))).body == b"ok"
        await fetcher.aclose()


async def test_a_crawl_never_reaches_a_private_address_it_was_not_allowed(
    redis_url: str, tmp_path: Path
) -> None:
    """A test site's link to 127.0.5.7 (loopback, not among the allowed addresses) and a
    redirect to it are refused before connecting: that server logs nothing, the pages
    are dead-lettered with the reason, and nothing from it reaches the output."""
    with RawServer(lambda path: response(200, b"<title>internal</title>"), "127.0.5.7") as inner:
        internal = inner.url("/admin")
        site = make_site(
            {
                (host(0), "/"): page("root", internal, href(host(0), "/moved")),
                (host(0), "/moved"): redirect(302, inner.url("/latest/meta-data/")),
            }
        )
        crew = Crew(redis_url, new_crawl_name(), tmp_path)
        with SiteServer(site) as server:
            await crawl_in_process(crew, [fast_settings(max_attempts=1)], [server.site.root])
        with Queue(redis_url, crew.crawl) as queue:
            dead = queue.dead()
    assert inner.paths == []
    assert set(dead) == {internal, inner.url("/latest/meta-data/")}
    assert all("127.0.5.7 is not a public address" in why for why in dead.values())
    assert "internal" not in json.dumps(crew.items())


# TLS


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context whose certificate (for 127.0.0.2) a CA the fetcher trusts signed."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.2").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx's TLS context reads it
    return context


async def test_an_https_answer_is_read_over_tls_with_its_peer_address(tls_server: ssl.SSLContext):
    """The pools' own connections speak TLS: the body arrives, the peer's address is kept."""
    answer = response(200, b"<title>over tls</title>", Content_Type="text/html")
    with RawServer(lambda path: answer, tls=tls_server) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host], keep_raw=True)
        try:
            got = await fetcher.fetch(Request(server.url("/s")))
        finally:
            await fetcher.aclose()
    assert (got.status, got.title(), server.paths) == (200, "over tls", ["/s"])
    assert got.exchange is not None and got.exchange.address == "127.0.0.2"


async def test_an_untrusted_certificate_fails_the_fetch_saying_so():
    """Without the CA, the handshake fails: a FetchError naming TLS, nothing requested."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.2").configure_cert(context)
    with RawServer(lambda path: response(200, b"secret"), tls=context) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host])
        with pytest.raises(FetchError, match=r"TLS handshake failed.*CERTIFICATE_VERIFY_FAILED"):
            await fetcher.fetch(Request(server.url()))
        await fetcher.aclose()
    assert server.paths == []


async def test_https_to_a_plain_http_server_says_it_does_not_speak_tls():
    """A TLS hello answered in plain text: the message says to try http://."""
    with RawServer(lambda path: response(400, b"")) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host])
        url = server.url().replace("http://", "https://")
        with pytest.raises(FetchError, match="does not speak TLS there"):
            await fetcher.fetch(Request(url))
        await fetcher.aclose()


# connections kept alive


async def test_a_kept_alive_connection_serves_the_next_request():
    """Requests to one origin, one after another, go over one connection."""
    with SiteServer(make_site({(host(0), "/"): page("a"), (host(0), "/b"): page("b")})) as server:
        fetcher = HttpxFetcher(allow_nets=[host(0)])
        urls = [server.site.root + path for path in ("b", "", "b")]
        statuses = [(await fetcher.fetch(Request(url))).status for url in urls]
        pools = fetcher._pools
        assert pools is not None
        (pool,) = [p.transport for p in pools._pools.values()]
        kept = len(pool._open)
        await fetcher.aclose()
    assert (statuses, kept) == ([200, 200, 200], 1)


async def test_a_connection_the_server_closed_while_idle_is_not_reused():
    """An answer without ``Connection: close`` whose server then hangs up: the next
    request opens a new connection instead of failing on the dead one."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
    with RawServer(lambda path: [head]) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host])
        first = await fetcher.fetch(Request(server.url("/1")))
        assert await trio.to_thread.run_sync(lambda: server.wait_for_ended(1, 10.0))
        second = await fetcher.fetch(Request(server.url("/2")))
        await fetcher.aclose()
    assert (first.body, second.body, server.paths) == (b"ok", b"ok", ["/1", "/2"])


def test_a_renderers_group_with_a_request_not_sent_is_not_sent() -> None:
    """A rendered page's requests fail together: one the worker may no longer send makes
    the page go back untried (NotSent), not a failed attempt; a group without one stays."""
    from hashcrawl._run._dispatcher import not_sent_in

    assert not_sent_in(BaseExceptionGroup("render", [ValueError("x"), NotSent("moved")]))
    assert not not_sent_in(BaseExceptionGroup("render", [ValueError("x")]))
