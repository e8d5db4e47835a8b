"""Tests for hashcrawl._core._intake: reads ask for what memory allows, a failed read is
followed by rereading this reader's pending entries, parked hosts come back as they run
short."""

from __future__ import annotations

import pytest

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._intake import PARK_AT, UNPARK_BELOW, Intake, Mine, Read
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import Fenced


def frontier_of(host: str, queued: int) -> Frontier:
    frontier = Frontier(delay=0.0, per_host=1)
    for n in range(queued):
        frontier.add(Held(f"{n}-0", Entry(url=f"http://{host}/{n}"), host), epoch=1)
    return frontier


def test_a_read_asks_for_what_memory_still_holds_and_parks_when_full() -> None:
    """Up to 200 entries; fewer as the buffer fills; 100 to park once it is full."""
    intake = Intake()
    assert intake.request(frontier_of("a.test", 0), 1000) == Read(200, None, False)
    assert intake.request(frontier_of("a.test", 950), 1000) == Read(50, None, False)
    assert intake.request(frontier_of("a.test", 1000), 1000) == Read(100, None, True)


def test_after_a_failed_read_the_reader_rereads_its_pending_entries_until_none() -> None:
    """A failure may have delivered entries: read after the last one taken in, then new."""
    intake = Intake()
    intake.answered(Read(200, None, False), [("5-0", b"{}")])
    intake.failed()
    again = intake.request(frontier_of("a.test", 0), 1000)
    assert again.after == "5-0"
    assert intake.answered(again, []) is False
    assert intake.request(frontier_of("a.test", 0), 1000).after is None


def test_a_parked_host_takes_entries_back_once_it_runs_short() -> None:
    """Below UNPARK_BELOW queued (or gone), yes; with memory full, stop asking."""
    intake = Intake()
    intake.parked_read(["a.test", "b.test"], Ring.of(1, ("w1",)), "w1")
    assert intake.unpark_wanted() == ["a.test", "b.test"]
    assert intake.may_unpark("a.test", frontier_of("a.test", UNPARK_BELOW), 1000) is False
    assert intake.may_unpark("a.test", frontier_of("a.test", UNPARK_BELOW - 1), 1000)
    assert intake.may_unpark("a.test", frontier_of("a.test", 10), 10) is None
    intake.unparked("a.test", "ok", 0, "w1")
    assert intake.unpark_wanted() == ["b.test"]


def test_a_host_parked_before_its_commit_stays_parked_through_a_reread() -> None:
    """Parked hosts read again (after a handoff) while a park waits to be committed: the
    host is not in Redis's set yet, and must not be forgotten (found by the simulation)."""
    intake, ring = Intake(), Ring.of(1, ("w1",))
    frontier, ledger = frontier_of("a.test", PARK_AT), Ledger()
    entry = Entry(url="http://a.test/more").encode()
    mine = Mine("w1", lambda entry: None)
    intake.take_in([("99-0", entry)], True, frontier, ring, mine, ledger)
    assert [o.kind.value for o in ledger.outcomes] == ["park"]
    intake.parked_read([], ring, "w1")  # Redis has no overflow set of a.test yet
    assert intake.unpark_wanted() == ["a.test"]
    intake.parked_read(["b.test"], Ring.of(2, ("w2",)), "w1")  # both hosts moved away
    assert intake.unpark_wanted() == []


def test_none_left_does_not_drop_a_host_whose_park_may_come_after_the_unpark() -> None:
    """An unpark's "none left" is stale when a park of the host was uncommitted as the
    unpark left (Redis may run that commit after it), or was taken in since: the host
    stays, and is dropped by an unpark sent once its parks are committed (found by the
    simulation: the overflow set written after the unpark was never asked back)."""
    intake, ring, ledger = Intake(), Ring.of(1, ("w1",)), Ledger()
    frontier, mine = frontier_of("a.test", PARK_AT), Mine("w1", lambda entry: None)
    intake.take_in(
        [("99-0", Entry(url="http://a.test/x").encode())], True, frontier, ring, mine, ledger
    )
    guard = intake.unpark_guard("a.test", ledger)
    assert guard is None
    intake.unparked("a.test", "ok", 0, "w1", guard)
    assert intake.unpark_wanted() == ["a.test"]
    ledger.outcomes.clear()  # committed
    guard = intake.unpark_guard("a.test", ledger)
    intake.take_in(
        [("100-0", Entry(url="http://a.test/y").encode())], True, frontier, ring, mine, ledger
    )
    ledger.outcomes.clear()
    intake.unparked("a.test", "ok", 0, "w1", guard)  # the new park was taken in since
    assert intake.unpark_wanted() == ["a.test"]
    intake.unparked("a.test", "ok", 0, "w1", intake.unpark_guard("a.test", ledger))
    assert intake.unpark_wanted() == []


def test_an_unpark_refused_as_fenced_fences_the_worker() -> None:
    """The unpark script's "fenced" ends the membership."""
    with pytest.raises(Fenced, match="w1 lost its membership"):
        Intake().unparked("a.test", "fenced", 3, "w1")
