"""Handoffs: applying a new epoch (the hosts it takes away go to their new owners) and
draining departed workers' streams to their hosts' owners."""

from __future__ import annotations

import logging

import trio

from hashcrawl._core._handover import Handoff
from hashcrawl._core._ring import Ring
from hashcrawl._core._session import HANDOFF_WAIT
from hashcrawl._run._membership import Membership

log = logging.getLogger("hashcrawl")


class Handoffs:
    """Handoffs: applying a new epoch (the hosts it takes away go to their new owners) and"""

    def __init__(self, m: Membership) -> None:
        self.m = m
        self.handover = m.session.handover

    async def apply_loop(self) -> None:
        await self.m.epoch_changed.turns(self.apply_turn)

    async def apply_turn(self) -> Ring | None:
        """Apply the newest epoch, if one waits; returns it."""
        ring = self.m.session.epochs.take()
        if ring is not None:
            await self.apply(ring)
        return ring

    async def apply(self, ring: Ring) -> None:
        """Adopt a new epoch: stop the hosts it takes away, then hand them over.

        A request still out to a host given away gets a short wait, then the handoff
        goes ahead without it: the request is cancelled at the latest --grace (or
        --timeout, if sooner) seconds from now, and the host's pace record says it was
        busy until then, so its new owner waits for that before its own first request.
        The entry stays this worker's until the request ends, then is committed as usual
        (or, cancelled, forwarded to the new owner). So no slow server holds up the
        fleet's epoch.
        """
        settings = self.m.settings
        handoff = self.handover.begin(ring)
        with trio.move_on_after(min(HANDOFF_WAIT, settings.grace)):
            while self.handover.busy(handoff):
                await self.m.changed.wait()
        # A request outlives neither --grace nor its own --timeout: the sooner bounds how
        # long the new owner must take the host for busy.
        self.cut_short(handoff, self.m.now() + min(settings.grace, settings.timeout))
        batch = self.handover.batch(handoff, self.m.now())
        result = await self.m.persist(self.m.store.commit, batch)
        if not self.handover.committed(handoff, result):
            # A newer epoch exists: read it now and apply that one (not this one again).
            await self.m.read_members()
            self.m.wake()
            return
        await self.m.find_parked()
        self.handover.done(handoff)
        self.m.wake()

    def cut_short(self, handoff: Handoff, deadline: float) -> None:
        for eid in self.handover.cut_short(handoff, deadline):
            scope = self.m.scopes.get(eid)
            if scope is not None:
                scope.deadline = min(scope.deadline, deadline)

    async def drain_loop(self) -> None:
        await self.m.orphans_waiting.turns(self.drain_turn)

    async def drain_turn(self) -> list[str]:
        """Drain every departed worker's stream there is; returns the streams drained."""
        drained: list[str] = []
        if not self.m.session.epochs.take_orphans():
            return drained
        while (stream := await self.m.persist(self.m.store.orphan)) is not None:
            await self.drain(stream)
            drained.append(stream)
        return drained

    async def drain(self, stream: str, *, leaving: bool = False) -> None:
        """Move every entry left in ``stream`` to its host's owner (see
        ``Handover.orphans_batch``: ``leaving``, this worker's own, out of the ring),
        then release the stream."""
        departed = self.handover.departed(stream)
        dying = await self.m.persist(self.m.store.in_flight_of, stream) if departed else None
        while True:
            got = await self.m.persist(self.m.store.entries, stream, count=500)
            if not got:
                if await self.m.persist(self.m.store.release, stream):
                    return
                continue
            epoch, members = await self.m.persist(self.m.store.members)
            ring, now = Ring.of(epoch, members), self.m.now()
            batch = self.handover.orphans_batch(stream, got, ring, dying, now, leaving=leaving)
            self.handover.drained(await self.m.persist(self.m.store.commit, batch))
