"""Tests for hashcrawl._core._session: the driver enters the core one way, a turn given to
``Session.start``, and reads its state from one value, ``Session.due``."""

from __future__ import annotations

import math

import pytest

from hashcrawl._core._beats import Beating, Taking
from hashcrawl._core._commits import Committing
from hashcrawl._core._entry import Entry
from hashcrawl._core._exchanges import (
    Apply,
    CommitOutcomes,
    Dispatch,
    Done,
    Drain,
    DrainOrphans,
    Forget,
    Idle,
    Leave,
    Limits,
    PaceDue,
    Process,
    Read,
    Renew,
    TakeDue,
    TakeRevisits,
    Turn,
    Unparks,
)
from hashcrawl._core._frontier import Held
from hashcrawl._core._handover import Applying, Draining, Leaving, Orphans
from hashcrawl._core._intake import Reading, Unparking
from hashcrawl._core._outcome import Outcome
from hashcrawl._core._pace import Paces
from hashcrawl._core._pacing import PaceRead
from hashcrawl._core._page import NoteInFlight, Page, Send
from hashcrawl._core._session import IDLE_HOST_SECONDS, Session
from hashcrawl._store._revisits import Taken
from tests.test_core import LEASE, beat, ready, session_of


def started(session: Session, turn: Turn) -> Process:
    return session.start(turn)


def test_a_turn_with_nothing_to_do_is_idle_with_its_empty_result() -> None:
    """No epoch waiting, no orphans, no pace due, nothing to commit, no fetch allowed:
    each turn is done at once, with what its loop returns when there was nothing."""
    session = session_of()
    for turn, result in (
        (Apply(0.0), None),
        (DrainOrphans(), []),
        (PaceDue(), []),
        (CommitOutcomes(200), 0),
        (Dispatch(0.0), math.inf),  # nothing queued: ask again when something changes
        (Forget(0.0), []),
        (Limits(0.0, 0.0), False),
    ):
        process = started(session, turn)
        assert isinstance(process, Idle), turn
        assert process.next_step(0.0) == Done() and process.result == result, turn


def test_each_turn_starts_the_process_that_does_it() -> None:
    """The driver names a turn; the session answers with the part's process for it."""
    session = session_of()
    assert isinstance(started(session, Renew(0.0, 1024)), Beating)
    assert isinstance(started(session, Read(500)), Reading)
    assert isinstance(started(session, Unparks()), Unparking)
    assert isinstance(started(session, Drain("q:w2")), Draining)
    assert isinstance(started(session, TakeRevisits(3600)), Taking)
    session.epochs.orphans_waiting = True
    assert isinstance(started(session, DrainOrphans()), Orphans)
    session.take_in([("1-0", Entry(url="http://a.test/").encode().encode())])
    session.heartbeat.answered(beat(epoch=1), sent=0.0, received=0.0)
    assert isinstance(started(session, PaceDue()), PaceRead)
    session.epochs.members_read(2, ("w1", "w2"))
    assert isinstance(started(session, Apply(0.0)), Applying)
    assert isinstance(started(session, Leave()), Leaving) and session.due().stopping
    session = session_of()
    ready(session, "http://a.test/1")
    page = started(session, Dispatch(0.0))
    assert isinstance(page, Page) and page.held.entry.url == "http://a.test/1"


def fetched_one() -> Session:
    """A session that fetched one page of a.test, its outcome waiting to be committed."""
    session = session_of()
    ready(session, "http://a.test/1")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.fetches.ended(held, Outcome.done(held, [], []), 0.1)
    return session


def test_a_commit_turn_commits_the_outcomes_waiting() -> None:
    """With an outcome waiting, the commit turn is a commit (``Committing``)."""
    session = fetched_one()
    assert isinstance(started(session, CommitOutcomes(200)), Committing)


def test_a_dispatched_page_begins_as_its_fetch_starts() -> None:
    """A page handed out by ``Dispatch`` notes its departed worker's entry in flight at
    its first step (when its task starts), not at dispatch: a page never started names
    no suspect in an in-flight record."""
    session = session_of()
    session.take_in([("1-0", Entry(url="http://a.test/1", suspect=True).encode().encode())])
    session.heartbeat.answered(beat(epoch=1), sent=0.0, received=0.0)
    session.pacing.loaded(*session.pacing.take_due()[:1], Paces(), session.epochs.release)
    page = started(session, Dispatch(0.0))
    assert isinstance(page, Page) and session.suspects.noted == 0
    assert page.next_step(0.0) == NoteInFlight(1, [page.held.eid])
    assert session.suspects.noted == 1


def test_a_limit_turn_stops_the_worker_once() -> None:
    """A --max-* limit reached stops this worker: the turn says so the first time."""
    session = session_of(max_pages=1)
    session.tally.fetched = 1
    assert started(session, Limits(0.0, 0.0)).result is True
    assert session.due().stopping
    assert started(session, Limits(0.0, 0.0)).result is False


def test_forgetting_drops_hosts_idle_long_enough() -> None:
    """A host with nothing queued or in flight is forgotten once idle long enough."""
    session = fetched_one()
    assert started(session, Forget(1.0)).result == []
    assert started(session, Forget(IDLE_HOST_SECONDS + 10)).result == ["a.test"]


def test_a_take_of_revisits_marks_the_crawl_busy_as_of_its_server_second() -> None:
    """A take that queued revisits keeps the crawl from being judged over by a heartbeat
    Redis answered before it; one that queued none changes nothing."""
    session = session_of()
    taking = started(session, TakeRevisits(3600))
    assert taking.next_step(0.0) == TakeDue(3600)
    taking.answered(Taken(entries=0, buckets=1, dropped=0, now_s=50), 0.0)
    assert taking.next_step(0.0) == Done() and taking.result == 0
    assert session.heartbeat.took_s == -1
    taking = started(session, TakeRevisits(3600))
    taking.answered(Taken(entries=3, buckets=1, dropped=0, now_s=100), 0.0)
    assert taking.result == 3 and session.heartbeat.took_s == 100


def test_the_state_says_the_crawl_is_over_by_the_last_heartbeat() -> None:
    """``due().finished``: the newest heartbeat found the fleet idle --idle seconds."""
    session = session_of(idle=2.0)
    assert not session.due().finished  # no heartbeat yet
    session.heartbeat.answered(beat(idle_since=0, now_ms=1999), sent=0.0, received=0.0)
    assert not session.due().finished
    session.heartbeat.answered(beat(idle_since=0, now_ms=2000), sent=0.1, received=0.1)
    assert session.due().finished


def test_the_state_carries_the_slots_the_ring_the_scope_and_the_outcomes() -> None:
    """``due()`` tells a sharded driver what it routes by: every slot taken, the newest
    ring, the scope, and the outcomes to commit, oldest first."""
    session = session_of(concurrency=1)
    ready(session, "http://a.test/1")
    due = session.due()
    assert not due.saturated and due.ring is session.epochs.latest and not due.outcomes
    assert due.scope is session.commits.scope
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert session.due().saturated and session.due().in_flight == 1
    outcome = Outcome.done(held, [], [])
    session.fetches.ended(held, outcome, 0.1)
    due = session.due()
    assert list(due.outcomes) == [outcome] and due.pending == 1 and due.saturated


@pytest.mark.parametrize("faults", [(), ("send_unchecked",)])
def test_a_page_answers_whether_its_request_may_still_leave(faults: tuple[str, ...]) -> None:
    """As its request is written a page asks the gate again: a worker whose heartbeat
    is older than it may trust sends nothing (unless the deliberate bug skips it)."""
    session = session_of()
    ready(session, "http://a.test/1")
    page = started(session, Dispatch(0.0))
    assert isinstance(page, Page)
    assert page.next_step(0.0) == Send(cookie=None)
    assert page.may_send(0.0)
    session.fetches.faults = type(session.fetches.faults).of(list(faults))
    assert page.may_send(LEASE) is bool(faults)


def test_a_pages_own_requests_take_their_hosts_turn_through_it() -> None:
    """A rendered page's sub-request waits its host's turn and counts its end; a
    robots.txt redirect's hop to a host not this worker's waits --delay, never refused."""
    session = session_of(delay=1.0)
    ready(session, "http://a.test/1")
    page = started(session, Dispatch(0.0))
    assert isinstance(page, Page)
    page.next_step(0.0)
    assert page.sub_request("http://a.test/img.png", 0.5) == 1.0
    page.sub_request_ended("http://a.test/img.png", 1.2)
    assert session.frontier.hosts["a.test"].last_end == 1.2
    assert page.sub_request("http://b.test/x", 2.0) == "b.test is no longer this worker's " + (
        "host: http://b.test/x not fetched"
    )
    assert page.sub_request("http://b.test/robots.txt", 2.0, hop=True) == 3.0
