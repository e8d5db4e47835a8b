"""A trio run in a helper thread, on a clock that only the simulation moves.

Hypothesis drives a state machine from plain synchronous code, while a worker session
lives in trio. :class:`Loop` keeps one ``trio.run`` going in a helper thread for the
length of one example, so that tasks a step leaves behind (a fetch waiting for its
answer, a commit waiting to retry) survive into later steps. ``Loop.run`` hands it a
coroutine and waits for the result.

The clock is a ``MockClock`` that never moves by itself: ``advance`` moves it, one
sleeper's deadline at a time, and lets whatever wakes run until every task is blocked
again. Within a step no time passes, so every step is deterministic.

No outcome may depend on real time, or Hypothesis sees an example behave one way and
its replay (or a later example sharing its first steps) another, and the run ends in a
``Flaky``/``FlakyStrategyDefinition`` with the first failure unprinted. So a hung step
is found by the loop's own state, not by a timeout: every task blocked, no thread
running, and the step not done means nothing can ever wake it (only the step moves the
clock), and that is :class:`Hung`, a finding like any broken invariant. What real time
still bounds (a step that outlasts ``REAL_TIMEOUT``, the simulation's Redis not
answering within its socket timeout or refusing connections, a restart that outlasts
its start timeout) is the machine's failure, not hashcrawl's: :class:`EnvironmentFailure`
ends the run at once, printed as such.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import trio
import trio.testing

from hashcrawl._exceptions import QueueError

T = TypeVar("T")
# Seconds of real time one step may take: only a machine too loaded, or a call blocking
# outside trio, comes near it (a hang is found without it, see ``_watch``).
REAL_TIMEOUT = 900.0  # above PATIENCE
# Seconds a connection of the simulation waits for Redis's answer, or for the server to
# start: far beyond any load, so that a slow answer is only slow (the outcome stays the
# simulated clock's), and only a server gone fails a call (a refused connection).
PATIENCE = 600.0
# A run loop about to wait this long (real seconds) for I/O has nothing runnable, no
# sleeper the frozen clock will ever wake and no task waiting for the others to block.
NEVER = 3600.0


class Hung(AssertionError):
    """A step did not finish: something waits for an event that never comes."""


class EnvironmentFailure(BaseException):
    """The machine failed the simulation, not hashcrawl: a step outlasted
    ``REAL_TIMEOUT``, or the simulation's Redis did not answer within its socket timeout,
    refused connections, or did not start in time.

    A BaseException, so that Hypothesis neither counts it as a failing example nor
    replays it (a replay on a quieter machine would pass, and the run would end as a
    flaky test with this unprinted): it ends the run at once, and ``python -m
    simulations`` prints it apart from a broken invariant (exit status 3).
    """


def environment_failure(exc: BaseException) -> EnvironmentFailure | None:
    """The environment failure ``exc`` stands for, if it is one: a Redis error of real
    time (no answer in time, a connection refused), raw from redis-py or as hashcrawl's
    ``QueueError`` words it (a ``QueueError`` keeps no cause, so its text is read)."""
    if isinstance(exc, EnvironmentFailure):
        return exc
    if isinstance(exc, redis.TimeoutError | redis.ConnectionError):
        return EnvironmentFailure(f"the simulation's Redis: {type(exc).__name__}: {exc}")
    if isinstance(exc, QueueError) and any(sign in str(exc) for sign in _REAL_TIME_SIGNS):
        return EnvironmentFailure(f"the simulation's Redis: {exc}")
    return None


# How hashcrawl words a Redis error of real time (``_store._connection._reason``), and
# redis-py's text for a connection that could not be made (refused: the server is gone;
# while it runs, a connection never fails to open).
_REAL_TIME_SIGNS = ("no answer in time", "connecting to")


def found_in(error: BaseException) -> EnvironmentFailure | None:
    """An environment failure in ``error`` or, through exception groups, inside it."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if (found := found_in(inner)) is not None:
                return found
        return None
    return error if isinstance(error, EnvironmentFailure) else None


SERVER_EPOCH_MS = 1_796_083_200_000  # 2026-12-01 UTC: the server's time at the loop's 0


class Loop:
    """One trio run with a MockClock, serving coroutines from the calling thread."""

    def __init__(self) -> None:
        self.clock = trio.testing.MockClock()
        self._watch = _HangWatch()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="simulation", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _main(self) -> None:
        try:
            trio.run(self._serve, clock=self.clock, instruments=[self._watch])
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
        """Run ``fn(*args)`` in the loop, then let every task it woke settle.

        Raises:
            Hung: the step waits for something that can never happen.
            EnvironmentFailure: the step outlasted ``REAL_TIMEOUT``, or raised an error
                of real time (see :func:`environment_failure`).
        """
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def runner() -> None:
            try:
                result = await fn(*args)
                await settle()
            except BaseException as exc:  # handed to the caller, who re-raises it
                _settle_future(future, exception=environment_failure(exc) or exc)
                if isinstance(exc, trio.Cancelled):
                    raise
            else:
                _settle_future(future, result=result)

        def start() -> None:
            self._watch.step = future
            self.nursery.start_soon(runner)

        trio.from_thread.run_sync(start, trio_token=self.token)
        try:
            return future.result(REAL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            raise EnvironmentFailure(
                f"a step did not finish in {REAL_TIMEOUT:g} s of real time (the machine is "
                "too loaded, or a call blocks outside trio)"
            ) from None

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


class _HangWatch(trio.abc.Instrument):
    """Fails the step under way with :class:`Hung` when the run loop, the step not done,
    is about to wait for I/O for ever: every task blocked, no thread running, no sleeper
    that the frozen clock will wake (only a step moves it) and no task waiting for the
    others to block. An instrument, not a task: it adds nothing to the scheduler's draws,
    so every step's order of events stays what it was."""

    def __init__(self) -> None:
        self.step: concurrent.futures.Future[Any] | None = None

    def before_io_wait(self, timeout: float) -> None:
        step = self.step
        if step is None or step.done() or timeout < NEVER:
            return
        if trio.to_thread.current_default_thread_limiter().borrowed_tokens:
            return  # a thread's end wakes the loop
        _settle_future(step, exception=Hung("a step waits for something that never comes"))


def _settle_future(
    future: concurrent.futures.Future[Any],
    *,
    result: Any = None,
    exception: BaseException | None = None,
) -> None:
    """Give ``future`` its result or error, unless the watch or the step gave it one."""
    if future.done():
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)


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
