"""The renderer: a fetcher that opens a request's page in the browser when it asks to be
rendered, and hands back the DOM once its scripts ran and its steps were done.

As far as the worker knows a rendered request is fetched: the document itself comes
from the fetcher the renderer wraps (the worker paced it as any fetch), then the page
is opened in a tab of the browser with that document, and every request the page
makes is judged and fetched by the same fetcher (``_intercept``). One page's failure,
its timeout or its tab's crash is a :class:`~hashcrawl.BrowserError`, a fetch failure
like any other: retried, then dead-lettered, while the worker and browser carry on.
"""

from __future__ import annotations

import contextlib
import email.utils
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from hashcrawl._browser._actions import DOCUMENT, act_all, evaluate
from hashcrawl._browser._cdp import Connection, Event
from hashcrawl._browser._intercept import BLOCKED_TYPES, Interceptor, Traffic, header_items
from hashcrawl._browser._pace import CURRENT, HostPace, Pace
from hashcrawl._browser._process import Seal, find_chromium
from hashcrawl._browser._reach import NO_REACH, Reach
from hashcrawl._browser._tabs import Tab, Tabs, prepare_target
from hashcrawl._core._steps import Rendered
from hashcrawl._exceptions import BrowserError, BrowserGone, FetchError, Refused
from hashcrawl._web._fetch import Fetcher
from hashcrawl._web._models import Request, Response


class Renderer:
    """A fetcher that renders the requests that ask for it (``render=True``), or all
    of them (``render_all``), and fetches the rest with ``fetcher`` as they are.

    Open one with :meth:`open` (it runs the browser for as long as the block does).

    Args:
        tabs: the browser and its tabs.
        fetcher: fetches each document and every request a page makes.
        render_timeout: seconds a page may take, from opening to its DOM read, steps
            included; past it the page's tab is closed and the fetch fails.
        pace: waits for a host's turn before a page's sub-request to it leaves (a
            worker's own, set with ``_pace.paced_by``, comes first).
        blocked: resource types a page may not fetch (see ``_intercept.BLOCKED_TYPES``).
        render_all: render every request, not only those that ask.
        chosen: whether the crawl's settings render a request's URL whatever it asks
            (``--render``, ``--render-hosts``: a worker's, read anew for every request).
        reach: what steps may use beyond the page (the upload directory, the spider's
            methods for call steps); by default, nothing.
        shared: the host keys a page may fetch from beside its own (the crawl's
            ``--render-fetch-hosts``, read anew for every page); by default, none.
    """

    def __init__(
        self,
        tabs: Tabs,
        fetcher: Fetcher,
        *,
        render_timeout: float = 30.0,
        pace: Pace | None = None,
        blocked: frozenset[str] = BLOCKED_TYPES,
        render_all: bool = False,
        chosen: Callable[[str], bool] = lambda url: False,
        reach: Reach = NO_REACH,
        shared: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.chosen, self.shared = chosen, shared
        self.tabs, self.fetcher, self.reach = tabs, fetcher, reach
        self.render_timeout, self.blocked, self.render_all = render_timeout, blocked, render_all
        self.pace: Pace = pace or HostPace()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        fetcher: Fetcher,
        *,
        chromium: str | None = None,
        tabs: int = 4,
        seal: Seal | None = None,
        heap_mib: int = 512,
        max_mib: float | None = None,
        **options: Any,
    ) -> AsyncIterator[Renderer]:
        """A renderer over ``fetcher`` whose browser (started by the first page
        rendered) ends with the block.

        Raises:
            ConfigError: ``chromium`` is not an executable, or none is on PATH when
                every page is to be rendered (``render_all``); otherwise a missing
                Chromium fails only the pages that ask to be rendered.
        """
        path = find_chromium(chromium) if chromium or options.get("render_all") else None
        async with trio.open_nursery() as nursery:
            pool = Tabs(nursery, path, tabs=tabs, seal=seal, heap_mib=heap_mib, max_mib=max_mib)
            nursery.start_soon(pool.watch_memory)
            try:
                yield cls(pool, fetcher, **options)
            finally:
                await pool.aclose()
                nursery.cancel_scope.cancel()

    async def fetch(self, request: Request) -> Response:
        """The request's response: rendered if it asks (and is an HTML page), else as
        the fetcher got it."""
        if not (request.render or self.render_all or self.chosen(request.url)):
            return await self.fetcher.fetch(request)
        if urlsplit(request.url).scheme not in ("http", "https"):
            raise Refused(f"only http(s) pages are rendered, not {request.url:.100}")
        pace = CURRENT.get() or self.pace
        try:
            document = await self.fetcher.fetch(request)
        finally:
            pace.ended(request.url)
        if not _renderable(document):
            return document
        tab = await self.tabs.take()
        try:
            with trio.fail_after(self.render_timeout):
                response = await _single(self._in_tab(tab, request, document, pace))
        except BaseException as exc:
            await self.tabs.discard(tab)
            if isinstance(exc, trio.TooSlowError):
                raise BrowserError(
                    f"{request.url:.100} ran past the render timeout ({self.render_timeout:g} s):"
                    " its tab was closed"
                ) from None
            raise
        await self.tabs.give_back(tab)
        return response

    async def _in_tab(self, tab: Tab, request: Request, document: Response, pace: Pace) -> Response:
        connection, session = tab.connection, tab.session
        interceptor = Interceptor(
            connection=connection,
            fetcher=self.fetcher,
            pace=pace,
            page_host=urlsplit(request.url).hostname or "",
            main_frame=tab.target,
            document=document,
            blocked=self.blocked,
            shared=self.shared(),
        )
        loaded = trio.Event()
        with connection.listen(session) as events:
            async with trio.open_nursery() as nursery:
                page = _Page(connection, nursery, interceptor, session, loaded)
                nursery.start_soon(page.follow, events)
                await _seed_cookies(connection, session, request)
                navigated = await connection.send("Page.navigate", {"url": request.url}, session)
                if navigated.get("errorText"):
                    raise BrowserError(f"{request.url:.100} did not open: {navigated['errorText']}")
                await loaded.wait()
                results = await act_all(
                    connection, session, request.steps, self.reach, traffic=page.traffic
                )
                location, dom = await evaluate(connection, session, DOCUMENT, "reading the DOM")
                cookies = await _page_cookies(connection, session, str(location))
                nursery.cancel_scope.cancel()
        headers = [
            *((k, v) for k, v in header_items(document) if k.lower() != "content-type"),
            ("content-type", "text/html; charset=utf-8"),  # the DOM is read as text
            *(("set-cookie", cookie) for cookie in cookies),  # back to the host's jar
        ]
        return Response(
            str(location),
            document.status,
            httpx.Headers(headers),
            str(dom).encode("utf-8"),
            request,
            max_links=document.max_links,
            exchange=document.exchange,
            render=Rendered(
                results=results,
                requests=tuple(interceptor.requests),
                archived=tuple(interceptor.archived),
            ),
        )

    async def aclose(self) -> None:
        """End the browser (the block of :meth:`open` does it too)."""
        await self.tabs.aclose()


class _Page:
    """The events of one page being rendered: its paused requests, its load, dialogs,
    its frames and workers attaching (each prepared as the tab was), a crash."""

    def __init__(
        self,
        connection: Connection,
        nursery: trio.Nursery,
        interceptor: Interceptor,
        session: str,
        loaded: trio.Event,
    ) -> None:
        self.connection, self.nursery, self.interceptor = connection, nursery, interceptor
        self.session, self.loaded = session, loaded
        self.traffic = Traffic()

    async def follow(self, events: trio.MemoryReceiveChannel[Event]) -> None:
        async for event in events:
            self.on(event)
        raise BrowserGone(f"the browser went away during the page ({self.connection.closed})")

    def on(self, event: Event) -> None:
        method, params = event.method, event.params
        if method == "Fetch.requestPaused":  # counted at once: a step may be waiting
            self.nursery.start_soon(self._answer, params, event.session, self.traffic.begin())
        elif method == "Page.loadEventFired" and event.session == self.session:
            self.loaded.set()
        elif method == "Page.javascriptDialogOpening":
            leave = params.get("type") == "beforeunload"  # let the page be left
            self.nursery.start_soon(
                self._send, "Page.handleJavaScriptDialog", {"accept": leave}, event.session
            )
        elif method == "Target.attachedToTarget":
            self.nursery.start_soon(self._child, params.get("sessionId"))
        elif method == "Inspector.targetCrashed" and event.session == self.session:
            raise BrowserError("the page's renderer crashed (out of memory?)")

    async def _answer(self, params: dict[str, Any], session: str | None, number: int) -> None:
        try:
            await self.interceptor.answer(params, session)
        finally:
            self.traffic.end(number)

    async def _child(self, child: str | None) -> None:
        if child is None:
            return
        with self.connection.listen(child) as events:
            # A target that cannot pause its requests still has no network of its own.
            with contextlib.suppress(BrowserError):
                await prepare_target(self.connection, child)
            await self._send("Runtime.runIfWaitingForDebugger", {}, child)
            async for event in events:
                self.on(event)

    async def _send(self, method: str, params: dict[str, Any], session: str | None) -> None:
        with contextlib.suppress(BrowserError):
            await self.connection.send(method, params, session)


async def _seed_cookies(connection: Connection, session: str, request: Request) -> None:
    """The cookies the worker sent with the document (its host's jar) into the tab, so
    the page's own requests carry them too."""
    pairs = [
        pair.partition("=")
        for name, value in request.headers
        if name.lower() == "cookie"
        for pair in value.split(";")
    ]
    cookies = [
        {"name": name.strip(), "value": value.strip(), "url": request.url}
        for name, _, value in pairs
        if name.strip()
    ]
    if cookies:
        await connection.send("Network.setCookies", {"cookies": cookies}, session)


async def _page_cookies(connection: Connection, session: str, location: str) -> list[str]:
    """The page's cookies once its steps are done, as ``Set-Cookie`` values: what it set
    (by its responses or by script) goes back to its host's jar with the response."""
    if urlsplit(location).scheme not in ("http", "https"):
        return []
    got = await connection.send("Network.getCookies", {"urls": [location]}, session)
    return [_set_cookie(cookie) for cookie in got.get("cookies", []) if isinstance(cookie, dict)]


def _set_cookie(cookie: dict[str, Any]) -> str:
    parts = [f"{cookie.get('name', '')}={cookie.get('value', '')}"]
    parts.append(f"Path={cookie.get('path') or '/'}")
    domain = str(cookie.get("domain", ""))
    if domain.startswith("."):
        parts.append(f"Domain={domain[1:]}")
    expires = cookie.get("expires", -1)
    if isinstance(expires, int | float) and expires > 0 and not cookie.get("session", False):
        parts.append(f"Expires={email.utils.formatdate(expires, usegmt=True)}")
    parts += [
        flag
        for flag, on in (("Secure", cookie.get("secure")), ("HttpOnly", cookie.get("httpOnly")))
        if on
    ]
    return "; ".join(parts)


def _renderable(document: Response) -> bool:
    kind = document.headers.get("content-type", "text/html").lower()
    # HTML only: robots.txt, sitemaps and feeds come as fetched, even with --render.
    return 200 <= document.status < 300 and "html" in kind


async def _single(page: Any) -> Response:
    """Await ``page``, turning a group of errors from its tasks into its first fetch
    error (the worker counts one failure per fetch)."""
    try:
        return await page  # type: ignore[no-any-return]
    except BaseExceptionGroup as group:
        fetch_errors = group.subgroup(lambda e: isinstance(e, FetchError))
        if fetch_errors is None or group.subgroup(lambda e: isinstance(e, trio.Cancelled)):
            raise
        raise _first(fetch_errors) from group


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
