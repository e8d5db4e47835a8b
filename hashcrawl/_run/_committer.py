"""The committer: writes the oldest outcomes' items, then acknowledges and routes them
atomically, a fifth of a second apart or at once when every slot is taken. In a sharded
crawl a commit also carries the links other shards' pages found for this shard
(``Inbound``), and acknowledges only pages whose links of other shards are in."""

from __future__ import annotations

import logging

import trio

from hashcrawl._core._batch import Status
from hashcrawl._core._entry import Entry
from hashcrawl._core._ledger import COMMIT_MAX, Commit
from hashcrawl._run._dispatcher import tell_unwanted
from hashcrawl._run._membership import Membership

log = logging.getLogger("hashcrawl")


class Committer:
    """The committer: writes the oldest outcomes' items, then acknowledges and routes them"""

    def __init__(self, m: Membership) -> None:
        self.m = m

    async def commit_loop(self) -> None:
        session = self.m.session
        while True:
            committed = 0
            if session.ledger.outcomes or self.m.inbound:
                committed = await self.commit_turn()
            if session.flushed():
                self.m.flushed.set()
            # Outcomes that wait for their links to be carried into other shards wait
            # for the next tick too (or for a wake-up when they are in).
            if len(session.ledger.outcomes) < COMMIT_MAX or not committed:
                with trio.move_on_at(self.m.next_commit_at()):
                    await self.m.commit_soon.wait()

    async def flush_now(self) -> None:
        while self.m.session.ledger.outcomes:
            if not await self.commit_turn():
                await self.m.deliveries_awaited()

    async def commit_turn(self) -> int:
        """Write the oldest outcomes' items, then acknowledge and route them atomically
        (with the links carried for other shards' pages); returns how many outcomes were
        committed."""
        commit = self.m.session.ledger.next_commit(await self.m.committable())
        parcels = self.m.inbound.take()
        if not commit.outcomes and not parcels:
            return 0
        try:
            await self.commit_these(commit, [e for p in parcels for e in p.entries])
        except BaseException:
            self.m.inbound.put_back(parcels)
            raise
        if parcels:
            self.m.carried(parcels)
        self.m.wake()
        return len(commit.outcomes)

    async def commit_these(self, commit: Commit, carried: list[Entry]) -> None:
        session = self.m.session
        session.ledger.commit_begun(commit)
        write_first = (
            "ack_before_write" not in self.m.worker.faults
        )  # off: a deliberate bug to catch
        # An archive holds records of pages with no items too: it is flushed every time.
        written = bool(commit.outcomes) and bool(commit.items or self.m.worker.archive is not None)
        if written and write_first:
            await self.write_items(commit)
        session.ledger.commit_written(commit)
        put_first = "revisit_put_after_ack" not in self.m.worker.faults  # off: a bug to catch
        if put_first:
            await self.put_revisits(commit)
        misroute = self.m.inbound.misroute
        while True:
            batch = session.commits.batch(commit, self.m.now(), carried, misroute)
            if not commit.outcomes and not batch.add:
                return  # every carried link was committed through this shard's filter
            sent = self.m.now()
            result = await self.m.persist(self.m.store.commit, batch)
            took = self.m.now() - sent
            status = session.commits.committed(commit, batch, result, took, carried)
            if status is Status.OK:
                if batch.unparented:
                    tell_unwanted(self.m)
                break
            if status is Status.RESCOPE:
                await self.m.read_scope()
                continue
            await self.m.read_members()
            self.m.wake()
        if written and not write_first:
            await self.write_items(commit)
        if not put_first:
            await self.put_revisits(commit)

    async def put_revisits(self, commit: Commit) -> None:
        """Write the committed pages' next revisit records, before their entries are
        acknowledged: a worker that dies in between has the page fetched again, and that
        fetch's record overwrites this one (docs/design.md, "Revisits")."""
        revisits = self.m.revisits
        fetches = [o.revisit for o in commit.outcomes if o.revisit is not None]
        if revisits is not None and fetches:
            await self.m.persist(revisits.put, fetches)

    async def write_items(self, commit: Commit) -> None:
        """Write the commit's items and flush every sink, in one thread hop: an archive
        flushes the records of every response fetched so far (the commit's pages' among
        them), which the dispatcher handed it as they came."""
        sink = self.m.worker.sink

        def write() -> None:
            if commit.items:
                sink.write(commit.items)
            sink.flush()

        await self.m.offload(write)
        self.m.session.commits.items_written(len(commit.items))
