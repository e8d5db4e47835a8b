"""What a worker says once per crawl and reason: pages its own rules refused.

A page refused by the address rule, robots.txt or another rule of the worker's is
counted in ``status`` all the same; the first time a reason comes up in a crawl, one
line on standard error says what was refused, where it is counted, and the flag that
allows it. Once per crawl, not once per worker: the ``notices`` hash in Redis (HSETNX)
decides which worker says it. The lines go to the ``hashcrawl.notices`` logger, which
``join -q`` and ``crawl -q`` silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from hashcrawl._exceptions import QueueError

log = logging.getLogger("hashcrawl.notices")
MAX_REASONS = 64  # reasons a worker remembers having told; past them it tells no more


class Notices:
    """The reasons this worker has told (or left to another worker) in its crawl."""

    def __init__(self) -> None:
        self.told: set[str] = set()

    def first(self, reason: str) -> bool:
        """Whether ``reason`` is new to this worker (it is remembered from now on)."""
        if reason in self.told or len(self.told) >= MAX_REASONS:
            return False
        self.told.add(reason)
        return True

    async def tell(self, reason: str, line: str, claim: Callable[[str], bool] | None) -> None:
        """Say ``line`` if no worker of the crawl has said ``reason`` (``claim`` asks
        Redis; None, or Redis not answering: say it, better twice than never)."""
        try:
            first = claim is None or await trio.to_thread.run_sync(claim, reason)
        except QueueError:
            first = True
        if first:
            log.warning(line)
