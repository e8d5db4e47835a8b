"""Judging a revisit crawl from the site's log (testing/revisitjudge.py), on logs made by
hand: the rule replayed, changes against their bound, idle time, gaps against --delay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hashcrawl._core._revisit import Policy
from testing.revisitjudge import Bound, fetches_of, idle_while_due, judge
from testing.revisitsite import Page, RevisitSite

BOUND = Bound(beat_s=0.2, delay_s=0.5, answer_s=0.1, pages=3, kill_s=4.0)
FIXED = Policy.parse("10")
NO_KILL = -1000.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def site(clock: Clock) -> Iterator[RevisitSite]:
    pages = [Page(kind="etag", period=20), Page(kind="none", period=None)]
    with RevisitSite(pages, clock=clock) as served:
        yield served


def fetch(site: RevisitSite, clock: Clock, at: float, path: str) -> None:
    clock.t = at
    site.answer(path, None, None)


def test_a_gap_under_the_delay_by_more_than_the_clocks_resolution_is_a_violation(
    site: RevisitSite, clock: Clock
) -> None:
    """Gaps of exactly --delay are polite; one a tenth of a millisecond short is not, and
    robots.txt's requests count."""
    for at, path in ((0.0, "/robots.txt"), (0.5, "/"), (1.0, "/p/0"), (1.4999, "/p/1")):
        fetch(site, clock, at, path)
    got = judge(site, FIXED, fast=20, killed=NO_KILL, end=2.0, bound=BOUND)
    assert (got["requests"], got["rude"]) == (4, 1)
    assert got["smallest_gap"] == pytest.approx(0.4999)


def test_the_rule_is_replayed_from_the_versions_each_fetch_saw(
    site: RevisitSite, clock: Clock
) -> None:
    """Adaptive 5-60 s: a quiet page is due 5 s after each fetch until it has been quiet
    for 25 s, then a fifth of its quiet time; each fetch's lateness is over that."""
    policy = Policy.parse("adaptive", low=5, high=60)
    times = [0.0, 5.5, 11.0, 16.5, 22.0, 27.5, 33.0, 40.0]
    for at in times:
        fetch(site, clock, at, "/p/1")
    got = fetches_of(site, 1, policy, NO_KILL, BOUND.kill_s)
    assert [f.then for f in got] == [5, 5, 5, 5, 5, 5, 6, 7]
    assert [round(f.over, 2) for f in got[1:] if f.over is not None] == [0.5] * 6 + [1.0]


def test_a_change_seen_past_its_bound_is_counted_and_one_still_due_is_not_judged(
    site: RevisitSite, clock: Clock
) -> None:
    """Fixed 10 s: page 0 changes at 20 s and 40 s; the first is seen at 35 s, past 10 s
    and the bound; the second, unseen at the end (44 s), was not yet due by the bound."""
    for at in (0.0, 35.0):
        fetch(site, clock, at, "/p/0")
    got = judge(site, FIXED, fast=20, killed=NO_KILL, end=44.0, bound=BOUND)
    fast = got["classes"]["fast"]  # type: ignore[index]
    assert (fast["made"], fast["seen"], fast["past_bound"]) == (1, 1, 1)
    assert fast["late_max"] == pytest.approx(15.0)


def test_an_unseen_change_that_was_due_is_past_its_bound(site: RevisitSite, clock: Clock) -> None:
    """A change the schedule should have seen by the end, and did not, counts."""
    fetch(site, clock, 15.0, "/p/0")
    got = judge(site, FIXED, fast=20, killed=NO_KILL, end=39.0, bound=BOUND)
    fast = got["classes"]["fast"]  # type: ignore[index]
    assert (fast["made"], fast["seen"], fast["past_bound"]) == (1, 0, 1)


def test_idle_time_is_what_the_gaps_leave_past_a_delay_and_an_answer() -> None:
    """Requests at 0.2 and 1.0 s in a window [0, 1.5), a request keeping the host busy for
    0.6 s (--delay 0.5 and an answer): idle only 0.2 s, between the two."""
    assert idle_while_due([0.2, 1.0], 0.0, 1.5, BOUND) == pytest.approx(0.2)
    assert idle_while_due([], 0.0, 0.5, BOUND) == 0.0
