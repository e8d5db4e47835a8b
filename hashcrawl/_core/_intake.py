"""Reading a worker's stream, and the hosts whose overflow waits parked in Redis. No IO.

A read that fails may still have delivered entries, which are then pending for this
reader and never delivered again. So after a failure the reader reads its own pending
entries past the newest one it took in (entries come in id order), until none is left,
and only then reads new ones again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import attrs

from hashcrawl._core._batch import Status
from hashcrawl._core._entry import BadEntry, Entry
from hashcrawl._core._exchanges import Done, Process, ReadStream, Step, Unpark
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._outcome import Kind, Outcome
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import Fenced, InvalidURL

log = logging.getLogger("hashcrawl")

PARK_AT = 16  # with memory full, a host with this many queued parks the rest
UNPARK_BELOW = 4  # a parked host with fewer queued takes some back


@attrs.frozen
class Read:
    """One read of the worker's stream, as asked: how many, and after which id."""

    count: int
    after: str | None
    parking: bool


@attrs.frozen
class Mine:
    """What makes an entry this worker's to fetch: its id owns the host in the ring,
    and its spider has what the entry names (``refuses`` says why not, or None)."""

    worker: str
    refuses: Callable[[Entry], str | None]


@attrs.define
class Intake:
    """Where this worker's reading stands, and which hosts it has parked entries of.

    ``park_at`` and ``unpark_below`` are ``PARK_AT`` and ``UNPARK_BELOW`` but where a
    test or the simulation makes them small, so that small sites park too.
    """

    last_read: str = "0"  # the newest entry id this reader has taken in
    unsure: bool = False  # a read failed: Redis may have delivered what never came
    parked: set[str] = attrs.Factory(set)
    parks: dict[str, int] = attrs.Factory(dict)  # host -> entries parked by take_in, ever
    park_at: int = PARK_AT
    unpark_below: int = UNPARK_BELOW

    @property
    def unpark_count(self) -> int:
        """How many parked entries one unpark of a host brings back."""
        return self.park_at - self.unpark_below

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
        """Learn which hosts this owner has overflow sets for.

        The hosts read are added to those known, not put in their place: a host parked by
        ``take_in`` whose commit has not run yet is not in Redis's set, and would be
        forgotten, its overflow set never asked back. A host known whose set is gone costs
        one unpark, which finds it empty and drops it.
        """
        self.parked = {h for h in self.parked.union(hosts) if ring.owner_of(h) == worker}

    def unparks(
        self, frontier: Frontier, max_buffer: int, ledger: Ledger, epoch: Callable[[], int]
    ) -> Iterator[Unpark]:
        """The unparks to send, one at a time: each decided when the one before it is
        answered (memory may have filled meanwhile), at the ``epoch()`` of then."""
        for name in self.unpark_wanted():
            wanted = self.may_unpark(name, frontier, max_buffer)
            if wanted is None:
                return
            if wanted:
                yield Unpark(name, epoch(), self.unpark_count, self.unpark_guard(name, ledger))

    def unpark_wanted(self) -> list[str]:
        """Parked hosts, in the order their entries are asked back."""
        return sorted(self.parked)

    def may_unpark(self, name: str, frontier: Frontier, max_buffer: int) -> bool | None:
        """Whether ``name`` should take parked entries back; None: memory is full, stop."""
        if frontier.size >= max_buffer:
            return None
        host = frontier.hosts.get(name)
        return host is None or len(host.queue) < self.unpark_below

    def unpark_guard(self, name: str, ledger: Ledger) -> int | None:
        """Taken as an unpark of ``name`` is sent: what lets its "none left" drop the host.

        None while a park of ``name`` waits in the ledger (or in a commit on its way):
        Redis may run that commit after the unpark, so "none left" would be stale.
        """
        for outcome in ledger.outcomes:
            if outcome.kind is Kind.PARK and outcome.held is not None and outcome.held.host == name:
                return None
        return self.parks.get(name, 0)

    def unparked(
        self, name: str, status: str, left: int, worker: str, guard: int | None = 0
    ) -> None:
        """Redis answered an unpark of ``name``, sent with ``guard`` (``unpark_guard``).

        The host is dropped once none is left, unless a park of it was uncommitted as
        the unpark left, or was taken in since: its overflow set may come back.

        Raises:
            Fenced: the worker lost its membership.
        """
        if status == Status.FENCED:
            raise Fenced(f"worker {worker} lost its membership while unparking")
        fresh = guard is not None and self.parks.get(name, 0) == guard
        if status == Status.OK and left == 0 and fresh:
            self.parked.discard(name)
            self.parks.pop(name, None)

    def take_in(
        self,
        got: list[tuple[str, bytes | None]],
        parking: bool,
        frontier: Frontier,
        ring: Ring,
        mine: Mine,
        ledger: Ledger,
    ) -> list[str]:
        """Queue what was read; with memory full, park what a host has enough of.

        An entry for another owner's host goes there whatever it names; one this owner
        cannot read is counted as bad, and one naming a callback, errback or rule its spider
        lacks is
        dead-lettered with the reason (another worker's spider may know it). Returns the
        hosts new to the frontier.
        """
        fresh: list[str] = []
        for eid, payload in got:
            try:
                entry = Entry.decode(payload)
                host = entry.host
            except (BadEntry, InvalidURL) as exc:
                log.warning("dropping a bad entry %s: %s", eid, exc)
                ledger.add(Outcome.bad(eid, str(exc)))
                continue
            held = Held(eid, entry, host)
            if ring.owner_of(host) != mine.worker:
                ledger.add(Outcome.forward(held))
                continue
            why = entry.steps_refusal or mine.refuses(entry)
            if why is not None:
                ledger.add(Outcome.dead(held, why))
                continue
            queued = frontier.hosts.get(host)
            if parking and queued is not None and len(queued.queue) >= self.park_at:
                ledger.add(Outcome.park(held))
                self.parked.add(host)
                self.parks[host] = self.parks.get(host, 0) + 1
                continue
            if queued is None:
                fresh.append(host)
            frontier.add(held, epoch=ring.epoch)
        return fresh


class Unparking(Process):
    """The unparks due now, as the driver's steps, one at a time: each decided when the
    one before it is answered (memory may have filled meanwhile). ``result``: the hosts
    that took entries back."""

    def __init__(self, intake: Intake, unparks: Iterator[Unpark], worker: str) -> None:
        self.intake, self.unparks, self.worker = intake, unparks, worker
        self.result: list[str] = []  # the hosts that took entries back
        self.current = next(unparks, None)

    def next_step(self, now: float) -> Step:
        return Done() if self.current is None else self.current

    def answered(self, reply: tuple[str, int, int], now: float) -> None:
        assert self.current is not None
        status, moved, left = reply
        unpark = self.current
        self.intake.unparked(unpark.host, status, left, self.worker, unpark.guard)
        if moved:
            self.result.append(unpark.host)
        self.current = next(self.unparks, None)


class Reading(Process):
    """One read of this worker's stream, as a step: what came is taken in (``take_in``);
    a failed read marks the intake unsure (see the module's docstring) and raises."""

    def __init__(
        self,
        intake: Intake,
        read: Read,
        block_ms: int,
        take_in: Callable[[list[tuple[str, bytes | None]], bool], None],
    ) -> None:
        self.intake, self.read, self.take_in = intake, read, take_in
        self.result: list[tuple[str, bytes | None]] = []  # what was read
        self.step = ReadStream(read.count, read.after, block_ms)

    def answered(self, reply: list[tuple[str, bytes | None]], now: float) -> None:
        self.result = reply
        if self.intake.answered(self.read, reply):
            self.take_in(reply, self.read.parking)
        self.step = Done()

    def failed(self, exc: Exception, now: float) -> None:
        self.intake.failed()
        raise exc
