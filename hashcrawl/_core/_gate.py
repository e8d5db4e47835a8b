"""The dispatch gate: whether a worker may start a request now, and which. No IO.

A request starts only while every rule holds: this worker's last answered heartbeat is
recent enough (``fresh``), a slot is free (``saturated``), the host's pacing and
suspects allow it, the fleet has settled the epoch the host came with, and this worker
still owns it. The same check runs once more right before the request leaves
(``may_send``): the request may have waited (a pause, a slow Redis) since.
"""

from __future__ import annotations

import math
from typing import Protocol

from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier, Held, Host
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._parts import Suspects
from hashcrawl._settings import Settings


class Dispatching(Protocol):
    """What the gate reads of its session (named here: the session makes the gate)."""

    id: str
    settings: Settings
    faults: Faults
    epochs: Epochs
    frontier: Frontier
    ledger: Ledger
    suspects: Suspects
    fetching: dict[str, str]  # requests under way: entry id -> host
    in_flight: int
    stopping: bool


class Gate:
    """The dispatch decisions of one session."""

    def __init__(self, session: Dispatching) -> None:
        self.s = session

    def fresh(self, now: float) -> bool:
        """Whether a heartbeat Redis answered was sent recently enough to fetch."""
        # A window of the whole lease is a deliberate bug to catch.
        wide = "wide_fresh_window" in self.s.faults
        return self.s.epochs.fresh(
            now, self.s.settings.lease if wide else self.s.settings.fresh_for
        )

    def saturated(self) -> bool:
        """Every slot is taken by a request in flight or a page not yet committed.

        Counting the uncommitted keeps what a killed worker held, and so what is
        fetched twice, within --concurrency.
        """
        return self.s.in_flight + self.s.ledger.uncommitted >= self.s.settings.concurrency

    def may_fetch(self, host: Host) -> bool:
        return (
            self.s.suspects.may_start(host)
            and host.paced
            and self.s.epochs.settled >= host.since
            and self.s.epochs.current()
            and self.s.epochs.latest.owner_of(host.name) == self.s.id
        )

    def next_fetch(self, now: float) -> Held | float:
        """The next entry to fetch (counted in flight), or when to ask again (``inf``:
        when something changes)."""
        wake = math.inf
        if self.s.stopping:
            return wake
        if not self.saturated() and self.fresh(now):
            got = self.s.frontier.take(now, self.may_fetch)
            if isinstance(got, Held):
                self.s.in_flight += 1
                self.s.fetching[got.eid] = got.host
                return got
            if got is not None:
                wake = got
        if not self.fresh(now):
            wake = min(wake, now + self.s.settings.beat_interval)
        return wake

    def may_send(self, held: Held, now: float) -> bool:
        """Whether ``held``'s request may leave now: asked right before it does, since
        the request may have waited (a pause, a slow Redis) since it was dispatched."""
        fresh = "send_stale" in self.s.faults or self.fresh(now)  # off: a deliberate bug to catch
        return fresh and self.s.epochs.latest.owner_of(held.host) == self.s.id
