"""One page's steps, in the order the core decides: robots.txt first if it is due, then
the rules, the host's page cap, the crawl's page cap, the request, the handler. No IO.

As in h11, the caller asks for the next step (:meth:`Page.next_step`), does it, and
reports what happened (:meth:`~Page.answered`, :meth:`~Page.failed` with what it
raised, or :meth:`~Page.not_sent`); the next step follows. Each step is a value that
carries what the caller needs for it. The caller does every fetch; the page asks the
gate whether a request may still leave as it hands out the step that sends one, and
the caller asks once more as the request is written (``Gate.may_send``): a request may
wait between the two. Once the page is ``Done``, :meth:`Page.ended` records its outcome
to commit (none: the entry waits for its host's next turn).
"""

from __future__ import annotations

import enum
import math

import attrs

from hashcrawl._core._exchanges import Done, Process, Step
from hashcrawl._core._fetches import Fetches
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Origin, Outcome
from hashcrawl._core._robotsrules import Robots, Unreachable
from hashcrawl._core._seams import Reply
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import FetchError, Interrupted, NotSent, Refused


@attrs.frozen
class NoteInFlight(Step):
    """A departed worker's entry is going out: write the in-flight record (the
    ``noted``-th, naming ``suspects``) before it does; then ``answered(None)``."""

    noted: int
    suspects: list[str]


@attrs.frozen
class FetchRobots(Step):
    """Fetch the host's robots.txt; then ``answered(Robots | Unreachable)``, or
    ``not_sent`` if the gate said no as it was written."""


@attrs.frozen
class CheckRules(Step):
    """Check the page against ``rules`` (``rules.allowed(url)``); then ``answered(allowed)``."""

    rules: Robots


@attrs.frozen
class TakePage(Step):
    """Ask Redis for one of the crawl's ``cap`` pages (--max-pages-total); then
    ``answered(granted)``."""

    cap: int


@attrs.frozen
class Send(Step):
    """Send the request, with ``cookie`` (None: none); then ``answered(Fetched(...))``,
    ``failed(error, took=...)``, or ``not_sent``."""

    cookie: str | None


@attrs.frozen
class Handle(Step):
    """Hand the response to the handler with ``origin`` and the server's clock now, in
    seconds (``server_s``: a revisit's due time is stamped by it, so a skewed local
    clock neither delays nor advances it); then ``answered(outcome)``, or
    ``failed(error)`` if it raised."""

    origin: Origin
    server_s: float


@attrs.frozen
class Recover(Step):
    """The request failed with ``error``: the request's errback, if it has one, may
    change ``outcome``; then ``answered(outcome)``."""

    outcome: Outcome
    error: Exception


@attrs.frozen
class GiveBack(Step):
    """The page took one of the crawl's --max-pages-total pages and sent nothing: give
    it back; then ``answered(None)``."""


@attrs.frozen
class Fetched:
    """A response to a page's request: what the core reads of it, how long it took, and
    its Set-Cookie headers."""

    reply: Reply
    took: float
    set_cookies: list[str] = attrs.Factory(list)


class _At(enum.Enum):
    """Where a page is."""

    NOTE = "note a suspect in flight"
    FETCH_ROBOTS = "fetch robots.txt"
    CHECK_RULES = "check the rules"
    TAKE = "take a page of the crawl's cap"
    SEND = "send the request"
    HANDLE = "handle the response"
    RECOVER = "let the errback recover"
    GIVE_BACK = "give the crawl's page back"
    DONE = "done"


class Page(Process):
    """The steps of ``held``'s fetch, from the moment it is dispatched until it ends
    (:meth:`ended`, once, however it went: done, put back, cancelled or failed).

    The page settles its own accounting with the session's parts (the frontier, the
    counts, the robots.txt cache, the page caps and the cookie jars), which ``fetches``
    holds (see ``Fetches``). It begins at ``now``, as its fetch starts (None: at its
    first step; a dispatched page's task starts a moment later).
    """

    def __init__(self, fetches: Fetches, held: Held, now: float | None = None) -> None:
        self.fetches, self.held = fetches, held
        self.outcome: Outcome | None = None
        self.rules: Robots | None = None  # the rules to check, at CHECK_RULES
        self.origin: Origin | None = None  # what the handler needs, at HANDLE
        self.error: Exception | None = None  # what the request raised, at RECOVER
        self.counted = False  # its request is in the host's --max-pages-per-host count
        self.took = False  # it holds one of the crawl's --max-pages-total pages
        self.give_back = False  # it took one and sent nothing: the caller gives it back
        self.cleared = False  # the gate let the step that sends go out
        self.noted: tuple[int, list[str]] | None = None  # the in-flight record to write first
        self.at, self.begun = _At.NOTE, False
        if now is not None:  # else at the first step: when its fetch task starts
            self._begin(now)

    def _begin(self, now: float) -> None:
        self.begun, self.noted = True, self.fetches.suspects.started(self.held)
        self.at = _At.NOTE if self.noted is not None else self._first(now)

    def _first(self, now: float) -> _At:
        due = self.settings.obey_robots and self.fetches.robots.wanted(self.held, now)
        return _At.FETCH_ROBOTS if due else self._rules()

    @property
    def settings(self) -> Settings:
        return self.fetches.settings  # as they are now: the crawl's may change meanwhile

    def next_step(self, now: float) -> Step:
        """What the caller does next. A step that sends a request is handed out only if
        the gate says it may still leave (else the page is put back: ``not_sent``), and a
        page request is counted in its host's --max-pages-per-host as it is."""
        if not self.begun:
            self._begin(now)
        if self.at in (_At.FETCH_ROBOTS, _At.SEND) and not self.cleared:
            unchecked = "send_unchecked" in self.fetches.faults  # a deliberate bug to catch
            if not unchecked and not self.fetches.gate.may_send(self.held, now):
                self.not_sent(now)
            else:
                self.cleared = True
                if self.at is _At.SEND:
                    self._sending()
        return self._step(now)

    def _step(self, now: float) -> Step:
        at = self.at
        if at is _At.NOTE:
            assert self.noted is not None
            return NoteInFlight(*self.noted)
        if at is _At.FETCH_ROBOTS:
            return FetchRobots()
        if at is _At.CHECK_RULES:
            assert self.rules is not None
            return CheckRules(self.rules)
        if at is _At.TAKE:
            assert self.settings.max_pages_total is not None
            return TakePage(self.settings.max_pages_total)
        if at is _At.SEND:
            return Send(self._cookie())
        if at is _At.HANDLE:
            assert self.origin is not None
            return Handle(self.origin, self.fetches.clock.server_s_by(now))
        if at is _At.RECOVER:
            assert self.outcome is not None and self.error is not None
            return Recover(self.outcome, self.error)
        if at is _At.GIVE_BACK:
            return GiveBack()
        return Done()

    def answered(
        self, result: Robots | Unreachable | bool | Fetched | Outcome | None, now: float
    ) -> None:
        """The step handed out was done, with ``result`` (see each step's class)."""
        at = self.at
        if at is _At.GIVE_BACK:
            self.give_back = False
            self._go(_At.DONE)
        elif at is _At.NOTE:
            self._go(self._first(now))
        elif at is _At.FETCH_ROBOTS:
            assert isinstance(result, Robots | Unreachable)
            self._robots_fetched(result, now)
        elif at is _At.CHECK_RULES:
            assert isinstance(result, bool)
            self._checked(result)
        elif at is _At.TAKE:
            assert isinstance(result, bool)
            self._taken(result, now)
        elif at is _At.SEND:
            assert isinstance(result, Fetched)
            self._fetched(result, now)
        else:
            assert at in (_At.HANDLE, _At.RECOVER)
            assert result is None or isinstance(result, Outcome)
            self._done(result)

    def failed(
        self, exc: Exception, now: float, *, took: float = 0.0, crashed: bool = False
    ) -> None:
        """The step handed out raised ``exc``: the request (which took ``took``), or the
        handler. ``NotSent``: the gate said no as the request was written (see
        :meth:`not_sent`); ``Interrupted``: a handoff cut the fetch short (see
        :meth:`cancelled`); ``crashed``: the caller's own code raised it (see
        :meth:`crashed`)."""
        if crashed:
            self.crashed(exc, now)
        elif isinstance(exc, Interrupted):
            self.cancelled(now)
        elif isinstance(exc, NotSent):
            self.not_sent(now)
        elif self.at is _At.SEND:
            self._send_failed(exc, took, now)
        else:
            assert self.at is _At.HANDLE
            self._handle_failed(exc, now)

    def crashed(self, exc: Exception, now: float) -> None:
        """The caller's own code raised ``exc``, at whatever step: the page failed (it
        is tried again, or dead-lettered once out of attempts), the worker did not."""
        reason = f"{type(exc).__name__}: {exc}"
        self._done(self.fetches.failed(self.held, reason, kind="other", now=now))

    def cancelled(self, now: float) -> None:
        """The fetch was cut short (a handoff's deadline): the page was not fetched after
        all, and waits for its host's next turn or goes to the host's new owner."""
        self._done(self.fetches.put_back(self.held, now))

    def may_send(self, now: float) -> bool:
        """Whether the request may leave now, asked as it is written (see
        ``Gate.may_send``); a wait for a connection, or a pause, can come between the
        step handed out and the socket."""
        if "send_unchecked" in self.fetches.faults:  # a deliberate bug the tests catch
            return True
        return self.fetches.gate.may_send(self.held, now)

    def sub_request(
        self, url: str, now: float, *, shared: bool = False, hop: bool = False
    ) -> float | str:
        """When a request the page makes to ``url`` may start (a rendered page's
        sub-request, or a robots.txt redirect's ``hop``), or why it may not (see
        ``Gate.sub_request``)."""
        return self.fetches.gate.sub_request(url, now, shared=shared, hop=hop)

    def sub_request_ended(self, url: str, now: float) -> None:
        """A request the page made to ``url`` ended: its host's pace counts the end."""
        self.fetches.gate.sub_request_ended(url, now)

    def ended(self, now: float) -> bool:
        """The fetch is over: its slot is freed and its outcome, if any, waits to be
        committed. Returns whether a commit is due at once (``Gate.commit_due``)."""
        return self.fetches.ended(self.held, self.outcome, now)

    def _cookie(self) -> str | None:
        """The ``Cookie`` header the request carries: its host's cookies, unless the
        request names its own."""
        entry = self.held.entry
        if self.settings.cookies and not any(n.lower() == "cookie" for n, _ in entry.headers):
            return self.fetches.jars.header(self.held.host, entry.method, entry.url)
        return None

    def _go(self, at: _At) -> None:
        self.at, self.cleared = at, False

    def _rules(self) -> _At:
        if self.settings.obey_robots:
            self.rules = self.fetches.robots.of(self.held)
        return _At.CHECK_RULES if self.rules is not None else self._cap()

    def _cap(self) -> _At:
        if not self._host_full():
            return _At.SEND if self.settings.max_pages_total is None else _At.TAKE
        self.fetches.tally.host_capped += 1
        return self._skipped()

    def _taken(self, granted: bool, now: float) -> None:
        """The crawl's --max-pages-total gave this page one of its pages, or had none
        left: then the page waits unfetched, and this worker stops as --max-pages stops
        it (so does every worker of the fleet, each at its next page)."""
        if granted:
            self.took = True
            self._go(_At.SEND)
            return
        self.fetches.flight.stopping = True
        self._done(self.fetches.put_back(self.held, now))

    def _host_full(self) -> bool:
        """Whether the host has had its --max-pages-per-host page requests."""
        cap = self.settings.max_pages_per_host
        return cap is not None and self.fetches.taken.get(self.held.host, 0) >= cap

    def _skipped(self) -> _At:
        """Done without a request: the host is free again as of its last request."""
        host = self.fetches.frontier.hosts.get(self.held.host)  # gone if handed over
        self.fetches.finish(self.held, host.last_start if host is not None else -math.inf)
        self.outcome = Outcome.done(self.held, [], [])
        return _At.DONE

    def _done(self, outcome: Outcome | None) -> None:
        self.outcome = outcome
        self._go(_At.GIVE_BACK if self.give_back else _At.DONE)

    def not_sent(self, now: float) -> None:
        """The gate said no right before the request left: the page waits its turn
        (or goes to its host's new owner), and its request, which never reached the
        host, is out of the host's count again, and of the crawl's (``give_back``)."""
        self.give_back, self.took = self.took, False
        if self.counted:
            self.counted = False
            taken = self.fetches.taken
            if taken.get(self.held.host, 0) > 0:  # not if handed over meanwhile
                taken[self.held.host] -= 1
        self._done(self.fetches.put_back(self.held, now))

    def _robots_fetched(self, got: Robots | Unreachable, now: float) -> None:
        """robots.txt gave ``got`` (kept per RFC 9309, see ``RobotsCache``); its request
        used the page's slot, so the page waits its turn again, or fails for now if
        robots.txt is unreachable (its host is backed off meanwhile)."""
        fetches = self.fetches
        why = fetches.robots.read(self.held, got, now, fetches.frontier, self.settings.lease)
        if why is not None:  # nothing may be fetched yet: try again later
            self._done(fetches.failed(self.held, why, kind="robots_unreachable", now=now))
            return
        fetches.finish(self.held, now)
        self._done(fetches.put_back(self.held, now))

    def _checked(self, allowed: bool) -> None:
        """The rules allow the page, or not (then it is done, fetched never)."""
        if not allowed:
            self.fetches.tally.robots_denied += 1
        self._go(self._cap() if allowed else self._skipped())

    def _sending(self) -> None:
        """The request is leaving now (the gate said it still may)."""
        if self.settings.max_pages_per_host is not None:
            taken = self.fetches.taken
            taken[self.held.host] = taken.get(self.held.host, 0) + 1
            self.counted = True

    def _fetched(self, fetched: Fetched, now: float) -> None:
        """A response came, with its Set-Cookie headers: the handler is next."""
        fetches, held, response = self.fetches, self.held, fetched.reply
        fetches.finish(held, now)
        fetches.tally.fetched += 1
        fetches.tally.response(response.status, len(response.body), fetched.took)
        owned = fetches.epochs.latest.owner_of(held.host) == fetches.id  # not handed over
        if self.settings.cookies and fetched.set_cookies and owned:
            fetches.jars.take(held.host, held.entry.method, response.url, fetched.set_cookies)
        robots = fetches.robots.rules.get(held.host) if self.settings.obey_robots else None
        # With the seen filter's deliberate bug, every follow reaches the commit to meet it.
        seen = None if "skip_seen_filter" in fetches.faults else fetches.seen
        self.origin = Origin(fetches.id, robots, self._host_full(), seen)
        self._go(_At.HANDLE)

    def _send_failed(self, exc: Exception, took: float, now: float) -> None:
        """The fetcher raised: a failed page, or a dead one if a rule refused it; the
        request's errback may recover it."""
        fetches, held = self.fetches, self.held
        kind = str(exc) if isinstance(exc, FetchError) else "fetcher"
        if isinstance(exc, Refused):  # a rule said no: trying again cannot help
            fetches.finish(held, now)
            fetches.tally.failed += 1
            fetches.tally.error(kind, took)
            self.outcome = Outcome.dead(held, str(exc))
        else:
            reason = str(exc) or type(exc).__name__
            self.outcome = fetches.failed(held, reason, kind=kind, took=took, now=now)
        self.error = exc
        self._go(_At.RECOVER)

    def _handle_failed(self, exc: Exception, now: float) -> None:
        """A parse callback's bug fails its page, not the worker."""
        reason = f"{type(exc).__name__}: {exc}"
        self._done(self.fetches.failed(self.held, reason, kind="parse", now=now))
