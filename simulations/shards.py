"""``python -m simulations.shards``: the crash simulation of a crawl spread over shards.

    python -m simulations.shards --runs 40 --seed 1
    python -m simulations.shards --fault deliver_after_ack --runs 40 --seeds 3
    python -m simulations.shards --aimed stale_report --fault end_from_one_sweep --seeds 3
    python -m simulations.shards --aimed expired_in_one --fault deliver_by_source_ring --seeds 3

A crawl of S shards (2-4) runs on S :class:`~simulations.shardcrew.Primary` (each its
own slot, failing over on its own) with 1-3 :class:`~simulations.shardcrew.ShardWorker`,
each a member of every shard. One *run* is a seeded sequence of steps: turns of each
shard's loops, fetches and answers, and faults between them: a worker killed, killed at
its next acknowledging commit (after its deliveries into other shards, or just after
the acknowledgement), killed at a delivery, paused past its lease, cut off from one
shard, a new worker joining, a worker stopping, and a shard's primary failing over
without its last writes (1-4 of them, run but unanswered). Then the faults stop and
the fleet runs to the crawl's end.

The invariants are the one-shard simulation's, judged from outside: from the web's
request log, the sinks and every shard's raw keys (``simulations.observe``): nothing
accepted is lost, a page is fetched for good twice only where a holder died, stalled or
a failover took its acknowledgement, politeness (one worker per host at a time, each
request ``--delay`` after the last: two owners show here), and the end (every worker
saw the crawl over; nothing queued in any shard; every reachable page done or dead).
One more is the fencing a lost suffix threatens: an epoch number of a shard names one
set of members for ever (read from the shard's keys after every step).

Exit status: 0 when every invariant held in every run, 1 when one broke.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import redis

from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._ring import Ring
from hashcrawl._core._shards import shard_name, shard_of
from hashcrawl._core._urls import host_key
from hashcrawl._exceptions import Fenced, QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._shards import stored_tags
from hashcrawl._store._store import Store
from simulations import shardverdict
from simulations.crew import SimulatedCrash
from simulations.loop import PATIENCE, Loop, found_in, settle
from simulations.observe import Observer
from simulations.shardcrew import Primary, ShardWorker
from simulations.web import Fetch, Page, Site, Web
from simulations.world import BEAT, SETTINGS, server

KINDS = ("beat", "read", "fetch", "apply", "drain", "load_pace", "unpark", "commit")
FINISH_WITHIN = 900.0  # simulated seconds for the fault-free end
CLOCK_FROM_MS = 10**12
# How the first settle on a promoted node goes (shardcrew.PromotedStore): it runs, is
# refused before the ratchet runs, or runs and its reply is lost.
SETTLE_FAULTS = (None, "refused", "lost")
FAILOVER_S = 0.01  # the aimed failover's length: far less than a lease, and a clock tick
STEPS = 40  # steps of a run before the fault-free end
FAULTS = (  # drawn alike: a cut off twice as often (the end's reports go stale there)
    *("crash", "crash_between", "crash_at_delivery", "pause", "cut", "cut"),
    *("failover", "failover_mid_join"),
)


class ShardWorld:
    """One simulated sharded crawl: its primaries, workers, web and records."""

    def __init__(self, seed: int, *, faults: Faults = NO_FAULTS, race_joins: bool = False) -> None:
        """Args:
        race_joins: a worker may join a shard between its failover and the first
            ratchet of the epoch by a store that saw it (see docs/simulation.md, "A
            sharded store": the open race this shows).
        """
        self.rng = random.Random(seed)
        self.race_joins = race_joins
        self.seed, self.faults = seed, faults
        shards = self.rng.choice((2, 3, 3, 4))
        self.site = Site(seed, hosts=self.rng.randint(4, 8), pages=self.rng.randint(16, 40))
        self.web = Web.of(self.site)
        self.url = server().url
        self.crawl = "shsim" + uuid.uuid4().hex[:8]
        self.settings = dict(SETTINGS, delay=float(self.rng.choice((1, 2))))
        self.queue = Queue(self.url, self.crawl, shards=shards, timeout=PATIENCE)
        self.submitted: set[str] = set()
        self.submits = 0
        self.submitted_at = 0.0
        self.trace: list[str] = []
        self.loop = Loop()
        self.submit([self.web.url(0)])  # records the shards' tags
        first = Store(RedisURL.parse(self.url), self.crawl, timeout=PATIENCE)
        self.tags = stored_tags(first) or []
        first.close()
        names = [shard_name(self.crawl, t) for t in ["", *self.tags]]
        self.observers = [Observer(self.url, name) for name in names]
        self.primaries = [Primary(i, o.prefix, self.url) for i, o in enumerate(self.observers)]
        for primary in self.primaries:
            primary.confirmed()  # the first submit's writes: confirmed before it returned
            primary.dying = self._dying
        self.workers: dict[str, ShardWorker] = {}
        self.fetches: list[Fetch] = []
        self.done: list[tuple[str, str]] = []
        self.excused: Counter[str] = Counter()
        self.rings: dict[tuple[int, int], tuple[str, ...]] = {}
        self.problems: list[str] = []
        self.caught: str = ""

    def close(self) -> None:
        try:
            self.loop.close()
        finally:
            for w in self.workers.values():
                for store in w.stores:
                    store.close()
            for primary in self.primaries:
                primary.close()
            for observer in self.observers:
                for key in observer.keys():  # noqa: SIM118 (a method, not a dict)
                    observer.r.delete(key)
                observer.close()
            self.queue.close()

    def now(self) -> float:
        return self.loop.now()

    def clock_ms(self) -> int:
        """The workers' clock in ms: simulated time from a day far from 0, so that the
        epoch a failover jumps to (``lua/failover.lua``: the clock in ms) is far above
        any count of membership changes, as on a real server."""
        return CLOCK_FROM_MS + self.loop.now_ms()

    def say(self, who: str, text: str) -> str:
        self.trace.append(f"t={self.now():8.3f} {who}: {text}")
        return text

    def submit(self, urls: list[str]) -> None:
        """The submitter's writes are confirmed like a worker's (its store WAITs too)."""
        self.queue.submit(urls)
        self.submitted.update(urls)
        self.submits += 1
        self.submitted_at = self.now()
        for primary in getattr(self, "primaries", ()):
            primary.confirmed()
        self.say("submitter", f"submitted {' '.join(urls)}")

    def live(self) -> list[ShardWorker]:
        return [w for w in self.workers.values() if w.live]

    def shard_of(self, url: str) -> int:
        return shard_of(host_key(url), len(self.tags) + 1)

    # -- actions (inside the loop) -----------------------------------------------------------

    async def join(self) -> None:
        if not self.race_joins:  # each running worker's next call settles a failover first
            for w in self.live():
                for store in w.stores:
                    # (a settle that fails, shardcrew.PromotedStore, waits for their next)
                    with contextlib.suppress(QueueError, redis.exceptions.ConnectionError):
                        store._redis  # noqa: B018 (``Connection._redis`` runs the ratchet)
        name = f"w{len(self.workers) + 1}"
        w = self.workers[name] = ShardWorker(name, self)
        w.start("join", w.join)
        await self.reap()
        self.say(name, f"joins every shard ({'done' if w.state == 'member' else 'pending'})")

    async def step(self, w: ShardWorker, kind: str, shard: int) -> None:
        if kind == "fetch":
            while w.active and w.drivers[shard].session.frontier.size:
                if not isinstance(w.drivers[shard].dispatch_one(), Held):
                    break
                await self.reap()
            return
        if kind == "beat" and self.now() - w.last_beat[shard] < BEAT - 1e-9:
            return
        if w.wants(kind, shard):
            name = f"{kind}@{shard}"
            w.start(name, lambda: getattr(w, kind)(shard))
            task = w.tasks[name]
            await self.reap()
            if kind == "beat" and task.done and "ended" in str(task.result):
                self.say(w.name, f"shard {shard}: {task.result}")

    async def complete(self, w: ShardWorker) -> None:
        while w.active and (flight := next(w.fetcher.due(self.now()), None)) is not None:
            if self.web.kills(flight.fetch.url):
                await self.crash(w, f"reading {flight.fetch.url} killed it")
                return
            flight.released.set()
            await self.reap()

    async def turn(self, w: ShardWorker, rng: random.Random | None = None) -> None:
        """Every loop of every shard of ``w`` once (shuffled and thinned by ``rng``)."""
        turns = [(kind, s) for s in range(len(w.drivers)) for kind in KINDS]
        if rng is not None:
            rng.shuffle(turns)
            turns = [t for t in turns if rng.random() < 0.7]
        for kind, shard in turns:
            if w.active and w.state in ("member", "stopping"):
                await self.step(w, kind, shard)
        if w.active:
            await self.complete(w)

    async def tick(self, rng: random.Random | None = None, skip: Any = None) -> None:
        end = self.now() + BEAT
        while True:
            for w in [w for w in self.live() if w is not skip]:
                await self.turn(w, rng)
            if self.now() >= end - 1e-9:
                return
            await self.loop.advance(min(self._next_wait(), end - self.now()))
            await self.reap()

    async def crash(self, w: ShardWorker, why: str) -> None:
        self._excuse(w)
        w.state = "crashed"
        w.stop_tasks()
        await self.reap()
        self.say(w.name, f"crashed ({why})")

    async def fault(self, kind: str) -> None:
        rng, live = self.rng, [w for w in self.live() if w.state == "member"]
        if kind == "failover":
            primary = rng.choice(self.primaries)
            primary.losing = rng.randint(1, 4)
            # Drawn apart from the run's own sequence, which the seeds the tests name keep.
            settle = random.Random(f"settle {self.seed} {primary.shard} {primary.failovers}")
            primary.settle_fault = settle.choice(SETTLE_FAULTS)
            self.say(
                "model",
                f"shard {primary.shard}'s primary will die, its last "
                f"{primary.losing} writes unconfirmed; the first settle on the promoted node: "
                f"{primary.settle_fault or 'runs'}",
            )
            return
        if kind == "failover_mid_join":
            await self.failover_mid_join()
        if not live or kind == "failover_mid_join":
            return
        w = rng.choice(live)
        if kind == "crash":
            await self.crash(w, "killed")
        elif kind == "crash_between":
            after = rng.random() < 0.5
            w.arm(crash_at="ack", after=after)
            self.say(w.name, f"will die {'after' if after else 'before'} its next acknowledgement")
        elif kind == "crash_at_delivery":
            w.arm(crash_at="commit", after=rng.random() < 0.5, shard=rng.randrange(len(w.links)))
            self.say(w.name, "will die at its next commit into one shard")
        elif kind == "pause":
            self._excuse(w)
            w.paused = True
            for _ in range(12):
                await self.tick(skip=w)
            w.paused = False
            self.say(w.name, "was paused past its lease, and runs again")
        elif kind == "cut":
            self._excuse(w)
            shard = rng.randrange(len(w.links))
            w.links[shard].cut = True
            for _ in range(rng.choice((2, 12))):
                await self.tick()
            w.links[shard].cut = False
            self.say(w.name, f"was cut off from shard {shard}, and reconnects")

    async def failover_mid_join(self) -> None:
        """Aimed: a newcomer's join is a shard's primary's last write, and a member reads
        the ring it made (a read is not confirmed) before the primary dies; the newcomer
        dies too, and another worker joins: the epoch it is given must not be the one
        the member holds (``lua/failover.lua``'s jump)."""
        live = [w for w in self.live() if w.state == "member"]
        if not live:
            return
        member, primary = self.rng.choice(live), self.rng.choice(self.primaries)
        primary.losing = 10**6  # until it dies below: the newcomer's retries are lost too
        newcomer = f"w{len(self.workers) + 1}"
        self.say("model", f"shard {primary.shard}'s primary dies after {newcomer}'s join")
        await self.join()
        with contextlib.suppress(QueueError):
            driver = member.drivers[primary.shard]
            epoch, members = await driver.persist(driver.store.members)
            driver.session.epochs.members_read(epoch, members)
        primary.fail_over()
        # A real failover takes cluster-node-timeout at least, so the promoted node's
        # clock reads later than any the lost suffix's epochs were drawn at: the jump's
        # premise (lua/failover.lua). At one instant a join could draw the very number.
        await self.loop.advance(FAILOVER_S)
        await self.crash(self.workers[newcomer], "killed as the primary died")
        await self.join()
        self.problems += shardverdict.epochs(self)  # judged now: the member's next call jumps

    async def random_step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.12 and len(self.live()) < 3:
            await self.join()
        elif roll < 0.32:
            await self.fault(rng.choice(FAULTS))
        elif roll < 0.36 and len(self.live()) > 1:
            w = rng.choice(self.live())
            w.sharded.request_stop()
            w.state = "stopping"
            self.say(w.name, "asked to stop")
        elif roll < 0.4 and not any(p.losing for p in self.primaries):
            self.submit([self.web.url(rng.randrange(len(self.web.pages)))])
        else:
            await self.tick(random.Random(rng.random()))

    async def reap(self) -> None:
        """Settle; end the workers whose steps raised; until nothing changes."""
        while True:
            await settle()
            ended = False
            for w in list(self.workers.values()):
                self.excused.update(w.fetcher.cut_short)
                w.fetcher.cut_short.clear()
                for kind, task in list(w.tasks.items()):
                    if task.done:
                        del w.tasks[kind]
                        ended |= await self._ended(w, kind, task.error)
                if w.state == "member" and any(d.session.flight.stopping for d in w.drivers):
                    w.state = "stopping"
            if not ended:
                return

    async def _ended(self, w: ShardWorker, kind: str, error: BaseException | None) -> bool:
        while isinstance(error, BaseExceptionGroup):  # a nursery's (the join, a delivery)
            error = error.exceptions[0]
        if error is None or not w.live:
            return False
        if (failure := found_in(error)) is not None:
            raise failure  # the machine's, not the worker's: the run ends
        if isinstance(error, SimulatedCrash):
            self._excuse(w)
            w.state = "crashed"
        elif isinstance(error, QueueError):
            w.state = "fenced" if isinstance(error, Fenced) else "gave up"
            self._excuse(w)
        else:
            raise AssertionError(f"{w.name}'s {kind} step raised {error!r}") from error
        self.say(w.name, f"{kind} ended the worker ({w.state}): {error}")
        w.disarm()
        w.stop_tasks()
        return True

    def _excuse(self, w: ShardWorker) -> None:
        """What ``w`` holds in any shard may be fetched once more (it died or stalled)."""
        for observer in self.observers:
            self.excused.update(observer.held_by(w.name))

    def _next_wait(self) -> float:
        now = self.now()
        times = [self.loop.next_deadline(), now + BEAT]
        for w in self.live():
            times += [t + BEAT for t in w.last_beat]
            times += [f.fetch.end for f in w.fetcher.flights]
            for d in w.drivers:
                for host in d.session.frontier.hosts.values():
                    if host.queue:
                        times.append(host.next_start(self.settings["delay"], 1))
        soonest = min((t for t in times if t > now + 1e-9), default=now + BEAT)
        return max(0.001, float(soonest - now))

    # -- judging -----------------------------------------------------------------------------

    def _dying(self, primary: Primary) -> None:
        """A failover may cost a refetch of each page of its shard fetched so far (its
        acknowledgement may be in the lost suffix) or read so far (a read is not
        confirmed: the replica may deliver it again, even to the same worker)."""
        queued = self.observers[primary.shard].snapshot().queued
        fetched = {f.url for f in self.fetches if self.shard_of(f.url) == primary.shard}
        self.excused.update(fetched | set(queued))
        self.say("model", f"shard {primary.shard} fails over, losing {primary.lost_writes}")
        primary.lost_writes = []

    def violations(self) -> list[str]:
        return shardverdict.violations(self)

    def saw_over(self, w: ShardWorker, instant: float) -> None:
        """``w`` saw the crawl over, idle everywhere at ``instant``: nothing may be queued
        in any shard now unless a submit came since (``Ends``'s argument)."""
        # It judges the submits before ``instant``: one since is left for a later worker.
        w.ended_at = self.submits - (self.submitted_at > instant)
        if self.submitted_at > instant:
            return
        for i, observer in enumerate(self.observers):
            if queued := sorted(observer.snapshot().queued):
                self.problems.append(
                    f"{w.name} saw the crawl over, yet shard {i} holds {queued[:3]}: ended "
                    "with a link in flight"
                )

    async def finish(self) -> list[str]:
        """Faults stop; the fleet runs until every worker has left; judge the end."""
        for primary in self.primaries:
            if primary.losing:
                primary.fail_over()
            primary.tracking = False
        for w in self.workers.values():
            w.paused = False
            for link in w.links:
                link.cut = False
        self.say("model", "faults stop; the fleet runs to the end")
        start = self.now()
        while True:
            if problems := self.violations():
                return problems
            if not self.live():
                ended = [w for w in self.workers.values() if w.state == "finished"]
                if any(w.ended_at == self.submits for w in ended):  # after the last submit
                    return shardverdict.judge_end(self)
                await self.join()  # an operator starts a worker while work is left
                continue
            if self.now() > start + FINISH_WITHIN:
                return [f"without faults the crawl did not end in {FINISH_WITHIN:g} s"]
            if self.now() > start + 10:
                for w in self.workers.values():
                    w.disarm()
            for w in sorted(self.live(), key=lambda w: w.name):
                await self.turn(w)
            await self.loop.advance(self._next_wait())
            await self.reap()

    async def play(self, steps: int) -> list[str]:
        for _ in range(self.rng.randint(1, 3)):
            await self.join()
        for _ in range(steps):
            await self.random_step()
            if problems := self.violations():
                return problems
        return await self.finish()

    def do(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return self.loop.run(fn, *args)


STALE_WITHIN = 60.0  # simulated seconds the aimed stale report's crawl runs, faults on


def stale_report_shape(world: ShardWorld) -> tuple[str, str, int, str] | None:
    """The aimed stale report's web, if this world's layout allows it: the submitted
    page A (shard s) links only to a new page B on a host of shard d != s that the
    observer owns in d, while the other of two workers owns A's host. Returns (the
    deliverer, the observer, d, B's URL), or None."""
    if len(world.primaries) < 2:
        return None
    ring = Ring.of(1, ("w1", "w2"))
    url_a = world.web.url(0)
    s, deliverer = world.shard_of(url_a), ring.owner_of(host_key(url_a))
    observer = "w2" if deliverer == "w1" else "w1"
    for i in range(100):
        url_b = f"http://b{i}.test/b"
        d = world.shard_of(url_b)
        if d != s and ring.owner_of(host_key(url_b)) == observer:
            page = world.web.pages[url_a]
            world.web.pages = {
                url_a: attrs.evolve(page, kind="ok", links=(url_b,), fails=0),
                url_b: Page(url_b, f"b{i}.test", "ok", (), 0.1),
            }
            world.web.killer = None
            assert deliverer is not None
            return deliverer, observer, d, url_b
    return None


async def stale_report(world: ShardWorld, shape: tuple[str, str, int, str]) -> list[str]:
    """Aimed (``end_from_one_sweep``): the observer's one report of shard d is quiet (d
    has not begun) and goes stale, the observer cut off from d, while the deliverer's
    page A of shard s puts B into d (in the observer's stream, which it cannot read) and
    s turns quiet. Only the second sweep keeps the observer from calling the crawl over
    with B queued; without the bug it gives up, and the deliverer finishes."""
    _, observer, d, _ = shape
    await world.join()
    await world.join()
    w = world.workers[observer]
    for shard in range(len(w.drivers)):
        await world.step(w, "beat", shard)
    w.links[d].cut = True
    world._excuse(w)
    world.say(observer, f"reported every shard once, and is cut off from shard {d}")
    start = world.now()
    while world.now() < start + STALE_WITHIN and w.live:
        if problems := world.violations():
            return problems
        await world.tick()
    w.links[d].cut = False
    return await world.finish()


def expired_in_one_shape(world: ShardWorld) -> tuple[str, str, int, str] | None:
    """The aimed misroute's web, if this world's layout allows it: the submitted page
    starts a chain of pages on one host of the deliverer's outside d (work that keeps the
    crawl going); page A, submitted later, is on a host of shard s that the deliverer
    owns and links only to B, on a host of shard d != s that the other worker owns
    (both with two members). Returns (the deliverer, the other, d, A's URL), or None."""
    if len(world.primaries) < 2:
        return None
    ring = Ring.of(1, ("w1", "w2"))
    for i in range(100):
        url_a = f"http://a{i}.test/a"
        s, deliverer = world.shard_of(url_a), ring.owner_of(host_key(url_a))
        other = "w2" if deliverer == "w1" else "w1"
        for j in range(100):
            url_b = f"http://b{j}.test/b"
            d = world.shard_of(url_b)
            if d != s and ring.owner_of(host_key(url_b)) == other:
                chain = _chain(world, ring, deliverer, d)
                first = world.web.url(0)
                page = attrs.evolve(world.web.pages[first], kind="ok", links=chain[:1], fails=0)
                pages = {
                    url: Page(url, host_key(url), "ok", chain[n + 1 : n + 2], 0.1)
                    for n, url in enumerate(chain)
                }
                world.web.pages = {
                    first: page,
                    **pages,
                    url_a: Page(url_a, f"a{i}.test", "ok", (url_b,), 0.1),
                    url_b: Page(url_b, f"b{j}.test", "ok", (), 0.1),
                }
                world.web.killer = None
                assert deliverer is not None
                return deliverer, other, d, url_a
    return None


def _chain(world: ShardWorld, ring: Ring, owner: str | None, away: int) -> tuple[str, ...]:
    """Twelve pages on a host ``owner`` owns outside shard ``away``, each linking the next."""
    host = next(
        f"c{k}.test"
        for k in range(1000)
        if world.shard_of(f"http://c{k}.test/") != away and ring.owner_of(f"c{k}.test") == owner
    )
    return tuple(f"http://{host}/c{n}" for n in range(12))


async def expired_in_one(world: ShardWorld, shape: tuple[str, str, int, str]) -> list[str]:
    """Aimed (``deliver_by_source_ring``): the other worker, cut off from shard d, dies
    near the end of its lease there; d expires it and its stream there is drained, while
    shard s, whose lease it renewed until it died, still counts it a member. Then A is
    submitted: the deliverer's commit into d routes B by d's ring (itself), not by s's
    (the other, whose stream in d nobody reads any more: B would wait there for ever)."""
    _, other, d, url_a = shape
    await world.join()
    await world.join()
    gone = world.workers[other]
    gone.links[d].cut = True
    world._excuse(gone)
    world.say(other, f"is cut off from shard {d}")
    s = world.shard_of(url_a)
    start = world.now()
    while world.now() < start + float(world.settings["lease"]) - 2 * BEAT:
        await world.tick()
    await world.crash(gone, "dies before it would give up (a crash: its other leases run on)")
    while world.now() < start + STALE_WITHIN:
        if problems := world.violations():
            return problems
        in_d, in_s = world.observers[d].snapshot(), world.observers[s].snapshot()
        if other not in in_d.members and not in_d.orphans and other in in_s.members:
            break
        await world.tick()
    else:
        return []  # the window did not open: nothing shown
    world.submit([url_a])
    world.say("model", f"{other} is expired in shard {d}, a member of shard {s} still")
    return await world.finish()


# The aimed scenarios: each finds its shape in a world (its web rewritten) and plays it.
AIMS: dict[str, tuple[Callable[[ShardWorld], Any], Callable[..., Awaitable[list[str]]]]] = {
    "stale_report": (stale_report_shape, stale_report),
    "expired_in_one": (expired_in_one_shape, expired_in_one),
}


def run_aimed(
    seed: int, faults: Faults = NO_FAULTS, *, aim: str = "stale_report"
) -> tuple[list[str], ShardWorld]:
    """One aimed scenario in the first world from ``seed`` on whose layout allows it
    (most do): its violations and the world (closed)."""
    shape_of, play = AIMS[aim]
    for n in range(100):
        world = ShardWorld(seed * 1000 + n, faults=faults)
        try:
            shape = shape_of(world)
            if shape is not None:
                return world.do(play, world, shape), world
        finally:
            world.close()
    raise AssertionError(f"no world from seed {seed} has the shape of {aim}")


def run_once(
    seed: int, faults: Faults = NO_FAULTS, steps: int = STEPS
) -> tuple[list[str], ShardWorld]:
    """One run: the violations (empty: every invariant held) and its world (closed)."""
    world = ShardWorld(seed, faults=faults)
    try:
        problems = world.do(world.play, steps)
    finally:
        world.close()
    return problems, world


def run(runs: int, seed: int, faults: Faults = NO_FAULTS) -> tuple[str, int]:
    """``runs`` runs from ``seed`` on; the first violation ("" if none) and runs made."""
    for n in range(runs):
        problems, world = run_once(seed * 100_000 + n, faults)
        if problems:
            tail = "\n".join(world.trace[-40:])
            return f"run {n} (seed {seed * 100_000 + n}): {problems[0]}\n{tail}", n + 1
    return "", runs


def _aimed(seed: int, faults: Faults, aim: str) -> tuple[str, int]:
    problems, world = run_aimed(seed, faults, aim=aim)
    if problems:
        tail = "\n".join(world.trace[-40:])
        return f"aimed {aim} (seed {world.seed}): {problems[0]}\n{tail}", 1
    return "", 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.shards", description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="runs per seed")
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds from --seed on")
    parser.add_argument("--fault", action="append", default=[], help="a deliberate bug")
    parser.add_argument(
        "--aimed",
        choices=sorted(AIMS),
        help="each seed's aimed scenario instead of runs: stale_report (the window of "
        "end_from_one_sweep), expired_in_one (of deliver_by_source_ring)",
    )
    args = parser.parse_args(argv)
    logging.getLogger("hashcrawl").setLevel(logging.ERROR)  # each failover's epoch jump
    faults = Faults.of(args.fault)
    broke = 0
    for seed in range(args.seed, args.seed + args.seeds):
        started, cpu = time.monotonic(), time.process_time()
        hit, made = _aimed(seed, faults, args.aimed) if args.aimed else run(args.runs, seed, faults)
        took = f"{time.monotonic() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU"
        print(f"seed {seed}: {'caught: ' + hit if hit else 'held'} after {made} runs, {took}")
        sys.stdout.flush()
        broke += bool(hit)
    if args.fault:
        print(f"{'+'.join(args.fault)}: caught in {broke} of {args.seeds} seeds")
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
