"""The browser a renderer keeps, and its pool of tabs.

One browser at a time, started on first use and again when it dies or has rendered
``browser_pages`` pages; at most ``tabs`` tabs, each reused until it has rendered
``tab_pages`` pages or a page in it failed (then it is closed, and a new one opened
when next needed). A tab of a browser that is gone is dropped, not reused.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import attrs
import trio

from hashcrawl._browser._cdp import Connection
from hashcrawl._browser._process import BrowserProcess, Seal, find_chromium
from hashcrawl._exceptions import BrowserError, ConfigError, Refused

log = logging.getLogger("hashcrawl")
#: Every request of a tab and its frames is paused, at the request stage.
PAUSE_ALL = {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}
AUTO_ATTACH = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}


@attrs.define(kw_only=True)
class Tab:
    """One open tab: its target, its flatten-mode session, the browser it is in."""

    target: str
    session: str
    browser: BrowserProcess
    pages: int = 0

    @property
    def connection(self) -> Connection:
        return self.browser.connection


async def prepare_target(connection: Connection, session: str) -> None:
    """Pause every request of a tab or a frame, and attach its own frames and workers
    (held until prepared the same way)."""
    await connection.send("Fetch.enable", PAUSE_ALL, session)
    await connection.send("Target.setAutoAttach", AUTO_ATTACH, session)


class Tabs:
    """The browser and its tabs (see the module's docstring).

    Args:
        nursery: runs the browser's connection and its watcher.
        chromium: the browser's executable (None: the first of ``_process.NAMES`` on
            PATH, looked for when the first page comes).
        tabs: the most tabs open at once (pages rendered at once).
        tab_pages: pages a tab renders before it is closed for a new one.
        browser_pages: pages a browser renders before it is restarted.
        heap_mib: the most JavaScript heap one page may take (``--max-old-space-size``).
        seal: how the browser is kept off the network (default: the best available).
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        chromium: str | None,
        *,
        tabs: int,
        tab_pages: int = 100,
        browser_pages: int = 1000,
        heap_mib: int = 512,
        seal: Seal | None = None,
    ) -> None:
        self._nursery, self._chromium = nursery, chromium
        self._slots, self._tab_count = trio.Semaphore(tabs), tabs
        self._tab_pages, self._browser_pages, self._heap, self._seal = (
            tab_pages,
            browser_pages,
            heap_mib,
            seal,
        )
        self._idle: list[Tab] = []
        self._start_lock = trio.Lock()
        self.browser: BrowserProcess | None = None
        self.starts = 0  # browsers started so far
        self._pages = 0  # pages rendered by the current browser

    async def take(self) -> Tab:
        """A tab to render one page in (waits for a free slot); give it back with
        :meth:`give_back` or :meth:`discard`, in a ``finally``."""
        await self._slots.acquire()
        try:
            browser = await self._current()
            while self._idle:
                tab = self._idle.pop()
                if tab.browser is browser:
                    return tab
            return await self._open(browser)
        except BaseException:
            self._slots.release()
            raise

    async def give_back(self, tab: Tab) -> None:
        """Return a tab whose page went well (closed instead once it has done its pages)."""
        tab.pages += 1
        self._pages += 1
        try:
            if tab.pages >= self._tab_pages or tab.browser is not self.browser:
                await self._close(tab)
            else:
                self._idle.append(tab)
        finally:
            self._slots.release()

    async def discard(self, tab: Tab) -> None:
        """Close a tab whose page failed or ran past its time (a stuck script ends with it)."""
        self._pages += 1
        try:
            await self._close(tab)
        finally:
            self._slots.release()

    async def _close(self, tab: Tab) -> None:
        with trio.move_on_after(5) as scope:
            scope.shield = True
            with contextlib.suppress(BrowserError):  # gone with its browser already
                await tab.connection.send("Target.closeTarget", {"targetId": tab.target})

    async def _current(self) -> BrowserProcess:
        async with self._start_lock:
            browser = self.browser
            worn = self._pages >= self._browser_pages and not self._busy_elsewhere()
            if browser is not None and browser.alive and not worn:
                return browser
            if browser is not None:
                log.info("restarting the browser (%s)", browser.connection.closed or "worn")
                await browser.aclose()
            self.browser = browser = await self._start()
            self._pages = 0
            return browser

    def _busy_elsewhere(self) -> bool:
        # Restarting for wear waits until no other page is open in this browser.
        return self._slots.value + 1 < self._tab_count

    async def _start(self) -> BrowserProcess:
        try:
            self._chromium = self._chromium or find_chromium()
        except ConfigError as exc:  # this worker cannot render: the page is refused
            raise Refused(f"this page asks to be rendered, and {exc}") from None
        try:
            browser = BrowserProcess.start(self._chromium, seal=self._seal, heap_mib=self._heap)
        except ConfigError as exc:
            raise BrowserError(str(exc)) from None
        self.starts += 1
        self._nursery.start_soon(browser.connection.run)
        connection = browser.connection
        try:
            await connection.send("Browser.setDownloadBehavior", {"behavior": "deny"})
            await connection.send("Target.setDiscoverTargets", {"discover": True})
        except BrowserError:
            await browser.aclose()
            raise
        self._nursery.start_soon(self._close_popups, browser)
        return browser

    async def _close_popups(self, browser: BrowserProcess) -> None:
        """Close every page a page opened (``window.open``, ``target=_blank``)."""
        with browser.connection.listen(None) as events:
            async for event in events:
                info: dict[str, Any] = event.params.get("targetInfo", {})
                if event.method == "Target.targetCreated" and info.get("openerId"):
                    self._nursery.start_soon(self._close_target, browser, info.get("targetId"))

    async def _close_target(self, browser: BrowserProcess, target: Any) -> None:
        with contextlib.suppress(BrowserError):
            await browser.connection.send("Target.closeTarget", {"targetId": target})

    async def _open(self, browser: BrowserProcess) -> Tab:
        connection = browser.connection
        target = (await connection.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        attached = await connection.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )
        tab = Tab(target=target, session=attached["sessionId"], browser=browser)
        try:
            await connection.send("Page.enable", {}, tab.session)
            await prepare_target(connection, tab.session)
        except BaseException:
            await self._close(tab)
            raise
        return tab

    async def aclose(self) -> None:
        """End the browser (its whole process group) and forget its tabs."""
        self._idle.clear()
        if self.browser is not None:
            await self.browser.aclose()
