"""The browser a renderer keeps, and its pool of tabs.

One browser at a time, started on first use and again when it dies, has rendered
``browser_pages`` pages, or its process tree's memory (PSS, measured every second)
passed ``max_mib``; at most ``tabs`` tabs, each reused until it has rendered
``tab_pages`` pages or a page in it failed (then it is closed, and a new one opened
when next needed). A tab of a browser that is gone is dropped, not reused.

A tab given back leaves its page for ``about:blank`` before another page may take it:
an idle tab runs no page's scripts or timers, holds none of its requests paused, and
its renderer frees the page's memory once its garbage is collected, which is asked for
then (4 tabs idle on pages of 100 MiB each: 741 MiB of PSS cleared but not collected,
335 MiB collected). A tab that cannot be cleared in time is closed.

A worn browser (pages or memory) is drained, not killed: no new page goes to it, the
pages in it end as they would have (each within the render timeout), and then the
next page starts a new one. So a restart fails no page; a browser that dies fails only
the pages in it, which are retried as any failed fetch.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import attrs
import trio

from hashcrawl._browser._cdp import Connection
from hashcrawl._browser._process import BrowserProcess, Seal, find_chromium, group_pss_mib
from hashcrawl._exceptions import BrowserError, ConfigError, Refused

log = logging.getLogger("hashcrawl")
#: Every request of a tab and its frames is paused, at the request stage.
PAUSE_ALL = {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}
FOCUSED = {"enabled": True}
BLANK = {"url": "about:blank"}
REFUSED = {"errorReason": "BlockedByClient"}
LEAVE = {"accept": True}
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
        max_mib: the browser's memory (PSS of its process tree, MiB) past which it is
            drained and restarted; None, no bound.
        seal: how the browser is kept off the network (default: the best available).
    """

    #: Seconds between two measures of the browser's memory.
    MEASURE_EVERY = 1.0
    #: Seconds a tab given back may take to leave its page (past them it is closed).
    CLEAR_WITHIN = 5.0

    def __init__(
        self,
        nursery: trio.Nursery,
        chromium: str | None,
        *,
        tabs: int,
        tab_pages: int = 100,
        browser_pages: int = 1000,
        heap_mib: int = 512,
        max_mib: float | None = None,
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
        self.max_mib = max_mib
        self._idle: list[Tab] = []
        self._out: list[Tab] = []  # tabs rendering a page now
        self._returned = trio.Event()  # set (and replaced) whenever a tab comes back
        self._start_lock = trio.Lock()
        self.browser: BrowserProcess | None = None
        self.starts = 0  # browsers started so far
        self._pages = 0  # pages rendered by the current browser
        self.pss_mib = 0.0  # the current browser's memory when last measured
        self.over = trio.Event()  # set the first time a browser is found over max_mib
        self._over_budget: BrowserProcess | None = None  # the browser found over it
        self.memory_restarts = 0

    async def take(self) -> Tab:
        """A tab to render one page in (waits for a free slot); give it back with
        :meth:`give_back` or :meth:`discard`, in a ``finally``."""
        await self._slots.acquire()
        try:
            tab = await self._tab(await self._current())
        except BaseException:
            self._slots.release()
            raise
        self._out.append(tab)
        return tab

    async def _tab(self, browser: BrowserProcess) -> Tab:
        while self._idle:
            tab = self._idle.pop()
            if tab.browser is browser:
                return tab
        return await self._open(browser)

    async def give_back(self, tab: Tab) -> None:
        """Return a tab whose page went well: it is cleared in the background (its slot
        comes free once it is), or closed once it has done its pages, when its browser
        is being drained, or when it cannot be cleared."""
        tab.pages += 1
        self._pages += 1
        if tab.pages < self._tab_pages and tab.browser is self.browser and not self._worn():
            self._nursery.start_soon(self._clear_and_keep, tab)
            return
        try:
            await self._close(tab)
        finally:
            self._returned_tab(tab)

    async def _clear_and_keep(self, tab: Tab) -> None:
        try:
            if await self._cleared(tab):
                self._idle.append(tab)
            else:
                await self._close(tab)
        finally:
            self._returned_tab(tab)

    async def _cleared(self, tab: Tab) -> bool:
        """Whether ``tab`` left its page for about:blank within ``CLEAR_WITHIN`` (what
        the leaving page asks to fetch meanwhile, a beacon say, is refused; a dialog it
        opens is accepted)."""
        connection = tab.connection
        with trio.move_on_after(self.CLEAR_WITHIN):
            with contextlib.suppress(BrowserError), connection.listen(tab.session) as events:
                await connection.send("Page.navigate", BLANK, tab.session)
                async for event in events:
                    if event.method == "Page.loadEventFired":
                        # The page's heap is garbage now, but V8 may keep it for long.
                        await connection.send("HeapProfiler.collectGarbage", {}, tab.session)
                        return True
                    if event.method == "Fetch.requestPaused":
                        refused = {"requestId": event.params.get("requestId"), **REFUSED}
                        self._nursery.start_soon(
                            self._send, connection, "Fetch.failRequest", refused, tab.session
                        )
                    elif event.method == "Page.javascriptDialogOpening":  # "leave the page?"
                        self._nursery.start_soon(
                            self._send,
                            connection,
                            "Page.handleJavaScriptDialog",
                            LEAVE,
                            tab.session,
                        )
        return False

    async def _send(
        self, connection: Connection, method: str, params: dict[str, Any], session: str | None
    ) -> None:
        with contextlib.suppress(BrowserError):
            await connection.send(method, params, session)

    async def discard(self, tab: Tab) -> None:
        """Close a tab whose page failed or ran past its time (a stuck script ends with it)."""
        self._pages += 1
        try:
            await self._close(tab)
        finally:
            self._returned_tab(tab)

    def _returned_tab(self, tab: Tab) -> None:
        if tab in self._out:
            self._out.remove(tab)
        self._returned.set()
        self._returned = trio.Event()
        self._slots.release()

    def _worn(self) -> bool:
        """Whether the browser is to be drained: it did its pages, or passed max_mib."""
        browser = self.browser
        return browser is not None and (
            self._pages >= self._browser_pages or self._over_budget is browser
        )

    async def _drained(self, browser: BrowserProcess) -> None:
        """Wait until no page renders in ``browser`` (each ends within its timeout)."""
        while any(tab.browser is browser for tab in self._out) and browser.alive:
            await self._returned.wait()

    async def _close(self, tab: Tab) -> None:
        with trio.move_on_after(5) as scope:
            scope.shield = True
            with contextlib.suppress(BrowserError):  # gone with its browser already
                await tab.connection.send("Target.closeTarget", {"targetId": tab.target})

    async def _current(self) -> BrowserProcess:
        async with self._start_lock:  # the takers behind wait: no page for a worn browser
            browser = self.browser
            if browser is not None and browser.alive and not self._worn():
                return browser
            if browser is not None:
                why = browser.connection.closed or self._wear(browser)
                await self._drained(browser)
                log.info("restarting the browser (%s)", why)
                self._idle = [tab for tab in self._idle if tab.browser is not browser]
                await browser.aclose()
            self.browser = browser = await self._start()
            self._pages = 0
            return browser

    def _wear(self, browser: BrowserProcess) -> str:
        if self._over_budget is browser:
            self.memory_restarts += 1
            return f"{self.pss_mib:.0f} MiB, over --browser-max-mib {self.max_mib:g}"
        return f"{self._pages} pages rendered"

    async def watch_memory(self) -> None:
        """Measure the browser's memory every ``MEASURE_EVERY`` seconds; mark it to be
        drained once it is over ``max_mib`` (run in the nursery, for as long as it)."""
        while True:
            browser = self.browser
            if browser is not None and browser.alive:
                self.pss_mib = await trio.to_thread.run_sync(group_pss_mib, browser.pid)
                if self.max_mib is not None and self.pss_mib > self.max_mib:
                    self._over_budget = browser
                    self.over.set()
            await trio.sleep(self.MEASURE_EVERY)

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
        except BaseException:  # a failure, or the page's fetch cancelled: none is left
            await browser.aclose()  # shielded: the process is reaped however it ends
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
        await self._send(browser.connection, "Target.closeTarget", {"targetId": target}, None)

    async def _open(self, browser: BrowserProcess) -> Tab:
        connection = browser.connection
        target = (await connection.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        attached = await connection.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )
        tab = Tab(target=target, session=attached["sessionId"], browser=browser)
        try:
            await connection.send("Page.enable", {}, tab.session)
            # Every tab behaves as the one in front: a background tab gets no animation
            # frames, so its scroll events never fire (an infinite scroll never grows).
            await connection.send("Emulation.setFocusEmulationEnabled", FOCUSED, tab.session)
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
