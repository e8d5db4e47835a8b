"""One origin's HTTP/1.1 connections, kept alive between requests.

What httpcore's ``AsyncConnectionPool`` does for one origin, without what a pool of
many origins needs: its queue of requests, its scan of every connection on each
request and on each close, and the ``AsyncHTTPConnection`` layer (and its lock)
between it and the HTTP/1.1 connection. :class:`OriginPools` keeps one of these per
origin. The HTTP/1.1 itself (h11, keep-alive, expiry) is httpcore's connection's.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import httpcore
import trio

_SCHEMES = {b"http": False, b"https": True, b"ws": False, b"wss": True}  # TLS or not


class OriginPool:
    """Up to ``max_connections`` connections to one origin, idle ones reused (the one
    used last first) until they expire or the server closes them.

    Args:
        backend: opens the connections (the address gate, in the default fetcher).
        tls: the TLS context of https connections (ALPN http/1.1 is set on it).
        keepalive_expiry: seconds an idle connection is kept.
    """

    def __init__(
        self,
        backend: httpcore.AsyncNetworkBackend,
        *,
        tls: ssl.SSLContext,
        max_connections: int,
        keepalive_expiry: float,
    ) -> None:
        self._backend, self._tls, self._expiry = backend, tls, keepalive_expiry
        self._slots = trio.Semaphore(max_connections)
        self._idle: list[httpcore.AsyncHTTP11Connection] = []
        self._open: set[httpcore.AsyncHTTP11Connection] = set()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection, or a new one; the response's stream
        gives the connection back once closed."""
        scheme = request.url.scheme
        if scheme not in _SCHEMES:
            shown = scheme.decode("ascii", "replace")
            raise httpcore.UnsupportedProtocol(f"Request URL has an unsupported protocol {shown!r}")
        try:  # a free slot is taken without a trip through the scheduler
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            while True:
                connection = await self._idle_one() or await self._connect(request)
                try:
                    response = await connection.handle_async_request(request)
                    break
                except httpcore.ConnectionNotAvailable:  # an idle one the server closed
                    self._open.discard(connection)
                except BaseException:  # it closed itself
                    self._open.discard(connection)
                    raise
        except BaseException:
            self._slots.release()
            raise
        response.stream = _Returned(response.stream, self, connection)
        return response

    async def _idle_one(self) -> httpcore.AsyncHTTP11Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.is_available() and not connection.has_expired():
                return connection
            await self._close(connection)
        return None

    async def _connect(self, request: httpcore.Request) -> httpcore.AsyncHTTP11Connection:
        origin = request.url.origin
        host = origin.host.decode("ascii")
        stream = await self._backend.connect_tcp(host, origin.port)
        if _SCHEMES[origin.scheme]:
            sni = request.extensions.get("sni_hostname") or host
            stream = await stream.start_tls(self._tls, server_hostname=sni)
        connection = httpcore.AsyncHTTP11Connection(origin, stream, self._expiry)
        self._open.add(connection)
        return connection

    async def _returned(self, connection: httpcore.AsyncHTTP11Connection) -> None:
        """A response's stream was closed: keep its connection if it can serve again."""
        self._slots.release()
        if connection.is_idle():
            self._idle.append(connection)
        else:
            await self._close(connection)

    async def _close(self, connection: httpcore.AsyncHTTP11Connection) -> None:
        self._open.discard(connection)
        with trio.CancelScope(shield=True):
            await connection.aclose()

    async def aclose(self) -> None:
        """Close every connection, idle or in use."""
        connections, self._open, self._idle = list(self._open), set(), []
        for connection in connections:
            with trio.CancelScope(shield=True):
                await connection.aclose()


class _Returned:
    """A response's body, which hands its connection back to its pool once closed."""

    def __init__(
        self, stream: object, pool: OriginPool, connection: httpcore.AsyncHTTP11Connection
    ) -> None:
        self._stream, self._pool, self._connection = stream, pool, connection
        self._open = True

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # type: ignore[attr-defined, no-any-return]

    async def aclose(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            with trio.CancelScope(shield=True):  # as httpcore closes a response
                await self._stream.aclose()  # type: ignore[attr-defined]
        finally:
            await self._pool._returned(self._connection)
