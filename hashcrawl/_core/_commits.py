"""Committing a session's outcomes: the batch that goes to Redis, and its answer. No IO.

A batch is routed by the newest epoch the worker knows (a stale one is refused by the
commit script, and the outcomes wait for the next), filtered by the crawl's scope as
widened by the batch's own redirects, and carries the pace records read since the last
commit to delete. An answered commit counts its outcomes, frees their slots and
remembers their links as seen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import attrs

from hashcrawl._core._batch import Batch, Committed, Status
from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._ledger import Commit, Ledger
from hashcrawl._core._outcome import Router, SeenCache
from hashcrawl._core._pace import Carry, PaceRecord
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Clock
from hashcrawl._core._patterns import Screen
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._seams import CookieJars, Tally
from hashcrawl._core._settings import Settings
from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import Fenced


class Committing(Protocol):
    """What the commits read of their session (named here: the session makes them)."""

    id: str

    @property
    def settings(self) -> Settings: ...

    faults: Faults
    stream: str
    inbox: str
    stream_of: Callable[[str], str]
    epochs: Epochs
    clock: Clock
    scope: Scope
    seen: SeenCache
    carry: Carry
    ledger: Ledger
    tally: Tally
    jars: CookieJars
    frontier: Frontier
    screen: Screen

    pacing: Pacing


class Commits:
    """The commit decisions of one session."""

    def __init__(self, session: Committing, foreign: Callable[[str], bool] | None = None) -> None:
        self.s = session
        #: A sharded crawl's test of a host being another shard's (None: one shard).
        self.foreign = foreign

    def router(self, ring: Ring, now: float) -> Router:
        """Where entries go at ``ring``'s epoch; dead letters dated by the server's clock."""
        s = self.s
        at, most = s.clock.server_ms(now) // 1000, s.settings.max_attempts
        route = (ring, s.stream_of, s.inbox, s.scope, s.seen, most)
        return Router(
            *route, at=at, faults=s.faults, foreign=self.foreign, no_parent=s.settings.no_parent
        )

    def batch(
        self,
        commit: Commit,
        now: float,
        carried: Iterable[Entry] = (),
        misroute: Ring | None = None,
    ) -> Batch:
        """The batch that commits ``commit`` at the newest epoch this worker knows, and
        adds ``carried`` (links found in another shard, of hosts in this one) as a
        delivery does. (``misroute``: those routed by another ring, the deliberate bug
        ``deliver_by_source_ring``.)"""
        s, ring = self.s, self.s.epochs.latest
        hosts = {h for o in commit.outcomes for h in o.widen}
        # Filtered by the widened scope; the commit stores the hosts, or is refused.
        s.scope = s.scope.widened(hosts)
        batch = Batch(worker=s.id, epoch=ring.epoch, src=s.stream, scope=s.scope.version)
        batch.widen = sorted(scope_members(hosts=hosts))
        batch.unpace = [x for pair in sorted(s.carry.read.items()) for x in pair]
        batch.pace = self.durable_cookies(now)  # HSET after the unpace's HDEL (commit.lua)
        router = self.router(ring, now)
        for outcome in commit.outcomes:
            router.add(batch, outcome)
        _add_links(batch, router if misroute is None else self.router(misroute, now), carried)
        return batch

    def durable_cookies(self, now: float) -> list[str]:
        """``[host, record, ...]``: the pace records of hosts this worker owns whose
        cookies changed since a commit stored them, for the next commit to store (so a
        new owner after a kill carries on with the session). A host whose previous
        owner's record is not read yet waits: writing would lose that owner's cookies."""
        s, ring = self.s, self.s.epochs.latest
        names = [
            name
            for name in s.jars.changed()
            if ring.owner_of(name) == s.id
            and (name not in s.frontier.hosts or s.frontier.hosts[name].paced)
        ]
        records = s.pacing.records(names, now, robots=False)  # cookies only: each commit
        return [x for pair in records.items() for x in pair]

    def delivery(self, entries: Iterable[Entry], now: float, ring: Ring | None = None) -> Batch:
        """A batch that only adds ``entries`` (links found in another shard, of hosts in
        this one), routed and filtered as follows are: no acknowledgement, no pace.
        (``ring``: routed by another ring, the deliberate bug ``deliver_by_source_ring``.)"""
        s, latest = self.s, self.s.epochs.latest
        batch = Batch(worker=s.id, epoch=latest.epoch, src=s.stream, scope=s.scope.version)
        _add_links(batch, self.router(ring or latest, now), entries)
        return batch

    def committed(
        self,
        commit: Commit,
        batch: Batch,
        result: Committed,
        took: float,
        carried: Iterable[Entry] = (),
    ) -> Status:
        """Redis answered a commit (that added ``carried`` too); returns its status (OK,
        RESCOPE or STALE).

        Raises:
            Fenced: the worker lost its membership.
        """
        s = self.s
        if result.status is Status.FENCED:
            raise Fenced(f"worker {s.id} lost its membership before committing")
        if result.status is not Status.OK:
            return result.status
        outcomes = commit.outcomes
        s.tally.committed(outcomes, s.settings.max_attempts, took)
        s.scope = attrs.evolve(s.scope, version=result.scope)
        s.ledger.committed(commit)
        s.carry.committed(batch.unpace)
        for name, record in zip(batch.pace[::2], batch.pace[1::2], strict=True):
            s.jars.stored(name, PaceRecord.from_text(record).cookies)
        s.seen.remember(batch.add)  # the follows and ``carried`` that went through the filter
        s.tally.pattern_refused += s.screen.unparented(batch.unparented)
        return Status.OK


def _add_links(batch: Batch, router: Router, entries: Iterable[Entry]) -> None:
    """Add ``entries`` to ``batch`` as follows are added: scoped, seen-filtered."""
    for entry in entries:
        unfiltered = router.follow(batch, entry)
        for target, payload in zip(unfiltered[::2], unfiltered[1::2], strict=True):
            batch.add.append([target, payload, *fingerprint(entry.key), 0])
