"""Handoffs: applying a new epoch (the hosts it takes away go to their new owners) and
draining departed workers' streams to their hosts' owners. The core's ``Handover``
decides each step (``Applying``, ``Draining``); the membership does them."""

from __future__ import annotations

import logging

from hashcrawl._core._exchanges import Apply, Drain, DrainOrphans, Idle
from hashcrawl._core._ring import Ring
from hashcrawl._run._membership import Membership

log = logging.getLogger("hashcrawl")


class Handoffs:
    """Handoffs: applying a new epoch, and draining departed workers' streams."""

    def __init__(self, m: Membership) -> None:
        self.m = m

    async def apply_loop(self) -> None:
        await self.m.epoch_changed.turns(self.apply_turn)

    async def apply_turn(self) -> Ring | None:
        """Apply the newest epoch, if one waits; returns it.

        A request still out to a host given away gets a short wait, then the handoff
        goes ahead without it: the request is cancelled at the latest --grace (or
        --timeout, if sooner) seconds from now, and the host's pace record says it was
        busy until then, so its new owner waits for that before its own first request.
        The entry stays this worker's until the request ends, then is committed as usual
        (or, cancelled, forwarded to the new owner). So no slow server holds up the
        fleet's epoch.
        """
        applying = self.m.session.start(Apply(self.m.now()))
        if isinstance(applying, Idle):  # no new epoch
            return None
        ring: Ring = await self.m.carry_out(applying)
        self.m.wake()
        return ring

    async def drain_loop(self) -> None:
        await self.m.orphans_waiting.turns(self.drain_turn)

    async def drain_turn(self) -> list[str]:
        """Drain every departed worker's stream there is; returns the streams drained."""
        orphans = self.m.session.start(DrainOrphans())
        if isinstance(orphans, Idle):  # none heard of
            return []
        drained: list[str] = await self.m.carry_out(orphans)
        return drained

    async def drain(self, stream: str, *, leaving: bool = False) -> None:
        """Move every entry left in ``stream`` to its host's owner (``leaving``: this
        worker's own, out of the ring), then release the stream."""
        await self.m.carry_out(self.m.session.start(Drain(stream, leaving)))
