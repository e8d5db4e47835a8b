"""One page's steps, in the order the core decides: robots.txt first if it is due, then
the rules, the host's page cap, the request, the handler. No IO.

As in h11, the caller asks for the next step (:attr:`Page.step`), does it, and reports
what happened; the page answers with the step after. The caller does every fetch, and
asks the session right before each request leaves whether it still may (``may_send``):
a request may wait between this decision and the socket. ``DONE`` carries the outcome
to commit (None: the entry waits for its host's next turn).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Origin, Outcome
from hashcrawl._core._rules import Robots, Unreachable
from hashcrawl._core._seams import Reply

if TYPE_CHECKING:
    from hashcrawl._core._session import Session


class Step(enum.Enum):
    """What the caller does next for a page."""

    FETCH_ROBOTS = "fetch robots.txt"  # then robots_fetched(), or not_sent()
    CHECK_RULES = "check the rules"  # ``rules.allowed(url)``, then checked()
    SEND = "send the request"  # with ``cookie``; then answered(), send_failed() or not_sent()
    HANDLE = "handle the response"  # with ``origin``; then handled() or handle_failed()
    DONE = "done"  # ``outcome`` is the page's


class Page:
    """The steps of ``held``'s fetch, from the moment it is dispatched."""

    def __init__(self, session: Session, held: Held, now: float) -> None:
        self.session, self.held = session, held
        self.outcome: Outcome | None = None
        self.rules: Robots | None = None  # the rules to check, at CHECK_RULES
        self.origin: Origin | None = None  # what the handler needs, at HANDLE
        self.step = Step.FETCH_ROBOTS if session.robots_wanted(held, now) else self._rules()

    @property
    def cookie(self) -> str | None:
        """The ``Cookie`` header the request carries (asked at SEND)."""
        return self.session.cookie_for(self.held)

    def _rules(self) -> Step:
        self.rules = self.session.robots_for(self.held)
        return Step.CHECK_RULES if self.rules is not None else self._cap()

    def _cap(self) -> Step:
        if self.session.host_is_full(self.held.host):
            return self._done(self.session.host_capped(self.held))
        return Step.SEND

    def _done(self, outcome: Outcome | None) -> Step:
        self.outcome, self.step = outcome, Step.DONE
        return Step.DONE

    def not_sent(self, now: float) -> Step:
        """The session said no right before the request left: the page waits its turn
        (or goes to its host's new owner)."""
        return self._done(self.session.put_back(self.held, now))

    def robots_fetched(self, got: Robots | Unreachable, now: float) -> Step:
        """robots.txt gave ``got``; its request used the page's slot, so the page waits
        its turn again, or fails for now if robots.txt is unreachable."""
        unreachable = self.session.robots_read(self.held, got, now)
        if unreachable is not None:  # nothing may be fetched yet: try again later
            failed = self.session.failed(self.held, unreachable, kind="robots_unreachable", now=now)
            return self._done(failed)
        return self._done(self.session.robots_fetched(self.held, now))

    def checked(self, allowed: bool) -> Step:
        """The rules allow the page, or not (then it is done, fetched never)."""
        if not allowed:
            return self._done(self.session.robots_denied(self.held))
        self.step = self._cap()
        return self.step

    def sending(self) -> None:
        """The request is leaving now (the session said it still may)."""
        self.session.sending(self.held)

    def answered(self, response: Reply, took: float, now: float, set_cookies: list[str]) -> Step:
        self.origin = self.session.answered(self.held, response, took, now, set_cookies)
        self.step = Step.HANDLE
        return self.step

    def send_failed(self, exc: Exception, took: float, now: float) -> Step:
        return self._done(self.session.send_failed(self.held, exc, took, now))

    def handled(self, outcome: Outcome | None) -> Step:
        return self._done(outcome)

    def handle_failed(self, exc: Exception, now: float) -> Step:
        """A parse callback's bug fails its page, not the worker."""
        reason = f"{type(exc).__name__}: {exc}"
        return self._done(self.session.failed(self.held, reason, kind="parse", now=now))
