"""The committer: writes the oldest outcomes' items, then acknowledges and routes them
atomically, a fifth of a second apart or at once when every slot is taken. In a sharded
crawl a commit also carries the links other shards' pages found for this shard
(``Inbound``), and acknowledges only pages whose links of other shards are in."""

from __future__ import annotations

import logging

import trio

from hashcrawl._core._exchanges import CommitOutcomes, Idle
from hashcrawl._core._ledger import COMMIT_MAX
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
            if session.due().pending or self.m.inbound:
                committed = await self.commit_turn()
            if session.due().flushed:
                self.m.flushed.set()
            # Outcomes that wait for their links to be carried into other shards wait
            # for the next tick too (or for a wake-up when they are in).
            if session.due().pending < COMMIT_MAX or not committed:
                with trio.move_on_at(self.m.next_commit_at()):
                    await self.m.commit_soon.wait()

    async def flush_now(self) -> None:
        while self.m.session.due().pending:
            if not await self.commit_turn():
                await self.m.deliveries_awaited()

    async def commit_turn(self) -> int:
        """Write the oldest outcomes' items, then acknowledge and route them atomically
        (with the links carried for other shards' pages); returns how many outcomes were
        committed. The core's ``Committing`` decides the steps."""
        count = await self.m.committable()
        parcels = self.m.inbound.take()
        committing = self.m.session.start(
            CommitOutcomes(
                count,
                [e for p in parcels for e in p.entries],
                lambda: self.m.inbound.misroute,
                archive=self.m.worker.archive is not None,
                revisits=self.m.revisits is not None,
            )
        )
        if isinstance(committing, Idle):  # nothing to commit
            return 0
        try:
            committed: int = await self.m.carry_out(committing)
        except BaseException:
            self.m.inbound.put_back(parcels)
            raise
        if parcels:
            self.m.carried(parcels)
        tell_unwanted(self.m)  # links the commit's filter kept out, said once
        self.m.wake()
        return committed
