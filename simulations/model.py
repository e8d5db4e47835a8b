"""The Hypothesis state machine: any sequence of crawl steps and faults, judged after each.

Rules pick a worker by index among those the step applies to (``w=1`` is the second of
them, in join order); the note printed with each step names the worker. A failing
example prints as a script: paste it after ``from simulations.model import CrawlModel``
and ``from simulations.web import Site`` (or save it and run ``python -m simulations
--replay FILE``) to watch it fail again.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._exceptions import QueueError
from simulations import names, reach, revisits, verdict
from simulations.crew import SimWorker
from simulations.loop import PATIENCE, EnvironmentFailure
from simulations.web import Site
from simulations.world import SETTINGS, World

MAX_WORKERS = 4
MAX_SUBMISSIONS = 6
MAX_CHANGES = 2  # configure --delay while the crawl runs
CALLS = ("heartbeat", "read", "leave", "members", "orphan", "entries", "release", "pace")
# Where crash_later may strike: before or after a Store call (crash_after_ack, the most
# telling point, has a rule of its own so that it comes up often).
CRASH_POINTS = (
    "before ack",
    "after commit",
    "before leave",
    "after leave",
    "after heartbeat",
    "after read",
    "after entries",
    "after pace",
    "before release",
)
REPLIES = ("commit", "commit", *CALLS)
TRACE_SHOWN = 30
# Takeover after an expiry takes the fleet one heartbeat interval or two: a stale request
# that close to the new owner's first breaks politeness only where the delay is longer.
LONG_DELAY = 1.5
# Aimed timing faults each example may inject beside its fault budget (most examples draw
# a small budget, which the other faults use up): the windows come up in every quick run.
TIMED_FAULTS = 1

sites = st.builds(
    Site,
    seed=st.integers(0, 2**16),
    hosts=st.integers(2, 6),
    pages=st.integers(4, 40),
)
index = st.integers(0, MAX_WORKERS - 1)
# The latest failures of this process's examples, newest last, each with the last steps
# of its trace: when Hypothesis then calls the run flaky (an example that failed did not
# fail again, or a later one sharing its first steps went another way), it prints none
# of them, so profiles.run adds these to its error.
FAILURES: collections.deque[str] = collections.deque(maxlen=3)


def _note(text: str) -> None:
    """A note for the printed example; printed at once when a script replays steps."""
    try:
        note(text)
    except InvalidArgument:  # outside Hypothesis: a replayed script
        print(text)


def _wanting(kind: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return precondition(lambda self: bool(self._eligible(kind)))


class CrawlModel(RuleBasedStateMachine):
    """Workers of one crawl against a real Redis, a fake web and a clock the model moves."""

    report: Any = None  # a profiles.Report to add this example's figures to
    bugs: Faults = NO_FAULTS  # the deliberate bugs the workers run with

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.faults = 0
        self.timed = 0  # aimed timing faults left beside the budget
        self.crash_joins = 0  # kills followed by a join (crash_then_join) left
        self.name_starts = 0  # workers started under a member's name (by_name) left
        self.restarts = 0
        self.submissions = 0
        self.broken = False  # a rule or check failed: teardown only cleans up
        self._remembered: BaseException | None = None  # the failure put in FAILURES

    # -- setting up and steps ---------------------------------------------------------------

    @initialize(
        site=sites,
        workers=st.integers(1, 3),
        roots=st.lists(st.integers(0, 99), max_size=3),
        faults=st.integers(0, 6),
        delay=st.sampled_from([1.0, 2.0, 3.0]),
        latency=st.sampled_from([0.0, 0.2, 0.6]),
        gap=st.sampled_from([0.0, 0.2, 1.0]),  # 0: every request leaves at once
        revisit=st.sampled_from(revisits.CHOICES),  # "": no revisits
    )
    def setup(
        self,
        site: Site,
        workers: int,
        roots: list[int],
        faults: int,
        delay: float,
        latency: float = 0.0,
        gap: float = 0.0,
        revisit: str = "",
    ) -> None:
        """``workers`` crawl ``site`` from ``roots``, ``delay`` s apart per host, and may
        suffer ``faults`` faults; heartbeats take up to ``latency`` s each way, and a
        request waits up to ``gap`` s to leave; with ``revisit``, the crawl revisits
        (simulations/revisits.py)."""
        settings = {**SETTINGS, "delay": delay, **revisits.settings_of(revisit)}
        self.world = World(site, settings=settings, latency=latency, gap=gap, faults=self.bugs)
        self.faults = faults
        self.timed = TIMED_FAULTS
        self.crash_joins = 1 if faults else 0
        self.name_starts = 1 if faults else 0
        if self.report is not None:
            self.report.started()
        for _ in range(workers):
            self._do(self.w.join)
        if roots:
            self.submit(roots)

    @property
    def w(self) -> World:
        assert self.world is not None
        return self.world

    def _do(self, fn: Any, *args: Any) -> None:
        self.broken = True
        mark = len(self.w.trace)
        try:
            self.w.do(fn, *args)
        finally:
            self._noted(mark)
        self.broken = False

    def _noted(self, mark: int) -> None:
        """Print what happened as comments, so the printed example stays a valid script."""
        for line in self.w.trace[mark:]:
            _note(f"# {line}")

    def _say(self, who: str, text: str) -> None:
        _note(f"# {self.w.say(who, text)}")

    def _eligible(self, kind: str) -> list[SimWorker]:
        if self.world is None:
            return []
        now = self.world.now()
        members = [w for w in self.world.active() if w.state in ("member", "stopping")]
        if kind == "fetch":
            return [w for w in members if w.session.frontier.size and not w.session.flight.stopping]
        if kind == "complete":
            return [w for w in members if next(w.fetcher.due(now), None) is not None]
        if kind == "send":
            return [w for w in members if w.fetcher.leaving(now)]
        if kind == "read":
            return [w for w in members if not w.session.flight.stopping]
        if kind in ("beat", "take"):
            return [w for w in members if not w.busy_with(kind)]
        return [w for w in members if w.wants(kind)]

    def _step(self, kind: str, i: int) -> None:
        self._do(self.w.step, self.w.pick(i, self._eligible(kind)), kind)

    @precondition(lambda self: self.world is not None and self.submissions < MAX_SUBMISSIONS)
    @rule(pages=st.lists(st.integers(0, 99), min_size=1, max_size=3))
    def submit(self, pages: list[int]) -> None:
        self.submissions += 1
        self._say("submitter", self.w.submit([self.w.web.url(p) for p in pages]))

    @precondition(lambda self: self.world is not None and len(self.world.live()) < MAX_WORKERS)
    @rule()
    def join(self) -> None:
        self._do(self.w.join)

    @_wanting("beat")
    @rule(w=index)
    def beat(self, w: int) -> None:
        self._step("beat", w)

    @_wanting("read")
    @rule(w=index)
    def read(self, w: int) -> None:
        self._step("read", w)

    @_wanting("load_pace")
    @rule(w=index)
    def load_pace(self, w: int) -> None:
        self._step("load_pace", w)

    @_wanting("fetch")
    @rule(w=index)
    def fetch(self, w: int) -> None:
        self._step("fetch", w)

    @_wanting("send")
    @rule(w=index)
    def send(self, w: int) -> None:
        self._step("send", w)

    @_wanting("complete")
    @rule(w=index)
    def complete(self, w: int) -> None:
        self._step("complete", w)

    @_wanting("commit")
    @rule(w=index)
    def commit(self, w: int) -> None:
        self._step("commit", w)

    @_wanting("apply")
    @rule(w=index)
    def apply(self, w: int) -> None:
        self._step("apply", w)

    @_wanting("drain")
    @rule(w=index)
    def drain(self, w: int) -> None:
        self._step("drain", w)

    @_wanting("unpark")
    @rule(w=index)
    def unpark(self, w: int) -> None:
        self._step("unpark", w)

    @precondition(lambda self: self._revisiting() and bool(self._eligible("take")))
    @rule(w=index)
    def take(self, w: int) -> None:
        """A turn of a worker's taker: due revisit records become inbox entries."""
        self._step("take", w)

    def _revisiting(self) -> bool:
        return self.world is not None and self.world.revisit is not None

    @precondition(lambda self: self.world is not None and bool(self.world.live()))
    @rule()
    def tick(self) -> None:
        self._do(self.w.tick)

    @precondition(lambda self: self.world is not None and bool(self.world.active()))
    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0, 4.0]), order=st.integers(0, 999))
    def run(self, seconds: float, order: int) -> None:
        self._do(self.w.run_for, seconds, order)

    @precondition(lambda self: self.world is not None and bool(self.world.live()))
    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.0, 5.0]))
    def advance(self, seconds: float) -> None:
        self._do(self.w.advance, seconds)

    @precondition(lambda self: len(self._eligible("read")) > 1)
    @rule(w=index)
    def stop(self, w: int) -> None:
        self._do(self.w.stop, self.w.pick(w, self._eligible("read")))

    @precondition(
        lambda self: self.world is not None and any(w.may_leave() for w in self.w.active())
    )
    @rule(w=index)
    def leave(self, w: int) -> None:
        self._do(self.w.leave, self.w.pick(w, [w for w in self.w.active() if w.may_leave()]))

    # -- faults -----------------------------------------------------------------------------

    def _faulty(self) -> list[SimWorker]:
        return self.w.live() if self.world is not None and self.faults > 0 else []

    def _fault(self, kind: str) -> None:
        self.faults -= 1
        self._count(kind)

    def _count(self, kind: str) -> None:
        if self.report is not None:
            self.report.faults[kind] += 1

    @precondition(lambda self: bool(self._faulty()))
    @rule(w=index)
    def crash(self, w: int) -> None:
        """The worker's process dies between two steps; its Redis state stays."""
        victim = self.w.pick(w, self._faulty())
        self._fault("crash")
        self._do(self.w.crash, victim)

    @precondition(lambda self: bool(self._faulty()))
    @rule(w=index)
    def crash_after_ack(self, w: int) -> None:
        """The worker's process will die just after its next commit that acknowledges
        entries has run in Redis: the moment an at-least-once pipeline is most fragile."""
        victim = self.w.pick(w, self._faulty())
        self._fault("crash_after_ack")
        victim.link.crash_at, victim.link.crash_after = "ack", True
        self._say(victim.name, "will die once its next acknowledging commit has run")

    @precondition(lambda self: bool(self._faulty()))
    @rule(w=index, at=st.sampled_from(CRASH_POINTS))
    def crash_later(self, w: int, at: str) -> None:
        """The worker's process will die at its next call of a Store method ("ack": a
        commit that acknowledges entries), before the call is sent or once Redis ran it."""
        victim = self.w.pick(w, self._faulty())
        self._fault("crash_later")
        when, _, call = at.partition(" ")
        victim.link.crash_at, victim.link.crash_after = call, when == "after"
        self._say(victim.name, f"will die {at}")

    @precondition(lambda self: self._revisiting() and bool(self._faulty()))
    @rule(w=index, at=st.sampled_from(revisits.CRASH_POINTS))
    def crash_at_revisit(self, w: int, at: str) -> None:
        """The worker will die at its next revisit call: before its put (holding fetched
        revisits), once the put ran, or once a take ran (its entries in the inbox)."""
        self.crash_later(w, at)

    @precondition(lambda self: any(not w.paused and not w.tasks for w in self._faulty()))
    @rule(w=index)
    def pause(self, w: int) -> None:
        victim = self.w.pick(w, [w for w in self._faulty() if not w.paused and not w.tasks])
        self._fault("pause")
        victim.paused = True
        self._say(victim.name, "paused (SIGSTOP)")

    @precondition(lambda self: self.world is not None and any(w.paused for w in self.w.live()))
    @rule(w=index)
    def resume(self, w: int) -> None:
        victim = self.w.pick(w, [w for w in self.w.live() if w.paused])
        victim.paused = False
        self._say(victim.name, "resumed (SIGCONT)")

    @precondition(lambda self: any(not w.paused and not w.tasks for w in self._faulty()))
    @rule(w=index)
    def pause_past_lease(self, w: int) -> None:
        victim = self.w.pick(w, [w for w in self._faulty() if not w.paused and not w.tasks])
        self._fault("pause_past_lease")
        self._do(self.w.pause_past_lease, victim)

    @precondition(lambda self: any(not w.link.cut for w in self._faulty()))
    @rule(w=index)
    def cut_off(self, w: int) -> None:
        victim = self.w.pick(w, [w for w in self._faulty() if not w.link.cut])
        self._fault("cut_off")
        victim.link.cut = True
        self._say(victim.name, "is cut off from Redis")

    @precondition(lambda self: self.world is not None and any(w.link.cut for w in self.w.live()))
    @rule(w=index)
    def reconnect(self, w: int) -> None:
        victim = self.w.pick(w, [w for w in self.w.live() if w.link.cut])
        victim.link.cut = False
        self._say(victim.name, "reaches Redis again")

    @precondition(lambda self: bool(self._faulty()))
    @rule(w=index, call=st.sampled_from(REPLIES))
    def lose_reply(self, w: int, call: str) -> None:
        """The reply to a worker's next call of a Store method is lost: Redis ran it."""
        victim = self.w.pick(w, self._faulty())
        self._fault("lose_reply")
        victim.link.lose_reply = call
        self._say(victim.name, f"will not get the reply to its next {call}")

    @precondition(
        lambda self: (
            self.world is not None and self.faults > 0 and len(self.world.live()) < MAX_WORKERS
        )
    )
    @rule()
    def join_losing_reply(self) -> None:
        """A worker joins, and the reply to its join is lost: it will join again."""
        self._fault("join_losing_reply")
        self._do(self.w.join, "join")

    @precondition(lambda self: self.world is not None and self.faults > 0 and self.restarts < 1)
    @rule(kill=st.booleans())
    def restart_redis(self, kill: bool) -> None:
        """Redis stops (SHUTDOWN, or SIGKILL) and starts again from its append-only file."""
        self._fault("restart_redis")
        self.restarts += 1
        if kill:
            self.w.redis.kill()
        try:  # a start the machine makes slow waits for it (PATIENCE), never fails for it
            self.w.redis.restart(timeout=PATIENCE)
        except QueueError as exc:  # the server, not hashcrawl: every later example would fail
            self.broken = True  # teardown only cleans up
            raise EnvironmentFailure(f"the simulation's Redis did not start again: {exc}") from exc
        self._say("redis", "killed and restarted" if kill else "restarted")

    @precondition(lambda self: self.world is not None and self.world.changes < MAX_CHANGES)
    @rule(delay=st.sampled_from([1.0, 2.0, 3.0]))
    def configure(self, delay: float) -> None:
        """The operator changes the crawl's delay while it runs (``reach.configure``)."""
        self._say("operator", reach.configure(self.w, delay))

    @precondition(lambda self: bool(self._faulty()))
    @rule(w=index)
    def plant_entries(self, w: int) -> None:
        """Unreadable entries appear in a member's stream, written by hand: each must be
        counted bad once, and the crawl must still end (``reach.plant``)."""
        self._fault("plant_entries")
        self._say("by hand", reach.plant(self.w, w))

    @precondition(
        lambda self: (
            bool(self._faulty()) and len(self.w.live()) < MAX_WORKERS and bool(self.w.active())
        )
    )
    @rule()
    def lost_join_then_pause(self) -> None:
        """A worker's join reply is lost, it joins again, and it is paused until just
        before the lease from that join ends: it must still be a member."""
        self._fault("lost_join_then_pause")
        self._do(reach.lost_join_then_pause, self.w)

    def _crash_aim(self) -> tuple[SimWorker, SimWorker, str] | None:
        """A worker to kill, and a host a join would move from another, live member."""
        aim = self._join_aim()
        if aim is None:
            return None
        owner, host = aim
        if not self.crash_joins:
            return None
        victims = [w for w in self.w.live() if w is not owner and w.state == "member"]
        return (victims[0], owner, host) if victims else None

    @precondition(lambda self: self._crash_aim() is not None)
    @rule()
    def crash_then_join(self) -> None:
        """A member dies, and a worker joins inside its lease (a restarted pod)."""
        aim = self._crash_aim()
        assert aim is not None
        self.crash_joins -= 1
        self._count("crash_then_join")
        self._do(reach.crash_then_join, self.w, *aim)

    def _name_aims(self) -> list[SimWorker]:
        """Running members with a sound link, for a worker of their name to start beside
        (while a worker may still join)."""
        if self.world is None or not self.name_starts or len(self.world.live()) >= MAX_WORKERS:
            return []
        return [w for w in self.world.active() if w.state == "member" and reach._sound(w)]

    @precondition(lambda self: bool(self._name_aims()))
    @rule(how=st.sampled_from(names.KINDS), w=index)
    def by_name(self, how: str, w: int) -> None:
        """A worker starts under a member's name: once the member died (a restart), while
        it runs (a twin, to be refused), or while it is paused (simulations/names.py)."""
        victim = self.w.pick(w, self._name_aims())
        self.name_starts -= 1
        self._count(f"by_name {how}")
        self._do(getattr(names, how), self.w, victim)

    # -- aimed: the windows the timing rules exist for (each listed twice, to weigh it) --

    def _join_aim(self) -> Any:
        if self.world is None or len(self.world.live()) >= MAX_WORKERS:
            return None
        return self.world.moving_host()

    def _aimed(self, kind: str) -> None:
        if self.report is not None:
            self.report.aimed[kind] += 1

    @precondition(lambda self: self._join_aim() is not None)
    @rule()
    def join_in_flight(self) -> None:
        """A join moves a host whose previous owner has a request out to it."""
        w, host = self._join_aim()
        self._aimed("join_in_flight")
        self._do(self.w.join_in_flight, w, host)

    def _holding(self) -> list[SimWorker]:
        """Running workers holding pages, with nothing pending but fetches, and another
        running member to take over from them."""
        if self.world is None or len(self.world.active()) < 2:
            return []
        return [
            w
            for w in (self.world.live() if self.timed or self.faults > 0 else [])
            if w.active
            and w.state == "member"
            and w.session.frontier.size
            and all(kind.startswith("fetch") for kind in w.tasks)
        ]

    def _timed_fault(self, kind: str) -> None:
        """An aimed timing fault: from the example's own allowance first, then the budget."""
        if self.timed:
            self.timed -= 1
            self._count(kind)
        else:
            self._fault(kind)

    @precondition(lambda self: bool(self._holding()))
    @rule(w=index, early=st.sampled_from([0.05, 0.3]), slow=st.sampled_from([1.8, 2.5]))
    def pause_to_lease_end(self, w: int, early: float, slow: float) -> None:
        """A pause ends just before the lease runs out, holding pages; the heartbeat it
        sends on waking reaches Redis after the fleet expired it."""
        victim = self.w.pick(w, self._holding())
        self._timed_fault("pause_to_lease_end")
        self._do(self.w.pause_to_lease_end, victim, early, slow)

    def _holding_long(self) -> list[SimWorker]:
        """Those of ``_holding`` with pages of a host whose delay is long: there the
        stale worker's last request and the new owner's first can be too close."""
        return [
            w
            for w in self._holding()
            if any(
                host.queue and self.w.delay_of(name) >= LONG_DELAY
                for name, host in w.session.frontier.hosts.items()
            )
        ]

    @precondition(lambda self: bool(self._holding_long()))
    @rule(w=index, early=st.sampled_from([0.05, 0.3]), slow=st.sampled_from([1.8, 2.5]))
    def pause_to_lease_end_long(self, w: int, early: float, slow: float) -> None:
        """``pause_to_lease_end`` aimed at a worker holding pages of a host with a long
        delay (``--delay`` 2 or 3 s, or a Crawl-delay)."""
        victim = self.w.pick(w, self._holding_long())
        self._timed_fault("pause_to_lease_end")
        self._do(self.w.pause_to_lease_end, victim, early, slow)

    @precondition(lambda self: bool(self._holding()))
    @rule(w=index)
    def lose_beat_after_expiry(self, w: int) -> None:
        """A worker whose requests wait to leave is expired while paused; the reply to its
        first heartbeat after that is lost."""
        victim = self.w.pick(w, self._holding())
        self._timed_fault("lose_beat_after_expiry")
        self._do(self.w.lose_beat_after_expiry, victim)

    # The most telling crash, weighed as before the aimed rules joined the draw.
    crash_after_ack_ = crash_after_ack
    join_in_flight_ = join_in_flight
    pause_to_lease_end_ = pause_to_lease_end
    pause_to_lease_end_long_ = pause_to_lease_end_long
    lose_beat_after_expiry_ = lose_beat_after_expiry

    # -- judging ------------------------------------------------------------------------------

    @invariant()
    def holds(self) -> None:
        if self.world is None:
            return
        if self.report is not None:
            self.report.steps += 1
        self._judged(verdict.violations(self.w))

    def _judged(self, problems: list[str]) -> None:
        if problems:
            self.broken = True
            trace = "\n".join(self.w.trace[-TRACE_SHOWN:])
            failure = AssertionError("\n".join(problems[:10]) + "\n-- last steps --\n" + trace)
            self._remember(failure)
            raise failure

    def teardown(self) -> None:
        if self.world is None:
            return
        failing = _failure_in_flight()
        try:
            if failing is not None:
                self._remember(failing)
            if not self.broken:
                self.broken = True
                self._judged(self.w.do(verdict.finish, self.w) + verdict.violations(self.w))
                self.broken = False
        finally:
            if self.report is not None:
                self.report.requests += len(self.w.fetches)
                self.report.pages += len({url for url, _ in self.w.done})
                self.report.simulated += self.w.loop.now()
                if self.w.killed:
                    self.report.faults["killer_page"] += self.w.killed
                if (cap := self.w.settings.get("max_pages_per_host")) is not None:
                    self.report.capped["examples"] += 1
                    at = sum(n >= cap for n in reach.page_requests(self.w).values())
                    self.report.capped["hosts at the cap"] += at
                if self.w.revisit is not None:
                    watched = revisits.revisited(self.w.web)
                    self.report.revisits.update(revisits.figures(self.w.fetches, watched))
            try:
                self.world.close()
            except BaseException:
                if failing is None:
                    raise  # else the error in flight is the one to report, not its aftermath

    def _remember(self, error: BaseException) -> None:
        """A rule or check raised ``error``: remember it in ``FAILURES`` (once: a broken
        invariant is remembered as it is judged, and seen again at teardown)."""
        if error is self._remembered:
            return
        self._remembered = error
        text = f"{type(error).__name__}: {error}"
        if "-- last steps --" not in text:
            text += "\n-- last steps --\n" + "\n".join(self.w.trace[-TRACE_SHOWN:])
        FAILURES.append(text)


def _failure_in_flight() -> BaseException | None:
    """The failure propagating through ``teardown`` (Hypothesis runs it in a ``finally``):
    an error of a rule or check, or the machine's; not Hypothesis's own control flow (its
    ``StopTest`` ends an example that drew all it may, and that example's end is run and
    judged as any other)."""
    error = sys.exc_info()[1]
    return error if isinstance(error, Exception | EnvironmentFailure) else None
