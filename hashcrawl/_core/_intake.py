"""Reading a worker's stream, and the hosts whose overflow waits parked in Redis. No IO.

A read that fails may still have delivered entries, which are then pending for this
reader and never delivered again. So after a failure the reader reads its own pending
entries past the newest one it took in (entries come in id order), until none is left,
and only then reads new ones again.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from hashcrawl._core._batch import Status
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import Fenced

PARK_AT = 16  # with memory full, a host with this many queued parks the rest
UNPARK_BELOW = 4  # a parked host with fewer queued takes some back


@attrs.frozen
class Read:
    """One read of the worker's stream, as asked: how many, and after which id."""

    count: int
    after: str | None
    parking: bool


@attrs.define
class Intake:
    """Where this worker's reading stands, and which hosts it has parked entries of."""

    last_read: str = "0"  # the newest entry id this reader has taken in
    unsure: bool = False  # a read failed: Redis may have delivered what never came
    parked: set[str] = attrs.Factory(set)

    def request(self, frontier: Frontier, max_buffer: int) -> Read:
        """The next read: up to 200 entries, fewer as memory fills (then parking)."""
        size = frontier.size
        full = size >= max_buffer
        count = 100 if full else min(200, max_buffer - size)
        return Read(count=count, after=self.last_read if self.unsure else None, parking=full)

    def failed(self) -> None:
        self.unsure = True

    def answered(self, read: Read, got: list[tuple[str, bytes | None]]) -> bool:
        """Note what a read brought; returns whether there is anything to take in."""
        if got:
            self.last_read = got[-1][0]
            return True
        if read.after is not None:
            self.unsure = False
        return False

    def parked_read(self, hosts: Iterable[str], ring: Ring, worker: str) -> None:
        """Learn which hosts this owner has overflow sets for."""
        self.parked = {h for h in hosts if ring.owner_of(h) == worker}

    def unpark_wanted(self) -> list[str]:
        """Parked hosts, in the order their entries are asked back."""
        return sorted(self.parked)

    def may_unpark(self, name: str, frontier: Frontier, max_buffer: int) -> bool | None:
        """Whether ``name`` should take parked entries back; None: memory is full, stop."""
        if frontier.size >= max_buffer:
            return None
        host = frontier.hosts.get(name)
        return host is None or len(host.queue) < UNPARK_BELOW

    def unparked(self, name: str, status: str, left: int, worker: str) -> None:
        """Redis answered an unpark of ``name``.

        Raises:
            Fenced: the worker lost its membership.
        """
        if status == Status.FENCED:
            raise Fenced(f"worker {worker} lost its membership while unparking")
        if status == Status.OK and left == 0:
            self.parked.discard(name)
