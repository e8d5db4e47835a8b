"""The heartbeat as the core sees it: what one tells Redis, what its answer means, and
when the crawl is over. No IO."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from hashcrawl._core._batch import LOST, Beat
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Clock
from hashcrawl._core._seams import Tally
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import Fenced, QueueError, StateLost


class Beating(Protocol):
    """What the heartbeat reads of its session (named here: the session makes it)."""

    id: str

    @property
    def settings(self) -> Settings: ...

    faults: Faults
    epochs: Epochs
    clock: Clock
    frontier: Frontier
    tally: Tally
    tally_base: dict[str, int]
    in_flight: int

    def members_read(self, epoch: int, members: Iterable[str], *, first: bool = False) -> None: ...

    pacing: Pacing

    def busy(self) -> bool: ...

    def held(self) -> int: ...


class Heartbeat:
    """The heartbeats of one session."""

    def __init__(self, session: Beating) -> None:
        self.s = session
        self.took_s = -1  # server second of this session's last take that queued revisits

    def took(self, server_s: int) -> None:
        """This session's taker queued due revisits at server second ``server_s``."""
        self.took_s = max(self.took_s, server_s)

    def request(self, now: float, *, resident_kib: int) -> dict[str, Any]:
        """What a heartbeat sent at ``now`` tells Redis (``Store.heartbeat``'s arguments)."""
        return {
            "lease_ms": int(self.s.settings.lease * 1000),
            # Expiring members that are not silent is a deliberate bug to catch.
            "expire_ms": 0 if "reclaim_live" in self.s.faults else None,
            "applied": self.s.epochs.applied,
            "known_epoch": self.s.epochs.latest.epoch,
            "stats": self.stats(now, resident_kib),
        }

    def failed(self, sent: float, exc: QueueError) -> None:
        """A heartbeat sent at ``sent`` got no answer.

        Raises:
            QueueError: no heartbeat got through for a whole lease.
        """
        lease = self.s.settings.lease
        if sent - self.s.epochs.confirmed_at > lease:
            raise QueueError(f"{exc}; gave up after a lease ({lease:g} s) without a heartbeat")

    def answered(self, beat: Beat, sent: float, received: float) -> None:
        """The reply to a heartbeat sent at ``sent`` arrived at ``received``.

        Raises:
            StateLost: the crawl's state is gone from Redis.
            Fenced: the worker is no longer a member.
        """
        if beat.lost:
            raise StateLost(f"{LOST}; worker {self.s.id} stops")
        if not beat.alive:
            raise Fenced(
                f"worker {self.s.id} was silent longer than its lease and lost its membership"
            )
        self.s.clock.sample(sent, received, beat.now_ms)
        self.s.epochs.confirmed_at = sent
        if beat.members is not None:
            self.s.members_read(beat.epoch, beat.members)
        # Taking the newest epoch for the settled one is a deliberate bug to catch.
        settled = beat.epoch if "newest_as_settled" in self.s.faults else beat.settled
        # This worker is never behind itself; forgetting the others is a deliberate bug.
        behind = {m: e for m, e in beat.behind.items() if m != self.s.id}
        if "release_unchecked" in self.s.faults:
            behind = {}
        # Without the rings every member behind holds up every host: the old, slower rule.
        rings = {} if "release_by_settled" in self.s.faults else beat.rings
        if self.s.epochs.released(beat.epoch, settled, behind, rings):
            self.s.pacing.want(())
        if beat.orphans:
            self.s.epochs.orphans_waiting = True

    def finished(self, beat: Beat) -> bool:
        """Whether the crawl is over: the fleet idle ``--idle`` seconds, this worker too."""
        if self.s.settings.idle is None or beat.idle_since < 0 or self.s.busy():
            return False
        # A take of this worker's since Redis ran the heartbeat (its reply still on its
        # way) made the crawl busy again: its revisits are in the inbox, to see through.
        if self.took_s * 1000 >= beat.now_ms - 1000:
            return False
        quiet_ms = beat.now_ms - max(beat.idle_since, self.s.epochs.joined_ms)
        return quiet_ms >= self.s.settings.idle * 1000

    def stats(self, now: float, resident_kib: int) -> dict[str, int | str]:
        """This membership's figures, for the worker's ``w:ID`` hash."""
        return {
            "hosts": len(self.s.frontier.hosts),
            "in_flight": self.s.in_flight,
            "held": self.s.held(),
            "frontier": self.s.frontier.size,
            "rss_kib": resident_kib,
            **self.s.tally.beat_fields(now, self.s.frontier, since=self.s.tally_base),
        }
