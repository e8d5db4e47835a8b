"""A trio run in a helper thread, on a clock that only the simulation moves.

Hypothesis drives a state machine from plain synchronous code, while a worker session
lives in trio. :class:`Loop` keeps one ``trio.run`` going in a helper thread for the
length of one example, so that tasks a step leaves behind (a fetch waiting for its
answer, a commit waiting to retry) survive into later steps. ``Loop.run`` hands it a
coroutine and waits for the result.

The clock is a ``MockClock`` that never moves by itself: ``advance`` moves it, one
sleeper's deadline at a time, and lets whatever wakes run until every task is blocked
again. Within a step no time passes, so every step is deterministic.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio
import trio.testing

T = TypeVar("T")
REAL_TIMEOUT = 120.0  # seconds of real time one step may take before we call it hung


class Hung(AssertionError):
    """A step did not finish: something waits for an event that never comes."""


SERVER_EPOCH_MS = 1_796_083_200_000  # 2026-12-01 UTC: the server's time at the loop's 0


class Loop:
    """One trio run with a MockClock, serving coroutines from the calling thread."""

    def __init__(self) -> None:
        self.clock = trio.testing.MockClock()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="simulation", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _main(self) -> None:
        try:
            trio.run(self._serve, clock=self.clock)
        except BaseException as exc:  # surfaced by close() instead of a thread warning
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def now(self) -> float:
        return self.clock.current_time()

    def now_ms(self) -> int:
        return round(self.clock.current_time() * 1000)

    def server_ms(self) -> int:
        """The Redis server's clock, as its scripts are given it: the loop's, on a Unix
        epoch. A worker's local clock (trio's) starts at 0, as a monotonic clock does, so
        its offset from the server's is as large as a real one, and its sign shows."""
        return self.now_ms() + SERVER_EPOCH_MS

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the loop, then let every task it woke settle."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def runner() -> None:
            try:
                result = await fn(*args)
                await settle()
            except BaseException as exc:  # handed to the caller, who re-raises it
                future.set_exception(exc)
                if isinstance(exc, trio.Cancelled):
                    raise
            else:
                future.set_result(result)

        trio.from_thread.run_sync(self.nursery.start_soon, runner, trio_token=self.token)
        try:
            return future.result(REAL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise Hung(f"a step did not finish in {REAL_TIMEOUT:g} s of real time") from None

    def start(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Start a task in the loop's nursery (call from inside the loop)."""
        self.nursery.start_soon(fn)

    async def advance(self, seconds: float) -> None:
        """Move the clock on, waking sleepers in deadline order and letting each settle."""
        target = self.clock.current_time() + seconds
        while True:
            await settle()
            wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
            now = self.clock.current_time()
            if now + wait > target:
                break
            self.clock.jump(max(wait, 0.0))
        self.clock.jump(max(target - self.clock.current_time(), 0.0))
        await settle()

    def next_deadline(self) -> float:
        """When the earliest sleeper wakes (inside the loop)."""
        wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
        return self.clock.current_time() + wait

    def close(self) -> None:
        if self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            self._thread.join(REAL_TIMEOUT)
        if self._failure is not None:
            raise self._failure


async def settle() -> None:
    """Return once every other task is blocked and no worker thread is running.

    Sink writes run in trio's worker threads; a task waiting for one counts as blocked,
    so the thread limiter tells whether anything is still on its way back.
    """
    limiter = trio.to_thread.current_default_thread_limiter()
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if limiter.borrowed_tokens == 0:
            return
        await trio.testing.wait_all_tasks_blocked(0.0005)


async def inline(fn: Callable[..., T], *args: Any, limiter: object = None) -> T:
    """A driver's ``offload`` run inline: no thread, so a step's order of events depends
    on nothing but the step (a thread's finish would reorder tasks by real time)."""
    return fn(*args)
