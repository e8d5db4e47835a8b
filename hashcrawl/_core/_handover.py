"""Handing hosts over when the epoch changes, and draining departed workers' streams:
the batches that move entries, pacing and counts to the hosts' new owners. No IO.

Each runs as a process of exchanges (``_exchanges``) the driver does one at a time.
Applying an epoch (:class:`Applying`): :meth:`Handover.begin` stops requests to the
hosts the new ring takes away; while requests are still out to them the driver waits a
little (``HANDOFF_WAIT``), then they are cut short; :meth:`~Handover.batch` is the
commit that moves them, and :meth:`~Handover.committed` and :meth:`~Handover.done` take
Redis's answer (see docs/design.md). Draining (:class:`Draining`) moves a stream's
entries in batches, routed by the members read for each, then releases the stream.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from hashcrawl._core._batch import Batch, Committed, Status
from hashcrawl._core._commits import Commits
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._exchanges import (
    AwaitChange,
    CommitBatch,
    CutShort,
    Done,
    Flush,
    LeaveRing,
    NextOrphan,
    Process,
    ReadEntries,
    ReadInFlight,
    ReadMembers,
    ReadParked,
    Release,
    Step,
)
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._intake import Intake
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Flight, RobotsCache
from hashcrawl._core._ring import Ring
from hashcrawl._core._seams import CookieJars
from hashcrawl._core._settings import Current
from hashcrawl._exceptions import Fenced

log = logging.getLogger("hashcrawl")
HANDOFF_WAIT = 1.0  # seconds a handoff waits for requests out to the hosts it gives away
DRAIN_BATCH = 500  # entries of a drained stream moved by one commit


@attrs.define
class Handoff:
    """A new epoch being applied: its ring, the hosts it takes from this worker, and
    the hosts it takes that only have a page count or cookies left to hand over."""

    ring: Ring
    lost: list[str]
    counted: list[str] = attrs.Factory(list)


class Handover:
    """The handovers of one session (its frontier, pacing, counts and cookies move).

    Args:
        current: the settings now (``grace``, ``timeout``: how long a request out to a
            host given away may run on).
        commits: routes what moves, as a commit routes (and names the streams).
        epochs: the rings: the one applied, and whether a newer waits.
        frontier: the hosts, given away or kept.
        pacing: the pace records, written for the hosts given away.
        flight: the requests under way, cut short if to a host given away.
        taken: page requests made to each host (with --max-pages-per-host).
        jars: the hosts' cookies, handed over in the pace records.
        robots: the robots.txt rules, forgotten for a host given away.
        intake: the hosts parked, read again once a handoff went through.
    """

    def __init__(
        self,
        *,
        current: Current,
        commits: Commits,
        epochs: Epochs,
        frontier: Frontier,
        pacing: Pacing,
        flight: Flight,
        taken: dict[str, int],
        jars: CookieJars,
        robots: RobotsCache,
        intake: Intake,
    ) -> None:
        self.current, self.intake = current, intake
        self.commits, self.epochs, self.frontier, self.pacing = commits, epochs, frontier, pacing
        self.flight, self.taken, self.jars, self.robots = flight, taken, jars, robots
        self.id, self.stream, self.inbox = commits.id, commits.stream, commits.inbox

    def apply(self, now: float) -> Applying | None:
        """Apply the newest epoch, if one waits to be (see :class:`Applying`)."""
        ring = self.epochs.take()
        return Applying(self, self.begin(ring), now) if ring is not None else None

    def orphans(self) -> Orphans | None:
        """Drain every departed worker's stream there is, if any wait to be."""
        return Orphans(self) if self.epochs.take_orphans() else None

    def drain(self, stream: str, *, leaving: bool = False) -> Draining:
        """Move every entry left in ``stream`` to its host's owner, then release it
        (``leaving``: this worker's own, once it is out of the ring)."""
        return Draining(self, stream, leaving=leaving)

    def leave(self) -> Leaving:
        """Hand every host back at once (see :class:`Leaving`); nothing more starts."""
        self.flight.stopping = True
        return Leaving(self)

    def begin(self, ring: Ring) -> Handoff:
        """Adopt ``ring``: stop starting requests to the hosts it takes away.

        Raises:
            Fenced: this worker is not a member at that epoch.
        """
        if self.id not in ring:
            raise Fenced(f"worker {self.id} is no longer a member at epoch {ring.epoch}")
        skipped = ring.epoch != self.epochs.ring.epoch + 1
        lost = [name for name in self.frontier.hosts if ring.owner_of(name) != self.id]
        gone = set(lost)
        for name, host in self.frontier.hosts.items():
            if name in gone:
                continue
            if skipped or host.revoked:
                # Someone may have owned it in the epochs skipped: pace it from their record.
                host.since, host.paced = ring.epoch, False
                self.pacing.carry.unpaced.add(name)
            if host.revoked:  # revoked by a handoff that a newer epoch overtook
                host.revoked = False
                self.frontier.reschedule(name)
        for name in lost:
            self.frontier.revoke(name)
        self.epochs.ring = ring
        return Handoff(ring, lost)

    def busy(self, handoff: Handoff) -> bool:
        """Whether requests are still out to hosts ``handoff`` gives away."""
        return any(self.frontier.hosts[name].in_flight for name in handoff.lost)

    def cut_short(self, handoff: Handoff, deadline: float) -> list[str]:
        """Have requests still out to the lost hosts end by ``deadline``: their hosts'
        pacing says they were busy until then. Returns the requests' entry ids, for the
        driver to cancel by then."""
        busy = set(handoff.lost)
        cut = []
        for eid, name in self.flight.fetching.items():
            if name in busy:
                cut.append(eid)
                host = self.frontier.hosts[name]
                host.last_end = max(host.last_end, deadline)
        return cut

    def batch(self, handoff: Handoff, now: float) -> Batch:
        """The commit that moves the lost hosts' entries and pacing, and marks the epoch
        applied (see docs/design.md)."""
        ring, lost = handoff.ring, handoff.lost
        counted = handoff.counted = self._lost_counts(ring)
        batch = Batch(worker=self.id, epoch=ring.epoch, src=self.stream, applied=ring.epoch)
        others = dict.fromkeys(h for h in counted if h not in lost)
        records = self.pacing.records([*lost, *others], now)
        batch.pace = [x for pair in records.items() for x in pair]
        router = self.commits.router(ring, now)
        for name in lost:
            target = router.target_of(name)
            for held in self.frontier.hosts[name].queued():
                batch.mv.append([held.eid, target, held.entry.encode()])
        return batch

    def _lost_counts(self, ring: Ring) -> list[str]:
        """Hosts ``ring`` takes away that have a page count or cookies to hand over."""
        counted = [h for h in self.taken if ring.owner_of(h) != self.id]
        return counted + [h for h in self.jars.hosts() if ring.owner_of(h) != self.id]

    def committed(self, handoff: Handoff, result: Committed) -> bool:
        """Redis answered the handoff; returns whether it went through.

        A stale one is overtaken by a newer epoch: that one is applied instead (the
        driver reads the members, and ``epoch_waiting`` is set).

        Raises:
            Fenced: the worker lost its membership.
        """
        if result.status is Status.FENCED:
            raise Fenced(f"worker {self.id} lost its membership during a handoff")
        if result.status is Status.STALE:
            self.epochs.waiting = True
            return False
        for name in handoff.lost:
            self.frontier.drop(name)
            self.robots.forget(name)
        for name in handoff.counted:
            self.taken.pop(name, None)
            self.jars.pop(name)  # written into its pace record
        return True

    def done(self, handoff: Handoff) -> None:
        """The handoff went through, and the parked hosts are read again."""
        self.epochs.applied = handoff.ring.epoch
        self.pacing.want(())
        log.info(
            "%s applied epoch %d: handed over %d hosts",
            self.id,
            self.epochs.applied,
            len(handoff.lost),
        )

    def orphans_batch(
        self,
        stream: str,
        got: list[tuple[str, bytes | None]],
        ring: Ring,
        dying: set[str] | None,
        now: float,
        *,
        leaving: bool = False,
    ) -> Batch:
        """The commit that moves entries left in ``stream`` to their hosts' owners.

        A departed worker's entries become suspects (``dying``: those it said it was
        fetching when it died, which use up an attempt). So a page that kills every
        worker that fetches it ends in the dead letters instead of killing them all.

        Only a worker ``leaving`` drains under no member's name (its own stream, once it
        is out of the ring); any other drain is this member's, fenced as its commits are:
        a worker that finds its own stream among the orphans has lost its membership,
        and must not write (an incarnation replaced by name woke from a pause).
        """
        batch = Batch(worker="" if leaving else self.id, epoch=ring.epoch, src=stream)
        self.commits.router(ring, now).add_orphans(batch, got, dying)
        return batch

    def departed(self, stream: str) -> bool:
        """Whether ``stream`` is another worker's (not this one's, not the inbox)."""
        return stream not in (self.stream, self.inbox)

    def drained(self, result: Committed) -> None:
        """Raises:
        Fenced: the worker lost its membership while draining."""
        if result.status is Status.FENCED:
            raise Fenced(f"worker {self.id} lost its membership while draining")


class Applying(Process):
    """Applying one epoch, as the driver's steps: wait (a little) for requests out to
    the hosts given away, cut the rest short, commit the handoff, then read the parked
    hosts (or, overtaken by a newer epoch, the members: that one is applied next)."""

    def __init__(self, handover: Handover, handoff: Handoff, now: float) -> None:
        self.handover, self.handoff = handover, handoff
        self.result = handoff.ring  # the epoch applied
        settings = handover.current.settings
        self.wait_until = now + min(HANDOFF_WAIT, settings.grace)
        # A request outlives neither --grace nor its own --timeout.
        self.outlives = min(settings.grace, settings.timeout)
        self.step = AwaitChange(self.wait_until)

    def next_step(self, now: float) -> Step:
        if isinstance(self.step, AwaitChange):
            if self.handover.busy(self.handoff) and now < self.wait_until:
                return self.step
            deadline = now + self.outlives
            self.step = CutShort(self.handover.cut_short(self.handoff, deadline), deadline)
        return self.step

    def answered(self, reply: Any, now: float) -> None:
        step, handover, handoff = self.step, self.handover, self.handoff
        if isinstance(step, CutShort):
            self.step = CommitBatch(handover.batch(handoff, now))
        elif isinstance(step, CommitBatch):
            assert isinstance(reply, Committed)
            # Stale: a newer epoch exists; read it, and apply that one (not this again).
            self.step = ReadParked() if handover.committed(handoff, reply) else ReadMembers()
        elif isinstance(step, ReadMembers):
            epoch, members = reply
            handover.epochs.members_read(epoch, members)
            self.step = Done()
        elif isinstance(step, ReadParked):
            handover.intake.parked_read(reply, handover.epochs.latest, handover.id)
            handover.done(handoff)
            self.step = Done()


class Draining(Process):
    """Draining one stream, as the driver's steps: what its worker was fetching when it
    died (if it is another's), then batches of its entries, each routed by the members
    read just before, until it is empty and released."""

    def __init__(self, handover: Handover, stream: str, *, leaving: bool = False) -> None:
        self.handover, self.stream, self.leaving = handover, stream, leaving
        self.dying: set[str] | None = None
        self.got: list[tuple[str, bytes | None]] = []
        departed = handover.departed(stream)
        self.step = ReadInFlight(stream) if departed else ReadEntries(stream, DRAIN_BATCH)

    def answered(self, reply: Any, now: float) -> None:
        step, stream = self.step, self.stream
        entries = ReadEntries(stream, DRAIN_BATCH)
        if isinstance(step, ReadInFlight):
            self.dying = reply
            self.step = entries
        elif isinstance(step, ReadEntries):
            self.got = reply
            self.step = ReadMembers() if self.got else Release(stream)
        elif isinstance(step, Release):
            self.step = Done() if reply else entries
        elif isinstance(step, ReadMembers):
            epoch, members = reply
            ring = Ring.of(epoch, members)
            batch = self.handover.orphans_batch(
                stream, self.got, ring, self.dying, now, leaving=self.leaving
            )
            self.step = CommitBatch(batch)
        elif isinstance(step, CommitBatch):
            assert isinstance(reply, Committed)
            self.handover.drained(reply)
            self.step = entries


class Orphans(Process):
    """Draining every departed worker's stream there is, one after another."""

    def __init__(self, handover: Handover) -> None:
        self.handover = handover
        self.result: list[str] = []  # the streams drained, in order
        self.draining: Draining | None = None
        self.over = False  # no stream was left to take

    def next_step(self, now: float) -> Step:
        if self.over:
            return Done()
        if self.draining is None:
            return NextOrphan()
        step = self.draining.next_step(now)
        if isinstance(step, Done):
            self.result.append(self.draining.stream)
            self.draining = None
            return NextOrphan()
        return step

    def answered(self, reply: Any, now: float) -> None:
        if self.draining is not None:
            self.draining.answered(reply, now)
        elif reply is not None:
            assert isinstance(reply, str)
            self.draining = self.handover.drain(reply)
        else:
            self.over = True


class Leaving(Process):
    """Leaving the crawl, as the driver's steps: commit everything held, leave the ring
    with a pace record of every host this worker had, then drain its own stream to the
    hosts' new owners under no member's name."""

    def __init__(self, handover: Handover) -> None:
        self.handover = handover
        self.step = Flush()
        self.draining: Draining | None = None

    def next_step(self, now: float) -> Step:
        return self.draining.next_step(now) if self.draining is not None else self.step

    def answered(self, reply: Any, now: float) -> None:
        handover = self.handover
        if self.draining is not None:
            self.draining.answered(reply, now)
        elif isinstance(self.step, Flush):
            self.step = LeaveRing(handover.pacing.records(handover.pacing.leaving(), now))
        else:
            self.draining = handover.drain(handover.stream, leaving=True)
