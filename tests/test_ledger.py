"""Tests for hashcrawl._core._ledger: outcomes wait, oldest first, until a commit of them
goes through; fetched pages hold a slot until then; items are written once."""

from __future__ import annotations

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._ledger import COMMIT_MAX, Ledger
from hashcrawl._core._outcome import Outcome


def page(n: int, items: int = 0) -> Outcome:
    held = Held(f"{n}-0", Entry(url=f"http://a.test/{n}"), "a.test")
    return Outcome.done(held, [{"n": n}] * items, [])


def test_a_commit_takes_the_oldest_outcomes_at_most_commit_max() -> None:
    """The next commit is the head of the ledger, COMMIT_MAX long at most."""
    ledger = Ledger()
    outcomes = [page(n) for n in range(COMMIT_MAX + 3)]
    for outcome in outcomes:
        ledger.add(outcome)
    assert ledger.next_commit().outcomes == outcomes[:COMMIT_MAX]


def test_only_fetched_pages_hold_a_slot_until_committed() -> None:
    """A fetched page counts as uncommitted; a forwarded entry does not; a commit frees."""
    ledger = Ledger()
    ledger.add(Outcome.bad("1-0", "unreadable"))
    ledger.add_fetched(page(2, items=3))
    assert (ledger.uncommitted, ledger.items_pending, len(ledger)) == (1, 3, 2)
    ledger.committed(ledger.next_commit())
    assert (ledger.uncommitted, len(ledger)) == (0, 0)


def test_a_commit_cut_short_is_done_again_without_its_items() -> None:
    """Items written for a commit that did not go through are not written again."""
    ledger = Ledger()
    ledger.add_fetched(page(1, items=2))
    first = ledger.next_commit()
    assert len(first.items) == 2
    ledger.commit_written(first)
    again = ledger.next_commit()
    assert (again.outcomes, again.items) == (first.outcomes, [])


def test_outcomes_added_while_a_commit_was_out_stay_for_the_next() -> None:
    """Committing the head leaves what came after it, in order."""
    ledger = Ledger()
    ledger.add_fetched(page(1))
    commit = ledger.next_commit()
    ledger.add_fetched(page(2))
    ledger.committed(commit)
    assert [o.eid for o in ledger.outcomes] == ["2-0"]
    assert ledger.uncommitted == 1
