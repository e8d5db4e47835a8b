"""Every request a rendered page makes: paused by the browser, judged here, and either
refused or fetched by the worker's own fetcher and handed back.

The judgement (:func:`verdict`) is pure: only http(s); not a resource type the DOM does
not need; only the page's own host. What passes is fetched by the fetcher the worker
uses for any page, so its address policy (``--allow-net``), ``--max-body`` and timeout
apply; a sub-request waits for its host's turn first (``_pace``). Another host is
refused unless the crawl shares it (``--render-fetch-hosts``: ``_core._turns``).
"""

from __future__ import annotations

import base64
import enum
import logging
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

from hashcrawl._browser._cdp import Connection, Session
from hashcrawl._browser._pace import Pace
from hashcrawl._core._turns import host_of
from hashcrawl._exceptions import BrowserError, HashcrawlError, Refused
from hashcrawl._web._fetch import Fetcher
from hashcrawl._web._models import Request, Response

log = logging.getLogger("hashcrawl")
#: Resource types (the DevTools protocol's names) not fetched by default: not needed
#: for the DOM (images, fonts, media, stylesheets) or only reports and hints.
BLOCKED_TYPES = frozenset(
    {
        "Image",
        "Media",
        "Font",
        "Stylesheet",
        "TextTrack",
        "Ping",
        "CSPViolationReport",
        "Prefetch",
        "Manifest",
    }
)
#: Headers of a paused request not passed on: the fetcher sets its own user agent and
#: encodings, and the connection is its own.
_DROPPED_REQUEST = frozenset(
    {"user-agent", "accept-encoding", "connection", "host", "content-length"}
)
#: Headers of a fetched response not handed back: its body is already decoded and whole.
_DROPPED_RESPONSE = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection"}
)


class Verdict(enum.Enum):
    """What becomes of a paused request."""

    FETCH = "fetched"
    SCHEME = "refused: not http(s)"
    TYPE = "refused: a resource type not fetched"
    HOST = "refused: another host"
    DOCUMENT = "the document"


def verdict(
    url: str,
    resource_type: str,
    page_host: str,
    blocked: frozenset[str],
    shared: frozenset[str] = frozenset(),
) -> Verdict:
    """What to do with a request for ``url`` of ``resource_type`` from a page on
    ``page_host``; ``shared`` holds the host keys it may fetch from beside its own."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return Verdict.SCHEME
    if resource_type in blocked or (resource_type == "Other" and parts.path == "/favicon.ico"):
        return Verdict.TYPE  # the browser's own favicon request: no DOM needs it
    if (parts.hostname or "") != page_host and not (shared and host_of(url) in shared):
        return Verdict.HOST
    return Verdict.FETCH


class Traffic:
    """A page's requests in flight, numbered as they are paused: what a step waiting for
    the network to go quiet reads (a scroll waits for the requests it set off)."""

    def __init__(self) -> None:
        self.begun = 0  # requests paused so far; a mark for :meth:`open_since`
        self._open: set[int] = set()
        self._changed = trio.Event()

    def begin(self) -> int:
        """Count a request paused; its number, for :meth:`end`."""
        self.begun += 1
        self._open.add(self.begun)
        self._signal()
        return self.begun

    def end(self, number: int) -> None:
        """Count request ``number`` answered (fulfilled, failed or abandoned)."""
        self._open.discard(number)
        self._signal()

    def open_since(self, mark: int) -> int:
        """The requests begun after ``mark`` (a value of :attr:`begun`) not yet answered."""
        return sum(1 for number in self._open if number > mark)

    async def quiet_since(self, mark: int) -> None:
        """Wait until every request begun after ``mark`` is answered."""
        while self.open_since(mark):
            await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


@attrs.define(kw_only=True)
class Interceptor:
    """Answers one page's paused requests (from the page and its frames).

    ``document`` is the page's own response, fetched before the page was opened: the
    first paused request for the main frame's document gets it as it is. ``requests``
    records each request's URL and what became of it (for ``response.render``).
    """

    connection: Connection
    fetcher: Fetcher
    pace: Pace
    page_host: str
    main_frame: str
    document: Response
    blocked: frozenset[str] = BLOCKED_TYPES
    shared: frozenset[str] = frozenset()  # hosts it may fetch from beside its own
    requests: list[tuple[str, str]] = attrs.Factory(list)
    archived: list[Response] = attrs.Factory(list)  # those with an exchange, for a WARC
    _served: bool = False
    # One sub-request at a time: the page holds one slot of its host, as a page does.
    _one_at_a_time: trio.Lock = attrs.Factory(trio.Lock)

    async def answer(self, params: dict[str, Any], session: Session) -> None:
        """Answer one ``Fetch.requestPaused`` event from ``session``."""
        request = params.get("request", {})
        url, rid = str(request.get("url", "")), params.get("requestId")
        kind = str(params.get("resourceType", "Other"))
        if not self._served and kind == "Document" and params.get("frameId") == self.main_frame:
            self._served = True
            self.requests.append((url, Verdict.DOCUMENT.value))
            await self._fulfill(rid, self.document, session)
            return
        judged = verdict(url, kind, self.page_host, self.blocked, self.shared)
        if judged is not Verdict.FETCH:
            self.requests.append((url, judged.value))
            if judged is Verdict.HOST:
                self.pace.refused(url, judged.value)
            await self._fail(rid, "BlockedByClient", session)
            return
        await self._fetch(rid, url, request, session)

    async def _fetch(self, rid: Any, url: str, request: dict[str, Any], session: Session) -> None:
        try:
            sub = Request(
                url,
                method=str(request.get("method", "GET")),
                headers=[
                    (name, value)
                    for name, value in request.get("headers", {}).items()
                    if name.lower() not in _DROPPED_REQUEST
                ],
                body=_posted(request),
                dont_filter=True,
            )
            async with self._one_at_a_time:
                await self.pace.turn(url)
                try:
                    response = await self.fetcher.fetch(sub)
                finally:
                    self.pace.ended(url)
        except Refused as exc:
            self.requests.append((url, f"refused: {exc}"))
            await self._fail(rid, "AccessDenied", session)
        except HashcrawlError as exc:  # a fetch failure, or a request not fit to send
            self.requests.append((url, f"failed: {exc}"))
            await self._fail(rid, "Failed", session)
        else:
            self.requests.append((url, Verdict.FETCH.value))
            if response.exchange is not None:
                self.archived.append(response)
            await self._fulfill(rid, response, session)

    async def _fulfill(self, rid: Any, response: Response, session: Session) -> None:
        headers = [
            {"name": name, "value": value}
            for name, value in header_items(response)
            if name.lower() not in _DROPPED_RESPONSE
        ]
        params = {
            "requestId": rid,
            "responseCode": response.status,
            "responseHeaders": headers,
            "body": base64.b64encode(response.body).decode("ascii"),
        }
        await self._send("Fetch.fulfillRequest", params, session)

    async def _fail(self, rid: Any, reason: str, session: Session) -> None:
        await self._send("Fetch.failRequest", {"requestId": rid, "errorReason": reason}, session)

    async def _send(self, method: str, params: dict[str, Any], session: Session) -> None:
        try:
            await self.connection.send(method, params, session)
        except BrowserError as exc:  # the frame went away meanwhile: nothing waits for it
            log.debug("%s for a paused request failed: %s", method, exc)


def _posted(request: dict[str, Any]) -> bytes:
    entries = request.get("postDataEntries") or []
    parts = [base64.b64decode(e["bytes"]) for e in entries if isinstance(e, dict) and "bytes" in e]
    if parts:
        return b"".join(parts)
    return str(request.get("postData", "")).encode("utf-8")


def header_items(response: Response) -> list[tuple[str, str]]:
    headers = response.headers
    multi = getattr(headers, "multi_items", None)
    return list(multi()) if multi is not None else list(headers.items())
