"""Real worker sessions, stepped one action at a time, with faults between them and Redis.

A :class:`SimWorker` wraps one ``hashcrawl._worker._Session``: the class every worker
runs, with its Store (the real scripts, on a real server) and a fake fetcher. Each
*step* is one turn of one of the session's loops (heartbeat, reader, dispatcher,
committer, applier, drainer, unparker), calling the session's own methods. Only the
loop scaffolding is re-stated here, because the real loops sleep and block; every
decision (what to fetch, whether the worker is fresh, how a commit is built, what a
handoff moves) is the session's.

Two pieces of plumbing differ from a live worker, and say so where they are set:

- store calls run inline in the trio thread instead of a worker thread (``_inline``),
  so that a step is deterministic;
- ``take_in`` starts ``load_pace`` through ``session.nursery.start_soon``; here that
  call is kept (``_Deferred``) and run as a step of its own, so the model also decides
  when the pace record is read.

A step that cannot finish at once (a commit retrying after Redis failed, a handoff
waiting for fetches in flight) stays *pending* as a task and goes on when time moves or
what it waits for happens, just as the loop would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from hashcrawl._exceptions import QueueError
from hashcrawl._frontier import Held
from hashcrawl._redisurl import RedisURL
from hashcrawl._store import Store
from hashcrawl._worker import Worker, _Session
from simulations.web import SimFetcher

REDIS_METHODS = frozenset(
    {"ping", "join", "heartbeat", "leave", "members", "commit", "read", "orphan", "entries"}
    | {"release", "unpark", "parked_hosts", "pace", "note_in_flight", "in_flight_of"}
)
LIVE = ("joining", "member", "stopping", "leaving")


class SimulatedCrash(BaseException):
    """The worker's process died at this point (armed by the model at a Redis call)."""


@attrs.define
class Link:
    """What stands between one worker and Redis; the model flips these.

    ``lose_reply`` and ``crash_at`` name a Store method: the next call of it loses its
    reply (Redis ran it; the caller sees an error), or is where the process dies, before
    the call is sent or, with ``crash_after``, once Redis has run it. ``crash_at="ack"``
    is the next commit that acknowledges entries (not a handoff's or a drain's).
    """

    cut: bool = False
    lose_reply: str | None = None
    crash_at: str | None = None
    crash_after: bool = False

    def disarm(self) -> None:
        self.cut = self.crash_after = False
        self.lose_reply = self.crash_at = None


class FaultyStore:
    """A Store seen through a :class:`Link`: cut off, losing replies, or dying mid-call."""

    def __init__(self, store: Store, link: Link) -> None:
        self._store = store
        self.link = link

    def orphan(self) -> str | None:
        """``Store.orphan``, but the same orphan every time the example is replayed.

        The real one picks with SRANDMEMBER, which Redis cannot be asked to repeat, and
        Hypothesis needs a replay to go the same way. Any order of drains must be right.
        """
        chosen = self._through("orphan", self._store.orphan)
        if chosen is None or chosen == self._store.inbox:
            return chosen  # type: ignore[no-any-return]
        return min(self._store._redis.smembers(self._store.key("orphans")) or {chosen})

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name not in REDIS_METHODS:
            return value

        def through(*args: Any, **kwargs: Any) -> Any:
            return self._through(name, value, *args, **kwargs)

        return through

    def _through(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        link = self.link
        crash = link.crash_at == name or (link.crash_at == "ack" and _acknowledges(name, args))
        if crash:
            link.crash_at = None
            if not link.crash_after:
                raise SimulatedCrash(f"died before calling {name}")
        if link.cut:
            raise QueueError(f"cut off from Redis (calling {name})")
        result = method(*args, **kwargs)
        if crash:
            raise SimulatedCrash(f"died after {name} reached Redis")
        if link.lose_reply == name:
            link.lose_reply = None
            raise QueueError(f"the reply to {name} was lost")
        return result


def _acknowledges(name: str, args: tuple[Any, ...]) -> bool:
    batch = args[0] if args else None
    return name == "commit" and bool(getattr(batch, "ack", None) or getattr(batch, "once", None))


async def _inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``_Session.call`` without the thread: the simulation wants each step deterministic."""
    return fn(*args, **kwargs)


class _Deferred:
    """Stands in for the session's nursery: keeps ``start_soon`` calls for the model."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Awaitable[None]], tuple[Any, ...]]] = []

    def start_soon(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.calls.append((fn, args))


@attrs.define(eq=False)
class Task:
    """One pending step of one worker."""

    kind: str
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: bool = False
    result: Any = None
    error: BaseException | None = None


class SimSink:
    """Records which URLs a worker wrote items for: the crawl's "done" set."""

    def __init__(self, done: list[tuple[str, str]], worker: str) -> None:
        self.done = done
        self.worker = worker

    def write(self, items: Any) -> None:
        self.done.extend((str(item["url"]), self.worker) for item in items)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class SimWorker:
    """One worker session and its pending steps. Create inside the loop."""

    def __init__(self, name: str, env: Any) -> None:
        self.name = name
        self.env = env
        self.link = Link()
        settings = env.settings
        self.store = Store(RedisURL.parse(env.url), env.crawl, timeout=10.0, clock=env.loop.now_ms)
        self.fetcher = SimFetcher(env.web, name, env.fetches, timeout=settings["timeout"])
        worker = Worker(
            env.url, env.crawl, fetcher=self.fetcher, sink=SimSink(env.done, name), **settings
        )
        worker.id = name
        store = FaultyStore(self.store, self.link)
        self.session = _Session(worker, store, self.fetcher)  # type: ignore[arg-type]
        self.session.call = _inline  # type: ignore[method-assign]
        self.deferred = _Deferred()
        self.session.nursery = self.deferred  # type: ignore[assignment]
        self.tasks: dict[str, Task] = {}
        self.state = "joining"
        self.paused = False
        self.excused = False
        self.departed = False  # seen out of the ring while leaving: it left by itself
        self.last_beat = float("-inf")  # when it last tried to beat
        self.confirmed = float("-inf")  # server time of its last heartbeat Redis answered
        self.flight_count = 0
        self.ended_at = -1

    def __repr__(self) -> str:
        return f"<{self.name} {self.state}{' paused' if self.paused else ''}>"

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def active(self) -> bool:
        """Live and running: a paused worker takes no step."""
        return self.live and not self.paused

    # -- tasks ---------------------------------------------------------------------------

    def start(self, kind: str, fn: Callable[[], Awaitable[Any]]) -> None:
        task = self.tasks[kind] = Task(kind)

        async def run() -> None:
            with task.scope:
                try:
                    task.result = await fn()
                except trio.Cancelled:
                    raise
                except BaseException as exc:  # every way a step can end is the model's
                    task.error = exc
            task.done = True

        self.env.loop.start(run)

    def stop_tasks(self, *, but: str | None = None) -> None:
        for kind, task in self.tasks.items():
            if kind != but:
                task.scope.cancel()

    def busy_with(self, kind: str) -> bool:
        return kind in self.tasks

    # -- the loops, one turn each ------------------------------------------------------------

    async def join(self) -> str:
        s = self.session
        await s.begin()
        await s.find_parked()  # what unpark_loop does first
        self.state = "member"
        self.last_beat = s.now()
        self.confirmed = s.joined_ms / 1000
        return f"joined at epoch {s.ring.epoch} with {len(s.ring.members)} members"

    async def beat(self) -> str:
        """A turn of heartbeat_loop: beat; end the session when the crawl is finished."""
        s = self.session
        self.last_beat = s.now()
        beat = await s.beat_once()
        if beat is None:
            return "heartbeat failed"
        self.confirmed = beat.now_ms / 1000
        s.check_limits()
        if s.finished(beat):
            self.stop_tasks(but="beat")  # the heartbeat cancels the session's nursery
            self.state = "leaving"
            await s.leave()
            self.state = "finished"
            self.ended_at = len(self.env.trace)
            return "saw the crawl finished, and left"
        return f"epoch {beat.epoch}, settled {beat.settled}, orphans {beat.orphans}"

    async def read(self) -> str:
        """A turn of reader_loop, without blocking when nothing is there to read."""
        s = self.session
        if s.stopping:
            return "stopping: reads no more"
        if not s.unsure and not self.env.observer.undelivered(s.stream):
            return "nothing new in its stream"
        try:
            got = await s.read_once(block_ms=1)
        except QueueError as exc:
            return f"read failed: {exc}"
        return f"read {got} entries"

    def dispatch(self) -> Held | None:
        """One pass of dispatch's inner loop: take an entry and start its fetch."""
        s = self.session
        if s.stopping or s.in_flight >= s.s.concurrency or not s.fresh():
            return None
        got = s.frontier.take(s.now(), s.may_fetch)
        if not isinstance(got, Held):
            return None
        s.in_flight += 1
        self.flight_count += 1
        self.start(f"fetch{self.flight_count}", lambda: s.fetch_one(got))
        return got

    async def commit(self) -> str:
        s = self.session
        if not s.outcomes:
            return "nothing to commit"
        count = min(len(s.outcomes), 200)
        await s.commit_now()
        return f"committed {count} outcomes"

    async def apply(self) -> str:
        """A turn of apply_loop."""
        s = self.session
        if not s.epoch_changed.is_set():
            return "no new epoch"
        s.epoch_changed = trio.Event()
        target = s.latest.epoch
        await s.apply(s.latest)
        if s.applied < target:
            return f"handoff to epoch {target} refused as stale"
        return f"applied epoch {s.applied}"

    async def drain(self) -> str:
        """A turn of drain_loop."""
        s = self.session
        if not s.orphans_waiting.is_set():
            return "no orphans heard of"
        s.orphans_waiting = trio.Event()
        drained = []
        while (stream := await s.persist(s.store.orphan)) is not None:
            await s.drain(stream)
            drained.append(stream.rsplit(":", 1)[-1])
        return f"drained {', '.join(drained) or 'nothing'}"

    async def load_pace(self) -> str:
        """One ``load_pace`` call that ``take_in`` started."""
        if not self.deferred.calls:
            return "no pace to load"
        fn, args = self.deferred.calls.pop(0)
        await fn(*args)
        return f"loaded pace of {', '.join(args[0])}"

    async def unpark(self) -> str:
        """A turn of unpark_loop."""
        took = await self.session.unpark_once()
        return f"unparked {', '.join(took) or 'nothing'}"

    async def leave(self) -> str:
        """What run() does once a stopping worker's fetches are over: leave."""
        await self.session.leave()
        self.state = "left"
        return "left the crawl"

    def may_leave(self) -> bool:
        s = self.session
        return self.state == "stopping" and s.in_flight == 0 and not self.tasks

    def wants(self, kind: str) -> bool:
        """Whether a turn of ``kind`` has anything to do (so a driver can skip idle ones)."""
        s = self.session
        if self.busy_with(kind):
            return False
        return {
            "commit": bool(s.outcomes),
            "apply": s.epoch_changed.is_set(),
            "drain": s.orphans_waiting.is_set(),
            "load_pace": bool(self.deferred.calls),
            "unpark": bool(s.parked),
        }.get(kind, True)
