"""The pace of a rendered page's sub-requests: the one hook between the browser and the
worker's politeness.

A rendered page holds its host's slot from its document's fetch until its DOM is read
(the worker counts it in flight all along), so the page's sub-requests need no slot of
their own: one at a time per page, each waits for its host's turn (:meth:`Pace.turn`,
which also says no to what robots.txt forbids) and reports its end (:meth:`Pace.ended`).
A worker sets its own pace, its frontier's, for the fetch it makes (:func:`paced_by`);
a renderer used alone spaces its sub-requests itself (:class:`HostPace`).
"""

from __future__ import annotations

import contextvars
from typing import Protocol
from urllib.parse import urlsplit

import trio


class Pace(Protocol):
    """Waits for a host's turn before a sub-request to it leaves."""

    async def turn(self, url: str) -> None:
        """Return when a request for ``url`` may start (its start is then counted).

        Raises:
            Refused: the request may not be made (robots.txt, or no longer this
                worker's host).
        """

    def ended(self, url: str) -> None:
        """A request for ``url`` (the document, or a sub-request) has ended."""

    def refused(self, url: str, why: str) -> None:
        """The page asked for ``url``, on a host it may not fetch from: not fetched."""


class HostPace:
    """Starts the sub-requests to each host ``delay`` seconds apart, in this process:
    the pace of a renderer used on its own."""

    def __init__(self, delay: float = 0.0) -> None:
        self._delay = delay
        self._next: dict[str, float] = {}

    async def turn(self, url: str) -> None:
        host = _host(url)
        now = trio.current_time()
        if len(self._next) > 10_000:  # forget the hosts whose turn has passed
            self._next = {h: at for h, at in self._next.items() if at > now}
        turn = max(now, self._next.get(host, now))
        self._next[host] = turn + self._delay
        await trio.sleep_until(turn)

    def ended(self, url: str) -> None:
        pass

    def refused(self, url: str, why: str) -> None:
        pass


#: The pace of the fetch under way, when a worker set one (see :func:`paced_by`).
CURRENT: contextvars.ContextVar[Pace | None] = contextvars.ContextVar("pace", default=None)


class paced_by:  # lower case: it replaced a contextmanager function
    """Within the block (and the tasks it starts), sub-requests follow ``pace``.

    A class, not a ``contextmanager``: every fetch a worker makes enters it, rendered or
    not, and a generator's two steps cost more than the contextvar's set and reset (1%
    of a worker's time in the bench's profile)."""

    __slots__ = ("_pace", "_token")

    def __init__(self, pace: Pace) -> None:
        self._pace = pace

    def __enter__(self) -> None:
        self._token = CURRENT.set(self._pace)

    def __exit__(self, *_: object) -> None:
        CURRENT.reset(self._token)


def _host(url: str) -> str:
    return urlsplit(url).netloc.lower()
