"""Tests for hashcrawl._core._page: a page's steps come in the core's order (robots.txt
when due, the rules, the host's page cap, the request, the handler)."""

from __future__ import annotations

from typing import Any

import attrs

from hashcrawl._core._exchanges import Done
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Kind, Outcome
from hashcrawl._core._page import (
    CheckRules,
    Fetched,
    FetchRobots,
    Handle,
    NoteInFlight,
    Page,
    Recover,
    Send,
    TakePage,
)
from hashcrawl._core._robotsrules import Robots, Unreachable
from hashcrawl._core._session import Session
from hashcrawl._exceptions import FetchError, Interrupted, NotSent, Refused
from tests.test_core import LEASE, ready, session_of


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
    assert page.next_step(0.0) == FetchRobots()
    page.answered(Robots.allow_all(), 0.1)
    assert page.next_step(0.1) == Done() and page.outcome is None  # put back: waits its turn
    assert session.frontier.hosts["a.test"].queue


def test_unreachable_robots_txt_fails_the_page_for_now() -> None:
    """No rules and robots.txt unreachable: the page is retried later, counted failed."""
    session, held = dispatched(obey_robots=True)
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.answered(Unreachable("HTTP 503"), 0.1)
    assert page.next_step(0.1) == Done()
    assert page.outcome is not None and page.outcome.kind is Kind.RETRY
    assert session.tally.failed == 1


def test_rules_kept_are_checked_and_a_denied_page_is_done_unfetched() -> None:
    """With rules kept, the page checks them; denied, it is done and counted."""
    session, held = dispatched(obey_robots=True)
    session.robots.rules["a.test"] = Robots.deny_all()
    page = Page(session.fetches, held, 0.0)
    assert page.next_step(0.0) == CheckRules(Robots.deny_all())
    page.answered(False, 0.0)
    assert page.next_step(0.0) == Done()
    assert page.outcome is not None and page.outcome.kind is Kind.DONE
    assert session.tally.robots_denied == 1


def test_a_host_that_had_its_pages_is_done_without_a_request() -> None:
    """With --max-pages-per-host reached, the page never reaches Send."""
    session, held = dispatched(max_pages_per_host=1)
    session.taken["a.test"] = 1
    page = Page(session.fetches, held, 0.0)
    assert isinstance(page.next_step(0.0), Done)
    assert session.tally.host_capped == 1


def test_a_response_goes_to_the_handler_with_what_it_needs_of_the_host() -> None:
    """Send, answered, Handle with the origin, answered: done with the handler's outcome."""
    session, held = dispatched(max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    assert page.next_step(0.0) == Send(cookie=None)
    response = Reply(status=200, body=b"hi", url=held.entry.url)
    page.answered(Fetched(response, 0.1), 0.1)
    handle = page.next_step(0.1)
    assert isinstance(handle, Handle) and handle.origin.worker == session.id
    assert (session.tally.fetched, session.taken["a.test"]) == (1, 1)
    outcome = Outcome.done(held, [], [])
    page.answered(outcome, 0.2)
    assert page.next_step(0.2) == Done() and page.outcome is outcome


def test_a_request_refused_by_a_rule_is_dead_and_a_failed_one_retried() -> None:
    """Refused cannot succeed later: dead at once; any other fetch error is retried;
    either way the request's errback has its say before the page is done."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    refused = Refused("address not allowed")
    page.failed(refused, 0.0)
    recover = page.next_step(0.0)
    assert isinstance(recover, Recover) and recover.error is refused
    assert recover.outcome.kind is Kind.DEAD
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(FetchError("timeout"), 1.0, took=1.0)
    recover = page.next_step(1.0)
    assert isinstance(recover, Recover) and recover.outcome.kind is Kind.RETRY
    recovered = Outcome.done(held, [], [])  # the errback's
    page.answered(recovered, 1.0)
    assert page.next_step(1.0) == Done() and page.outcome is recovered


def test_a_request_the_gate_stopped_puts_the_page_back() -> None:
    """The gate says no as the request would leave: the page waits for its host's next
    turn, nothing is counted."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    assert page.next_step(LEASE) == Done()  # no heartbeat answered for a lease: stale
    assert page.outcome is None
    assert session.tally.fetched == session.tally.failed == 0
    assert session.frontier.hosts["a.test"].queue


def test_the_send_unchecked_bug_sends_what_the_gate_refuses() -> None:
    """The deliberate bug the end-to-end tests catch: no gate asked."""
    session, held = dispatched(max_pages_per_host=5)
    session.fetches.faults = Faults.of(["send_unchecked"])
    assert Page(session.fetches, held, 0.0).next_step(LEASE) == Send(cookie=None)


def test_a_request_stopped_as_it_left_is_out_of_the_hosts_page_count() -> None:
    """Handing out Send counts the request for --max-pages-per-host; a NotSent after it
    (the gate said no as it was written) reached no host, and takes it out again, so a
    host at a cap of N gets N requests, not fewer (found by the simulation: a handoff
    stopped a counted request, and the new owner capped the host one page early)."""
    session, held = dispatched(max_pages_per_host=5)
    session.taken["a.test"] = 2
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.next_step(0.0)  # asked again: counted once
    assert session.taken["a.test"] == 3
    page.failed(NotSent("the host moved"), 0.0)  # as the fetcher raises it
    assert session.taken["a.test"] == 2 and page.outcome is None
    page.not_sent(0.0)  # once only
    assert session.taken["a.test"] == 2


def test_a_suspect_page_first_has_its_in_flight_record_written() -> None:
    """A departed worker's entry going out is named in the in-flight record before its
    first request; the steps after come once the record is written."""
    session = session_of()
    ready(session, "http://a.test/page")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    suspect = attrs.evolve(held, entry=attrs.evolve(held.entry, suspect=True))
    page = Page(session.fetches, suspect, 0.0)
    assert page.next_step(0.0) == NoteInFlight(1, [held.eid])
    page.answered(None, 0.0)
    assert page.next_step(0.0) == Send(cookie=None)


def test_a_handled_page_is_stamped_by_the_servers_clock() -> None:
    """The handler gets the server's time (a revisit is due by it), not the local one."""
    session, held = dispatched()
    session.clock.sample(0.0, 0.0, 50_000)  # the server's clock is 50 s ahead
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.answered(Fetched(Reply(status=200, body=b"", url=held.entry.url), 0.1), 0.1)
    handle = page.next_step(1.0)
    assert isinstance(handle, Handle) and handle.server_s == 51.0


def test_a_page_ends_once_however_it_went() -> None:
    """Cut short, the page waits for its host's turn; failed in the caller's own code,
    it is retried; either way its end frees its slot and records what it left."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(Interrupted(), 0.5)  # a handoff's deadline cut it short
    assert page.next_step(0.5) == Done() and page.outcome is None
    assert page.ended(0.5) is False and session.flight.in_flight == 0
    assert session.frontier.hosts["a.test"].queue  # back in its host's queue
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(LookupError("a bogus charset"), 0.0, crashed=True)  # the dispatcher's own
    assert page.next_step(0.0) == Done() and page.outcome is not None
    assert page.outcome.kind is Kind.RETRY and session.tally.failed == 1
    page.ended(0.0)
    assert session.ledger.outcomes == [page.outcome]


def test_a_request_carries_its_hosts_cookies_unless_it_names_its_own() -> None:
    """The jar's Cookie header goes with the request (with --cookies, the default);
    a request that names a Cookie header keeps its own."""
    session, held = dispatched()
    session.jars.take("a.test", "GET", "http://a.test/", ["sid=1"])
    assert Page(session.fetches, held, 0.0).next_step(0.0) == Send(cookie="sid=1")
    own = attrs.evolve(held, entry=attrs.evolve(held.entry, headers=(("Cookie", "x=2"),)))
    assert Page(session.fetches, own, 0.0).next_step(0.0) == Send(cookie=None)


def test_set_cookies_are_kept_only_for_a_host_still_this_workers() -> None:
    """A response's Set-Cookie goes into the jar; a host handed over meanwhile keeps
    none here (its cookies are its new owner's)."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    reply = Reply(status=200, body=b"", url=held.entry.url)
    page.answered(Fetched(reply, 0.1, ["sid=1"]), 0.1)
    assert session.jars.header("a.test", "GET", held.entry.url) == "sid=1"
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    session.epochs.members_read(2, ("w2",))  # the host is w2's now
    page.answered(Fetched(reply, 0.1, ["sid=1"]), 0.1)
    assert session.jars.header("a.test", "GET", held.entry.url) is None


def test_the_handler_gets_the_hosts_rules_and_the_seen_links_unless_a_bug_skips_them() -> None:
    """With robots.txt obeyed, the origin carries the host's rules (links back to it are
    checked there); the seen cache goes along, unless the deliberate bug skips it."""
    session, held = dispatched(obey_robots=True)
    session.robots.rules["a.test"] = Robots.allow_all()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.answered(True, 0.0)  # the rules allow it
    page.next_step(0.0)
    page.answered(Fetched(Reply(status=200, body=b"", url=held.entry.url), 0.1), 0.1)
    handle = page.next_step(0.1)
    assert isinstance(handle, Handle)
    assert handle.origin.robots is session.robots.rules["a.test"]
    assert handle.origin.seen is session.seen
    session, held = dispatched()
    session.fetches.faults = Faults.of(["skip_seen_filter"])
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.answered(Fetched(Reply(status=200, body=b"", url=held.entry.url), 0.1), 0.1)
    handle = page.next_step(0.1)
    assert isinstance(handle, Handle) and handle.origin.seen is None


def test_a_failed_request_is_counted_by_its_kind() -> None:
    """A FetchError's message is the kind the metrics count; anything else a fetcher
    raises counts as "fetcher"."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(FetchError("timeout"), 1.0, took=1.0)
    session2, held2 = dispatched()
    page = Page(session2.fetches, held2, 0.0)
    page.next_step(0.0)
    page.failed(RuntimeError("a bug in a fetcher"), 1.0)
    assert (session.tally.errors, session2.tally.errors) == ({"timeout": 1}, {"fetcher": 1})


def test_a_page_put_back_before_its_request_counted_leaves_the_hosts_count_alone() -> None:
    """Not yet handed out as Send, a page the gate stops takes nothing out of the host's
    --max-pages-per-host count; and a count already gone (the host handed over) stays 0."""
    session, held = dispatched(max_pages_per_host=5)
    session.taken["a.test"] = 2
    Page(session.fetches, held, 0.0).not_sent(0.0)
    assert session.taken["a.test"] == 2
    session, held = dispatched(max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    session.taken["a.test"] = 0  # handed over meanwhile
    page.not_sent(0.0)
    assert session.taken["a.test"] == 0


def test_a_page_granted_a_crawl_page_is_counted_for_its_host_as_it_leaves() -> None:
    """After TakePage, the Send handed out is asked of the gate and counted for the
    host's --max-pages-per-host, as one handed out at once is."""
    session, held = dispatched(max_pages_total=5, max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    assert page.next_step(0.0) == TakePage(5)
    page.answered(True, 0.0)
    assert isinstance(page.next_step(0.0), Send) and session.taken["a.test"] == 1


def test_a_host_never_requested_is_not_full_at_a_cap_of_one() -> None:
    """--max-pages-per-host 1: a host with no request yet gets its one."""
    session, held = dispatched(max_pages_per_host=1)
    assert isinstance(Page(session.fetches, held, 0.0).next_step(0.0), Send)


def test_a_page_put_back_after_its_host_was_handed_over_changes_no_count() -> None:
    """The host's count went with it (handed over): putting the page back is harmless."""
    session, held = dispatched(max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    del session.taken["a.test"]
    page.not_sent(0.0)
    assert "a.test" not in session.taken


def test_a_refused_request_is_counted_failed_once_and_a_nameless_error_named_by_type() -> None:
    """Refused: one failure counted; an exception with no message is named by its type."""
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(Refused("address not allowed"), 0.0)
    assert session.tally.failed == 1
    session, held = dispatched()
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.failed(RuntimeError(), 0.0)
    assert page.outcome is not None and page.outcome.error == "RuntimeError"


def test_a_hosts_first_request_stopped_as_it_left_takes_its_count_back_to_zero() -> None:
    """The first request of a host, counted as Send is handed out and stopped by the
    gate as it is written: the host's count is 0 again, not 1."""
    session, held = dispatched(max_pages_per_host=5)
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    assert session.taken["a.test"] == 1
    page.failed(NotSent("the host moved"), 0.0)
    assert session.taken["a.test"] == 0
