"""The revisit taker: once a second, due revisit records become inbox entries.

Any worker may take (the script takes each due record once, whoever calls it); the
inbox is then drained to each host's owner like an orphan stream, so a revisit waits
for its host's pace like any page (docs/design.md, "Revisits").
"""

from __future__ import annotations

import trio

from hashcrawl._core._exchanges import TakeRevisits
from hashcrawl._core._settings import revisit_policy
from hashcrawl._run._membership import Membership

TAKE_EVERY = 1.0  # seconds between takes while nothing is due
#: How long a taken record waits for its fetch's put before it is taken again (a page
#: dead-lettered, or a commit lost): the policy's longest interval, and at least this.
REQUEUE_FLOOR_S = 3600


class Taker:
    """Takes due revisits for the crawl, a batch at a time."""

    def __init__(self, m: Membership) -> None:
        self.m = m  # its store's revisit records, taken by the core's ``Taking``

    async def take_loop(self) -> None:
        while True:
            if not await self.take_turn():
                await trio.sleep(TAKE_EVERY)

    async def take_turn(self) -> int:
        """One take, if the crawl revisits; returns how many entries it added to the inbox."""
        policy = revisit_policy(self.m.worker.settings)
        if policy is None or self.m.session.due().stopping:
            return 0  # a worker on its way out takes no work it would not see through
        requeue = max(policy.high, REQUEUE_FLOOR_S)
        if "revisit_stays_due" in self.m.worker.faults:  # a deliberate bug to catch
            requeue = 0
        taken: int = await self.m.carry_out(self.m.session.start(TakeRevisits(requeue)))
        return taken
