"""Committing a session's outcomes: the batch that goes to Redis, and its answer. No IO.

A batch is routed by the newest epoch the worker knows (a stale one is refused by the
commit script, and the outcomes wait for the next), filtered by the crawl's scope as
widened by the batch's own redirects, and carries the pace records read since the last
commit to delete. An answered commit counts its outcomes, frees their slots and
remembers their links as seen.

One commit is a process of exchanges (:class:`Committing`, see ``_exchanges``): the
items written and flushed, the next revisit records put, then the batch, until Redis
takes it (the scope read again if it grew, the members if the epoch moved on). Items
and records go first, so that a page acknowledged has its items kept.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import attrs

from hashcrawl._core._batch import Batch, Committed, Status
from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._exchanges import (
    CommitBatch,
    CommitOutcomes,
    Done,
    Process,
    PutRevisits,
    ReadMembers,
    ReadScope,
    Step,
    WriteItems,
)
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier
from hashcrawl._core._ledger import Commit, Ledger
from hashcrawl._core._outcome import Router, SeenCache
from hashcrawl._core._pace import PaceRecord
from hashcrawl._core._pacing import Pacing
from hashcrawl._core._parts import Clock
from hashcrawl._core._patterns import Screen
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._seams import CookieJars, Tally
from hashcrawl._core._settings import Current, Settings
from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import Fenced


class Commits:
    """The commit decisions of one session, and the crawl's scope as it knows it.

    Args:
        worker: the member this session is of.
        current: the settings now (``max_attempts``, ``no_parent``).
        faults: the deliberate bugs the router carries.
        stream_of: a worker's stream, by its id.
        inbox: the crawl's inbox stream.
        epochs: the rings: a batch is routed by the newest.
        clock: the server's clock, which dates dead letters.
        seen: the links known seen, remembered as commits go through.
        pacing: the pace records (and the previous owners' read, deleted by a commit).
        ledger: the outcomes committed.
        tally: the counts.
        jars: the hosts' cookies, stored with the pace records.
        frontier: the hosts: one not yet paced keeps its previous owner's cookies.
        screen: the links kept out, counted once.
        foreign: a sharded crawl's test of a host being another shard's (None: one shard).
    """

    def __init__(
        self,
        *,
        worker: str,
        current: Current,
        faults: Faults,
        stream_of: Callable[[str], str],
        inbox: str,
        epochs: Epochs,
        clock: Clock,
        seen: SeenCache,
        pacing: Pacing,
        ledger: Ledger,
        tally: Tally,
        jars: CookieJars,
        frontier: Frontier,
        screen: Screen,
        foreign: Callable[[str], bool] | None = None,
    ) -> None:
        self.id, self.current, self.faults, self.stream_of = worker, current, faults, stream_of
        self.stream, self.inbox, self.epochs, self.clock = stream_of(worker), inbox, epochs, clock
        self.seen, self.pacing, self.ledger, self.tally = seen, pacing, ledger, tally
        self.jars, self.frontier, self.screen, self.foreign = jars, frontier, screen, foreign
        self.scope = Scope()  # the crawl's, as this worker knows it

    @property
    def settings(self) -> Settings:
        return self.current.settings

    def start(self, turn: CommitOutcomes) -> Committing | None:
        """Commit the oldest outcomes (at most ``turn.count``) with the links of other
        shards' pages it carries, if there is any (see :class:`Committing` and
        ``_exchanges.Commit``)."""
        commit = self.ledger.next_commit(turn.count)
        if not commit.outcomes and not turn.carried:
            return None
        return Committing(
            self, commit, turn.carried, turn.misroute, archive=turn.archive, revisits=turn.revisits
        )

    def router(self, ring: Ring, now: float) -> Router:
        """Where entries go at ``ring``'s epoch; dead letters dated by the server's clock."""
        at, most = self.clock.server_ms(now) // 1000, self.settings.max_attempts
        route = (ring, self.stream_of, self.inbox, self.scope, self.seen, most)
        return Router(
            *route,
            at=at,
            faults=self.faults,
            foreign=self.foreign,
            no_parent=self.settings.no_parent,
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
        ring = self.epochs.latest
        hosts = {h for o in commit.outcomes for h in o.widen}
        # Filtered by the widened scope; the commit stores the hosts, or is refused.
        self.scope = self.scope.widened(hosts)
        batch = Batch(worker=self.id, epoch=ring.epoch, src=self.stream, scope=self.scope.version)
        batch.widen = sorted(scope_members(hosts=hosts))
        batch.unpace = [x for pair in sorted(self.pacing.carry.read.items()) for x in pair]
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
        ring, hosts = self.epochs.latest, self.frontier.hosts
        names = [
            name
            for name in self.jars.changed()
            if ring.owner_of(name) == self.id and (name not in hosts or hosts[name].paced)
        ]
        records = self.pacing.records(names, now, robots=False)  # cookies only: each commit
        return [x for pair in records.items() for x in pair]

    def items_written(self, count: int) -> None:
        """``count`` items of the oldest outcomes are written (before their commit)."""
        self.tally.items += count
        self.ledger.items_written(count)

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
        if result.status is Status.FENCED:
            raise Fenced(f"worker {self.id} lost its membership before committing")
        if result.status is not Status.OK:
            return result.status
        outcomes = commit.outcomes
        self.tally.committed(outcomes, self.settings.max_attempts, took)
        self.scope = attrs.evolve(self.scope, version=result.scope)
        self.ledger.committed(commit)
        self.pacing.carry.committed(batch.unpace)
        for name, record in zip(batch.pace[::2], batch.pace[1::2], strict=True):
            self.jars.stored(name, PaceRecord.from_text(record).cookies)
        self.seen.remember(batch.add)  # the follows and ``carried`` that went through the filter
        self.tally.pattern_refused += self.screen.unparented(batch.unparented)
        return Status.OK


def _add_links(batch: Batch, router: Router, entries: Iterable[Entry]) -> None:
    """Add ``entries`` to ``batch`` as follows are added: scoped, seen-filtered."""
    for entry in entries:
        unfiltered = router.follow(batch, entry)
        for target, payload in zip(unfiltered[::2], unfiltered[1::2], strict=True):
            batch.add.append([target, payload, *fingerprint(entry.key), 0])


class Committing(Process):
    """One commit, as the driver's steps: write the items and flush, put the revisit
    records, then the batch until Redis takes it (reading the scope again if it grew,
    the members if the epoch moved on). With the deliberate bugs ``ack_before_write``
    and ``revisit_put_after_ack``, the items or the records go after it instead.

    Written as a generator, as trio writes its run loop: the steps in the order they
    are taken, each reply sent back in where the step was yielded.
    """

    def __init__(
        self,
        commits: Commits,
        commit: Commit,
        carried: Sequence[Entry],
        misroute: Callable[[], Ring | None],
        *,
        archive: bool,
        revisits: bool,
    ) -> None:
        self.commits, self.commit, self.carried, self.misroute = commits, commit, carried, misroute
        # An archive holds records of pages with no items too: it is flushed every time.
        self.written = bool(commit.outcomes) and bool(commit.items or archive)
        self.fetches = [o.revisit for o in commit.outcomes if o.revisit is not None]
        self.revisits = revisits and bool(self.fetches)
        self.now = 0.0
        self.result = 0  # outcomes committed
        self.started = False
        self._steps = self._run()
        commits.ledger.commit_begun(commit)

    def next_step(self, now: float) -> Step:
        self.now = now
        if not self.started:
            self.started, self.step = True, self._advance(None)
        return self.step

    def answered(self, reply: Any, now: float) -> None:
        self.now = now
        self.step = self._advance(reply)

    def _advance(self, reply: Any) -> Step:
        try:
            return self._steps.send(reply)
        except StopIteration:
            return Done()

    def _run(self) -> Generator[Step, Any, None]:
        commits, commit, faults = self.commits, self.commit, self.commits.faults
        write_first = "ack_before_write" not in faults
        put_first = "revisit_put_after_ack" not in faults
        if self.written and write_first:
            yield WriteItems(commit.items)
            commits.items_written(len(commit.items))
        commits.ledger.commit_written(commit)
        if self.revisits and put_first:
            yield PutRevisits(self.fetches)
        while True:
            batch = commits.batch(commit, self.now, self.carried, self.misroute())
            if not commit.outcomes and not batch.add:
                return  # every carried link was committed through this shard's filter
            sent = self.now
            result = yield CommitBatch(batch)
            status = commits.committed(commit, batch, result, self.now - sent, self.carried)
            if status is Status.OK:
                break
            if status is Status.RESCOPE:
                self.commits.scope = Scope.from_members((yield ReadScope()))
                continue
            epoch, members = yield ReadMembers()  # stale: route by the newer epoch
            commits.epochs.members_read(epoch, members)
        self.result = len(commit.outcomes)  # committed
        if self.written and not write_first:
            yield WriteItems(commit.items)
            commits.items_written(len(commit.items))
        if self.revisits and not put_first:
            yield PutRevisits(self.fetches)
