"""A rendered page's sub-requests, paced by the worker's frontier (``_browser._pace``).

The renderer asks :class:`FrontierPace` before each sub-request to the page's host: the
core's frontier says when (``Frontier.sub_request_turn``: the host's ``--delay`` after
its last start, and after its last end with ``--per-host 1``, and counts it as a start),
the host's robots.txt rules say whether; the end is counted too. So a page's
sub-requests and the host's other pages keep one pace between them.
"""

from __future__ import annotations

import trio

from hashcrawl._exceptions import Refused
from hashcrawl._run._membership import Membership


class FrontierPace:
    """The pace of the sub-requests of the pages one membership renders."""

    def __init__(self, m: Membership) -> None:
        self.m = m

    async def turn(self, url: str) -> None:
        turn = self.m.session.gate.sub_request(url, self.m.now())
        if isinstance(turn, str):
            raise Refused(turn)
        await trio.sleep(max(0.0, turn - self.m.now()))

    def ended(self, url: str) -> None:
        self.m.session.gate.sub_request_ended(url, self.m.now())
