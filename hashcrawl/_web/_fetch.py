"""Fetchers: the protocol every fetcher meets, and the default one on httpx.

A fetcher only fetches. Pacing, robots.txt, retries, leases and routing are the
worker's, and apply to any fetcher alike.

The default fetcher bounds what one response can cost: ``timeout`` is a deadline for
the whole exchange (a server dripping a byte a second cannot stretch it), the body is
decoded under ``max_body`` as it is read (so a gzip bomb inflates no further than the
cap), and every connection goes only to an address its :class:`AddressPolicy` allows,
checked on the address actually connected to (the pools and that check: ``_pools``).
"""

from __future__ import annotations

import datetime
import http.cookiejar
import io
import logging
import socket
import ssl
import urllib.request
import zlib
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol, runtime_checkable

import httpcore
import httpx
import trio

from hashcrawl._exceptions import FetchError, Refused
from hashcrawl._version import DEFAULT_USER_AGENT
from hashcrawl._web._addresses import AddressPolicy
from hashcrawl._web._models import Exchange, Request, Response
from hashcrawl._web._pools import NotSent as NotSent
from hashcrawl._web._pools import OriginPools as OriginPools
from hashcrawl._web._pools import sending_only_while as sending_only_while
from hashcrawl._web._proxied import ProxyRoutes, Route, pool_of
from hashcrawl._web._wire import URLParts, WireRequest, plain_url

log = logging.getLogger("hashcrawl")
#: The content codings the default fetcher decodes under its body cap, and so asks for.
ACCEPT_ENCODING = "gzip, deflate"
_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # zlib detects which header the stream has
_PIECE = 256 * 1024  # most bytes inflated at once
#: httpcore's errors, which httpx turns into its own of the same names (ConnectError...).
_CORE_ERRORS = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
)
_TRANSPORT_ERRORS = (httpx.HTTPError, *_CORE_ERRORS)


@runtime_checkable
class Fetcher(Protocol):
    """Anything with ``async def fetch(request) -> Response``.

    Raise :class:`hashcrawl.FetchError` for a failure worth retrying; return a response
    (any status) otherwise.
    """

    async def fetch(self, request: Request) -> Response: ...


def fetch_failure(exc: BaseException) -> str:
    """Why a fetch failed, in words a person acts on (httpx often says only ConnectError)."""
    causes = list(_causes(exc))
    for cause in causes:
        if isinstance(cause, ssl.SSLError):
            if "WRONG_VERSION_NUMBER" in str(cause) or "RECORD_LAYER" in str(cause):
                return "TLS handshake failed: the server does not speak TLS there (try http://)"
            return f"TLS handshake failed: {cause}"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing listens at that address and port)"
        if isinstance(cause, socket.gaierror):
            return f"DNS lookup failed: {cause.strerror or cause}"
    if isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    said = next((str(c) for c in causes if str(c)), "")
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, groups opened, at most 20 deep."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(c for c in (current.__cause__, current.__context__) if c is not None)


class HttpxFetcher:
    """The default fetcher: httpx under trio, no automatic redirects, bounded responses.

    Redirects come back as 3xx responses: the worker routes their target to its host's
    owner like any other link, so each host's politeness stays with its owner.

    Each origin gets its own small connection pool (:class:`OriginPools`), whose
    connections go only to addresses ``allow_nets``/``allow_private`` allow, unless a
    ``transport`` is given or the environment names a proxy (``HTTP_PROXY`` and the
    like), which httpx's own transport honours; then no address is checked. Through
    ``proxies`` the proxy's address is checked, and a page's host only when it is an
    IP address: the proxy resolves and reaches the rest.

    A request's method, headers, body and timeout are sent as it gives them; ``headers``
    here go with every request (a request's own header of the same name wins), and
    never travel through Redis: the place for credentials.

    Args:
        timeout: seconds for the whole exchange, connecting and the body included (a
            request's own ``timeout`` replaces it).
        max_body: the most body bytes kept, counted after decoding; the rest is not
            read, and the response says ``truncated``.
        allow_nets: networks (CIDR) that may be reached besides public addresses.
        allow_private: reach any address, loopback and private networks included.
        keep_raw: also keep each exchange as it went over the wire (``response.exchange``,
            for an archive): the body as received is kept under ``max_body`` too, and
            costs memory only when it was content-encoded (otherwise it is the body).
        proxies: forward proxies (``http://[user:password@]host:port``) every request
            goes through, each host through one of them (see ``_proxied``); they
            replace any proxy the environment names.
        proxy_retry_status: statuses that move a host to the next proxy (and fail the
            fetch, to be retried), besides 407.
        allow_request_proxy: send a request that names its own proxy through it (else
            it is refused).
    """

    def __init__(
        self,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        timeout: float = 30.0,
        max_body: int = 10 * 1024 * 1024,
        max_connections: int = 64,
        max_per_host: int = 4,
        allow_nets: Iterable[str] = (),
        allow_private: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Iterable[tuple[str, str]] = (),
        keep_raw: bool = False,
        proxies: Iterable[str] = (),
        proxy_retry_status: Iterable[int] = (),
        allow_request_proxy: bool = False,
    ) -> None:
        self.max_body, self.timeout, self.keep_raw = max_body, timeout, keep_raw
        policy = AddressPolicy.of(allow_nets, allow_private)
        # Always there: a request naming its own proxy is refused unless allowed.
        self._routes = ProxyRoutes(
            pool_of(proxies), policy=policy, max_connections=max_connections,
            max_per_host=max_per_host, retry_status=proxy_retry_status,
            allow_request_proxy=allow_request_proxy,
        )  # fmt: skip
        self._retry_status = self._routes.retry_status
        # With its own pools the fetcher sends through httpcore itself (see _fetch_direct);
        # the client below then only holds the headers and builds unusual requests.
        self._pools: OriginPools | None = None
        if transport is None and (proxies or not _environment_proxies()):
            self._pools = transport = OriginPools.of(
                max_connections=max_connections, max_per_host=max_per_host, policy=policy
            )
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        every = httpx.Headers({"User-Agent": user_agent, "Accept-Encoding": ACCEPT_ENCODING})
        headers = list(headers)
        for name, value in headers:
            every[name] = value
        # The --header values are credentials: an archive shows that they were sent, not them.
        self._hidden = frozenset(name.lower().encode() for name, _ in headers)
        # Cookies are the worker's, kept per host by its owner (see _cookies): this
        # client's own jar, one for every host, accepts none.
        refusing = http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self._client = httpx.AsyncClient(
            headers=every,
            cookies=refusing,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            limits=limits,
            transport=transport,
        )
        # A jar that refuses every cookie still costs httpx urllib stand-ins of the
        # request and response on every answer (~3% of a page): one that takes none
        # looks at none.
        self._client._cookies = _NoCookies(refusing)
        # What every plain GET sends after its Host, as httpx's client would merge it.
        self._every = self._client.headers.raw

    async def fetch(self, request: Request) -> Response:
        started = datetime.datetime.now(datetime.UTC) if self.keep_raw else None
        deadline = self.timeout if request.timeout is None else request.timeout
        route = None  # a request without a proxy costs two tests here, no await
        if self._routes.proxies or request.proxy is not None or request.meta is not None:
            route = await self._routes.route(request)
        try:
            with trio.fail_after(deadline):
                if route is not None:
                    answer, body, raw, truncated = await self._fetch_direct(request, route.pools)
                elif self._pools is not None:
                    answer, body, raw, truncated = await self._fetch_direct(request, self._pools)
                else:
                    answer, body, raw, truncated = await self._fetch_httpx(request, deadline)
        except trio.TooSlowError:
            why = f"no whole answer within the timeout ({deadline:g} s)"
            raise FetchError(self._moved(route, why)) from None
        except _TRANSPORT_ERRORS as exc:
            raise FetchError(self._moved(route, fetch_failure(exc)[:300])) from None
        except Refused as exc:
            if route is None:
                raise
            raise Refused(f"proxy {route.proxy.shown}: {exc}") from None
        if route is not None and answer.status in self._retry_status:
            said = "asks for credentials" if answer.status == 407 else "answered"
            raise FetchError(self._moved(route, f"proxy {said}: status {answer.status}"))
        exchange = None
        if raw is not None:
            assert started is not None
            exchange = _exchange(answer, request.body, raw, started, self._hidden)
        return Response(
            url=answer.url,
            status=answer.status,
            headers=answer.headers,
            body=body,
            request=request,
            truncated=truncated,
            exchange=exchange,
        )

    def _moved(self, route: Route | None, why: str) -> str:
        """``why`` a fetch failed; through a proxy, its host moved to the next."""
        return why if route is None else self._routes.moved(route, why)

    async def _fetch_direct(self, request: Request, pools: OriginPools) -> _Fetched:
        """``request`` sent through the pools with httpcore alone, bytes on the wire as
        httpx's client would send them (tests/test_fetch.py compares the two).

        httpx's client and transport cost more per request than its connection pool
        (its request and response models, the auth and redirect generators, the cookie
        and hook layers, a wrapper per stream): see docs/performance.md ("The send path").
        """
        plain = not (request.headers or request.body or request.method in ("POST", "PUT", "PATCH"))
        url = plain_url(request.url) if plain else None
        if url is None:
            parsed = httpx.URL(request.url)
            url = URLParts.of(parsed)
        if not plain:
            merged = httpx.Headers(self._client.headers)
            merged.update(list(request.headers))
            body = request.body or None
            head = httpx.Request(request.method, parsed, headers=merged, content=body).headers.raw
        else:  # what httpx.Request builds for a bodiless request without headers of its own
            head = [(b"Host", url.netloc), *self._every] if url.host else self._every
        target = httpcore.URL(scheme=url.scheme, host=url.host, port=url.port, target=url.target)
        core = WireRequest(request.method.encode("ascii"), target, head, request.body)
        got = await pools.handle_async_request(core)
        stream = got.stream  # the pools' own, which gives the slot back once closed
        try:
            headers = httpx.Headers(got.headers)
            address = _peer_address(got) if self.keep_raw else None
            codings = headers.get_list("content-encoding", split_commas=True)
            read = await self._read(stream, stream.aclose, codings)
        finally:
            await stream.aclose()
        answer = _Answer(url.text, got.status, headers, got.extensions, core, address)
        return (answer, *read)

    async def _fetch_httpx(self, request: Request, deadline: float) -> _Fetched:
        """``request`` sent through httpx's client (a given transport, or a proxy's)."""
        async with self._client.stream(
            request.method,
            request.url,
            headers=list(request.headers) or None,
            content=request.body or None,
            timeout=deadline,
        ) as got:
            sent = httpcore.Request(
                got.request.method,
                httpcore.URL(target=got.request.url.raw_path),  # only its target is read
                headers=got.request.headers.raw,
            )
            address = _peer_address(got) if self.keep_raw else None
            status, extensions = got.status_code, got.extensions
            answer = _Answer(str(got.url), status, got.headers, extensions, sent, address)
            if got.is_stream_consumed:  # a given transport's response, in memory already
                # Decoded already: what was received is not known, so nothing claims to be it.
                content = got.content
                return answer, content[: self.max_body], None, len(content) > self.max_body
            codings = got.headers.get_list("content-encoding", split_commas=True)
            return (answer, *await self._read(got.aiter_raw(), got.aclose, codings))

    async def _read(
        self,
        chunks: AsyncIterable[bytes],
        close: Callable[[], Awaitable[None]],
        codings: list[str],
    ) -> tuple[bytes, bytes | None, bool]:
        """The body decoded, and as received (with ``keep_raw``), each cut at
        ``max_body``; and whether it was cut."""
        decode = _decoder(codings)
        # BytesIO hands its buffer over at getvalue() where bytearray would be copied:
        # a body at the cap costs its size once, not twice. Unencoded, the body as
        # received is the body itself, not a second copy.
        body, truncated = io.BytesIO(), False
        raw = io.BytesIO() if self.keep_raw and decode is not _as_received else None
        try:
            async for chunk in chunks:
                if truncated:
                    continue  # iterating on ends httpcore's generators (a ReadError, or the end)
                cut = False
                if raw is not None:
                    # Bytes that inflate to nothing must not grow the kept copy unbounded.
                    room = self.max_body - raw.tell()
                    cut, chunk = len(chunk) > room, chunk[:room]
                    raw.write(chunk)
                truncated = self._keep(body, decode(chunk)) or cut
                if truncated:
                    await close()  # reads no more
        except _TRANSPORT_ERRORS:
            if not truncated:
                raise
        decoded = body.getvalue()
        if raw is None:
            return decoded, decoded if self.keep_raw else None, truncated
        return decoded, raw.getvalue(), truncated

    def _keep(self, body: io.BytesIO, pieces: Iterable[bytes]) -> bool:
        """Write ``pieces`` to ``body`` up to ``max_body``; whether one had to be cut."""
        for piece in pieces:
            room = self.max_body - body.tell()
            if len(piece) > room:
                body.write(piece[:room])
                return True
            body.write(piece)
        return False

    async def aclose(self) -> None:
        """Close the client, and with it every pool it opened."""
        await self._client.aclose()
        await self._routes.aclose()


class _Answer(NamedTuple):
    """What a fetch keeps of its answer, either way it was sent."""

    url: str
    status: int
    headers: httpx.Headers
    extensions: dict[str, Any]
    sent: httpcore.Request  # as it went: method, target and headers
    address: str | None  # the peer's IP address, kept only for an exchange


#: The answer, the body decoded and as received, and whether it was cut.
_Fetched = tuple[_Answer, bytes, bytes | None, bool]


class _NoCookies(httpx.Cookies):
    """A client's cookie jar that never takes a cookie from a response."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass


def _decoder(codings: list[str]) -> Callable[[bytes], Iterable[bytes]]:
    """A function from raw bytes to decoded pieces, each of at most ``_PIECE`` bytes
    (or a raw chunk, at most httpcore's 64 KiB read, when there is no coding).

    Raises:
        Refused: more than one coding ("gzip, gzip"), or one not asked for.
    """
    names = [c.strip().lower() for c in codings if c.strip().lower() not in ("", "identity")]
    if not names:
        return _as_received
    if len(names) > 1:
        raise Refused(f"Content-Encoding {', '.join(names)!r}: stacked encodings are refused")
    if names[0] not in ("gzip", "x-gzip", "deflate"):
        raise Refused(f"Content-Encoding {names[0]!r} was not asked for ({ACCEPT_ENCODING})")
    return _Inflater(raw_fallback=names[0] == "deflate").pieces


def _as_received(raw: bytes) -> tuple[bytes]:
    """The decoder of a body with no content coding."""
    return (raw,)


def _exchange(
    answer: _Answer,
    body_sent: bytes,
    body: bytes,
    started: datetime.datetime,
    hidden: frozenset[bytes],
) -> Exchange:
    """The exchange behind ``answer`` as it went over the wire (``body``: as received)."""
    sent = answer.sent
    version = answer.extensions.get("http_version", b"HTTP/1.1")
    request_line = b"%s %s %s" % (sent.method, sent.url.target, version)
    asked = [(n, b"redacted" if n.lower() in hidden else v) for n, v in sent.headers]
    reason = answer.extensions.get("reason_phrase", b"")
    status_line = b"%s %d %s" % (version, answer.status, reason)
    # httpx hands the body over with its chunking removed: a reader that saw
    # "Transfer-Encoding: chunked" would look for chunks that are not there. The
    # header is kept under StormCrawler's name for headers a crawler changed.
    told = [
        (b"X-Crawler-" + n if n.lower() == b"transfer-encoding" else n, v)
        for n, v in answer.headers.raw
    ]
    return Exchange(
        request_head=_head(request_line, asked),
        request_body=body_sent,
        response_head=_head(status_line, told),
        body=body,
        started=started,
        address=answer.address,
    )


def _head(first: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    lines = [first, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _peer_address(answer: httpx.Response | httpcore.Response) -> str | None:
    """The IP address ``answer`` came from (through a proxy: the proxy's), if known."""
    stream = answer.extensions.get("network_stream")
    try:
        peer = stream.get_extra_info("server_addr") if stream is not None else None
    except OSError:
        return None
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


class _Inflater:
    """Inflates a gzip or zlib stream (or raw deflate, which some servers send as
    "deflate") a bounded piece at a time: input not yet inflated waits in zlib's
    ``unconsumed_tail``, and is never inflated once the body is cut.
    """

    def __init__(self, *, raw_fallback: bool) -> None:
        self._zlib = zlib.decompressobj(_GZIP_OR_ZLIB)
        self._raw_fallback, self._started = raw_fallback, False

    def pieces(self, data: bytes) -> Iterator[bytes]:
        while data:
            piece = self._inflate(data)
            data = self._zlib.unconsumed_tail
            if piece:
                yield piece

    def _inflate(self, data: bytes) -> bytes:
        try:
            piece = self._zlib.decompress(data, _PIECE)
        except zlib.error as exc:
            if not self._raw_fallback or self._started:
                raise FetchError(f"corrupt compressed body: {exc}") from None
            self._zlib, self._raw_fallback = zlib.decompressobj(-zlib.MAX_WBITS), False
            return self._inflate(data)
        self._started = True
        return piece


def _environment_proxies() -> bool:
    """Whether httpx's default transport would send some requests through a proxy."""
    return any(scheme in urllib.request.getproxies() for scheme in ("http", "https", "all"))
