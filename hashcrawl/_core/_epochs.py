"""A worker's membership as it knows it: the ring it fetches by, the newest one known,
the epochs applied and settled, and when Redis last answered a heartbeat. No IO."""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from hashcrawl._core._ring import Ring


@attrs.define
class Epochs:
    """Which epochs this worker knows, has applied, and knows every member has applied.

    A host gained at an epoch is fetched only once the fleet has ``settled`` it: until
    then its previous owner may still hold it.
    """

    ring: Ring = attrs.Factory(lambda: Ring.of(0, ()))  # the epoch applied: requests start by it
    latest: Ring = attrs.Factory(lambda: Ring.of(0, ()))  # the newest known: entries go by it
    applied: int = 0
    settled: int = 0  # the newest epoch every member has applied
    waiting: bool = False  # a new epoch is known and not yet applied
    orphans_waiting: bool = False  # a heartbeat said departed workers' streams wait
    confirmed_at: float = -math.inf  # when the last heartbeat Redis answered was sent
    joined_ms: int = 0

    def members_read(self, epoch: int, members: Iterable[str], *, first: bool = False) -> None:
        """Learn the fleet's membership; a new epoch waits to be applied.

        The first read (at join) is applied at once, but not settled: until a heartbeat
        says every member has applied it, a host gained by joining may still be in its
        previous owner's hands.
        """
        if first:
            self.ring = self.latest = Ring.of(epoch, tuple(members))
            self.applied, self.settled = epoch, 0
        elif epoch != self.latest.epoch:
            self.latest = Ring.of(epoch, tuple(members))
            self.waiting = True

    def take(self) -> Ring | None:
        """The newest epoch, if it waits to be applied."""
        if not self.waiting:
            return None
        self.waiting = False
        return self.latest

    def fresh(self, now: float, window: float) -> bool:
        """Whether a heartbeat Redis answered was sent less than ``window`` ago."""
        return now - self.confirmed_at < window

    def current(self) -> bool:
        """Whether requests start by the newest epoch known (none waits to be applied)."""
        return self.ring.epoch == self.latest.epoch
