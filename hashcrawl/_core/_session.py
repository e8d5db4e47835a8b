"""A worker's membership as a state machine: every decision, no IO, no await.

A :class:`Session` holds what one membership knows (its ring and epochs, frontier,
outcomes, pacing, robots.txt rules, cookies) and decides everything a worker does.
It is told the time and what happened (a heartbeat's reply, entries read, a response,
a commit's result) and answers with what to do next: the next request to start, the
next commit batch, the hosts whose pace records to read, the entries to hand over.
The driver in ``_run`` does the IO it asks for; the simulations drive the same
driver turn by turn, so they run these decisions and no copy of them.

The session builds its parts, each given the parts it reads (none holds the session).
The driver's loops enter it one way: :meth:`Session.start` takes a turn (a value of
``_exchanges``: ``Dispatch``, ``Read``, ``Commit``, ``Renew``, ``Apply``...) and answers
with its process, whose steps the driver does (``next_step``, ``answered``, ``failed``,
``result``); :meth:`Session.due` says which turns the state asks for. A page's process
(``Page``) is the one the driver holds longer: the gate's questions a request asks as
it is written, and a rendered page's sub-requests, go through it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hashcrawl._core._beats import Heartbeat
from hashcrawl._core._commits import Commits
from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._exchanges import (
    Apply,
    CommitOutcomes,
    Dispatch,
    Done,
    Drain,
    DrainOrphans,
    Forget,
    Idle,
    Join,
    Leave,
    Limits,
    PaceDue,
    Process,
    Read,
    ReadMembers,
    ReadParked,
    ReadScope,
    Renew,
    TakeRevisits,
    Turn,
    Unparks,
    WidenScope,
)
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._fetches import Fetches
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._gate import Gate, Pool
from hashcrawl._core._handover import Handover
from hashcrawl._core._intake import PARK_AT as PARK_AT
from hashcrawl._core._intake import UNPARK_BELOW as UNPARK_BELOW
from hashcrawl._core._intake import Intake, Mine, Reading, Unparking
from hashcrawl._core._ledger import COMMIT_MAX as COMMIT_MAX
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._outcome import SeenCache
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._page import Page
from hashcrawl._core._parts import (
    Clock,
    Due,
    Figures,
    Flight,
    RobotsCache,
    Suspects,
    limit_reached,
    limits,
)
from hashcrawl._core._patterns import Screen
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._seams import CookieJars, Tally
from hashcrawl._core._settings import Current, Settings

log = logging.getLogger("hashcrawl")
# A commit costs ~10 Redis commands however few pages it carries, so waiting 200 ms
# keeps a worker with few hosts near 1 command per page; one whose --concurrency fills
# up commits at once anyway (``Gate.commit_due``), so the fetcher never waits on this.
COMMIT_EVERY = 0.2
# A host with nothing queued or in flight is forgotten after this long idle, and beyond
# this many such hosts at once, the least recently used: its robots.txt rules (tens of
# KiB once parsed) and pacing are rebuilt if it comes back.
IDLE_HOST_SECONDS = 300.0
IDLE_HOSTS_KEPT = 1000
FORGET_EVERY = 2.0


class Session:
    """One membership of a worker, from join to leave (or to being fenced): its parts,
    and the decisions that read more than one of them."""

    def __init__(
        self,
        *,
        worker: str,
        settings: Settings,
        stream_of: Callable[[str], str],
        inbox: str,
        refuses: Callable[[Entry], str | None],
        tally: Tally,
        jars: CookieJars,
        now: float,
        faults: Faults = NO_FAULTS,
        pool: Pool | None = None,
        foreign: Callable[[str], bool] | None = None,
        screen: Screen | None = None,
    ) -> None:
        self.id, self.stream, self.refuses, self.started = worker, stream_of(worker), refuses, now
        self.current = current = Current(settings)  # what every part reads: one step to change
        self.tally, self.jars, self.faults = tally, jars, faults  # jars: the owned hosts' cookies
        self.frontier = frontier = Frontier(delay=settings.delay, per_host=settings.per_host)
        self.epochs, self.clock, self.robots = Epochs(), Clock(), RobotsCache()
        self.seen, self.suspects = SeenCache(), Suspects()
        self.screen = screen or Screen()  # links kept out, each counted once (the handler's)
        self.taken: dict[str, int] = {}  # host -> page requests (with --max-pages-per-host)
        self.ledger, self.flight, self.intake = Ledger(), Flight(), Intake()
        epochs, ledger, flight, robots = self.epochs, self.ledger, self.flight, self.robots
        self.pacing = pacing = Pacing(
            current=current, frontier=frontier, epochs=epochs, clock=self.clock, jars=jars,
            taken=self.taken, faults=faults, robots=robots,
        )  # fmt: skip
        self.gate = gate = Gate(
            worker=worker, current=current, faults=faults, epochs=epochs, frontier=frontier,
            ledger=ledger, suspects=self.suspects, robots=robots, flight=flight, pool=pool,
        )  # fmt: skip
        self.heartbeat = Heartbeat(
            worker=worker, current=current, faults=faults, epochs=epochs, clock=self.clock,
            frontier=frontier, ledger=ledger, flight=flight, pacing=pacing, tally=tally,
        )  # fmt: skip
        self.fetches = Fetches(
            worker=worker, current=current, faults=faults, epochs=epochs, frontier=frontier,
            ledger=ledger, suspects=self.suspects, robots=robots, tally=tally, flight=flight,
            gate=gate, jars=jars, taken=self.taken, seen=self.seen, clock=self.clock,
        )  # fmt: skip
        self.commits = Commits(
            worker=worker, current=current, faults=faults, stream_of=stream_of, inbox=inbox,
            epochs=epochs, clock=self.clock, seen=self.seen, pacing=pacing, ledger=ledger,
            tally=tally, jars=jars, frontier=frontier, screen=self.screen, foreign=foreign,
        )  # fmt: skip
        self.handover = Handover(
            current=current, commits=self.commits, epochs=epochs, frontier=frontier,
            pacing=pacing, flight=flight, taken=self.taken, jars=jars, robots=robots,
            intake=self.intake,
        )  # fmt: skip

    @property
    def settings(self) -> Settings:
        return self.current.settings

    def start(self, turn: Turn) -> Process:
        """The process of ``turn``, the one way the driver's loops enter the core: each
        turn a value (``_exchanges``), each answered with the process that does it."""
        heartbeat, handover, pacing = self.heartbeat, self.handover, self.pacing
        match turn:
            case Dispatch(now):
                got = self.gate.next_fetch(now)
                return Page(self.fetches, got) if isinstance(got, Held) else Idle(got)
            case Read(block_ms):
                read = self.intake.request(self.frontier, self.settings.max_buffer)
                return Reading(self.intake, read, block_ms, self.take_in)
            case CommitOutcomes():
                return self.commits.start(turn) or Idle(0)
            case Renew(now, resident_kib):
                return heartbeat.beat(now, resident_kib=resident_kib)
            case Apply(now):
                return handover.apply(now) or Idle()
            case DrainOrphans():
                return handover.orphans() or Idle([])
            case Drain(stream, leaving):
                return handover.drain(stream, leaving=leaving)
            case Leave():
                return handover.leave()
            case PaceDue():
                return pacing.read_due() or Idle([])
            case Unparks():
                return self.unparking()
            case TakeRevisits(requeue_s):
                return heartbeat.take(requeue_s)
            case Forget(now):
                return Idle(forget_idle(self.frontier, self.robots, now))
            case Limits(now, resident_mib):
                return Idle(self.check_limits(now, resident_mib))
        assert isinstance(turn, Join), turn
        self.clock.sample(turn.sent, turn.received, turn.now_ms)
        return Joining(turn, self.settings, self.epochs, self.intake, self.commits, self.id)

    def take_settings(self, settings: Settings) -> None:
        """Decide by ``settings`` from now on (the crawl's changed); a host's next
        request is paced by the new delay, from its last request's time."""
        self.current.settings = settings
        self.frontier.delay = settings.delay

    def stop(self) -> None:
        """Start no more requests: the worker was asked to stop."""
        self.flight.stopping = True

    def figures(self) -> Figures:
        queued, hosts, members = self.frontier.size, self.frontier.hosts, self.epochs.latest.members
        held = self.heartbeat.held()
        return Figures(self.flight.in_flight, held, len(hosts), queued, len(members))

    def due(self) -> Due:
        """The session's state as the driver's loops read it (see ``Due``)."""
        epochs, flight, ledger, heartbeat = self.epochs, self.flight, self.ledger, self.heartbeat
        pending, in_flight, stopping = len(ledger.outcomes), flight.in_flight, flight.stopping
        return Due(
            epochs.waiting, epochs.orphans_waiting, bool(self.pacing.carry.due), stopping,
            in_flight, pending, ledger.backlogged(), heartbeat.busy(),
            stopping and not pending and not in_flight, heartbeat.finished(heartbeat.last),
            self.gate.saturated(mark=False), epochs.latest, self.commits.scope, ledger.outcomes,
        )  # fmt: skip

    def check_limits(self, now: float, resident_mib: float) -> bool:
        """Whether a --max-* limit is reached: then this worker (not the crawl) stops."""
        if self.flight.stopping:
            return False
        took, items = now - self.started, self.ledger.items_pending
        hit = limit_reached(limits(self.settings, self.tally, took, items, resident_mib))
        if hit is not None:
            log.warning("stopping: %s %g reached; handing hosts back", *hit)
            self.flight.stopping = True
        return hit is not None

    def take_in(self, got: list[tuple[str, bytes | None]], parking: bool = False) -> None:
        """Queue what was read (see ``Intake.take_in``); hosts new here get their pacing."""
        ring, frontier = self.epochs.latest, self.frontier
        mine = Mine(self.id, self.refuses)
        self.pacing.want(self.intake.take_in(got, parking, frontier, ring, mine, self.ledger))

    def unparking(self) -> Unparking:
        """The unparks due now, one at a time (see ``Intake.unparks``)."""
        epoch = lambda: self.epochs.latest.epoch  # noqa: E731
        due = self.intake.unparks(self.frontier, self.settings.max_buffer, self.ledger, epoch)
        return Unparking(self.intake, due, self.id)


def forget_idle(frontier: Frontier, robots: RobotsCache, now: float) -> list[str]:
    """Drop the state of hosts idle a while, or beyond the most idle hosts kept, so
    memory follows the hosts at work, not every host ever seen. A host that comes back
    is made afresh: its robots.txt is fetched again, its pacing is exact (only hosts
    free to be fetched now are forgotten)."""
    gone = frontier.evict_idle(now, idle_for=IDLE_HOST_SECONDS, keep=IDLE_HOSTS_KEPT)
    for name in gone:
        robots.forget(name)
    return gone


class Joining(Process):
    """What a worker learns as it joins at the server's ``turn.now_ms`` (taking a
    predecessor's place by name, the join left floors in Redis for its hosts, read with
    their records: ``Paces``), as the driver's steps: what its settings add to
    the crawl's scope, the scope, the members (the first read is applied at once, but
    not settled: until a heartbeat says every member has applied it, a host gained by
    joining may still be in its previous owner's hands), and the hosts it has parked
    entries of. ``result``: the epoch and members joined at."""

    def __init__(
        self, turn: Join, settings: Settings, epochs: Epochs, intake: Intake, commits: Commits,
        worker: str,
    ) -> None:  # fmt: skip
        self.epochs, self.intake, self.commits, self.worker = epochs, intake, commits, worker
        epochs.joined_ms, epochs.confirmed_at = turn.now_ms, turn.sent
        own = scope_members(domains=settings.allow_domains, span=settings.span_hosts)
        self.step = WidenScope(own)

    def answered(self, reply: Any, now: float) -> None:
        step, epochs = self.step, self.epochs
        if isinstance(step, WidenScope):
            self.step = ReadScope()
        elif isinstance(step, ReadScope):
            self.commits.scope = Scope.from_members(reply)
            self.step = ReadMembers()
        elif isinstance(step, ReadMembers):
            epoch, members = self.result = reply
            epochs.members_read(epoch, members, first=True)
            self.step = ReadParked()
        else:
            self.intake.parked_read(reply, epochs.latest, self.worker)
            self.step = Done()
