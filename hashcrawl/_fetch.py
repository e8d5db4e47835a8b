"""Fetchers: the protocol every fetcher meets, and the default one on httpx.

A fetcher only fetches. Pacing, robots.txt, retries, leases and routing are the
worker's, and apply to any fetcher alike.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import httpx

from ._exceptions import FetchError
from ._models import Request, Response
from ._version import DEFAULT_USER_AGENT


@runtime_checkable
class Fetcher(Protocol):
    """Anything with ``async def fetch(request) -> Response``.

    Raise :class:`hashcrawl.FetchError` for a failure worth retrying; return a response
    (any status) otherwise.
    """

    async def fetch(self, request: Request) -> Response: ...


class HttpxFetcher:
    """The default fetcher: httpx under trio, no automatic redirects, a body size cap.

    Redirects come back as 3xx responses: the worker routes their target to its host's
    owner like any other link, so each host's politeness stays with its owner.
    """

    def __init__(
        self,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        timeout: float = 30.0,
        max_bytes: int = 10 * 1024 * 1024,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.AsyncClient(
            headers={"User-Agent": user_agent},
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            limits=limits,
            transport=transport,
        )

    async def fetch(self, request: Request) -> Response:
        try:
            async with self._client.stream("GET", request.url) as answer:
                body = await self._read(answer)
        except httpx.HTTPError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}"[:300]) from None
        return Response(
            url=str(answer.url),
            status=answer.status_code,
            headers=answer.headers,
            body=body,
            request=request,
        )

    async def _read(self, answer: httpx.Response) -> bytes:
        chunks, size = [], 0
        async for chunk in answer.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchError(f"body larger than {self.max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        await self._client.aclose()
