"""Real worker sessions, stepped one turn at a time, with faults between them and Redis.

A :class:`SimWorker` runs one ``hashcrawl._run._driver.Driver``: the driver every worker
runs, around the same ``hashcrawl._core._session.Session``, with its Store (the real scripts, on
a real server) and a fake fetcher. Each *step* is one turn of one of the driver's loops
(``beat_once``, ``read_once``, ``dispatch_one``, ``commit_turn``, ``apply_turn``,
``drain_turn``, ``pace_turn``, ``unpark_turn``): the loops themselves only repeat those
turns and wait, so the simulation runs every decision and no copy of one.

The driver is built with two seams, as its constructor offers them:

- ``call``: store calls run inline in the trio thread instead of a worker thread, so
  that a step is deterministic. A heartbeat takes simulated time: it reaches Redis
  after a latency and its reply comes back after another (both drawn per call), and a
  lost reply is noticed only once the answer timeout has passed;
- ``spawn``: a fetch starts as a task of this simulated worker, which a crash cancels;
- ``offload``: parsing a robots.txt and writing items run inline too, not in a thread
  (a thread's finish would order the step's tasks by real time).

A step that cannot finish at once (a commit retrying after Redis failed, a handoff
waiting for fetches in flight) stays *pending* as a task and goes on when time moves or
what it waits for happens, just as the loop would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import trio

from hashcrawl._core._batch import Batch, Beat, Committed
from hashcrawl._core._due import Fetch as Revisited
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._names import Holder
from hashcrawl._core._pace import Paces
from hashcrawl._core._ring import INCARNATION, name_of
from hashcrawl._exceptions import QueueError
from hashcrawl._run._naming import Place
from hashcrawl._run._taker import Taker
from hashcrawl._run._worker import Worker
from hashcrawl._store import _crawlconfig
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._revisits import TAKE_MOST, Revisits
from hashcrawl._store._store import Store
from simulations.loop import PATIENCE, SERVER_EPOCH_MS, Loop, environment_failure, inline
from simulations.observe import Observer
from simulations.revisits import Plan
from simulations.web import Fetch, SimFetcher, Web

LIVE = ("joining", "member", "stopping", "leaving")
TAKES_PER_TURN = 10  # a take visits 8 buckets: ten cover any site here (40 pages at most)


class SimulatedCrash(BaseException):
    """The worker's process died at this point (armed by the model at a Redis call)."""


class LostReply(QueueError):
    """Redis ran the call, but its reply never came back."""


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
    slow_beat: float = 0.0  # the next heartbeat reaches Redis this late (0: as drawn)

    def disarm(self) -> None:
        self.cut = self.crash_after = False
        self.lose_reply = self.crash_at = None
        self.slow_beat = 0.0


class FaultyStore:
    """A Store seen through a :class:`Link`: cut off, losing replies, or dying mid-call.

    It implements the worker's half of the store (``hashcrawl._store._base.WorkerStore``),
    which mypy checks where the driver is given it.
    """

    def __init__(
        self, store: Store, link: Link, ran: Callable[[str, Any], None] | None = None
    ) -> None:
        """Args:
        ran: told of each call Redis ran, with its result (even if the reply is lost).
        """
        self._store = store
        self.link = link
        self.ran = ran or (lambda name, result: None)

    def orphan(self) -> str | None:
        """``Store.orphan``, but the same orphan every time the example is replayed.

        The real one picks with SRANDMEMBER, which Redis cannot be asked to repeat, and
        Hypothesis needs a replay to go the same way. Any order of drains must be right.
        """
        chosen: str | None = self._through("orphan", self._store.orphan)
        if chosen is None or chosen == self._store.inbox:
            return chosen
        orphans: set[str] = self._store._redis.smembers(self._store.key("orphans"))
        return min(orphans or {chosen})

    # What a worker's driver asks of the store (``WorkerStore``): each call through the
    # link, as Redis would run it, but for the few that only name keys.

    @property
    def crawl(self) -> str:
        return self._store.crawl

    @property
    def inbox(self) -> str:
        return self._store.inbox

    def stream_of(self, worker: str) -> str:
        return self._store.stream_of(worker)

    def close(self) -> None:
        self._store.close()

    def instance(self) -> str | None:
        return self._store.instance()

    def durability_warning(self) -> str | None:
        return self._store.durability_warning()

    def ping(self) -> None:
        self._through("ping", self._store.ping)

    def join(
        self,
        worker: str,
        info: Mapping[str, str | int],
        *,
        instance: str = "",
        replaces: Holder | None = None,
        lease_ms: int = 0,
        in_hand: Sequence[str] = (),
        timeout_ms: int = 0,
    ) -> tuple[int, int, str]:
        joined: tuple[int, int, str] = self._through(
            "join",
            self._store.join,
            worker,
            info,
            instance=instance,
            replaces=replaces,
            lease_ms=lease_ms,
            in_hand=in_hand,
            timeout_ms=timeout_ms,
        )
        return joined

    def holder(self, name: str) -> Holder | None:
        held: Holder | None = self._through("holder", self._store.holder, name)
        return held

    def heartbeat(
        self,
        worker: str,
        *,
        lease_ms: int,
        applied: int,
        known_epoch: int,
        stats: Mapping[str, str | int] = {},
        expire_ms: int | None = None,
        instance: str = "",
        forget_ms: int | None = None,
    ) -> Beat:
        beat: Beat = self._through(
            "heartbeat",
            self._store.heartbeat,
            worker,
            lease_ms=lease_ms,
            applied=applied,
            known_epoch=known_epoch,
            stats=stats,
            expire_ms=expire_ms,
            instance=instance,
            forget_ms=forget_ms,
        )
        return beat

    def leave(self, worker: str, pace: Mapping[str, str]) -> int:
        left: int = self._through("leave", self._store.leave, worker, pace)
        return left

    def members(self) -> tuple[int, tuple[str, ...]]:
        members: tuple[int, tuple[str, ...]] = self._through("members", self._store.members)
        return members

    def commit(self, batch: Batch) -> Committed:
        committed: Committed = self._through("commit", self._store.commit, batch)
        return committed

    def read(
        self, worker: str, *, count: int, block_ms: int, after: str | None = None
    ) -> list[tuple[str, bytes | None]]:
        got: list[tuple[str, bytes | None]] = self._through(
            "read", self._store.read, worker, count=count, block_ms=block_ms, after=after
        )
        return got

    def entries(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]:
        got: list[tuple[str, bytes | None]] = self._through(
            "entries", self._store.entries, stream, count=count
        )
        return got

    def held(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]:
        got: list[tuple[str, bytes | None]] = self._through(
            "held", self._store.held, stream, count=count
        )
        return got

    def release(self, stream: str) -> bool:
        released: bool = self._through("release", self._store.release, stream)
        return released

    def unpark(self, worker: str, epoch: int, host: str, count: int) -> tuple[str, int, int]:
        got: tuple[str, int, int] = self._through(
            "unpark", self._store.unpark, worker, epoch, host, count
        )
        return got

    def note_in_flight(self, worker: str, seq: int, eids: Sequence[str]) -> bool:
        noted: bool = self._through("note_in_flight", self._store.note_in_flight, worker, seq, eids)
        return noted

    def take_page(self, cap: int) -> bool:
        taken: bool = self._through("take_page", self._store.take_page, cap)
        return taken

    def give_back_page(self) -> None:
        self._through("give_back_page", self._store.give_back_page)

    def in_flight_of(self, stream: str) -> set[str]:
        eids: set[str] = self._through("in_flight_of", self._store.in_flight_of, stream)
        return eids

    def widen_scope(self, members: set[str]) -> None:
        self._store.widen_scope(members)

    def add_parents(self, members: set[str], cap: int) -> tuple[bool, int]:
        return self._store.add_parents(members, cap)

    def scope(self) -> set[str]:
        return self._store.scope()

    def parked_hosts(self) -> set[str]:
        hosts: set[str] = self._through("parked_hosts", self._store.parked_hosts)
        return hosts

    def pace(self, hosts: Sequence[str]) -> Paces:
        paces: Paces = self._through("pace", self._store.pace, hosts)
        return paces

    def start_settings(
        self, texts: Mapping[str, str], scope: Sequence[str], *, max_text: int
    ) -> list[Any]:
        return self._store.start_settings(texts, scope, max_text=max_text)

    def fleet_counters(self) -> dict[str, int]:
        return self._store.fleet_counters()

    def _through(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        link = self.link
        at = link.crash_at
        crash = at == name or (at == "ack" and _acknowledges(name, args))
        if crash:
            link.crash_at = None
            if not link.crash_after:
                raise SimulatedCrash(f"died before calling {name}")
        if link.cut:
            raise QueueError(f"cut off from Redis (calling {name})")
        try:
            result = method(*args, **kwargs)
        except QueueError as exc:  # a Redis slow past PATIENCE, or gone: not hashcrawl's
            if (failure := environment_failure(exc)) is not None:
                raise failure from exc
            raise
        self.ran(name, result)
        if crash and at == "ack" and getattr(result, "status", "ok") != "ok":
            # Refused (stale, rescope): it acknowledged nothing; the crash waits for one
            # that does, the moment it is armed for.
            crash, link.crash_at = False, at
        if crash:
            raise SimulatedCrash(f"died after {name} reached Redis")
        if link.lose_reply == name:
            link.lose_reply = None
            raise LostReply(f"the reply to {name} was lost")
        return result


class FaultyRevisits:
    """The crawl's revisit records (``RevisitStore``) through a worker's link: cut off,
    losing replies or dying at ``revisit_put`` and ``revisit_take`` like any call."""

    def __init__(self, revisits: Revisits, store: FaultyStore) -> None:
        self._revisits = revisits
        self._store = store

    def put(self, fetches: Sequence[Revisited]) -> int:
        written: int = self._store._through("revisit_put", self._revisits.put, fetches)
        return written

    def take(self, *, requeue_s: int, now_s: int | None = None, most: int = TAKE_MOST) -> Any:
        return self._store._through(
            "revisit_take", self._revisits.take, requeue_s=requeue_s, now_s=now_s, most=most
        )


def _accepted(name: str, result: Any) -> bool:
    """Whether a call's reply says Redis took a member's write: a heartbeat that renewed
    it, or a commit done."""
    if name == "heartbeat":
        return bool(result.alive)
    return name == "commit" and getattr(result, "status", None) == "ok"


def _acknowledges(name: str, args: tuple[Any, ...]) -> bool:
    batch = args[0] if args else None
    return name == "commit" and bool(getattr(batch, "ack", None) or getattr(batch, "once", None))


@attrs.define(eq=False)
class Task:
    """One pending step of one worker."""

    kind: str
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def run(self, fn: Callable[[], Awaitable[Any]], loop: Any) -> None:
        """Run ``fn`` as this step on the simulation's ``loop``; its result or error lands
        here, never raised (every way a step can end is the model's)."""

        async def run() -> None:
            with self.scope:
                try:
                    self.result = await fn()
                except trio.Cancelled:
                    raise
                except BaseException as exc:  # every way a step can end is the model's
                    self.error = exc
            self.done = True

        loop.start(run)


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


class Env(Protocol):
    """What a simulated worker reads of its world (``simulations.world.World``, which
    builds the crew and steps it: the crew sits below it and sees only these)."""

    url: str
    crawl: str
    settings: dict[str, Any]
    faults: Faults
    loop: Loop
    web: Web
    observer: Observer
    fetches: list[Fetch]
    done: list[tuple[str, str]]
    trace: list[str]
    gap: float
    latency: float
    revisit: Plan | None
    replaced: set[str]
    problems: list[str]

    @property
    def answer_timeout(self) -> float: ...

    def now(self) -> float: ...

    def send_gap(self) -> float: ...

    def beat_latency(self) -> tuple[float, float]: ...

    def heard_heartbeat(self) -> None: ...


class SimWorker:
    """One worker session and its pending steps. Create inside the loop."""

    def __init__(self, name: str, env: Env, *, place: Place | None = None) -> None:
        """``name`` is the member id: ``NAME~TOKEN`` joins as a worker named ``NAME`` (one
        incarnation of it), at ``place`` (default: the simulation's own process)."""
        self.name = name
        self.env = env
        self.link = Link()
        settings = env.settings
        self.store = Store(
            RedisURL.parse(env.url),
            env.crawl,
            timeout=PATIENCE,
            clock=env.loop.server_ms,
            faults=env.faults,
        )
        self.fetcher = SimFetcher(
            env.web,
            name,
            env.fetches,
            timeout=settings["timeout"],
            gap=env.send_gap if env.gap else None,
        )
        worker = Worker(
            env.url,
            env.crawl,
            fetcher=self.fetcher,
            sink=SimSink(env.done, name),
            faults=env.faults,
            name=name_of(name) if INCARNATION in name else None,
            **settings,
        )
        worker.id = name
        # As Worker.run does first: take the crawl's settings, or record these as them.
        taken, worker.crawl_settings = _crawlconfig.adopt(
            self.store, worker.settings, worker.given_crawl
        )
        worker.take_settings(taken)
        store = FaultyStore(self.store, self.link, ran=self._ran)
        revisits = FaultyRevisits(Revisits.of(self.store), store)
        self.driver = worker.membership(  # new settings and a stop reach it, as in Worker.run
            store,
            self.fetcher,
            call=self._call,
            spawn=self._start_fetch,
            offload=inline,
            revisits=revisits,
            place=place,
        )
        self.taker = Taker(self.driver)
        self.last_take = float("-inf")
        self.session = self.driver.session
        self.tasks: dict[str, Task] = {}
        self.state = "joining"
        self.paused = False
        self.excused = False
        self.departed = False  # seen out of the ring while leaving: it left by itself
        self.last_beat = float("-inf")  # when it last tried to beat
        self.confirmed = float("-inf")  # when Redis last ran a heartbeat of it as a member
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
        task.run(fn, self.env.loop)

    def stop_tasks(self, *, but: str | None = None) -> None:
        for kind, task in self.tasks.items():
            if kind != but:
                task.scope.cancel()

    def busy_with(self, kind: str) -> bool:
        return kind in self.tasks

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The driver's ``call``: inline, except that a heartbeat takes time each way."""
        if getattr(fn, "__name__", "") != "heartbeat":
            return fn(*args, **kwargs)
        there, back = self.env.beat_latency()
        if self.link.slow_beat:
            there, self.link.slow_beat = self.link.slow_beat, 0.0
        await trio.sleep(there)
        try:
            beat = fn(*args, **kwargs)
        except LostReply:
            if self.env.latency:  # noticed only as a timeout (not in scripts from before)
                await trio.sleep(self.env.answer_timeout)
            raise
        await trio.sleep(back)
        return beat

    def _ran(self, name: str, result: Any) -> None:
        """Redis ran one of this worker's calls: a heartbeat that renewed it counts; one
        that wrote for an incarnation its successor replaced is a violation."""
        if self.name in self.env.replaced and _accepted(name, result):
            self.env.problems.append(
                f"{self.name} was replaced by a worker of its name, yet Redis accepted its {name}"
            )
        if name == "heartbeat" and result.alive and not result.lost:
            self.confirmed = self.env.now()
            self.env.heard_heartbeat()
        if name == "revisit_take" and self.env.revisit is not None:
            self.env.revisit.took(self.env.now())

    def _start_fetch(self, fetch: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.flight_count += 1
        self.start(f"fetch{self.flight_count}", lambda: fetch(*args))

    # -- the loops, one turn each ------------------------------------------------------------

    async def join(self) -> str:
        driver, session = self.driver, self.session
        await driver.begin()
        self.state = "member"
        self.last_beat = driver.now()
        self.confirmed = (session.epochs.joined_ms - SERVER_EPOCH_MS) / 1000
        ring = session.epochs.ring
        return f"joined at epoch {ring.epoch} with {len(ring.members)} members"

    async def beat(self) -> str:
        """A turn of heartbeat_loop: beat; end the membership when the driver would."""
        driver = self.driver
        self.last_beat = driver.now()
        beat = await driver.beat_once()
        if beat is None:
            return "heartbeat failed"
        if driver.ends_with(beat):
            stopped = self.session.flight.stopping
            self.stop_tasks(but="beat")  # the heartbeat cancels the session's nursery
            self.state = "leaving"
            await driver.leave()
            self.state = "left" if stopped else "finished"
            self.ended_at = len(self.env.trace)
            return "stopped, and left" if stopped else "saw the crawl finished, and left"
        return f"epoch {beat.epoch}, settled {beat.settled}, orphans {beat.orphans}"

    async def read(self) -> str:
        """A turn of reader_loop, without blocking when nothing is there to read."""
        session = self.session
        if session.flight.stopping:
            return "stopping: reads no more"
        if not session.intake.unsure and not self.env.observer.undelivered(session.stream):
            return "nothing new in its stream"
        try:
            got = await self.driver.read_once(block_ms=1)
        except QueueError as exc:
            return f"read failed: {exc}"
        return f"read {got} entries"

    def dispatch(self) -> Held | None:
        """One pass of dispatch_loop's turn: take an entry and start its fetch."""
        got = self.driver.dispatch_one()
        return got if isinstance(got, Held) else None

    async def commit(self) -> str:
        count = await self.driver.commit_turn()
        return f"committed {count} outcomes" if count else "nothing to commit"

    async def apply(self) -> str:
        """A turn of apply_loop."""
        target = self.session.epochs.latest.epoch
        ring = await self.driver.apply_turn()
        if ring is None:
            return "no new epoch"
        if self.session.epochs.applied < target:
            return f"handoff to epoch {target} refused as stale"
        return f"applied epoch {self.session.epochs.applied}"

    async def drain(self) -> str:
        """A turn of drain_loop."""
        if not self.session.epochs.orphans_waiting:
            return "no orphans heard of"
        drained = [stream.rsplit(":", 1)[-1] for stream in await self.driver.drain_turn()]
        return f"drained {', '.join(drained) or 'nothing'}"

    async def load_pace(self) -> str:
        """A turn of pace_loop."""
        hosts = await self.driver.pace_turn()
        return f"loaded pace of {', '.join(hosts)}" if hosts else "no pace to load"

    async def settings(self) -> str:
        """A turn of settings_loop: a heartbeat named a new version of the settings."""
        await self.driver.settings_due.wait()  # set: taken at once
        await self.driver.follow_settings()
        return f"took the crawl's settings: delay {self.session.settings.delay:g} s"

    async def unpark(self) -> str:
        """A turn of unpark_loop."""
        took = await self.driver.unpark_turn()
        return f"unparked {', '.join(took) or 'nothing'}"

    async def take(self) -> str:
        """A turn of the taker's loop: take again while a take found due records (up to
        ``TAKES_PER_TURN`` takes, so a take that never moves a due time on cannot spin)."""
        self.last_take = self.driver.now()
        taken = 0
        for _ in range(TAKES_PER_TURN):
            got = await self.taker.take_turn()
            taken += got
            if not got:
                break
        return f"took {taken} due revisits"

    async def leave(self) -> str:
        """What run() does once a stopping worker's fetches are over: leave."""
        await self.driver.leave()
        self.state = "left"
        return "left the crawl"

    def may_leave(self) -> bool:
        session = self.session
        return self.state == "stopping" and session.flight.in_flight == 0 and not self.tasks

    def wants(self, kind: str) -> bool:
        """Whether a turn of ``kind`` has anything to do (so a driver can skip idle ones)."""
        session = self.session
        if self.busy_with(kind):
            return False
        return {
            "commit": bool(session.ledger.outcomes),
            "apply": (due := session.due()).apply,
            "drain": due.drain,
            "load_pace": due.pace,
            "unpark": bool(session.intake.parked),
            "settings": self.driver.settings_due.is_set(),
        }.get(kind, True)
