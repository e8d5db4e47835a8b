"""Tests for hashcrawl._core._page: a page's steps come in the core's order (robots.txt
when due, the rules, the host's page cap, the request, the handler)."""

from __future__ import annotations

from typing import Any

import attrs

from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Kind, Outcome
from hashcrawl._core._page import Page, Step
from hashcrawl._core._robotsrules import Robots, Unreachable
from hashcrawl._core._session import Session
from hashcrawl._exceptions import FetchError, Refused
from tests.test_core import ready, session_of


@attrs.frozen(kw_only=True)
class Reply:
    """All the core reads of a response (``_seams.Reply``)."""

    status: int
    body: bytes
    url: str


def dispatched(**settings: Any) -> tuple[Session, Held]:
    """A session with one page of a.test dispatched at time 0."""
    session = session_of(**settings)
    ready(session, "http://a.test/page")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    return session, held


def test_robots_txt_comes_first_and_its_request_uses_the_pages_turn() -> None:
    """With robots.txt obeyed and no rules kept, the page fetches them, then waits."""
    session, held = dispatched(obey_robots=True)
    page = Page(session.fetches, held, 0.0)
    assert page.step is Step.FETCH_ROBOTS
    assert page.robots_fetched(Robots.allow_all(), 0.1) is Step.DONE
    assert page.outcome is None  # put back: it waits for its host's next turn
    assert session.frontier.hosts["a.test"].queue


def test_unreachable_robots_txt_fails_the_page_for_now() -> None:
    """No rules and robots.txt unreachable: the page is retried later, counted failed."""
    session, held = dispatched(obey_robots=True)
    page = Page(session.fetches, held, 0.0)
    page.robots_fetched(Unreachable("HTTP 503"), 0.1)
    assert page.outcome is not None and page.outcome.kind is Kind.RETRY
    assert session.tally.failed == 1


def test_rules_kept_are_checked_and_a_denied_page_is_done_unfetched() -> None:
    """With rules kept, the page checks them; denied, it is done and counted."""
    session, held = dispatched(obey_robots=True)
    session.robots.rules["a.test"] = Robots.deny_all()
    page = Page(session.fetches, held, 0.0)
    assert (page.step, page.rules) == (Step.CHECK_RULES, Robots.deny_all())
    assert page.checked(False) is Step.DONE
    assert page.outcome is not None and page.outcome.kind is Kind.DONE
    assert session.tally.robots_denied == 1


def test_a_host_that_had_its_pages_is_done_without_a_request() -> None:
    """With --max-pages-per-host reached, the page never reaches SEND."""
    session, held = dispatched(max_pages_per_host=1)
    session.taken["a.test"] = 1
    page = Page(session.fetches, held, 0.0)
    assert page.step is Step.DONE
    assert session.tally.host_capped == 1


def test_a_response_goes_to_the_handler_with_what_it_needs_of_the_host() -> None:
    """SEND, answered, HANDLE with the origin, handled: done with the handler's outcome."""
    session, held = dispatched(max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    assert page.step is Step.SEND
    page.sending()
    response = Reply(status=200, body=b"hi", url=held.entry.url)
    assert page.answered(response, 0.1, 0.1, []) is Step.HANDLE
    assert page.origin is not None and page.origin.worker == session.id
    assert (session.tally.fetched, session.taken["a.test"]) == (1, 1)
    outcome = Outcome.done(held, [], [])
    assert page.handled(outcome) is Step.DONE and page.outcome is outcome


def test_a_request_refused_by_a_rule_is_dead_and_a_failed_one_retried() -> None:
    """Refused cannot succeed later: dead at once; any other fetch error is retried."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.send_failed(Refused("address not allowed"), 0.0, 0.0)
    assert page.outcome is not None and page.outcome.kind is Kind.DEAD
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.send_failed(FetchError("timeout"), 1.0, 1.0)
    assert page.outcome is not None and page.outcome.kind is Kind.RETRY


def test_a_request_the_session_stopped_puts_the_page_back() -> None:
    """not_sent: the page waits for its host's next turn, nothing is counted."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    assert page.not_sent(0.0) is Step.DONE and page.outcome is None
    assert session.tally.fetched == session.tally.failed == 0


def test_a_request_stopped_as_it_left_is_out_of_the_hosts_page_count() -> None:
    """sending() counts the request for --max-pages-per-host; a NotSent after it (the
    session said no as it was written) reached no host, and takes it out again, so a
    host at a cap of N gets N requests, not fewer (found by the simulation: a handoff
    stopped a counted request, and the new owner capped the host one page early)."""
    session, held = dispatched(max_pages_per_host=5)
    session.taken["a.test"] = 2
    page = Page(session.fetches, held, 0.0)
    page.sending()
    assert session.taken["a.test"] == 3
    page.not_sent(0.0)
    assert session.taken["a.test"] == 2
    page.not_sent(0.0)  # once only
    assert session.taken["a.test"] == 2
