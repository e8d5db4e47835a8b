"""What the driver's loops share: one store caller, which owns the retry policy, and the
wake-ups the loops wait on.

The policy: a store call that fails (``QueueError``) is tried again, a little apart,
until it has failed for a whole lease; then the worker gives up, since Redis answers
nobody or refuses this (out of memory, say), and work it holds nobody else can take
over while it is a member. ``Fenced`` is never retried: the membership is over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from hashcrawl._exceptions import Fenced, QueueError

log = logging.getLogger("hashcrawl")
T = TypeVar("T")
Call = Callable[..., Awaitable[Any]]  # runs a blocking store call: call(fn, *args, **kwargs)


class StoreCaller:
    """Runs store calls through ``call`` (a thread, or the simulation's inline one).

    Args:
        call: runs one blocking store call.
        lease: the current lease, in seconds (settings may change while running).
        now: the clock (trio's, or the simulation's).
    """

    def __init__(self, call: Call, lease: Callable[[], float], now: Callable[[], float]) -> None:
        self.call = call
        self.lease = lease
        self.now = now

    async def persist(
        self, fn: Callable[..., T], *args: Any, every: float = 1.0, **kwargs: Any
    ) -> T:
        """Call ``fn``, tried again ``every`` seconds until it has failed for a lease.

        Raises:
            Fenced: the worker is no longer a member.
            QueueError: it kept failing for a whole lease.
        """
        failing_since = None
        while True:
            try:
                result: T = await self.call(fn, *args, **kwargs)
                return result
            except Fenced:
                raise
            except QueueError as exc:
                now, lease = self.now(), self.lease()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > lease:
                    raise QueueError(f"{exc}; still failing after a lease ({lease:g} s)") from None
                log.debug("retrying: %s", exc)
                await trio.sleep(every)


class Wakeup:
    """A loop's reason to run its turn: set from anywhere, taken once by the loop."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        """Wait until set, and take it: a set while the turn runs wakes the loop again."""
        await self._event.wait()
        self._event = trio.Event()

    async def turns(self, turn: Callable[[], Awaitable[Any]]) -> None:
        """Run ``turn`` each time this is set, forever: the loop of most loops."""
        while True:
            await self.wait()
            await turn()


class Signal:
    """Wakes every task waiting for "something changed"; waiters re-check their condition."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()
