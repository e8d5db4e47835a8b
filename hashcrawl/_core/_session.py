"""A worker's membership as a state machine: every decision, no IO, no await.

A :class:`Session` holds what one membership knows (its ring and epochs, frontier,
outcomes, pacing, robots.txt rules, cookies) and decides everything a worker does.
It is told the time and what happened (a heartbeat's reply, entries read, a response,
a commit's result) and answers with what to do next: the next request to start, the
next commit batch, the hosts whose pace records to read, the entries to hand over.
The driver in ``_worker`` does the IO it asks for; the simulations drive the same
driver turn by turn, so they run these decisions and no copy of them.

Each exchange with Redis is two calls here, one as it goes out and one with its reply,
each with its own time (``heartbeat.request``/``answered``, ``read_request``/
``read_answered``, ``commit_batch``/``committed``), and whether a request may still be
sent is asked separately (:meth:`Session.may_send`), right before it leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

from hashcrawl._core._batch import Batch, Committed, Status
from hashcrawl._core._beats import Heartbeat
from hashcrawl._core._commits import Commits
from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._fetches import Fetches
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._gate import Gate, Pool
from hashcrawl._core._intake import PARK_AT as PARK_AT
from hashcrawl._core._intake import UNPARK_BELOW as UNPARK_BELOW
from hashcrawl._core._intake import Intake, Mine, Read, Unpark
from hashcrawl._core._ledger import COMMIT_MAX as COMMIT_MAX
from hashcrawl._core._ledger import Commit as Commit
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._outcome import Outcome, Router, SeenCache
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Clock, Due, Figures, RobotsCache, Suspects, limit_reached, limits
from hashcrawl._core._patterns import Screen
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._seams import CookieJars, Tally
from hashcrawl._core._settings import Current, Settings

log = logging.getLogger("hashcrawl")
# A commit costs ~10 Redis commands however few pages it carries, so waiting 200 ms
# keeps a worker with few hosts near 1 command per page; one whose --concurrency fills
# up commits at once anyway (``Gate.commit_due``), so the fetcher never waits on this.
COMMIT_EVERY = 0.2
HANDOFF_WAIT = 1.0  # seconds a handoff waits for requests out to the hosts it gives away
# A host with nothing queued or in flight is forgotten after this long idle, and beyond
# this many such hosts at once, the least recently used: its robots.txt rules (tens of
# KiB once parsed) and pacing are rebuilt if it comes back.
IDLE_HOST_SECONDS = 300.0
IDLE_HOSTS_KEPT = 1000
FORGET_EVERY = 2.0


class Session:
    """One membership of a worker, from join to leave (or to being fenced)."""

    def __init__(
        self,
        *,
        worker: str,
        settings: Settings,
        stream_of: Callable[[str], str],
        inbox: str,
        refuses: Callable[[Entry], str | None],
        spider_name: str,
        tally: Tally,
        jars: CookieJars,
        now: float,
        faults: Faults = NO_FAULTS,
        pool: Pool | None = None,
        foreign: Callable[[str], bool] | None = None,
        screen: Screen | None = None,
    ) -> None:
        self.id = worker
        self.current = Current(settings)  # what every part reads: one step to change
        self.stream_of = stream_of
        self.inbox = inbox
        self.stream = stream_of(worker)
        self.refuses = refuses  # why the spider cannot handle an entry, or None
        self.spider_name = spider_name
        self.tally = tally
        self.faults = faults
        self.tally_base = tally.counts()  # the heartbeat reports this membership's counts
        self.started = now
        self.frontier = Frontier(delay=settings.delay, per_host=settings.per_host)
        self.epochs = Epochs()
        self.clock = Clock()
        self.robots = RobotsCache()
        self.scope = Scope()
        self.seen = SeenCache()
        self.screen = screen or Screen()  # links kept out, each counted once (the handler's)
        self.fetching: dict[str, str] = {}  # requests under way: entry id -> host
        self.taken: dict[str, int] = {}  # host -> page requests (with --max-pages-per-host)
        self.ledger = Ledger()
        self.in_flight = 0
        self.stopping = False
        self.intake = Intake()  # reading the stream, and the hosts parked
        self.jars = jars  # the cookies of the hosts this worker owns
        self.suspects = Suspects()
        self.pacing = Pacing(
            current=self.current, frontier=self.frontier, epochs=self.epochs, clock=self.clock,
            jars=jars, taken=self.taken, faults=faults, robots=self.robots,
        )  # fmt: skip
        self.carry = self.pacing.carry  # previous owners' pace records still to read
        self.gate = Gate(self, pool)  # a sharded worker's slots, shared by its shards
        self.heartbeat = Heartbeat(self)
        self.fetches = Fetches(self)
        self.commits = Commits(self, foreign)  # a sharded crawl's: a host of another shard

    @property
    def settings(self) -> Settings:
        return self.current.settings

    @property
    def latest(self) -> Ring:
        """The newest ring this worker knows (see ``Epochs``)."""
        return self.epochs.latest

    # -- joining -------------------------------------------------------------------------

    def own_scope(self) -> set[str]:
        """What this worker's settings add to the crawl's scope as it joins."""
        return scope_members(domains=self.settings.allow_domains, span=self.settings.span_hosts)

    def scope_read(self, stored: Iterable[str]) -> None:
        self.scope = Scope.from_members(stored)

    def joined(self, sent: float, received: float, now_ms: int) -> None:
        """Joined at the server's ``now_ms``. Taking a predecessor's place by name, the
        join left floors in Redis for its hosts, read with their records (``Paces``)."""
        self.clock.sample(sent, received, now_ms)
        self.epochs.joined_ms = now_ms
        self.epochs.confirmed_at = sent

    def members_read(self, epoch: int, members: Iterable[str], *, first: bool = False) -> None:
        """Learn the fleet's membership; a new epoch waits to be applied. The first read
        (at join) is applied at once, but not settled: until a heartbeat says every member
        has applied it, a host gained by joining may still be in its previous owner's hands."""
        self.epochs.members_read(epoch, members, first=first)

    def parked_read(self, hosts: Iterable[str]) -> None:
        self.intake.parked_read(hosts, self.epochs.latest, self.id)

    # -- heartbeat -------------------------------------------------------------------------

    def take_settings(self, settings: Settings) -> None:
        """Decide by ``settings`` from now on (the crawl's changed); a host's next
        request is paced by the new delay, from its last request's time."""
        self.current.settings = settings
        self.frontier.delay = settings.delay

    def busy(self) -> bool:
        return bool(self.frontier.size or self.in_flight or self.outcomes)

    def flushed(self) -> bool:
        """Stopping, with nothing in flight or left to commit: ready to leave."""
        return self.stopping and not self.outcomes and self.in_flight == 0

    def held(self) -> int:
        """Entries read from this worker's stream and not yet committed."""
        return self.frontier.size + self.in_flight + len(self.outcomes)

    def figures(self) -> Figures:
        queued, hosts, members = self.frontier.size, self.frontier.hosts, self.latest.members
        return Figures(self.in_flight, self.held(), len(hosts), queued, len(members))

    def due(self) -> Due:
        epochs = self.epochs
        return Due(epochs.waiting, epochs.orphans_waiting, bool(self.carry.due))

    def check_limits(self, now: float, resident_mib: float) -> bool:
        """Whether a --max-* limit is reached: then this worker (not the crawl) stops."""
        if self.stopping:
            return False
        took, items = now - self.started, self.ledger.items_pending
        hit = limit_reached(limits(self.settings, self.tally, took, items, resident_mib))
        if hit is not None:
            log.warning("stopping: %s %g reached; handing hosts back", *hit)
            self.stopping = True
        return hit is not None

    # -- reading the stream ----------------------------------------------------------------

    def backlogged(self) -> bool:
        """Too much read and not committed: what was read must be committed (parked,
        forwarded) before reading on, or memory grows with the stream after all."""
        return len(self.outcomes) >= 2 * COMMIT_MAX

    def read_request(self) -> Read:
        """The next read of this worker's stream (see ``Intake``)."""
        return self.intake.request(self.frontier, self.settings.max_buffer)

    def read_failed(self) -> None:
        self.intake.failed()

    def read_answered(self, read: Read, got: list[tuple[str, bytes | None]]) -> None:
        if self.intake.answered(read, got):
            self.take_in(got, parking=read.parking)

    def take_in(self, got: list[tuple[str, bytes | None]], *, parking: bool = False) -> None:
        """Queue what was read (see ``Intake.take_in``); hosts new here get their pacing."""
        ring, frontier = self.epochs.latest, self.frontier
        mine = Mine(self.id, self.refuses)
        self.pacing.want(self.intake.take_in(got, parking, frontier, ring, mine, self.ledger))

    def unparks(self) -> Iterator[Unpark]:
        """The unparks to send now, one at a time (see ``Intake.unparks``)."""
        epoch = lambda: self.epochs.latest.epoch  # noqa: E731
        return self.intake.unparks(self.frontier, self.settings.max_buffer, self.ledger, epoch)

    def unparked(self, unpark: Unpark, status: str, left: int) -> None:
        self.intake.unparked(unpark.host, status, left, self.id, unpark.guard)

    # -- idle hosts --------------------------------------------------------------

    def forget_idle(self, now: float) -> list[str]:
        """Drop the state of hosts idle a while, or beyond the most idle hosts kept, so
        memory follows the hosts at work, not every host ever seen. A host that comes
        back is made afresh: its robots.txt is fetched again, its pacing is exact (only
        hosts free to be fetched now are forgotten)."""
        gone = self.frontier.evict_idle(now, idle_for=IDLE_HOST_SECONDS, keep=IDLE_HOSTS_KEPT)
        for name in gone:
            self.robots.forget(name)
        return gone

    # -- dispatching ---------------------------------------------------------------------------

    def next_fetch(self, now: float) -> Held | float:
        """The next entry to fetch (counted in flight), or when to ask again (see ``Gate``)."""
        return self.gate.next_fetch(now)

    def may_send(self, held: Held, now: float) -> bool:
        """Whether ``held``'s request may leave now (see ``Gate``)."""
        return self.gate.may_send(held, now)

    def saturated(self) -> bool:
        return self.gate.saturated()

    # -- one fetch, start to end --------------------------------------------------------------

    def fetch_started(self, held: Held) -> tuple[int, list[str]] | None:
        """Note a suspect going out; returns the in-flight record to write first, if any."""
        return self.suspects.started(held)

    def failed(
        self, held: Held, reason: str, *, kind: str, now: float, took: float | None = None
    ) -> Outcome:
        """A page that failed: tried again after a while, or dead-lettered (``Fetches``)."""
        return self.fetches.failed(held, reason, kind=kind, now=now, took=took)

    def finish(self, held: Held, at: float) -> None:
        self.fetches.finish(held, at)

    def put_back(self, held: Held, now: float) -> Outcome | None:
        return self.fetches.put_back(held, now)

    def fetch_ended(self, held: Held, outcome: Outcome | None, now: float) -> bool:
        """``held``'s fetch is over; returns whether a commit is due at once."""
        return self.fetches.ended(held, outcome, now)

    # -- committing ----------------------------------------------------------------------------

    @property
    def outcomes(self) -> list[Outcome]:
        """What waits to be committed, oldest first (see ``Ledger``)."""
        return self.ledger.outcomes

    def next_commit(self, count: int = COMMIT_MAX) -> Commit:
        return self.ledger.next_commit(count)

    def items_written(self, count: int) -> None:
        self.tally.items += count
        self.ledger.items_written(count)

    def commit_begun(self, commit: Commit) -> None:
        self.ledger.commit_begun(commit)

    def commit_written(self, commit: Commit) -> None:
        self.ledger.commit_written(commit)

    def router(self, ring: Ring, now: float) -> Router:
        return self.commits.router(ring, now)

    def commit_batch(
        self, commit: Commit, now: float, carried: Sequence[Entry] = (), ring: Ring | None = None
    ) -> Batch:
        """The batch that commits ``commit``, and adds ``carried`` (see ``Commits``)."""
        return self.commits.batch(commit, now, carried, ring)

    def committed(
        self,
        commit: Commit,
        batch: Batch,
        result: Committed,
        took: float,
        carried: Sequence[Entry] = (),
    ) -> Status:
        """Redis answered a commit; returns its status (see ``Commits.committed``)."""
        return self.commits.committed(commit, batch, result, took, carried)

    # -- membership changes (the handover itself: ``Handover``) ---------------------------

    def take_epoch(self) -> Ring | None:
        """The newest epoch, if it waits to be applied."""
        return self.epochs.take()

    def take_orphans(self) -> bool:
        """Whether departed workers' streams wait to be drained (then they are taken)."""
        return self.epochs.take_orphans()
