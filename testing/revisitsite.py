"""A loopback site whose pages change at known rates, for judging revisits from outside.

Each page ``/p/N`` has a kind (it serves an ``etag``, only ``lastmod``, or ``none`` of
them) and a period: its content changes every ``period`` seconds from the server's
start (``None``: never). The server answers conditional requests as RFC 9110 says
(``If-None-Match`` first, else ``If-Modified-Since``) with 304s, and logs every request
with the time it arrived, the conditional headers it carried, its status and the page's
version then, so a test judges a crawl from this log alone: which changes were seen and
how late, how often unchanged pages were fetched, and the gaps between requests.
"""

from __future__ import annotations

import email.utils
import http.server
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self

import attrs

KINDS = ("etag", "lastmod", "none")


@attrs.frozen(kw_only=True)
class Page:
    """One page of the site: how it names its version, and how often it changes."""

    kind: str
    period: float | None  # seconds between changes; None: it never changes


@attrs.frozen(kw_only=True)
class Hit:
    """One request as the server saw it."""

    at: float  # seconds since the server started
    path: str
    if_none_match: str | None
    if_modified_since: str | None
    status: int
    version: int  # the page's version when the request arrived (-1 for the index)


class RevisitSite:
    """Serves ``pages`` on ``host`` (a loopback address) until closed; ``/`` links them all."""

    def __init__(
        self,
        pages: Sequence[Page],
        host: str = "127.0.0.2",
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Args:
        clock: seconds since the start, for tests that move time by hand.
        """
        self.pages = tuple(pages)
        self.log: list[Hit] = []
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._clock = clock
        self._epoch = int(time.time())  # Last-Modified of version 0, whole seconds
        self._server = http.server.ThreadingHTTPServer((host, 0), self._handler_class())
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic() - self._start

    def version(self, n: int, at: float) -> int:
        period = self.pages[n].period
        return 0 if period is None else int(at // period)

    def changed_at(self, n: int, version: int) -> float:
        """When page ``n`` took on ``version`` (seconds since the start)."""
        period = self.pages[n].period
        return 0.0 if period is None else version * period

    def hits(self, n: int) -> list[Hit]:
        with self._lock:
            return [hit for hit in self.log if hit.path == f"/p/{n}"]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(
        self, path: str, if_none_match: str | None, if_modified_since: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        """The status, headers and body for ``path`` now; logs the request."""
        at = self.now()

        def logged(status: int, version: int = -1) -> None:
            with self._lock:
                self.log.append(Hit(at=at, path=path, if_none_match=if_none_match,
                                    if_modified_since=if_modified_since, status=status,
                                    version=version))  # fmt: skip

        if path == "/":
            logged(200)
            links = "".join(f'<a href="/p/{n}">{n}</a> ' for n in range(len(self.pages)))
            return 200, {"Content-Type": "text/html"}, f"<title>index</title>{links}".encode()
        n = _page_number(path, len(self.pages))
        if n is None:  # robots.txt too: every request counts for politeness
            logged(404)
            return 404, {"Content-Type": "text/plain"}, b"not found"
        page, version = self.pages[n], self.version(n, at)
        headers = {"Content-Type": "text/html"}
        etag, modified = f'"v{version}"', self._epoch + int(self.changed_at(n, version))
        if page.kind == "etag":
            headers["ETag"] = etag
        if page.kind in ("etag", "lastmod"):
            headers["Last-Modified"] = email.utils.formatdate(modified, usegmt=True)
        status = 304 if self._fresh(page, etag, modified, if_none_match, if_modified_since) else 200
        logged(status, version)
        body = b"" if status == 304 else f"<title>p{n}</title>version {version}".encode()
        return status, headers, body

    @staticmethod
    def _fresh(
        page: Page, etag: str, modified: int, if_none_match: str | None, since: str | None
    ) -> bool:
        if if_none_match is not None:  # RFC 9110 13.2.2: If-None-Match wins
            return page.kind == "etag" and etag in (t.strip() for t in if_none_match.split(","))
        if since is None or page.kind == "none":
            return False
        try:
            when = email.utils.parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError):
            return False
        return modified <= when

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = site.answer(
                    self.path,
                    self.headers.get("If-None-Match"),
                    self.headers.get("If-Modified-Since"),
                )
                try:
                    self.send_response(status)
                    for name, value in {**headers, "Content-Length": str(len(body))}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a worker SIGKILLed mid-answer: its request is logged all the same

            def log_message(self, format: str, *args: object) -> None:
                pass  # the site keeps its own log

        return Handler


def _page_number(path: str, pages: int) -> int | None:
    if not path.startswith("/p/") or not path[3:].isdigit():
        return None
    n = int(path[3:])
    return n if n < pages else None


def changes_missed(site: RevisitSite, n: int, *, within: float) -> list[int]:
    """The versions of page ``n`` that no fetch saw within ``within`` seconds of the change
    (judged from the log: a 200 of that version or later, or any fetch after it)."""
    hits = [hit for hit in site.hits(n) if hit.status in (200, 304)]
    if not hits:
        return []
    last = site.version(n, hits[-1].at)
    missed = []
    for version in range(1, last + 1):
        at = site.changed_at(n, version)
        if at + within > hits[-1].at:
            break  # too recent to judge
        if not any(at <= hit.at <= at + within for hit in hits):
            missed.append(version)
    return missed


def smallest_gap(site: RevisitSite) -> float:
    """The shortest time between two requests to the site (one host): its politeness."""
    with site._lock:
        times = sorted(hit.at for hit in site.log)
    return min((b - a for a, b in itertools.pairwise(times)), default=float("inf"))
