"""Fetchers: the protocol every fetcher meets, and the default one on httpx.

A fetcher only fetches. Pacing, robots.txt, retries, leases and routing are the
worker's, and apply to any fetcher alike.

The default fetcher bounds what one response can cost: ``timeout`` is a deadline for
the whole exchange (a server dripping a byte a second cannot stretch it), the body is
decoded under ``max_body`` as it is read (so a gzip bomb inflates no further than the
cap), and every connection goes only to an address its :class:`AddressPolicy` allows,
checked on the address actually connected to.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import functools
import http.cookiejar
import io
import logging
import socket
import ssl
import urllib.request
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import attrs
import httpcore
import httpx
import trio

from hashcrawl._exceptions import FetchError, Refused
from hashcrawl._version import DEFAULT_USER_AGENT
from hashcrawl._web._addresses import AddressPolicy, literal_address
from hashcrawl._web._models import Exchange, Request, Response

log = logging.getLogger("hashcrawl")
#: The content codings the default fetcher decodes under its body cap, and so asks for.
ACCEPT_ENCODING = "gzip, deflate"
_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # zlib detects which header the stream has
_PIECE = 256 * 1024  # most bytes inflated at once

_may_send: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "hashcrawl_may_send", default=None
)


class NotSent(Exception):
    """A request was stopped before it left: its worker may no longer fetch the host."""


@contextlib.contextmanager
def sending_only_while(check: Callable[[], bool]) -> Iterator[None]:
    """Have this task's requests ask ``check`` again right before their bytes are written.

    The worker checks that it may fetch a host before it calls the fetcher, but a request
    can then wait (for a free connection, a connect, the scheduler) and the process can
    be paused meanwhile. :class:`HttpxFetcher`'s own pools ask ``check`` again as the
    request is written to the socket, and raise :class:`NotSent` if it says no.
    """
    token = _may_send.set(check)
    try:
        yield
    finally:
        _may_send.reset(token)


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
    if isinstance(exc, httpx.TimeoutException):
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
    like), which httpx's own transport honours; then no address is checked.

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
    ) -> None:
        self.max_body, self.timeout, self.keep_raw = max_body, timeout, keep_raw
        policy = AddressPolicy.of(allow_nets, allow_private)
        if transport is None and not _environment_proxies():
            transport = OriginPools.of(
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

    async def fetch(self, request: Request) -> Response:
        started = datetime.datetime.now(datetime.UTC)
        try:
            deadline = self.timeout if request.timeout is None else request.timeout
            with trio.fail_after(deadline):
                async with self._client.stream(
                    request.method,
                    request.url,
                    headers=list(request.headers) or None,
                    content=request.body or None,
                    timeout=deadline,
                ) as answer:
                    address = _peer_address(answer) if self.keep_raw else None
                    body, raw, truncated = await self._read(answer)
        except trio.TooSlowError:
            raise FetchError(f"no whole answer within the timeout ({deadline:g} s)") from None
        except httpx.HTTPError as exc:
            raise FetchError(fetch_failure(exc)[:300]) from None
        exchange = None
        if raw is not None:
            exchange = _exchange(answer, request.body, raw, started, address, self._hidden)
        return Response(
            url=str(answer.url),
            status=answer.status_code,
            headers=answer.headers,
            body=body,
            request=request,
            truncated=truncated,
            exchange=exchange,
        )

    async def _read(self, answer: httpx.Response) -> tuple[bytes, bytes | None, bool]:
        """The body decoded, and as received (with ``keep_raw``), each cut at
        ``max_body``; and whether it was cut."""
        if answer.is_stream_consumed:  # a given transport's response, in memory already
            # Decoded already: what was received is not known, so nothing claims to be it.
            return answer.content[: self.max_body], None, len(answer.content) > self.max_body
        decode = _decoder(answer.headers.get_list("content-encoding", split_commas=True))
        # BytesIO hands its buffer over at getvalue() where bytearray would be copied:
        # a body at the cap costs its size once, not twice. Unencoded, the body as
        # received is the body itself, not a second copy.
        body, truncated = io.BytesIO(), False
        raw = io.BytesIO() if self.keep_raw and decode is not _as_received else None
        try:
            async for chunk in answer.aiter_raw():
                if truncated:
                    continue  # iterating on ends httpx's generators (a ReadError, or the end)
                cut = False
                if raw is not None:
                    # Bytes that inflate to nothing must not grow the kept copy unbounded.
                    room = self.max_body - raw.tell()
                    cut, chunk = len(chunk) > room, chunk[:room]
                    raw.write(chunk)
                truncated = self._keep(body, decode(chunk)) or cut
                if truncated:
                    await answer.aclose()  # reads no more
        except httpx.HTTPError:
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
    answer: httpx.Response,
    body_sent: bytes,
    body: bytes,
    started: datetime.datetime,
    address: str | None,
    hidden: frozenset[bytes],
) -> Exchange:
    """The exchange behind ``answer`` as it went over the wire (``body``: as received)."""
    sent = answer.request
    version = answer.http_version.encode("ascii", "replace")
    request_line = b"%s %s %s" % (sent.method.encode("ascii"), sent.url.raw_path, version)
    asked = [(n, b"redacted" if n.lower() in hidden else v) for n, v in sent.headers.raw]
    reason = answer.extensions.get("reason_phrase", b"")
    status_line = b"%s %d %s" % (version, answer.status_code, reason)
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
        address=address,
    )


def _head(first: bytes, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    lines = [first, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _peer_address(answer: httpx.Response) -> str | None:
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


class OriginPools(httpx.AsyncBaseTransport):
    """A transport that gives each origin (scheme, host, port) a connection pool of its own.

    httpcore's pool walks all of its connections on every request and on every response
    close, and polls the socket of each idle one. One pool shared by every host a worker
    owns made each page cost O(hosts): 40% of a worker's CPU in the benchmark. A pool
    per origin walks only that host's one or two connections.

    Pools are made on first use. At most ``max_connections`` requests are in flight at
    once over all origins, and at most ``max_connections`` pools are kept: a new one
    closes the least recently used pools that have nothing in flight. So a crawl over
    many hosts keeps a bounded number of sockets open.
    """

    def __init__(
        self, make_pool: Callable[[], httpx.AsyncBaseTransport], *, max_connections: int
    ) -> None:
        self._make_pool = make_pool
        self._max_pools = max_connections
        self._slots = trio.Semaphore(max_connections)
        self._pools: OrderedDict[tuple[str, str, int | None], _Pool] = OrderedDict()

    @classmethod
    def of(
        cls, *, max_connections: int, max_per_host: int, policy: AddressPolicy | None = None
    ) -> OriginPools:
        """Pools of ``httpx.AsyncHTTPTransport``, each up to ``max_per_host`` connections,
        connecting only where ``policy`` allows (default: public addresses only)."""
        # One TLS context for all pools: building one loads the CA bundle, ~10 ms each.
        tls = httpx.create_ssl_context()
        limits = httpx.Limits(max_connections=max_per_host, max_keepalive_connections=max_per_host)
        policy = policy if policy is not None else AddressPolicy()

        def make_pool() -> httpx.AsyncBaseTransport:
            transport = httpx.AsyncHTTPTransport(verify=tls, limits=limits, trust_env=False)
            return _gated(transport, policy)

        return cls(make_pool, max_connections=max_connections)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._slots.acquire()
        pool = None
        try:
            pool = await self._pool_for((request.url.scheme, request.url.host, request.url.port))
            response = await pool.transport.handle_async_request(request)
        except BaseException:
            if pool is not None:  # a failed request leaves its pool idle, so closable
                pool.active -= 1
            self._slots.release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Released(response.stream, pool, self._slots)
        return response

    async def _pool_for(self, origin: tuple[str, str, int | None]) -> _Pool:
        pool = self._pools.get(origin)
        if pool is not None:
            self._pools.move_to_end(origin)
            pool.active += 1
            return pool
        pool = self._pools[origin] = _Pool(self._make_pool())
        pool.active += 1  # before closing others, which awaits: this one is in use
        try:
            await self._close_idle()
        except BaseException:
            pool.active -= 1
            raise
        return pool

    async def _close_idle(self) -> None:
        excess = len(self._pools) - self._max_pools
        idle = [origin for origin, pool in self._pools.items() if not pool.active]
        for origin in idle[: max(0, excess)]:
            await self._pools.pop(origin).transport.aclose()

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.transport.aclose()


@attrs.define
class _Pool:
    transport: httpx.AsyncBaseTransport
    active: int = 0  # responses not yet closed: a pool is closed only with none


class _Released(httpx.AsyncByteStream):
    """A response body that gives back its pool's use and its slot once closed."""

    def __init__(self, stream: httpx.AsyncByteStream, pool: _Pool, slots: trio.Semaphore) -> None:
        self._stream, self._pool, self._slots = stream, pool, slots
        self._open = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._open:
                self._open = False
                self._pool.active -= 1
                self._slots.release()


def _gated(transport: httpx.AsyncHTTPTransport, policy: AddressPolicy) -> httpx.AsyncHTTPTransport:
    """``transport``, connecting only where ``policy`` allows, its sockets checking
    :func:`sending_only_while` before each write.

    httpx (0.28) has no public way to choose its pool's network backend (encode/httpx
    PR 3749 would add one), so the pool's backend is wrapped where it stands.
    tests/test_fetch.py fails if a new httpx or httpcore moves it.
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _GatedBackend(backend, policy)  # type: ignore[union-attr]
    else:
        # Without the backend there is no check of addresses: refuse to run so.
        raise RuntimeError("httpx changed: hashcrawl cannot check the addresses it connects to")
    return transport


class _GatedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to addresses its policy allows, and whose
    streams are :class:`_GatedStream` s.

    The host is resolved once, here, and the connection made to an address checked:
    a name that resolves differently the second time (DNS rebinding) cannot slip
    through. TLS's server name and the Host header come from the URL, not from here.
    """

    def __init__(self, backend: httpcore.AsyncNetworkBackend, policy: AddressPolicy) -> None:
        self._backend, self._policy = backend, policy

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await _resolve(host, port)
        allowed = [address for address in addresses if self._policy.allows(address)]
        if not allowed:
            raise Refused(self._policy.refusal(host, addresses))
        connect = functools.partial(
            self._backend.connect_tcp,
            port=port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )
        for address in allowed[:-1]:  # the next address if one refuses, as browsers do
            with contextlib.suppress(httpcore.ConnectError):
                return _GatedStream(await connect(address))
        return _GatedStream(await connect(allowed[-1]))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _GatedStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _GatedStream(httpcore.AsyncNetworkStream):
    """A connection that asks the task's check before it writes a request's bytes.

    Between the check and the socket's send there is no await: a pause can still fall
    in that gap, of microseconds, but no longer in a wait for a connection.
    """

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # An empty write (the end of a bodiless request) sends nothing; the request's
        # first bytes were checked already, and refusing now would hide that they left.
        check = _may_send.get()
        if buffer and check is not None and not check():
            raise NotSent("this worker may no longer fetch the host")
        await self._stream.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _GatedStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


async def _resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order.

    Raises:
        httpcore.ConnectError: it does not resolve (httpx makes it a ConnectError).
    """
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise httpcore.ConnectError(f"{host!r} resolves to no address")
    return addresses


def _environment_proxies() -> bool:
    """Whether httpx's default transport would send some requests through a proxy."""
    return any(scheme in urllib.request.getproxies() for scheme in ("http", "https", "all"))
