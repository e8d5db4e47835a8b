"""Connections for the default fetcher: a pool per origin, connecting only where an
:class:`AddressPolicy` allows, and a last check right before a request's bytes leave.

The pools bound what a crawl over many hosts holds open (``max_connections`` in flight
and as many pools, the least recently used idle ones closed first). Each connection
goes only to an address the policy allows, checked on the address actually connected
to; and a task that set :func:`sending_only_while` has its check asked again as its
request is written, so a request that waited (for a connection, a pause) is not sent
once its worker may no longer fetch the host.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol

import attrs
import httpcore
import httpx
import trio

from hashcrawl._core._proxies import Proxy
from hashcrawl._exceptions import NotSent as NotSent
from hashcrawl._exceptions import Refused
from hashcrawl._web._addresses import AddressPolicy, literal_address
from hashcrawl._web._origin import OriginPool

_may_send: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "hashcrawl_may_send", default=None
)


class sending_only_while:  # lower case: it replaced a contextmanager function
    """Have this task's requests ask ``check`` again right before their bytes are written.

    The worker checks that it may fetch a host before it calls the fetcher, but a request
    can then wait (for a free connection, a connect, the scheduler) and the process can
    be paused meanwhile. :class:`HttpxFetcher`'s own pools ask ``check`` again as the
    request is written to the socket, and raise :class:`NotSent` if it says no.

    A class, not a ``contextmanager``: it is entered once a request, and a generator's
    two steps cost more than the contextvar's set and reset.
    """

    __slots__ = ("_check", "_token")

    def __init__(self, check: Callable[[], bool]) -> None:
        self._check = check

    def __enter__(self) -> None:
        self._token = _may_send.set(self._check)

    def __exit__(self, *_: object) -> None:
        _may_send.reset(self._token)


_before_send: contextvars.ContextVar[Callable[[], Awaitable[None]] | None] = contextvars.ContextVar(
    "hashcrawl_before_send", default=None
)


@contextlib.contextmanager
def sending_after(hook: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """Have this task's requests await ``hook`` as their bytes are about to be written,
    on a connection made already, before the check of :class:`sending_only_while`: the
    place to wait for a turn that a slow connect or TLS handshake must not eat into.
    ``hook`` is awaited before each write (a request's later writes included)."""
    token = _before_send.set(hook)
    try:
        yield
    finally:
        _before_send.reset(token)


def sending_also_while(check: Callable[[], bool]) -> sending_only_while:
    """As :class:`sending_only_while`, with ``check`` asked after the task's check (if it
    has one): a request leaves only while both say yes."""
    outer = _may_send.get()
    if outer is None:
        return sending_only_while(check)
    return sending_only_while(lambda: outer() and check())


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

    def __init__(self, make_pool: Callable[[], Any], *, max_connections: int) -> None:
        self._make_pool = make_pool
        self._max_pools = max_connections
        self._slots = trio.Semaphore(max_connections)
        self._pools: OrderedDict[tuple[str, str, int | None], _Pool] = OrderedDict()

    @classmethod
    def of(
        cls, *, max_connections: int, max_per_host: int, policy: AddressPolicy | None = None
    ) -> OriginPools:
        """An :class:`OriginPool` per origin, each up to ``max_per_host`` connections,
        connecting only where ``policy`` allows (default: public addresses only). These
        pools take httpcore's requests, not httpx's (``HttpxFetcher`` sends through
        them with httpcore alone)."""
        # One TLS context for all pools: building one loads the CA bundle, ~10 ms each.
        tls = httpx.create_ssl_context()
        tls.set_alpn_protocols(["http/1.1"])  # as httpcore sets it on each connect
        policy = policy if policy is not None else AddressPolicy()

        def make_pool() -> OriginPool:
            # Keep-alive as httpx's transport keeps it (5 s); HTTP/1.1 only, as it speaks.
            return OriginPool(
                _GatedBackend(policy),
                tls=tls,
                max_connections=max_per_host,
                keepalive_expiry=httpx.Limits().keepalive_expiry or 5.0,
            )

        return cls(make_pool, max_connections=max_connections)

    @classmethod
    def through(
        cls, proxy: Proxy, *, max_connections: int, max_per_host: int, policy: AddressPolicy
    ) -> OriginPools:
        """Pools like :meth:`of`'s whose connections go to ``proxy`` (forwarding http,
        tunnelling https with CONNECT): ``policy`` judges the proxy's address; the
        page's host is the proxy's to resolve and reach."""
        tls = httpx.create_ssl_context()
        auth = (proxy.username, proxy.password) if proxy.username or proxy.password else None
        url = httpcore.URL(scheme=proxy.scheme.encode(), host=proxy.host.encode(), port=proxy.port)

        def make_pool() -> httpcore.AsyncHTTPProxy:
            return httpcore.AsyncHTTPProxy(
                url, proxy_auth=auth, ssl_context=tls, max_connections=max_per_host,
                keepalive_expiry=httpx.Limits().keepalive_expiry or 5.0,
                network_backend=_GatedBackend(policy),
            )  # fmt: skip

        return cls(make_pool, max_connections=max_connections)

    async def handle_async_request(self, request: Any) -> Any:
        """Send ``request`` (httpx's, or httpcore's with pools of httpcore's) through its
        origin's pool; the response's stream gives back its slot once closed."""
        try:  # a free slot is taken without a trip through the scheduler
            self._slots.acquire_nowait()
        except trio.WouldBlock:
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
    transport: Any  # an httpx transport, or an OriginPool
    active: int = 0  # responses not yet closed: a pool is closed only with none


class _Body(Protocol):
    """A response's body stream, httpx's or httpcore's: its chunks, and its close."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class _Released(httpx.AsyncByteStream):
    """A response body that gives back its pool's use and its slot once closed."""

    def __init__(self, stream: _Body, pool: _Pool, slots: trio.Semaphore) -> None:
        self._stream, self._pool, self._slots = stream, pool, slots
        self._open = True

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the body's own chunks, no generator between

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._open:
                self._open = False
                self._pool.active -= 1
                self._slots.release()


class _GatedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to addresses its policy allows, and whose
    streams are :class:`_GatedStream` s.

    The host is resolved once, here, and the connection made to an address checked:
    a name that resolves differently the second time (DNS rebinding) cannot slip
    through. TLS's server name and the Host header come from the URL, not from here.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy

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
            _connect, port=port, timeout=timeout, local_address=local_address
        )
        for address in allowed[:-1]:  # the next address if one refuses, as browsers do
            with contextlib.suppress(httpcore.ConnectError):
                return _GatedStream(await connect(address), socket_options)
        return _GatedStream(await connect(allowed[-1]), socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError, OSError):
            with trio.fail_after(_or_inf(timeout)):
                stream = await trio.open_unix_socket(path)
        return _GatedStream(stream, socket_options)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


async def _connect(
    address: str, *, port: int, timeout: float | None, local_address: str | None
) -> trio.SocketStream:
    """A TCP connection to ``address`` (TCP_NODELAY, trio's default), errors as httpcore's."""
    with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError, OSError):
        with trio.fail_after(_or_inf(timeout)):
            return await trio.open_tcp_stream(address, port, local_address=local_address)


class _GatedStream(httpcore.AsyncNetworkStream):
    """A connection that asks the task's check before it writes a request's bytes.

    Between the check and the socket's send there is no await: a pause can still fall
    in that gap, of microseconds, but no longer in a wait for a connection.

    It does what httpcore's ``TrioStream`` does (errors mapped to httpcore's the same
    way), without that class's two context managers around every read and write when
    no timeout is given: the default fetcher gives none, its deadline is the
    exchange's (``trio.fail_after`` around it).
    """

    def __init__(self, stream: trio.abc.Stream, socket_options: Iterable[Any] | None) -> None:
        self._stream = stream
        for option in socket_options or ():
            self._socket().setsockopt(*option)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # An empty write (the end of a bodiless request) sends nothing; the request's
        # first bytes were checked already, and refusing now would hide that they left.
        if not buffer:
            return
        hook = _before_send.get()
        if hook is not None:
            await hook()
        check = _may_send.get()
        if check is not None and not check():
            raise NotSent("this worker may no longer fetch the host")
        try:
            if timeout is None:
                await self._stream.send_all(buffer)
            else:
                with trio.fail_after(timeout):
                    await self._stream.send_all(buffer)
        except trio.TooSlowError as exc:
            raise httpcore.WriteTimeout(exc) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpcore.WriteError(exc) from exc

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            if timeout is None:
                return bytes(await self._stream.receive_some(max_bytes))  # no copy of bytes
            with trio.fail_after(timeout):
                return bytes(await self._stream.receive_some(max_bytes))
        except trio.TooSlowError as exc:
            raise httpcore.ReadTimeout(exc) from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpcore.ReadError(exc) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        tls = trio.SSLStream(
            self._stream, ssl_context, server_hostname=server_hostname, https_compatible=True
        )
        try:
            with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
                with trio.fail_after(_or_inf(timeout)):
                    await tls.do_handshake()
        except Exception:
            await self.aclose()
            raise
        return _GatedStream(tls, ())

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object" and isinstance(self._stream, trio.SSLStream):
            return self._stream._ssl_object  # as httpcore's TrioStream reads it
        if info == "client_addr":
            return self._socket().getsockname()
        if info == "server_addr":
            return self._socket().getpeername()
        if info == "socket":
            return self._socket()
        if info == "is_readable":
            return self._socket().is_readable()
        return None

    def _socket(self) -> trio.socket.SocketType:
        stream = self._stream
        while isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        assert isinstance(stream, trio.SocketStream)
        return stream.socket


def _or_inf(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


@contextlib.contextmanager
def _mapped(
    too_slow: type[Exception], broken: type[Exception], *also: type[Exception]
) -> Iterator[None]:
    """trio's errors as httpcore's: a timeout as ``too_slow``, a broken stream (or
    ``also``) as ``broken``, each raised from the original (once a connection)."""
    breaks: tuple[type[Exception], ...] = (trio.BrokenResourceError, *also)
    try:
        yield
    except trio.TooSlowError as exc:
        raise too_slow(exc) from exc
    except breaks as exc:
        raise broken(exc) from exc


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
