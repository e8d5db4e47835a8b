"""The pieces of running a parse callback: its steps, its failures, what it is given.

:class:`~hashcrawl._run._handling.Handler` drives a callback through :class:`Steps`; the
rest are pure helpers it and its tests share.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import sysconfig
import time
import traceback
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from hashcrawl._core._frontier import Held
from hashcrawl._core._revisit import Fetched
from hashcrawl._web._models import Response


def page_item(held: Held, response: Response, worker: str) -> dict[str, Any]:
    """The item hashcrawl writes for a page when no parse callback is given."""
    return {
        "url": held.entry.url,
        "final_url": response.url,
        "status": response.status,
        "content_type": response.headers.get("content-type"),
        "length": len(response.body),
        "title": response.title(),
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
    page = response._parsed[0] if response._parsed else None
    return page.dropped if page is not None else 0


def fetched(response: Response) -> Fetched:
    """What a revisit's judgement needs of a response."""
    headers = response.headers
    etag, modified = headers.get("etag"), headers.get("last-modified")
    return Fetched(status=response.status, body=response.body, etag=etag, last_modified=modified)


def unix_now() -> float:
    return time.time()
