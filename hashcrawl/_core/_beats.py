"""The heartbeat as the core sees it: what one tells Redis, what its answer means, and
when the crawl is over. No IO."""

from __future__ import annotations

import logging
from typing import Any

from hashcrawl._core._batch import LOST, Beat
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._exchanges import Done, Process, SendHeartbeat, Step, TakeDue
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Clock, Flight
from hashcrawl._core._seams import Tally
from hashcrawl._core._settings import Current
from hashcrawl._exceptions import Fenced, QueueError, StateLost

log = logging.getLogger("hashcrawl")


class Heartbeat:
    """The heartbeats of one session.

    Args:
        worker: the member this session is of.
        current: the settings now (``lease``, ``idle``).
        faults: the deliberate bugs (``reclaim_live``, ``newest_as_settled``...).
        epochs: the rings, told of the fleet's as each heartbeat answers.
        clock: the server's clock, sampled from each answer.
        frontier, ledger, flight: what this worker holds, reported and asked for ``busy``.
        pacing: told when the fleet releases hosts gained.
        tally: the counts reported (those since the membership began).
    """

    def __init__(
        self,
        *,
        worker: str,
        current: Current,
        faults: Faults,
        epochs: Epochs,
        clock: Clock,
        frontier: Frontier,
        ledger: Ledger,
        flight: Flight,
        pacing: Pacing,
        tally: Tally,
    ) -> None:
        self.id, self.current, self.faults, self.epochs = worker, current, faults, epochs
        self.clock, self.frontier, self.ledger, self.flight = clock, frontier, ledger, flight
        self.pacing, self.tally = pacing, tally
        self.tally_base = tally.counts()  # the heartbeat reports this membership's counts
        self.took_s = -1  # server second of this session's last take that queued revisits
        self.last: Beat | None = None  # the newest heartbeat's answer

    def took(self, server_s: int) -> None:
        """This session's taker queued due revisits at server second ``server_s``."""
        self.took_s = max(self.took_s, server_s)

    def take(self, requeue_s: float) -> Taking:
        """A take of the crawl's due revisits (see :class:`Taking`)."""
        return Taking(self, requeue_s)

    def beat(self, now: float, *, resident_kib: int) -> Beating:
        """One heartbeat, sent at ``now`` (see :class:`Beating`)."""
        return Beating(self, now, self.request(now, resident_kib=resident_kib))

    def request(self, now: float, *, resident_kib: int) -> dict[str, Any]:
        """What a heartbeat sent at ``now`` tells Redis (``Store.heartbeat``'s arguments)."""
        return {
            "lease_ms": int(self.current.settings.lease * 1000),
            # Expiring members that are not silent is a deliberate bug to catch.
            "expire_ms": 0 if "reclaim_live" in self.faults else None,
            "applied": self.epochs.applied,
            "known_epoch": self.epochs.latest.epoch,
            "stats": self.stats(now, resident_kib),
        }

    def failed(self, sent: float, exc: QueueError) -> None:
        """A heartbeat sent at ``sent`` got no answer.

        Raises:
            QueueError: no heartbeat got through for a whole lease.
        """
        lease = self.current.settings.lease
        if sent - self.epochs.confirmed_at > lease:
            raise QueueError(f"{exc}; gave up after a lease ({lease:g} s) without a heartbeat")

    def answered(self, beat: Beat, sent: float, received: float) -> None:
        """The reply to a heartbeat sent at ``sent`` arrived at ``received``.

        Raises:
            StateLost: the crawl's state is gone from Redis.
            Fenced: the worker is no longer a member.
        """
        if beat.lost:
            raise StateLost(f"{LOST}; worker {self.id} stops")
        if not beat.alive:
            raise Fenced(
                f"worker {self.id} was silent longer than its lease and lost its membership"
            )
        self.clock.sample(sent, received, beat.now_ms)
        self.epochs.confirmed_at, self.last = sent, beat
        if beat.members is not None:
            self.epochs.members_read(beat.epoch, beat.members)
        # Taking the newest epoch for the settled one is a deliberate bug to catch.
        settled = beat.epoch if "newest_as_settled" in self.faults else beat.settled
        # This worker is never behind itself; forgetting the others is a deliberate bug.
        behind = {m: e for m, e in beat.behind.items() if m != self.id}
        if "release_unchecked" in self.faults:
            behind = {}
        # Without the rings every member behind holds up every host: the old, slower rule.
        rings = {} if "release_by_settled" in self.faults else beat.rings
        if self.epochs.released(beat.epoch, settled, behind, rings):
            self.pacing.want(())
        if beat.orphans:
            self.epochs.orphans_waiting = True

    def finished(self, beat: Beat | None) -> bool:
        """Whether the crawl is over by ``beat``: the fleet idle ``--idle`` seconds, this
        worker too."""
        if beat is None or self.current.settings.idle is None:
            return False
        if beat.idle_since < 0 or self.busy():
            return False
        # A take of this worker's since Redis ran the heartbeat (its reply still on its
        # way) made the crawl busy again: its revisits are in the inbox, to see through.
        if self.took_s * 1000 >= beat.now_ms - 1000:
            return False
        quiet_ms = beat.now_ms - max(beat.idle_since, self.epochs.joined_ms)
        return quiet_ms >= self.current.settings.idle * 1000

    def busy(self) -> bool:
        """Whether this worker holds work: queued, in flight, or to commit."""
        return bool(self.frontier.size or self.flight.in_flight or self.ledger.outcomes)

    def held(self) -> int:
        """Entries read from this worker's stream and not yet committed."""
        return self.frontier.size + self.flight.in_flight + len(self.ledger.outcomes)

    def stats(self, now: float, resident_kib: int) -> dict[str, int | str]:
        """This membership's figures, for the worker's ``w:ID`` hash."""
        return {
            "hosts": len(self.frontier.hosts),
            "in_flight": self.flight.in_flight,
            "held": self.held(),
            "frontier": self.frontier.size,
            "rss_kib": resident_kib,
            "busiest": self.frontier.top(now, busiest=True),
            "backed_off": self.frontier.top(now, busiest=False),
            **self.tally.beat_fields(now, since=self.tally_base),
        }


class Beating(Process):
    """One heartbeat, as a step: its answer is taken (``Heartbeat.answered``: it may
    fence the worker or end the crawl's state); with no answer, it is let go until the
    next, unless none got through for a whole lease (``Heartbeat.failed`` raises)."""

    def __init__(self, heartbeat: Heartbeat, sent: float, fields: dict[str, Any]) -> None:
        self.heartbeat, self.sent = heartbeat, sent
        self.result: Beat | None = None  # the answer (None: none came)
        self.step = SendHeartbeat(fields)

    def answered(self, reply: Beat, now: float) -> None:
        self.heartbeat.answered(reply, self.sent, now)
        self.result, self.step = reply, Done()

    def failed(self, exc: Exception, now: float) -> None:
        if not isinstance(exc, QueueError):
            raise exc
        self.heartbeat.failed(self.sent, exc)
        log.info("heartbeat failed: %s", exc)
        self.step = Done()


class Taking(Process):
    """A take of the crawl's due revisits into the inbox, as a step; ``result``: how
    many entries it added. One that added some marks the crawl busy as of the server's
    second it ran at (``Heartbeat.finished``)."""

    def __init__(self, heartbeat: Heartbeat, requeue_s: float) -> None:
        self.heartbeat, self.result = heartbeat, 0
        self.step: Step = TakeDue(requeue_s)

    def answered(self, reply: Any, now: float) -> None:
        if reply.entries:
            self.heartbeat.took(int(reply.now_s))
        self.result, self.step = int(reply.entries), Done()
