"""The dispatcher: starts every fetch the session allows, and does each page's steps
(the core's ``Page`` decides them), asking the session right before a request leaves."""

from __future__ import annotations

import functools
import logging
import time

import attrs
import trio

from hashcrawl._browser._pace import paced_by
from hashcrawl._core._due import conditional
from hashcrawl._core._exchanges import Dispatch, Done
from hashcrawl._core._frontier import Held
from hashcrawl._core._page import (
    CheckRules,
    Fetched,
    FetchRobots,
    GiveBack,
    Handle,
    NoteInFlight,
    Page,
    Recover,
    Send,
    TakePage,
)
from hashcrawl._core._patterns import Refusal
from hashcrawl._core._revisit import Record
from hashcrawl._exceptions import FetchError, Interrupted, Refused
from hashcrawl._run._frontierpace import FrontierPace
from hashcrawl._run._membership import Membership
from hashcrawl._run._metrics import error_kind
from hashcrawl._web._fetch import Fetcher
from hashcrawl._web._models import Request, Response
from hashcrawl._web._pools import NotSent, sending_only_while
from hashcrawl._web._requests import set_cookies
from hashcrawl._web._robots import Robots, RobotsFetch, Unreachable

log = logging.getLogger("hashcrawl")


class Dispatcher:
    """The dispatcher: starts every fetch the session allows, and does each page's steps"""

    def __init__(self, m: Membership, fetcher: Fetcher) -> None:
        self.m = m
        self.fetcher = fetcher
        self.robots_limiter = trio.CapacityLimiter(2)  # threads checking heavy robots.txt

    async def dispatch_loop(self) -> None:
        session = self.m.session
        while not session.due().stopping:
            wake = self.dispatch_turn()
            with trio.move_on_at(max(wake, self.m.now() + 0.001)):
                await self.m.changed.wait()
        with trio.move_on_after(self.m.settings.grace):
            while session.due().in_flight:
                await self.m.changed.wait()
        # Past the grace period: what is still in flight stays pending in the stream,
        # and goes to the hosts' new owners with the rest.
        for scope in self.m.scopes.values():
            scope.cancel()

    def dispatch_turn(self) -> float:
        """Start every fetch the session allows now; returns when to look again."""
        while isinstance(got := self.dispatch_one(), Held):
            pass
        return got

    def dispatch_one(self) -> Held | float:
        """Start the next fetch the session allows, or say when to look again."""
        got = self.m.session.start(Dispatch(self.m.now()))
        if not isinstance(got, Page):
            return float(got.result)
        held = got.held
        self.m.scopes[held.eid] = trio.CancelScope()
        self.m.spawn(self.fetch_one, got)
        return held

    async def fetch_one(self, page: Page) -> None:
        held = page.held
        scope = self.m.scopes.setdefault(held.eid, trio.CancelScope())
        try:
            with scope:
                await self.fetch_guarded(page, held)
            if scope.cancelled_caught:
                page.failed(Interrupted(), self.m.now())
        finally:
            del self.m.scopes[held.eid]
            commit_now = page.ended(self.m.now())
            self.m.wake()
        if commit_now:
            self.m.commit_soon.set()
        self.m.check_limits()

    async def fetch_guarded(self, page: Page, held: Held) -> None:
        """:meth:`fetch_and_handle`, where nothing the network or user code raises gets
        out: it fails this page only. A handoff may cut the fetch short (see apply)."""
        try:
            await self.fetch_and_handle(page, held)
        except Exception as exc:  # e.g. a LookupError from a bogus charset
            log.exception("fetching %s failed", held.entry.url)
            page.failed(exc, self.m.now(), crashed=True)

    async def fetch_and_handle(self, page: Page, held: Held) -> None:
        """Do the steps the core's :class:`Page` hands out, in its order, until it is done."""
        response = None  # the page's, from Send to Handle
        while not isinstance(step := page.next_step(self.m.now()), Done):
            if isinstance(step, Handle):
                assert response is not None
                await self.handle(page, held, response, step)
            elif isinstance(step, Recover):
                recovered = await self.m.worker.handler.failed(held, step.outcome, step.error)
                page.answered(recovered, self.m.now())
            elif isinstance(step, NoteInFlight):
                note = self.m.store.note_in_flight
                await self.m.persist(note, self.m.worker.id, step.noted, step.suspects)
                page.answered(None, self.m.now())
            elif isinstance(step, CheckRules):
                allowed = await self.robots_allow(step.rules, held.entry.url)
                if not allowed:
                    self.tell_robots(held.host, held.entry.url)
                page.answered(allowed, self.m.now())
            elif isinstance(step, TakePage):
                await self.take_page(page, step.cap)
            elif isinstance(step, GiveBack):  # it took one of the crawl's pages, sent nothing
                await self.m.persist(self.m.worker.give_back_page)
                page.answered(None, self.m.now())
            elif isinstance(step, FetchRobots):
                try:
                    page.answered(await self.fetch_robots(page), self.m.now())
                except NotSent as exc:
                    page.failed(exc, self.m.now())
            else:
                assert isinstance(step, Send), step
                response = await self.send_page(page, held, step)

    async def send_page(self, page: Page, held: Held, step: Send) -> Response | None:
        """Send ``page``'s request; returns the response, if one came."""
        entry = held.entry
        if entry.revisit is not None:  # a revisit: conditional on the last fetch's validators
            entry = conditional(entry, Record.from_hex(entry.revisit))
        cookie = (("Cookie", step.cookie),) if step.cookie else ()
        request = Request.from_entry(entry, cookie)
        sent = self.m.now()
        try:
            response = await self.send(page, request)
        except NotSent as exc:
            page.failed(exc, self.m.now())
            return None
        except Exception as exc:  # a user's fetcher may raise anything: a failed page
            if not isinstance(exc, FetchError):
                log.exception("fetcher failed on %s", held.entry.url)
            page.failed(exc, self.m.now(), took=self.m.now() - sent)
            if isinstance(exc, Refused):
                self.tell_refused(held.entry.url, exc)
            return None
        took = self.m.now() - sent
        page.answered(Fetched(response, took, set_cookies(response)), self.m.now())
        if response.truncated:
            self.tell(
                "max_body",
                f"the body of {held.entry.url} is longer than --max-body "
                f"({self.m.settings.max_body:,} bytes): cut there, and the page parsed from "
                "what was kept (--max-body raises it; said once per crawl)",
            )
        parser = self.m.worker.handler.parser
        if parser is not None and parser.takes(response):  # the host is free: fetch its
            self.m.wake()  # next page while this one is parsed in the other process
        return response

    async def handle(self, page: Page, held: Held, response: Response, step: Handle) -> None:
        try:
            handled = self.m.worker.handler.handle(
                held, response, step.origin, server_s=step.server_s
            )
            outcome = await handled
            page.answered(outcome, self.m.now())
            if outcome is not None and outcome.denied:
                self.tell_robots(held.host, "links on " + held.entry.url)
            self.tell_unwanted()
        except Exception as exc:  # a parse callback's bug fails its page, not the worker
            log.exception("parsing %s failed", held.entry.url)
            page.failed(exc, self.m.now())

    async def take_page(self, page: Page, cap: int) -> None:
        """Ask Redis for one page of the crawl's --max-pages-total (see ``Page``)."""
        granted = await self.m.persist(self.m.worker.take_page, cap)
        page.answered(granted, self.m.now())
        if not granted:
            self.tell(
                "max_pages_total",
                f"stopping: --max-pages-total {cap:,} reached: the crawl's workers take no "
                "more pages and end once the pages in flight are in (said once per crawl)",
            )
            self.m.worker.stop()

    def tell_refused(self, url: str, exc: Refused) -> None:
        """Say, the first time in the crawl, that a rule of the worker's refused a page."""
        message = str(exc)
        address = "not a public address" in message
        python = " (from Python: allow_nets=['CIDR'] or allow_private=True)" if address else ""
        self.tell(
            "address" if address else error_kind(message),
            f"refused {url}: {message}{python}; counted in status as failed, and dead "
            "(hashcrawl dead lists them); said once per crawl",
        )

    def tell_robots(self, host: str, what: str) -> None:
        """Say, the first time in the crawl, that robots.txt kept pages out."""
        self.tell(
            "robots",
            f"robots.txt of {host} disallows {what} for this user agent: not fetched, "
            "counted in status as robots_denied (--ignore-robots fetches such pages; "
            "said once per crawl)",
        )

    def tell_unwanted(self) -> None:
        tell_unwanted(self.m)

    def tell(self, reason: str, line: str) -> None:
        tell(self.m, reason, line)

    async def send(self, page: Page, request: Request) -> Response:
        """Fetch ``request`` on ``page``'s behalf, asking the page once more as the
        request is written (with the default fetcher) whether it may leave, and pacing
        a rendered page's own requests by its host's (``FrontierPace``).

        Raises:
            NotSent: the check said no; nothing reached the host.
        """
        pace = FrontierPace(self.m, page)  # a rendered page's own requests
        with sending_only_while(lambda: page.may_send(self.m.now())), paced_by(pace):
            started = time.monotonic()
            try:
                response = await self.fetcher.fetch(request)
            except BaseExceptionGroup as group:
                if not_sent_in(group):
                    raise NotSent("this worker may no longer fetch the host") from group
                raise
            response = attrs.evolve(response, latency=time.monotonic() - started)
        archive = self.m.worker.archive
        if archive is not None:  # records built here, before the page's outcome exists
            archive.archive(response)  # the commit's flush writes them, before the ack
            for fetched in response.render.archived if response.render is not None else ():
                archive.archive(fetched)  # a rendered page's own requests, as fetched
        return response

    async def fetch_robots(self, page: Page) -> Robots | Unreachable:
        """Fetch a host's robots.txt, per RFC 9309 (see ``_robots``): the rules, or why
        it is unreachable. Nothing a robots.txt or its server does raises out of here: a
        fetcher's failure counts as an unreachable robots.txt.

        Raises:
            NotSent: this worker may no longer fetch the host; nothing was asked.
        """
        fetch = RobotsFetch(page.held.entry.url, self.m.settings.user_agent)
        got: str | Robots | Unreachable = fetch.url
        while isinstance(got, str):
            if fetch.hops:  # a redirect: its target waits its host's turn, as any request
                turn = page.sub_request(got, self.m.now(), hop=True)
                assert not isinstance(turn, str)  # a hop is never refused
                await trio.sleep(max(0.0, turn - self.m.now()))
            try:
                response = await self.send(page, Request(got))
                page.sub_request_ended(got, self.m.now())
                # Parsing 500 KiB of rules takes a good part of a second: not on the loop.
                answered = functools.partial(fetch.answered, truncated=response.truncated)
                got = await self.m.offload(
                    answered, response.status, response.headers, response.body, time.time()
                )
            except NotSent:
                raise
            except Refused:  # a hop to an address not allowed: no file there
                got = Robots.allow_all()
            except Exception as exc:  # a user's fetcher may raise anything: unreachable
                if not isinstance(exc, FetchError):
                    log.exception("fetcher failed on %s", got)
                got = fetch.failed(f"{type(exc).__name__}: {exc}")
        return got

    async def robots_allow(self, robots: Robots, url: str) -> bool:
        if not robots.heavy:
            return robots.allowed(url)
        return await self.m.offload(robots.allowed, url, limiter=self.robots_limiter)  # type: ignore[no-any-return]


def not_sent_in(group: BaseExceptionGroup[BaseException]) -> bool:
    """Whether a fetch that failed as a group is not sent: a renderer's requests run side
    by side, and one the worker may no longer send (``NotSent``: its host moved, or the
    worker went stale) means the page goes back untried, whatever else failed with it."""
    return group.subgroup(NotSent) is not None


def tell_unwanted(m: Membership) -> None:
    """Say, the first time in the crawl, that a pattern or --no-parent kept links out."""
    unsaid = m.worker.handler.screen.unsaid  # the session's too (``Commits.committed``)
    while unsaid:
        refusal, why = unsaid.popitem()
        flag = refusal.value
        change = f"configure {flag} changes the pattern, --reset"
        if refusal is Refusal.NO_PARENT:
            change = "configure --reset"
        tell(
            m,
            refusal.name.lower(),
            f"not following {why}: counted in status as pattern_refused (hashcrawl "
            f"{change} {flag.removeprefix('--')} drops it; said once per crawl)",
        )


def tell(m: Membership, reason: str, line: str) -> None:
    """Say ``line`` if this is the crawl's first time for ``reason`` (``_notices``)."""
    notices = m.worker.notices
    if notices.first(reason):
        m.spawn(notices.tell, reason, line, getattr(m.store, "claim_notice", None))
