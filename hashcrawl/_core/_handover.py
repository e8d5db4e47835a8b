"""Handing hosts over when the epoch changes, and draining departed workers' streams:
the batches that move entries, pacing and counts to the hosts' new owners. No IO.

A handover runs in steps the driver takes: :meth:`Handover.begin` stops requests to the
hosts the new ring takes away; :meth:`~Handover.busy` says whether requests are still
out to them (the driver waits a little, then :meth:`~Handover.cut_short`);
:meth:`~Handover.batch` is the commit that moves them; :meth:`~Handover.committed` and
:meth:`~Handover.done` take Redis's answer (see docs/design.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from hashcrawl._core._batch import Batch, Committed, Status
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import Fenced

if TYPE_CHECKING:
    from hashcrawl._core._session import Session

log = logging.getLogger("hashcrawl")


@attrs.define
class Handoff:
    """A new epoch being applied: its ring, the hosts it takes from this worker, and
    the hosts it takes that only have a page count or cookies left to hand over."""

    ring: Ring
    lost: list[str]
    counted: list[str] = attrs.Factory(list)


class Handover:
    """The handovers of one session (its frontier, pacing, counts and cookies move)."""

    def __init__(self, session: Session) -> None:
        self.s = session

    def begin(self, ring: Ring) -> Handoff:
        """Adopt ``ring``: stop starting requests to the hosts it takes away.

        Raises:
            Fenced: this worker is not a member at that epoch.
        """
        if self.s.id not in ring:
            raise Fenced(f"worker {self.s.id} is no longer a member at epoch {ring.epoch}")
        skipped = ring.epoch != self.s.epochs.ring.epoch + 1
        lost = [name for name in self.s.frontier.hosts if ring.owner_of(name) != self.s.id]
        gone = set(lost)
        for name, host in self.s.frontier.hosts.items():
            if name in gone:
                continue
            if skipped or host.revoked:
                # Someone may have owned it in the epochs skipped: pace it from their record.
                host.since, host.paced = ring.epoch, False
                self.s.carry.unpaced.add(name)
            if host.revoked:  # revoked by a handoff that a newer epoch overtook
                host.revoked = False
                self.s.frontier.reschedule(name)
        for name in lost:
            self.s.frontier.revoke(name)
        self.s.epochs.ring = ring
        return Handoff(ring, lost)

    def busy(self, handoff: Handoff) -> bool:
        """Whether requests are still out to hosts ``handoff`` gives away."""
        return any(self.s.frontier.hosts[name].in_flight for name in handoff.lost)

    def cut_short(self, handoff: Handoff, deadline: float) -> list[str]:
        """Have requests still out to the lost hosts end by ``deadline``: their hosts'
        pacing says they were busy until then. Returns the requests' entry ids, for the
        driver to cancel by then."""
        busy = set(handoff.lost)
        cut = []
        for eid, name in self.s.fetching.items():
            if name in busy:
                cut.append(eid)
                host = self.s.frontier.hosts[name]
                host.last_end = max(host.last_end, deadline)
        return cut

    def batch(self, handoff: Handoff, now: float) -> Batch:
        """The commit that moves the lost hosts' entries and pacing, and marks the epoch
        applied (see docs/design.md)."""
        ring, lost = handoff.ring, handoff.lost
        counted = handoff.counted = self._lost_counts(ring)
        batch = Batch(worker=self.s.id, epoch=ring.epoch, src=self.s.stream, applied=ring.epoch)
        others = dict.fromkeys(h for h in counted if h not in lost)
        records = self.s.pacing.records([*lost, *others], now)
        batch.pace = [x for pair in records.items() for x in pair]
        router = self.s.router(ring, now)
        for name in lost:
            target = router.target_of(name)
            for held in self.s.frontier.hosts[name].queued():
                batch.mv.append([held.eid, target, held.entry.encode()])
        return batch

    def _lost_counts(self, ring: Ring) -> list[str]:
        """Hosts ``ring`` takes away that have a page count or cookies to hand over."""
        counted = [h for h in self.s.taken if ring.owner_of(h) != self.s.id]
        return counted + [h for h in self.s.jars.hosts() if ring.owner_of(h) != self.s.id]

    def committed(self, handoff: Handoff, result: Committed) -> bool:
        """Redis answered the handoff; returns whether it went through.

        A stale one is overtaken by a newer epoch: that one is applied instead (the
        driver reads the members, and ``epoch_waiting`` is set).

        Raises:
            Fenced: the worker lost its membership.
        """
        if result.status is Status.FENCED:
            raise Fenced(f"worker {self.s.id} lost its membership during a handoff")
        if result.status is Status.STALE:
            self.s.epochs.waiting = True
            return False
        for name in handoff.lost:
            self.s.frontier.drop(name)
            self.s.robots.forget(name)
        for name in handoff.counted:
            self.s.taken.pop(name, None)
            self.s.jars.pop(name)  # written into its pace record
        return True

    def done(self, handoff: Handoff) -> None:
        """The handoff went through, and the parked hosts are read again."""
        self.s.epochs.applied = handoff.ring.epoch
        self.s.pacing.want(())
        log.info(
            "%s applied epoch %d: handed over %d hosts",
            self.s.id,
            self.s.epochs.applied,
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
        batch = Batch(worker="" if leaving else self.s.id, epoch=ring.epoch, src=stream)
        self.s.router(ring, now).add_orphans(batch, got, dying)
        return batch

    def departed(self, stream: str) -> bool:
        """Whether ``stream`` is another worker's (not this one's, not the inbox)."""
        return stream not in (self.s.stream, self.s.inbox)

    def drained(self, result: Committed) -> None:
        """Raises:
        Fenced: the worker lost its membership while draining."""
        if result.status is Status.FENCED:
            raise Fenced(f"worker {self.s.id} lost its membership while draining")
