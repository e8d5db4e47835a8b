"""A rendered page's sub-requests, paced by the worker's frontier (``_browser._pace``).

The renderer asks :class:`FrontierPace` before each sub-request. To a host this worker
owns (the page's own), the core's frontier says when (``Frontier.sub_request_turn``:
the host's ``--delay`` after its last start, and after its last end with ``--per-host
1``, and counts it as a start), the host's robots.txt rules say whether; the end is
counted too. So a page's sub-requests and the host's other pages keep one pace between
them. To a shared host (``--render-fetch-hosts``) it does not own, robots.txt says
whether (``_turns.SharedRobots``) and its turn in Redis when (``_turns.SharedTurns``,
the fetcher under the renderer). Any other host was refused before it got here, and is
counted and told of here.
"""

from __future__ import annotations

import trio

from hashcrawl._core._page import Page
from hashcrawl._core._turns import host_of, shared_hosts
from hashcrawl._exceptions import Refused
from hashcrawl._run._membership import Membership


class FrontierPace:
    """The pace of the sub-requests of ``page``, rendered by one membership."""

    def __init__(self, m: Membership, page: Page) -> None:
        self.m, self.page = m, page

    async def turn(self, url: str) -> None:
        host = host_of(url)
        shared = host is not None and host in shared_hosts(self.m.settings.render_fetch_hosts)
        if shared and host is not None:
            await self._robots_allow(url, host)
        turn = self.page.sub_request(url, self.m.now(), shared=shared)
        if isinstance(turn, str):
            raise Refused(turn)
        await trio.sleep(max(0.0, turn - self.m.now()))

    async def _robots_allow(self, url: str, host: str) -> None:
        robots = self.m.worker.shared_robots
        if robots is None or not self.m.settings.obey_robots:
            return
        if not (await robots.rules(url, host)).allowed(url):
            raise Refused(f"robots.txt disallows {url:.100} (or is unreachable)")

    def ended(self, url: str) -> None:
        self.page.sub_request_ended(url, self.m.now())

    def refused(self, url: str, why: str) -> None:
        worker = self.m.worker
        worker.tally.sub_refused += 1
        if worker.notices.first("render_host"):
            line = (
                f"a rendered page asked for {url:.100}, {why.removeprefix('refused: ')}: not "
                "fetched, since that host's pace is its owner's (--render-fetch-hosts HOST "
                "lets renders fetch from it, each request to it then taking a turn in Redis); "
                "counted in status as sub_refused; said once per crawl"
            )
            claim = getattr(self.m.store, "claim_notice", None)
            self.m.spawn(worker.notices.tell, "render_host", line, claim)
