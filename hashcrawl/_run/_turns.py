"""Shared hosts at work: a fetcher that has every request to a --render-fetch-hosts host
take its turn in Redis first (``_core._turns``), and those hosts' robots.txt rules for
the rendered pages that fetch from them without owning them.

:class:`SharedTurns` wraps the worker's fetcher, under the renderer, so every request
to a shared host passes it: a rendered page's sub-requests, and the host's owner's own
pages and robots.txt when the crawl crawls it too. A request to any other host goes
straight through, at no cost.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

import trio

from hashcrawl._core._settings import Settings
from hashcrawl._core._turns import AHEAD, MAX_MISSED, Start, Turn, host_of, shared_hosts
from hashcrawl._exceptions import FetchError, QueueError
from hashcrawl._web._fetch import Fetcher
from hashcrawl._web._models import Request, Response
from hashcrawl._web._pools import NotSent, sending_after, sending_also_while
from hashcrawl._web._robots import RULES_TTL, Robots, RobotsFetch, Unreachable

Offload = Callable[..., Awaitable[Any]]


class TakeTurn(Protocol):
    """``Store.take_turn``: reserve a shared host's next turn in Redis."""

    def __call__(
        self, host: str, *, gap: float, margin: float, most_wait: float
    ) -> tuple[bool, float]: ...


class SharedTurns:
    """A fetcher: ``fetcher``'s, where a request to a shared host first waits for a turn
    Redis reserved it, and leaves only within that turn's window.

    With the default fetcher (``at_write``) the turn is taken as the request's bytes are
    about to be written, on a connection made already (``_pools.sending_after``), so a
    connect or TLS handshake slower than the margin costs no turn; the window is checked
    right before the bytes leave. With any other fetcher the turn is taken, and its
    window checked, right before the fetcher is called.

    Args:
        take: reserves a turn (``Store.take_turn``; blocking, run by ``offload``).
        settings: the worker's settings now (its shared hosts, --delay, the margin).
        gap_of: the host's gap, seconds: --delay, or its Crawl-delay if known and longer.
        at_write: ``fetcher`` is the default one, whose connections await the turn.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        *,
        take: TakeTurn,
        settings: Callable[[], Settings],
        gap_of: Callable[[str], float],
        offload: Offload = trio.to_thread.run_sync,
        at_write: bool = False,
    ) -> None:
        self.fetcher, self.take, self.settings, self.gap_of = fetcher, take, settings, gap_of
        self.offload, self.at_write = offload, at_write
        self.taken = 0  # turns reserved
        self.missed = 0  # turns let go: the reply came, or the request left, too late

    def shared(self, url: str) -> str | None:
        """The host key of ``url`` if it is a shared host (every request asks: a crawl
        that shares none pays one attribute read, not a parse of ``url``)."""
        text = self.settings().render_fetch_hosts
        if not text:
            return None
        host = host_of(url)
        return host if host is not None and host in shared_hosts(text) else None

    async def fetch(self, request: Request) -> Response:
        host = self.shared(request.url)
        if host is None:
            return await self.fetcher.fetch(request)
        for _ in range(MAX_MISSED):
            start = Start()
            hook = functools.partial(self._take, start, host)
            with contextlib.ExitStack() as stack:
                if self.at_write:  # the connection awaits the turn: see sending_after
                    stack.enter_context(sending_after(hook))
                else:
                    await hook()
                    if not start.check(trio.current_time()):
                        self.missed += 1
                        continue
                stack.enter_context(sending_also_while(_checked_now(start)))
                try:
                    return await self.fetcher.fetch(request)
                except (NotSent, BaseExceptionGroup) as exc:
                    if not start.missed or not _not_sent(exc):
                        raise
            self.missed += 1
        raise FetchError(
            f"no turn: {host}'s turns came later than --render-fetch-margin "
            f"({self.settings().render_fetch_margin:g} s) {MAX_MISSED} times: Redis answers "
            "too slowly for it"
        )

    async def _take(self, start: Start, host: str) -> None:
        """Take ``start``'s turn, once (a request's later writes find it taken)."""
        if start.turn is None:
            start.turn = await self.turn(host)

    async def turn(self, host: str) -> Turn:
        """A turn of ``host`` reserved in Redis, once its window opens (a turn whose reply
        came too late is returned at once: not ``usable``).

        Raises:
            FetchError: Redis did not answer, or the next free turn is past the
                deadline of the task (a rendered page's --render-timeout, the fetch's
                --timeout).
        """
        margin = self.settings().render_fetch_margin
        while True:
            asked = trio.current_time()
            left = trio.current_effective_deadline() - asked
            take = functools.partial(
                self.take, host, gap=self.gap_of(host), margin=margin, most_wait=min(AHEAD, left)
            )
            try:
                granted, wait = await self.offload(take)
            except QueueError as exc:
                raise FetchError(f"no turn: Redis did not answer for {host}: {exc}") from None
            if granted:
                self.taken += 1
                turn = Turn.granted(
                    asked=asked, answered=trio.current_time(), wait=wait, margin=margin
                )
                if turn.usable:
                    await trio.sleep_until(turn.opens)
                return turn
            if wait >= left:
                raise FetchError(f"no turn: {host}'s next free turn is {wait:.1f} s off, too late")
            await trio.sleep(wait - AHEAD)  # then reserve it: at most AHEAD away


def _checked_now(start: Start) -> Callable[[], bool]:
    return lambda: start.check(trio.current_time())


def _not_sent(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(NotSent) is not None
    return isinstance(exc, NotSent)


class SharedRobots:
    """The robots.txt rules of the shared hosts, for the pages this worker renders that
    fetch from one it does not own: each fetched once (through its turn) and kept as
    an owner keeps them (``RULES_TTL``; an unreachable one denies all for its backoff).
    At most one entry per shared host."""

    def __init__(self, fetcher: Fetcher, settings: Callable[[], Settings]) -> None:
        self.fetcher, self.settings = fetcher, settings
        self._rules: dict[str, Robots] = {}
        self._locks: dict[str, trio.Lock] = {}

    def crawl_delay(self, host: str) -> float:
        """The host's Crawl-delay as known here (0: none), at most half the lease."""
        rules = self._rules.get(host)
        delay = rules.crawl_delay if rules is not None else None
        return min(delay or 0.0, self.settings().lease / 2)

    async def rules(self, url: str, host: str) -> Robots:
        """The rules ``url``'s page (of shared host ``host``) is checked against."""
        lock = self._locks.setdefault(host, trio.Lock())
        async with lock:
            kept = self._rules.get(host)
            now = trio.current_time()
            if kept is not None and not kept.expired(now):
                return kept
            got = await self._fetch(f"{urlsplit(url).scheme}://{host}/")
            if isinstance(got, Unreachable):
                until = now + got.wait(1)
                kept = (kept or Robots.deny_all()).kept_until(until)  # RFC 9309 2.4
            else:
                kept = got.kept_until(now + RULES_TTL)
            self._rules[host] = kept
            return kept

    async def _fetch(self, url: str) -> Robots | Unreachable:
        fetch = RobotsFetch(url, self.settings().user_agent)
        got: str | Robots | Unreachable = fetch.url
        while isinstance(got, str):
            if fetch.hops and host_of(got) not in shared_hosts(self.settings().render_fetch_hosts):
                return Robots.allow_all()  # a hop to a host it may not fetch: no file
            try:
                response = await self.fetcher.fetch(Request(got))
            except FetchError as exc:
                return fetch.failed(str(exc))
            answered = functools.partial(fetch.answered, truncated=response.truncated)
            got = await trio.to_thread.run_sync(
                answered, response.status, response.headers, response.body, time.time()
            )
        return got
