"""One page's steps, in the order the core decides: robots.txt first if it is due, then
the rules, the host's page cap, the crawl's page cap, the request, the handler. No IO.

As in h11, the caller asks for the next step (:attr:`Page.step`), does it, and reports
what happened; the page answers with the step after. The caller does every fetch, and
asks the session right before each request leaves whether it still may (``may_send``):
a request may wait between this decision and the socket. ``DONE`` carries the outcome
to commit (None: the entry waits for its host's next turn).
"""

from __future__ import annotations

import enum
import math

from hashcrawl._core._fetches import Fetches
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Origin, Outcome
from hashcrawl._core._robotsrules import Robots, Unreachable
from hashcrawl._core._seams import Reply
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import FetchError, Refused


class Step(enum.Enum):
    """What the caller does next for a page."""

    FETCH_ROBOTS = "fetch robots.txt"  # then robots_fetched(), or not_sent()
    CHECK_RULES = "check the rules"  # ``rules.allowed(url)``, then checked()
    TAKE = "take a page of the crawl's cap"  # --max-pages-total; then taken()
    SEND = "send the request"  # with ``cookie``; then answered(), send_failed() or not_sent()
    HANDLE = "handle the response"  # with ``origin``; then handled() or handle_failed()
    DONE = "done"  # ``outcome`` is the page's


class Page:
    """The steps of ``held``'s fetch, from the moment it is dispatched.

    The page settles its own accounting with the session's parts (the frontier, the
    counts, the robots.txt cache, the page caps and the cookie jars), which ``fetches``
    holds (see ``Fetches``).
    """

    def __init__(self, fetches: Fetches, held: Held, now: float) -> None:
        self.fetches, self.held = fetches, held
        self.outcome: Outcome | None = None
        self.rules: Robots | None = None  # the rules to check, at CHECK_RULES
        self.origin: Origin | None = None  # what the handler needs, at HANDLE
        self.counted = False  # its request is in the host's --max-pages-per-host count
        self.took = False  # it holds one of the crawl's --max-pages-total pages
        self.give_back = False  # it took one and sent nothing: the caller gives it back
        due = self.settings.obey_robots and fetches.robots.wanted(held, now)
        self.step = Step.FETCH_ROBOTS if due else self._rules()

    @property
    def settings(self) -> Settings:
        return self.fetches.settings  # as they are now: the crawl's may change meanwhile

    @property
    def cookie(self) -> str | None:
        """The ``Cookie`` header the request carries (asked at SEND): its host's cookies,
        unless the request names its own."""
        entry = self.held.entry
        if self.settings.cookies and not any(n.lower() == "cookie" for n, _ in entry.headers):
            return self.fetches.jars.header(self.held.host, entry.method, entry.url)
        return None

    def _rules(self) -> Step:
        if self.settings.obey_robots:
            self.rules = self.fetches.robots.of(self.held)
        return Step.CHECK_RULES if self.rules is not None else self._cap()

    def _cap(self) -> Step:
        if not self._host_full():
            return Step.SEND if self.settings.max_pages_total is None else Step.TAKE
        self.fetches.tally.host_capped += 1
        return self._skipped()

    def taken(self, granted: bool, now: float) -> Step:
        """The crawl's --max-pages-total gave this page one of its pages, or had none
        left: then the page waits unfetched, and this worker stops as --max-pages stops
        it (so does every worker of the fleet, each at its next page)."""
        if granted:
            self.took, self.step = True, Step.SEND
            return self.step
        self.fetches.flight.stopping = True
        return self._done(self.fetches.put_back(self.held, now))

    def _host_full(self) -> bool:
        """Whether the host has had its --max-pages-per-host page requests."""
        cap = self.settings.max_pages_per_host
        return cap is not None and self.fetches.taken.get(self.held.host, 0) >= cap

    def _skipped(self) -> Step:
        """Done without a request: the host is free again as of its last request."""
        host = self.fetches.frontier.hosts.get(self.held.host)  # gone if handed over
        self.fetches.finish(self.held, host.last_start if host is not None else -math.inf)
        return self._done(Outcome.done(self.held, [], []))

    def _done(self, outcome: Outcome | None) -> Step:
        self.outcome, self.step = outcome, Step.DONE
        return Step.DONE

    def not_sent(self, now: float) -> Step:
        """The session said no right before the request left: the page waits its turn
        (or goes to its host's new owner), and its request, which never reached the
        host, is out of the host's count again, and of the crawl's (``give_back``)."""
        self.give_back, self.took = self.took, False
        if self.counted:
            self.counted = False
            taken = self.fetches.taken
            if taken.get(self.held.host, 0) > 0:  # not if handed over meanwhile
                taken[self.held.host] -= 1
        return self._done(self.fetches.put_back(self.held, now))

    def robots_fetched(self, got: Robots | Unreachable, now: float) -> Step:
        """robots.txt gave ``got`` (kept per RFC 9309, see ``RobotsCache``); its request
        used the page's slot, so the page waits its turn again, or fails for now if
        robots.txt is unreachable (its host is backed off meanwhile)."""
        fetches = self.fetches
        why = fetches.robots.read(self.held, got, now, fetches.frontier, self.settings.lease)
        if why is not None:  # nothing may be fetched yet: try again later
            return self._done(fetches.failed(self.held, why, kind="robots_unreachable", now=now))
        fetches.finish(self.held, now)
        return self._done(fetches.put_back(self.held, now))

    def checked(self, allowed: bool) -> Step:
        """The rules allow the page, or not (then it is done, fetched never)."""
        if not allowed:
            self.fetches.tally.robots_denied += 1
            return self._skipped()
        self.step = self._cap()
        return self.step

    def sending(self) -> None:
        """The request is leaving now (the session said it still may)."""
        if self.settings.max_pages_per_host is not None:
            taken = self.fetches.taken
            taken[self.held.host] = taken.get(self.held.host, 0) + 1
            self.counted = True

    def answered(self, response: Reply, took: float, now: float, set_cookies: list[str]) -> Step:
        """A response came, with its Set-Cookie headers: the handler is next."""
        fetches, held = self.fetches, self.held
        fetches.finish(held, now)
        fetches.tally.fetched += 1
        fetches.tally.response(response.status, len(response.body), took)
        owned = fetches.epochs.latest.owner_of(held.host) == fetches.id  # not handed over
        if self.settings.cookies and set_cookies and owned:
            fetches.jars.take(held.host, held.entry.method, response.url, set_cookies)
        robots = fetches.robots.rules.get(held.host) if self.settings.obey_robots else None
        # With the seen filter's deliberate bug, every follow reaches the commit to meet it.
        seen = None if "skip_seen_filter" in fetches.faults else fetches.seen
        self.origin = Origin(fetches.id, robots, self._host_full(), seen)
        self.step = Step.HANDLE
        return self.step

    def send_failed(self, exc: Exception, took: float, now: float) -> Step:
        """The fetcher raised: a failed page, or a dead one if a rule refused it."""
        fetches, held = self.fetches, self.held
        kind = str(exc) if isinstance(exc, FetchError) else "fetcher"
        if isinstance(exc, Refused):  # a rule said no: trying again cannot help
            fetches.finish(held, now)
            fetches.tally.failed += 1
            fetches.tally.error(kind, took)
            return self._done(Outcome.dead(held, str(exc)))
        reason = str(exc) or type(exc).__name__
        return self._done(fetches.failed(held, reason, kind=kind, took=took, now=now))

    def handled(self, outcome: Outcome | None) -> Step:
        return self._done(outcome)

    def handle_failed(self, exc: Exception, now: float) -> Step:
        """A parse callback's bug fails its page, not the worker."""
        reason = f"{type(exc).__name__}: {exc}"
        return self._done(self.fetches.failed(self.held, reason, kind="parse", now=now))
