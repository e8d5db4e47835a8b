"""The dispatch gate: whether a worker may start a request now, and which. No IO.

A request starts only while every rule holds: this worker's last answered heartbeat is
recent enough (``fresh``), a slot is free (``saturated``), the host's pacing and
suspects allow it, the fleet has settled the epoch the host came with, and this worker
still owns it. The same check runs once more right before the request leaves
(``may_send``): the request may have waited (a pause, a slow Redis) since.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Protocol

from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier, Held, Host
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._parts import Flight, RobotsCache, Suspects
from hashcrawl._core._settings import Current, Settings
from hashcrawl._exceptions import InvalidURL


class Holding(Protocol):
    """What a pool counts of each session it spans."""

    flight: Flight
    ledger: Ledger


class Pool:
    """A sharded worker's slots, shared by its shards' sessions.

    Each shard's driver keeps its share of --concurrency in flight; the pages it has
    fetched and not yet acknowledged count against the worker's ``limit`` (twice
    --concurrency), not against its share: a page of one shard waits a commit tick for
    its links to go into the other shards before it may be acknowledged, and a share's
    few slots would fill within that tick and force early commits. So what a killed
    sharded worker held, and so what is fetched twice, stays within 2 x --concurrency.
    """

    def __init__(self, limit: int, sessions: Callable[[], Iterable[Holding]]) -> None:
        self.limit = limit
        self._sessions = sessions
        self.refused = False  # a dispatch found the pool full: wake every shard when not

    def held(self) -> int:
        return sum(s.flight.in_flight + s.ledger.uncommitted for s in self._sessions())

    def full(self, *, mark: bool = True) -> bool:
        """Whether every slot is held (``mark``: a dispatch is refused for it, so that
        every shard's is woken once one is released)."""
        if self.held() >= self.limit:
            self.refused = self.refused or mark
            return True
        return False

    def released(self) -> bool:
        """Whether a dispatch was refused for a full pool that is no longer full."""
        if self.refused and self.held() < self.limit:
            self.refused = False
            return True
        return False


class Gate:
    """The dispatch decisions of one session.

    Args:
        worker: the member this session is of (a host it owns is fetched).
        current: the settings now (``concurrency``, ``lease``, ``fresh_for``).
        faults: the deliberate bugs (``wide_fresh_window``, ``send_stale``).
        epochs: the rings, and whether the fleet has released a host.
        frontier: the hosts and their queued pages.
        ledger: the pages fetched and not yet committed, each holding a slot.
        suspects: departed workers' entries in flight here.
        robots: the robots.txt rules, for a rendered page's sub-requests.
        flight: the fetches under way.
        pool: a sharded worker's slots, shared by its shards (None: one shard).
    """

    def __init__(
        self,
        *,
        worker: str,
        current: Current,
        faults: Faults,
        epochs: Epochs,
        frontier: Frontier,
        ledger: Ledger,
        suspects: Suspects,
        robots: RobotsCache,
        flight: Flight,
        pool: Pool | None = None,
    ) -> None:
        self.id, self.current, self.faults, self.epochs = worker, current, faults, epochs
        self.frontier, self.ledger, self.suspects, self.robots = frontier, ledger, suspects, robots
        self.flight, self.pool = flight, pool

    @property
    def settings(self) -> Settings:
        return self.current.settings

    def fresh(self, now: float) -> bool:
        """Whether a heartbeat Redis answered was sent recently enough to fetch."""
        # A window of the whole lease is a deliberate bug to catch.
        wide = "wide_fresh_window" in self.faults
        return self.epochs.fresh(now, self.settings.lease if wide else self.settings.fresh_for)

    def saturated(self, *, mark: bool = True) -> bool:
        """Every slot is taken by a request in flight or a page not yet committed
        (``mark``: a dispatch is refused for it, see ``Pool.full``).

        Counting the uncommitted keeps what a killed worker held, and so what is
        fetched twice, within --concurrency (a sharded worker's: ``Pool``).
        """
        in_flight, pool = self.flight.in_flight, self.pool
        if pool is None:
            return in_flight + self.ledger.uncommitted >= self.settings.concurrency
        return in_flight >= self.settings.concurrency or pool.full(mark=mark)

    def commit_due(self) -> bool:
        """Whether the committer should commit at once: half of --concurrency waits for a
        commit not yet under way, or nothing else can move. A slot freed is refilled at
        once, so every slot is taken nearly always: committing then would commit the
        pages that ended during the last commit, a few at a time, at about ten Redis
        commands a commit however few pages it carries. Half keeps the other half
        fetching while a commit is under way, and the timer (``COMMIT_EVERY``) takes the
        rest."""
        ledger = self.ledger
        if ledger.waiting >= max(1, self.settings.concurrency // 2):
            return True
        # No request in flight to end and call a commit, and none under way to free a
        # slot (a sharded worker's slots are shared: ``Pool``): at once.
        return (
            ledger.waiting > 0
            and not ledger.committing
            and not self.flight.in_flight
            and self.saturated()
        )

    def may_fetch(self, host: Host) -> bool:
        return (
            self.suspects.may_start(host)
            and host.paced
            and self.epochs.release(host.name, host.since)
            and self.epochs.current()
            and self.epochs.latest.owner_of(host.name) == self.id
        )

    def next_fetch(self, now: float) -> Held | float:
        """The next entry to fetch (counted in flight), or when to ask again (``inf``:
        when something changes)."""
        wake = math.inf
        if self.flight.stopping:
            return wake
        if not self.saturated() and self.fresh(now):
            got = self.frontier.take(now, self.may_fetch)
            if isinstance(got, Held):
                self.flight.in_flight += 1
                self.flight.fetching[got.eid] = got.host
                return got
            if got is not None:
                wake = got
        if not self.fresh(now):
            wake = min(wake, now + self.settings.beat_interval)
        return wake

    def may_send(self, held: Held, now: float) -> bool:
        """Whether ``held``'s request may leave now: asked right before it does, since
        the request may have waited (a pause, a slow Redis) since it was dispatched."""
        fresh = "send_stale" in self.faults or self.fresh(now)  # off: a deliberate bug to catch
        return fresh and self.epochs.latest.owner_of(held.host) == self.id

    def sub_request(
        self, url: str, now: float, *, shared: bool = False, hop: bool = False
    ) -> float | str:
        """When a rendered page's sub-request to ``url`` may start (its host's turn,
        counted as the host's last start at once: see ``Frontier.sub_request_turn``),
        or why it may not: robots.txt disallows it, or the host is not this worker's.
        A ``shared`` host (``_turns``) that is not this worker's may start now: its
        turn in Redis paces it. A ``hop`` of a robots.txt redirect is never refused: it
        starts at its host's turn when this worker owns the host, or --delay from now
        when another owner paces the host's pages."""
        try:
            host = Entry(url=url).host
        except InvalidURL:
            return now + self.settings.delay if hop else f"not a URL to fetch: {url:.100}"
        rules = self.robots.rules.get(host) if self.settings.obey_robots and not hop else None
        if rules is not None and not rules.allowed(url):
            return f"robots.txt disallows {url:.100}"
        turn = self.frontier.sub_request_turn(host, now)
        if turn is None and (shared or hop):
            return now if shared else now + self.settings.delay
        if turn is None:
            return f"{host} is no longer this worker's host: {url:.100} not fetched"
        return turn

    def sub_request_ended(self, url: str, now: float) -> None:
        self.frontier.sub_request_ended(Entry(url=url).host, now)
