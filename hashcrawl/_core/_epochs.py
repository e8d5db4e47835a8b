"""A worker's membership as it knows it: the ring it fetches by, the newest one known,
the epochs applied and settled, and when Redis last answered a heartbeat. No IO."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from hashcrawl._core._ring import Ring


@attrs.frozen
class Release:
    """Whether a host gained at an epoch may be fetched: once no member that may still
    fetch it is left, as a heartbeat saw the fleet.

    Every member has applied ``settled``. Of those ``behind`` the newest epoch (``epoch``,
    the one the heartbeat saw), each fetches by the ring of the epoch it has applied, so
    a host waits only for the members that own it in theirs (and for any whose ring is
    not known). A dead member holds up its own hosts until its lease runs out, no other.
    """

    settled: int = 0
    epoch: int = 0
    behind: Mapping[str, int] = attrs.field(factory=dict)
    rings: Mapping[int, Ring] = attrs.field(factory=dict)

    def __call__(self, host: str, since: int) -> bool:
        if self.settled >= since:
            return True
        if self.epoch < since:  # seen before the host's epoch: who is behind is not known
            return False
        for member, applied in self.behind.items():
            if applied < since:
                ring = self.rings.get(applied)
                if ring is None or ring.owner_of(host) == member:
                    return False
        return True


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
    release: Release = attrs.Factory(Release)  # which hosts gained may be fetched

    def members_read(self, epoch: int, members: Iterable[str], *, first: bool = False) -> None:
        """Learn the fleet's membership; a new epoch waits to be applied.

        The first read (at join) is applied at once, but not settled: until a heartbeat
        says every member has applied it, a host gained by joining may still be in its
        previous owner's hands.
        """
        if first:
            self.ring = self.latest = Ring.of(epoch, tuple(members))
            self.applied, self.settled = epoch, 0
            self.release = Release()
        elif epoch != self.latest.epoch:
            self.latest = Ring.of(epoch, tuple(members))
            self.waiting = True

    def released(
        self,
        epoch: int,
        settled: int,
        behind: Mapping[str, int],
        rings: Mapping[int, Iterable[str]],
    ) -> bool:
        """Learn from a heartbeat (at ``epoch``) who is behind; returns whether that changed."""
        known = self.release.rings
        ringed = {e: known.get(e) or Ring.of(e, tuple(m)) for e, m in rings.items()}
        release = Release(settled, epoch, dict(behind), ringed)
        changed = (release.settled, release.behind) != (self.release.settled, self.release.behind)
        self.settled, self.release = settled, release
        return changed

    def take_orphans(self) -> bool:
        """Whether departed workers' streams wait (a heartbeat said so); now taken."""
        waiting, self.orphans_waiting = self.orphans_waiting, False
        return waiting

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
