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
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

import attrs
import httpcore
import httpx
import trio

from hashcrawl._exceptions import Refused
from hashcrawl._web._addresses import AddressPolicy, literal_address

_may_send: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "hashcrawl_may_send", default=None
)


class NotSent(Exception):
    """A request was stopped before it left: its worker may no longer fetch the host."""


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
        """Pools of httpcore's ``AsyncConnectionPool``, each up to ``max_per_host``
        connections, connecting only where ``policy`` allows (default: public addresses
        only). These pools take httpcore's requests, not httpx's (``HttpxFetcher``
        sends through them with httpcore alone)."""
        # One TLS context for all pools: building one loads the CA bundle, ~10 ms each.
        tls = httpx.create_ssl_context()
        policy = policy if policy is not None else AddressPolicy()

        def make_pool() -> httpcore.AsyncConnectionPool:
            # As httpx's AsyncHTTPTransport makes its pool (HTTP/1.1, keep-alive 5 s).
            return httpcore.AsyncConnectionPool(
                ssl_context=tls,
                max_connections=max_per_host,
                max_keepalive_connections=max_per_host,
                keepalive_expiry=httpx.Limits().keepalive_expiry,
                network_backend=_GatedBackend(httpcore.TrioBackend(), policy),
            )

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
    transport: Any  # an httpx transport, or httpcore's AsyncConnectionPool
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
