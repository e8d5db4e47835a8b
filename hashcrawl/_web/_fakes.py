"""Stand-ins for the network and the output, for tests and examples: a fetcher that asks a
function (or a dict of pages) instead of the network, as httpx's ``MockTransport`` does,
and a sink that keeps the items in memory.

    fetcher = MockFetcher.of_pages({"https://example.com/": "<a href=/about>About</a>"})
    sink = MemorySink()
    Worker(redis, "test", fetcher=fetcher, sink=sink, idle=0.5).run_sync()
    assert [item["url"] for item in sink.items] == [...]

Both keep what they saw (``MockFetcher.requests``, ``MemorySink.items``) behind a lock:
a worker calls a sink from a thread.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from hashcrawl._web._models import Request, Response

Handler = Callable[[Request], Response | Awaitable[Response]]


class MockFetcher:
    """A fetcher whose responses come from ``handler(request)`` (sync or async): raise
    :class:`hashcrawl.FetchError` there for a failure worth retrying."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []  # every request fetched, in order
        self._lock = threading.Lock()

    @classmethod
    def of_pages(
        cls, pages: Mapping[str, str | bytes], *, content_type: str = "text/html; charset=utf-8"
    ) -> MockFetcher:
        """Serve ``pages`` (URL -> body, as the request's URL is written); anything else
        is a 404, so a missing robots.txt allows everything. A robots.txt given is served
        as text/plain."""

        def serve(request: Request) -> Response:
            body = pages.get(request.url)
            kind = "text/plain" if request.url.endswith("/robots.txt") else content_type
            data = body.encode() if isinstance(body, str) else body or b""
            status = 404 if body is None else 200
            return Response(
                url=request.url,
                status=status,
                headers={"content-type": kind},
                body=data,
                request=request,
            )

        return cls(serve)

    async def fetch(self, request: Request) -> Response:
        with self._lock:
            self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, Response):
            raise TypeError(f"MockFetcher's handler must return a Response, got {answer!r}")
        return answer

    @property
    def urls(self) -> list[str]:
        """The URLs fetched, in order."""
        with self._lock:
            return [r.url for r in self.requests]


class MemorySink:
    """A sink that keeps every item in ``items`` (flushing does nothing: nothing here
    survives the process, so use it where that does not matter)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.closed = False
        self._lock = threading.Lock()

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            self.items.extend(dict(item) for item in items)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
