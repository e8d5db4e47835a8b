"""Tests for hashcrawl._core._fetches: a fetch frees its host once, however it ends, and
an ended fetch makes a commit due once every slot is taken."""

from __future__ import annotations

from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Kind, Outcome
from tests.test_core import ready, session_of


def test_a_fetch_frees_its_host_once_however_often_it_is_finished() -> None:
    """A second finish (a put back after the end, say) leaves the host's last end alone."""
    session = session_of()
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    fetches = session.fetches
    fetches.finish(held, 0.5)
    fetches.finish(held, 5.0)
    assert session.frontier.hosts["a.test"].last_end == 0.5
    assert session.flight.fetching == {}


def test_an_ended_fetch_makes_a_commit_due_once_every_slot_is_taken() -> None:
    """With one slot, a page done waits to be committed, so a commit is due at once;
    a fetch put back (no outcome) commits nothing and frees its slot."""
    session = session_of(concurrency=1)
    ready(session, "http://a.test/1", "http://b.test/1")
    fetches = session.fetches
    first = session.gate.next_fetch(0.0)
    assert isinstance(first, Held)
    assert fetches.ended(first, None, 0.0) is False
    assert (session.flight.in_flight, session.ledger.outcomes) == (0, [])
    second = session.gate.next_fetch(0.0)
    assert isinstance(second, Held)
    assert fetches.ended(second, Outcome.done(second, [], []), 0.0) is True
    assert [o.kind for o in session.ledger.outcomes] == [Kind.DONE]


def test_a_failed_fetch_is_counted_and_backs_its_host_off() -> None:
    """A failure counts once, and its outcome holds the host back a second (first try)."""
    session = session_of(delay=0.0)
    ready(session, "http://a.test/1")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    outcome = session.fetches.failed(held, "reset", kind="reset", now=0.0)
    assert (outcome.kind, outcome.backoff, session.tally.failed) == (Kind.RETRY, 1.0, 1)
