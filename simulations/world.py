"""Everything one simulated crawl runs against, and what it is judged by.

A :class:`World` is a crawl name on the simulation's Redis server, a fake web, a fleet
of :class:`~simulations.crew.SimWorker` and the records the invariants read: every
request the web received, every item a sink wrote, the URLs submitted, and the URLs
whose double fetch is excused because a holder died or stalled with them.

Its async methods run inside the :class:`~simulations.loop.Loop`; the model calls them
through ``world.do(...)``.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import random
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._ring import Ring, name_of
from hashcrawl._exceptions import Fenced, NameTaken, QueueError
from hashcrawl._run._naming import Place
from hashcrawl._run._queue import Queue
from hashcrawl._run._taker import TAKE_EVERY
from hashcrawl._store._server import RedisServer
from simulations import revisits
from simulations.changes import changes_of
from simulations.crew import SimulatedCrash, SimWorker
from simulations.loop import PATIENCE, Loop, environment_failure, found_in, settle
from simulations.observe import Observer
from simulations.web import Fetch, Site, Web

SETTINGS: dict[str, Any] = {
    "delay": 1.0,
    "span_hosts": True,  # the simulated webs link across their hosts
    "lease": 8.0,
    "timeout": 2.0,
    "grace": 4.0,
    "idle": 2.0,
    "max_attempts": 3,
    "concurrency": 4,
    "per_host": 1,
    "max_buffer": 6,
}
BEAT = min(1.0, SETTINGS["lease"] / 10)
QUIET = ("epoch ", "nothing new in its stream", "no answer has arrived", "nothing it may fetch")

PARK_AT = 2  # a host with this many queued parks the rest, once memory is full
UNPARK_BELOW = 1  # and takes some back once it has none left
CAPS = (2, 3)  # --max-pages-per-host in a third of the sites (hosts have 2-20 pages)
SEEN_LAYER = 4  # URLs in the seen filter's first layer (c0); each next one doubles
# A worker learns of a change at its next heartbeat and takes it at its next turn; one paused
# or cut off short of its lease, or holding requests taken before (up to two leases, as
# lose_beat_after_expiry holds them), may send by the old delay until then: three leases.
FOLLOW_WITHIN = 24.0


@attrs.frozen
class Reach:
    """Which mechanisms a site of at most 40 pages never reaches its crawl is given
    (``simulations/reach.py``): parking from ``PARK_AT`` queued, and a seen filter whose
    first layer holds ``SEEN_LAYER`` URLs, and ``--max-pages-per-host`` from ``CAPS`` in a
    third of the crawls that revisit nothing; drawn from the site's seed alone."""

    park: bool = False
    seen_layer: int | None = None
    cap: int | None = None  # --max-pages-per-host, in a crawl that does not revisit

    @classmethod
    def of(cls, seed: int) -> Reach:
        rng = random.Random(f"reach {seed}")
        park = rng.random() < 1 / 2
        seen = SEEN_LAYER if rng.random() < 1 / 2 else None
        cap = rng.choice(CAPS) if rng.random() < 1 / 3 else None  # drawn last: the rest stay
        return cls(park=park, seen_layer=seen, cap=cap)

    def prepare(self, world: World) -> None:
        """Before the crawl's first commit: shape the seen filter."""
        if self.seen_layer is not None:
            world.observer.r.hset(world.observer.prefix + "seenmeta", "c0", self.seen_layer)

    def fit(self, w: SimWorker) -> None:
        """A new worker session: its park threshold."""
        if self.park:
            w.session.intake.park_at = PARK_AT
            w.session.intake.unpark_below = UNPARK_BELOW


def delay_at(world: World, start: float) -> float:
    """The delay a request starting at ``start`` must keep: the least of those in force
    from ``FOLLOW_WITHIN`` before it up to it (``reach.configure`` changes them)."""
    kept = [
        delay
        for (since, delay), (until, _) in zip(
            world.delays, [*world.delays[1:], (math.inf, 0.0)], strict=True
        )
        if since <= start and until > start - FOLLOW_WITHIN
    ]
    return min(kept)


_server: RedisServer | None = None


def server() -> RedisServer:
    """The simulations' Redis server: AOF on, fsync always, started on first use."""
    global _server
    if _server is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        directory = Path(tempfile.mkdtemp(prefix="hashcrawl-sim-", dir=base))
        _server = RedisServer(
            directory=directory, appendonly=True, appendfsync="always", extra={"hz": "100"}
        )
        _server.start(timeout=PATIENCE)
        atexit.register(_remove, _server, directory)
    return _server


def _remove(redis: RedisServer, directory: Path) -> None:
    redis.close()
    shutil.rmtree(directory, ignore_errors=True)


class World:
    """One simulated crawl: workers, web, records. Close it when the example ends."""

    def __init__(
        self,
        site: Site,
        *,
        settings: dict[str, Any] | None = None,
        latency: float = 0.0,
        gap: float = 0.0,
        faults: Faults = NO_FAULTS,
    ) -> None:
        """Args:
        latency: the most a heartbeat takes to reach Redis, and its reply to come back.
        gap: the most a request waits (for a connection) before it may leave.
        faults: the deliberate bugs every worker runs with.
        """
        self.latency, self.gap = latency, gap
        self.faults = faults
        self.rng = random.Random(site.seed)  # the same draws each time a script replays
        self.redis = server()
        self.url = self.redis.url
        self.crawl = "sim" + uuid.uuid4().hex[:8]
        self.settings = dict(settings or SETTINGS)
        self.site = site
        self.web = Web.of(site)
        self.revisit = revisits.Plan.of(self.settings)  # None: this crawl revisits nothing
        if self.revisit is not None:
            self.web.changes = changes_of(site.seed, revisits.revisited(self.web))
        self.loop = Loop()
        self.observer = Observer(self.url, self.crawl)
        self.reach = Reach.of(site.seed)  # parking, seen-filter rollover
        if self.reach.cap is not None and self.revisit is None:
            self.settings["max_pages_per_host"] = self.reach.cap
        self.reach.prepare(self)
        self.planted = 0  # unreadable entries written into streams by hand
        self.planted_good: list[str] = []  # URLs of good ones written by hand (reach.plant)
        self.changes = 0  # crawl settings changed with configure (reach.configure)
        self.delays = [(float("-inf"), float(self.settings["delay"]))]  # (since, delay)
        self.queue = Queue(self.url, self.crawl, timeout=PATIENCE)
        self.workers: dict[str, SimWorker] = {}
        self.fetches: list[Fetch] = []
        self.done: list[tuple[str, str]] = []
        self.submitted: set[str] = set()
        self.excused: Counter[str] = Counter()  # url -> holders that died or stalled with it
        self.killed = 0  # workers the site's killer page killed
        self.killed_members = 0  # of them, those still members as they died
        self.members_seen: set[str] = set()
        self.last_submission = -1  # trace position: a crawl is over only after the last one
        self.problems: list[str] = []  # violations seen as they happen (premature expiry)
        self.replaced: set[str] = set()  # incarnations a successor of their name replaced
        self.trace: list[str] = []
        self.finishing = False
        self._joined = 0  # sessions started: the next is named w{_joined + 1}
        self._rings: dict[tuple[str, ...], Ring] = {}
        self._unseen = itertools.count(1)

    def close(self) -> None:
        try:
            self.loop.close()
        finally:
            for w in self.workers.values():
                w.store.close()
            self.observer.clear()
            self.observer.close()
            self.queue.close()

    def do(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run one of this world's async actions in its loop."""
        return self.loop.run(fn, *args)

    def now(self) -> float:
        return self.loop.now()

    # -- time where the timing bugs live ---------------------------------------------------

    def beat_latency(self) -> tuple[float, float]:
        """How long the next heartbeat takes to reach Redis, and its reply to come back."""
        return self.rng.uniform(0, self.latency), self.rng.uniform(0, self.latency)

    def send_gap(self) -> float:
        """How long the next request waits to leave: mostly not at all."""
        return self.rng.choice((0.0, 0.0, self.rng.uniform(0, self.gap)))

    @property
    def answer_timeout(self) -> float:
        """How long a worker waits for a reply before it calls the call failed."""
        return float(self.settings["lease"]) / 3

    def heard_heartbeat(self) -> None:
        """Redis ran a heartbeat: it may have expired members just now."""
        self._detect_expiries()

    def say(self, who: str, text: str) -> str:
        line = f"t={self.now():8.3f} {who}: {text}"
        if not (self.finishing and any(q in text for q in QUIET)):
            self.trace.append(line)  # routine turns of the fault-free end would drown the rest
        return line

    # -- who is who ----------------------------------------------------------------------

    def live(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if w.live]

    def active(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if w.active]

    def pick(self, index: int, among: list[SimWorker]) -> SimWorker:
        return among[index % len(among)]

    # -- actions ---------------------------------------------------------------------------

    def submit(self, urls: list[str]) -> str:
        for _ in range(3):  # a submitter retries once Redis is back
            try:
                added = self.queue.submit(urls)
                break
            except ConnectionError as exc:
                if (failure := environment_failure(exc)) is not None:
                    raise failure from exc  # the server is gone: no retry brings it back
                continue
        else:
            return "could not reach Redis"
        self.submitted.update(urls)
        self.last_submission = len(self.trace)
        return f"submitted {len(urls)} URLs, {added} new: {' '.join(urls)}"

    async def join(
        self, lose_reply: str | None = None, *, as_id: str | None = None, place: Place | None = None
    ) -> str:
        """A worker joins: a new one (``w1``, ``w2``, ...), or the member ``as_id``
        (``NAME~TOKEN``: an incarnation of the worker named NAME) at ``place``."""
        name = as_id or self.next_name()
        self._joined += 1
        w = self.workers[name] = SimWorker(name, self, place=place)
        self.reach.fit(w)
        w.link.lose_reply = lose_reply
        w.start("join", w.join)
        return await self._settled(w, "join")

    async def step(self, w: SimWorker, kind: str) -> str:
        if kind == "fetch":
            sent = len(self.fetches)
            got = w.dispatch()
            await self._reap()
            if got is None:
                return self.say(w.name, "nothing it may fetch now")
            requests = " ".join(f.url for f in self.fetches[sent:]) or "nothing sent yet"
            return self.say(w.name, f"took {got.entry.url}: sent {requests}")
        if kind == "complete":
            return await self.complete(w)
        if kind == "send":
            return await self.send(w)
        w.start(kind, getattr(w, kind))
        text = await self._settled(w, kind)
        if kind == "beat":
            self._detect_expiries()  # only a heartbeat expires members
        return text

    async def send(self, w: SimWorker) -> str:
        """Let the requests of ``w`` that may leave by now go (each asks its check)."""
        sent = len(self.fetches)
        leaving = w.fetcher.leaving(self.now())
        for departure in leaving:
            departure.go.set()
        await self._reap()
        went = " ".join(f.url for f in self.fetches[sent:])
        held = len(leaving) - (len(self.fetches) - sent)
        return self.say(w.name, f"sent {went or 'nothing'}" + (f"; {held} held back" * bool(held)))

    async def complete(self, w: SimWorker) -> str:
        flight = next(w.fetcher.due(self.now()), None)
        if flight is None:
            return self.say(w.name, "no answer has arrived")
        if self.web.kills(flight.fetch.url):
            self.killed += 1
            if w.name in self.observer.members():  # an expired one's entries moved on already
                self.killed_members += 1
            return await self.crash(w, f"reading the answer for {flight.fetch.url} killed it")
        flight.released.set()
        await self._reap()
        answer = flight.answer
        status = answer.error or (
            "timed out" if answer.duration > w.fetcher.timeout else str(answer.status)
        )
        return self.say(w.name, f"got {flight.fetch.url}: {status}")

    async def stop(self, w: SimWorker) -> str:
        w.driver.request_stop()
        w.state = "stopping"
        return self.say(w.name, "asked to stop")

    async def leave(self, w: SimWorker) -> str:
        w.state = "leaving"
        w.start("leave", w.leave)
        return await self._settled(w, "leave")

    async def crash(self, w: SimWorker, why: str = "killed") -> str:
        self._excuse(w)
        w.state = "crashed"
        w.stop_tasks()
        await self._reap()
        return self.say(w.name, f"crashed ({why}); its Redis state stays")

    async def advance(self, seconds: float) -> str:
        await self.loop.advance(seconds)
        await self._reap()
        return self.say("clock", f"+{seconds:g} s")

    async def tick(
        self, *, skip: SimWorker | None = None, seconds: float = BEAT, quiet: bool = False
    ) -> str:
        """A heartbeat interval passes, every running worker beating once and running its
        other loops as they come due (``skip`` takes no part: it is paused)."""
        end = self.now() + seconds
        if not quiet:
            self.say("tick", f"{seconds:.3g} s of every running worker's loops")
        while True:
            for w in self.active():
                if w is not skip:
                    await self.turn(w)
            if self.now() >= end - 1e-9:
                return ""
            await self.loop.advance(min(self._next_wait(), end - self.now()))
            await self._reap()

    async def pause_past_lease(self, w: SimWorker) -> str:
        w.paused = True
        ticks = math.ceil(self.settings["lease"] / BEAT) + 2
        for _ in range(ticks):
            await self.tick(skip=w)
        w.paused = False
        return self.say(w.name, f"was paused {ticks * BEAT:g} s, and runs again")

    async def run_for(self, seconds: float, seed: int) -> str:
        """Every running worker runs its loops for a while, in an order ``seed`` shuffles.

        Real loops run concurrently, so any order of their turns can happen; some turns
        are skipped, as a loop that is slow to wake would skip them.
        """
        rng = random.Random(seed)
        end = self.now() + seconds
        self.say("model", f"the fleet runs for {seconds:g} s (order {seed})")
        while True:
            for w in rng.sample(self.active(), k=len(self.active())):
                await self.turn(w, rng)
            if self.now() >= end - 1e-9:
                return ""
            await self.loop.advance(min(self._next_wait(), end - self.now()))
            await self._reap()

    async def turn(
        self, w: SimWorker, rng: random.Random | None = None, *, woken: bool = False
    ) -> None:
        """Every loop of one worker once: in the order a live worker tends to run them,
        or shuffled and thinned out by ``rng``; ``woken`` (after a pause) first takes the
        answers that arrived meanwhile, which frees the slots their requests held."""
        if not w.active or w.state not in ("member", "stopping"):
            return
        kinds = ["beat", "settings", "drain", "apply", "load_pace", "read", "unpark"]
        kinds += ["fetch", "send"]
        if self.revisit is not None and self.revisit.taking(self.now(), self.finishing):
            kinds.append("take")
        kinds = ["complete", "commit", *kinds] if woken else [*kinds, "complete", "commit"]
        if rng is not None:
            rng.shuffle(kinds)
            kinds = [k for k in kinds if rng.random() < 0.7]
        for kind in kinds:
            if w.state in ("member", "stopping") and not w.paused:
                await self._turn(w, kind)
        if w.may_leave():
            await self.leave(w)

    async def _turn(self, w: SimWorker, kind: str) -> None:
        if kind == "beat":
            if self.now() - w.last_beat >= BEAT - 1e-9 and not w.busy_with("beat"):
                await self.step(w, "beat")
        elif kind == "fetch":
            while w.live and w.session.frontier.size:
                text = await self.step(w, "fetch")
                if "nothing it may fetch" in text:
                    break
        elif kind == "take":
            if self.now() - w.last_take >= TAKE_EVERY - 1e-9 and not w.busy_with("take"):
                await self.step(w, "take")
        elif kind == "complete":
            while w.live and next(w.fetcher.due(self.now()), None) is not None:
                await self.complete(w)
        elif kind == "send":
            if w.fetcher.leaving(self.now()):
                await self.send(w)
        elif w.wants(kind):
            await self.step(w, kind)

    async def wait(self) -> None:
        """Let time pass until the next thing any worker waits for."""
        await self.loop.advance(self._next_wait())
        await self._reap()

    def _next_wait(self) -> float:
        now = self.now()
        delay, per_host = self.settings["delay"], self.settings["per_host"]
        times = [self.loop.next_deadline(), now + BEAT]
        for w in self.live():
            times.append(w.last_beat + BEAT)
            times += [f.fetch.end for f in w.fetcher.flights]
            times += [d.ready for d in w.fetcher.waiting]
            for host in w.session.frontier.hosts.values():
                if host.queue:
                    times.append(host.next_start(delay, per_host))
        soonest = min((t for t in times if t > now + 1e-9), default=now + BEAT)
        return max(0.001, float(soonest - now))

    # -- aimed steps: the windows the timing rules exist for ---------------------------------

    def next_name(self) -> str:
        return f"w{self._joined + 1}"

    def moving_host(self) -> tuple[SimWorker, str] | None:
        """A running owner and a host it fetches or holds that the next join moves."""
        owners = [w for w in self.active() if w.state == "member"]
        if not owners:
            return None
        latest = max((w.session.epochs.latest for w in owners), key=lambda ring: ring.epoch)
        members = tuple(sorted({*latest.members, self.next_name()}))
        if members not in self._rings:
            self._rings[members] = Ring.of(latest.epoch + 1, members)
        after = self._rings[members]
        for w in owners:
            queued = [name for name, host in w.session.frontier.hosts.items() if host.queue]
            for host in [*w.session.flight.fetching.values(), *queued]:
                if latest.owner_of(host) == w.name and after.owner_of(host) == self.next_name():
                    return w, host
        return None

    async def join_in_flight(self, w: SimWorker, host: str) -> str:
        """A worker joins while ``w`` has a request out to ``host``, which the join moves
        to the newcomer; a link to ``host`` follows, and the fleet runs on."""
        if host not in w.session.flight.fetching.values():
            await self._turn(w, "fetch")
            await self._turn(w, "send")
        self.say("model", f"a worker joins while {w.name} fetches {host}, which moves")
        newcomer = self.next_name()
        await self.join()
        if self.workers[newcomer].state == "member":  # its heartbeat loop beats at once
            await self.step(self.workers[newcomer], "beat")
        self.say("submitter", self.submit([f"http://{host}/unseen{next(self._unseen)}"]))
        await self.tick()
        return ""

    async def pause_to_lease_end(self, w: SimWorker, early: float, slow: float) -> str:
        """``w`` is paused, holding pages, until ``early`` s before its lease runs out by
        its own reckoning; its loops run again, its heartbeat reaching Redis ``slow``
        s late (after the fleet expired it), and the fleet runs on."""
        w.paused = True
        self.say(w.name, "paused (SIGSTOP)")
        until = w.session.epochs.confirmed_at + float(self.settings["lease"]) - early
        while self.now() < until - 1e-9:
            await self.tick(skip=w, seconds=min(BEAT, until - self.now()))
        w.paused = False
        w.link.slow_beat = slow
        self.say(
            w.name,
            f"runs again, {early:g} s before its lease runs out; its next "
            f"heartbeat reaches Redis {slow:g} s late",
        )
        await self.turn(w, woken=True)
        for _ in range(3):
            await self.tick()
        return ""

    async def lose_beat_after_expiry(self, w: SimWorker) -> str:
        """``w`` takes pages, their requests held back from leaving (as for a busy
        connection); it is paused until the fleet has expired it and a new owner has sent
        its first request to one of those hosts; then it runs again, and the reply to its
        next heartbeat is lost: its requests reach the check before sending first, right
        after the new owner's."""
        w.fetcher.holding = True
        try:
            for _ in range(5):  # until a slot and a host's pacing let it take one
                await self._turn(w, "fetch")
                if w.fetcher.waiting or not w.active:
                    break
                await self.tick()
        finally:
            w.fetcher.holding = False
        if not w.active:
            w.fetcher.let_go(self.now())
            return self.say(w.name, "is no longer running")
        hosts = {d.url.split("/")[2] for d in w.fetcher.waiting}
        w.paused = True
        self.say(w.name, f"paused (SIGSTOP), its requests to {' '.join(sorted(hosts))} waiting")
        try:
            await self._until_taken_over(w, hosts)
        finally:
            w.paused = False
            w.fetcher.let_go(self.now())
        w.link.lose_reply = "heartbeat"
        self.say(w.name, "runs again; the reply to its next heartbeat will be lost")
        await self._turn(w, "send")  # woken, the waiting requests go first
        await self.turn(w)
        for _ in range(2):
            await self.tick()
        return ""

    async def _until_taken_over(self, w: SimWorker, hosts: set[str]) -> None:
        """The fleet runs without ``w`` until it expired ``w`` and another worker sent a
        request to one of ``hosts`` (with none, a tick after the expiry; at most two
        leases)."""
        self.say("model", f"the fleet runs until it expired {w.name} and took its hosts")
        end = self.now() + 2 * float(self.settings["lease"])
        mark: int | None = None  # requests from the expiry on
        while self.now() < end:
            if mark is None and w.name not in self.observer.members():
                mark = len(self.fetches)
                if not hosts:
                    await self.tick(skip=w, quiet=True)
                    return
            later = self.fetches[mark:] if mark is not None else []
            if any(f.host in hosts and f.worker != w.name for f in later):
                return
            await self.tick(skip=w, seconds=BEAT / 4, quiet=True)

    # -- plumbing ----------------------------------------------------------------------------

    async def _settled(self, w: SimWorker, kind: str) -> str:
        task = w.tasks.get(kind)
        await self._reap()
        if task is None or not task.done:
            return self.say(w.name, f"{kind}: pending")
        if task.error is not None:
            return self.say(w.name, f"{kind}: {type(task.error).__name__}: {task.error}")
        return self.say(w.name, f"{kind}: {task.result}")

    async def _reap(self) -> None:
        """Settle, then end the sessions whose steps raised; repeat until nothing changes."""
        while True:
            await settle()
            ended = False
            for w in list(self.workers.values()):
                self._excuse_cut_short(w)
                for kind, task in list(w.tasks.items()):
                    if task.done:
                        del w.tasks[kind]
                        ended |= await self._ended(w, kind, task.error)
            self._sync_states()
            if not ended:
                return

    async def _ended(self, w: SimWorker, kind: str, error: BaseException | None) -> bool:
        if error is None:
            return False
        if (failure := found_in(error)) is not None:
            raise failure  # the machine's, not the worker's: the run ends
        if isinstance(error, SimulatedCrash):
            self._excuse(w)
            w.state = "crashed"
        elif isinstance(error, QueueError):
            w.state = "fenced" if isinstance(error, Fenced) else "gave up"
            w.ended_at = len(self.trace)
        elif isinstance(error, NameTaken):
            w.state = "refused"  # its name's holder runs: it never joined
        else:
            raise AssertionError(f"{w.name}'s {kind} step raised {error!r}") from error
        self.say(w.name, f"{kind} ended the session ({w.state}): {error}")
        w.stop_tasks()
        return True

    def _sync_states(self) -> None:
        for w in self.workers.values():
            if w.state == "member" and w.session.flight.stopping:
                w.state = "stopping"  # a --max-* limit asked it to stop

    def _detect_expiries(self) -> None:
        """Excuse what a member held when Redis expired it, if it was silent a whole lease.

        A member expired sooner was reclaimed alive: that is a violation, and what it
        held is not excused.
        """
        members = self.observer.members()
        self.members_seen |= members
        lease = self.settings["lease"]
        holders = {name_of(m): m for m in members}
        for w in self.workers.values():
            gone = w.name in self.members_seen and w.name not in members
            if gone and w.state in ("leaving", "left", "finished"):
                w.departed = True  # it left the ring itself, even if its leave then fails
            if gone and holders.get(name_of(w.name), w.name) != w.name:
                self.replaced.add(w.name)  # a successor of its name took its place
                self._excuse(w)  # (simulations.names judges whether it rightly did)
            if not gone or w.excused or w.departed:
                continue
            silent = self.now() - w.confirmed
            if silent <= lease:
                w.excused = True  # judged once
                self.problems.append(
                    f"{w.name} lost its membership after {silent:.3f} s without a heartbeat, "
                    f"within its lease of {lease:g} s: it was reclaimed alive"
                )
            else:
                self._excuse(w)
            self.say(w.name, f"was expired by the fleet after {silent:.3f} s of silence")

    def _excuse_cut_short(self, w: SimWorker) -> None:
        """A request cancelled after it reached the server (a handoff cut it short) goes
        back to the stream and on to the host's new owner: it may be fetched again."""
        if w.state != "crashed":  # a crash excused what it held already
            self.excused.update(w.fetcher.cut_short)
        w.fetcher.cut_short.clear()

    def _excuse(self, w: SimWorker) -> None:
        if not w.excused:
            self.excused.update(self.observer.held_by(w.name))
            w.excused = True

    # -- what the judges read ---------------------------------------------------------------

    def done_urls(self) -> set[str]:
        return {url for url, _ in self.done}

    def delay_of(self, host: str, at: float | None = None) -> float:
        """The least time between two requests to ``host``: --delay or its Crawl-delay
        (``at``: for a request that starts then, as the crawl's delay changed, see
        ``reach.delay_at``; None: the crawl's delay now)."""
        crawl_delay = min(self.web.crawl_delay(host), float(self.settings["lease"]) / 2)
        delay = float(self.settings["delay"]) if at is None else delay_at(self, at)
        return max(delay, crawl_delay)

    def failed(self, url: str) -> bool:
        """Whether the web ever failed a request for ``url``, or for its host's robots.txt
        (unreachable, it lets no page through: RFC 9309), so that it may end dead."""
        robots = "/".join(url.split("/")[:3]) + "/robots.txt"
        return any(f.url in (url, robots) and not f.final for f in self.fetches)
