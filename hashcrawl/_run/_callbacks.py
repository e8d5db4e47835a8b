"""The pieces of running a parse callback: its steps, its failures, what it is given.

:class:`~hashcrawl._run._handler.Handler` runs a callback or errback through a
:class:`Caller`, which drives it through :class:`Steps` and sorts what it gives into a
:class:`Produced`; the rest are pure helpers it and its tests share.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import logging
import os
import sysconfig
import time
import traceback
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._links import request_url
from hashcrawl._core._revisit import Fetched
from hashcrawl._exceptions import ConfigError
from hashcrawl._output._sinks import as_dict
from hashcrawl._spiders._spider import Calls
from hashcrawl._web._models import Request, Response

LOOP_HOLD_WARNING = 1.0  # seconds a callback may hold the event loop before it is reported

log = logging.getLogger("hashcrawl")


def page_item(held: Held, response: Response, worker: str) -> dict[str, Any]:
    """The item hashcrawl writes for a page when no parse callback is given.

    A redirect's says where it went: ``location`` is its ``Location`` header as sent,
    ``final_url`` the target it leads to (followed as a page of its own), and it has
    no title (its body is the server's "302 Found" boilerplate, not a page's)."""
    location = response.headers.get("location") if 300 <= response.status < 400 else None
    target = request_url(response.url, location) if location is not None else None
    return {
        "url": held.entry.url,
        "final_url": response.url if target is None else target,
        "location": location,
        "status": response.status,
        "content_type": response.headers.get("content-type"),
        "length": len(response.body),
        "title": response.title() if location is None else None,
        "canonical": response.canonical(),
        "depth": held.entry.depth,
        "fetched_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        "worker": worker,
    }


class ParseTimeout(Exception):
    """A parse callback ran past ``--parse-timeout`` and was cancelled."""


def failure(exc: Exception) -> str:
    if isinstance(exc, ParseTimeout):
        return str(exc)
    return f"raised {type(exc).__name__}: {exc}"


_NOT_THE_SPIDERS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in (
        Path(__file__).parent.parent,
        Path(trio.__file__).parent,
        sysconfig.get_path("stdlib"),
    )
)


def spider_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` through the user's code only: hashcrawl's own frames
    (and trio's, and the standard library's) say nothing about the spider's bug."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not str(Path(frame.filename).resolve()).startswith(_NOT_THE_SPIDERS)
    ]
    shown = "".join(traceback.format_list(frames)) if frames else "  (no frame of its own)\n"
    return "the callback's own frames, innermost last:\n" + shown.rstrip("\n")


@attrs.define
class Produced:
    """What a parse callback has produced so far (kept if it then raises)."""

    items: list[Any] = attrs.Factory(list)
    follows: list[Entry] = attrs.Factory(list)
    dropped: int = 0  # requests past --max-links, not even read
    # Links of the default parse that the worker queued already (``Origin.seen``), with
    # their hosts: never made entries, but counted as found, and as kept if the rules
    # would keep them.
    known: list[tuple[str, str]] = attrs.Factory(list)


@attrs.frozen
class Caller:
    """Runs a callback or an errback under ``--parse-timeout`` and collects what it
    gives: items (through the spider's pipelines), and requests up to ``--max-links``.

    ``unknown`` says what a request names that the handler lacks (None: nothing).
    """

    spider: Calls | None
    blocking: bool
    max_links: int
    timeout: float
    unknown: Callable[[Request], str | None]

    async def run(
        self, call: Callable[[Any], Any], arg: Any, held: Held, produced: Produced, base: str
    ) -> None:
        """Add what ``call(arg)`` produces to ``produced``, one by one as it comes; its
        requests past ``max_links`` are counted as dropped, not kept. ``base`` is the
        URL a relative request is resolved against.

        Raises:
            ParseTimeout: it ran past ``--parse-timeout`` (and was cancelled).
            Exception: whatever the callback raised, or ``TypeError``/``ConfigError`` for
                a thing it produced that is not an item, a Request, a URL or None. What
                was produced before stays in ``produced``.
        """
        try:
            with trio.fail_after(self.timeout):
                await self._collect(call, arg, held, produced, base)
        except trio.TooSlowError:
            raise ParseTimeout(f"ran past --parse-timeout ({self.timeout:g} s)") from None

    async def _collect(
        self, call: Callable[[Any], Any], arg: Any, held: Held, produced: Produced, base: str
    ) -> None:
        most, follows = self.max_links, produced.follows
        steps = Steps(call, arg, self.blocking)
        async with contextlib.aclosing(steps.each()) as things:
            async for thing in things:
                if isinstance(thing, Request | str) and len(follows) >= most:
                    produced.dropped += 1  # past --max-links: not even read
                elif isinstance(thing, Request | str):
                    if isinstance(thing, Request) and (why := self.unknown(thing)) is not None:
                        raise ConfigError(f"Request names an unknown {why.removeprefix('no ')}")
                    request = thing if isinstance(thing, Request) else Request(thing)
                    follow = request.to_entry(base, held.entry.depth + 1)
                    if follow is not None:
                        follows.append(follow)
                elif thing is not None:
                    item = thing if self.spider is None else await self._piped(thing)
                    if item is not None:
                        produced.items.append(as_dict(item))
        if steps.held_loop > LOOP_HOLD_WARNING:
            log.warning(
                "the parse callback held the event loop %.1f s on %s: set blocking = True "
                "on the spider to run it in a thread",
                steps.held_loop,
                held.entry.url,
            )

    async def _piped(self, item: Any) -> Any:
        """``item`` through the spider's pipelines (None if one dropped it)."""
        assert self.spider is not None
        if not self.spider.pipelines:
            return item
        return await self.spider.process_item(item, self._step)

    async def _step(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``: in a thread for a blocking spider, else here."""
        if self.blocking:
            return await trio.to_thread.run_sync(call, *args)
        return call(*args)


_DONE = object()


class Steps:
    """A callback's run, one produced thing at a time, its synchronous steps timed.

    A blocking spider's synchronous steps (the call, each ``next``) run in a thread,
    abandoned if ``--parse-timeout`` cancels them; otherwise they run on the event loop
    and ``held_loop`` adds up how long they held it.
    """

    def __init__(self, parse: Callable[[Any], Any], response: Any, blocking: bool) -> None:
        self.parse = parse
        self.response = response
        self.blocking = blocking
        self.held_loop = 0.0

    async def step(self, call: Callable[..., Any], *args: Any) -> Any:
        if self.blocking:
            return await trio.to_thread.run_sync(call, *args, abandon_on_cancel=True)
        start = time.monotonic()
        try:
            return call(*args)
        finally:
            self.held_loop += time.monotonic() - start

    async def each(self) -> AsyncGenerator[Any, None]:
        produced = await self.step(self.parse, self.response)
        if isinstance(produced, Iterator) and not isinstance(produced, str):
            try:
                while (thing := await self.step(next, produced, _DONE)) is not _DONE:
                    yield thing
            finally:
                close = getattr(produced, "close", None)
                if close is not None:
                    with contextlib.suppress(ValueError):  # still running in an abandoned thread
                        close()
            return
        async with contextlib.aclosing(_each(produced)) as things:
            async for thing in things:
                yield thing


async def _each(produced: Any) -> AsyncGenerator[Any, None]:
    """What a callback produced, one thing at a time, so an exception keeps what came before."""
    if inspect.isawaitable(produced):
        produced = await produced
    if inspect.isasyncgen(produced):
        async with contextlib.aclosing(produced):
            async for thing in produced:
                yield thing
    elif produced is None:
        return
    elif isinstance(produced, dict | str) or attrs.has(type(produced)):
        yield produced
    elif isinstance(produced, Iterable):
        for thing in produced:
            yield thing
    else:
        yield produced


def unread_links(response: Response) -> int:
    """Links a capped parse of the page left unread (0 if links() was never asked for)."""
    parsed = response._parsed[0] if response._parsed else None
    return parsed.dropped if parsed is not None else 0


def fetched(response: Response) -> Fetched:
    """What a revisit's judgement needs of a response."""
    headers = response.headers
    etag, modified = headers.get("etag"), headers.get("last-modified")
    return Fetched(status=response.status, body=response.body, etag=etag, last_modified=modified)


def unix_now() -> float:
    return time.time()
