"""The crash simulation's revisits (simulations/revisits.py): its judges on hand-made
logs, the web's changing pages, a revisiting example through a crash and a join, and
the two deliberate revisit bugs it catches."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from simulations import changes, profiles, revisits, teeth
from simulations.model import CrawlModel
from simulations.web import Fetch, Site, Web

URL = "http://h0.test/p1"
EXAMPLES = 40  # each seed of a deliberate revisit bug is tried for up to these


def fetch(start: float, end: float, worker: str = "w1", *, final: bool = True) -> Fetch:
    return Fetch(worker, URL, "h0.test", start, end, final, False, 200)


def test_a_revisit_no_sooner_than_its_interval_is_no_repeat() -> None:
    """Fetches an interval apart are visits; one sooner is a repeat, allowed only once
    per holder that died or stalled."""
    log = [fetch(0, 0.5), fetch(6.5, 7), fetch(8, 8.2), fetch(13.2, 13.5)]
    assert revisits.early(log, {URL}, 6.0, {}) != []
    assert revisits.early(log, {URL}, 6.0, {URL: 1}) == []
    assert revisits.early(log[:2] + log[3:], {URL}, 6.0, {}) == []


def test_an_error_does_not_begin_a_visit() -> None:
    """Only a fetch for good is a visit: a timed-out one before it changes nothing."""
    log = [fetch(0, 0.5), fetch(3, 5, final=False), fetch(6.5, 7)]
    assert revisits.early(log, {URL}, 6.0, {}) == []


def test_a_page_due_before_the_last_take_must_be_fetched_again() -> None:
    """Its last answer read at 1 s, an interval of 6 s, latency 0.2 s: due by 8.2 s; a
    take at 9 s should have queued it, one at 8 s could not yet."""
    log = [fetch(0, 0.5)]
    lost = revisits.lost(log, {URL}, {URL: 1.0}, set(), high=6.0, latency=0.2, last_take=9.0)
    assert len(lost) == 1 and "due again by 8.200 s" in lost[0]
    assert revisits.lost(log, {URL}, {URL: 1.0}, set(), high=6.0, latency=0.2, last_take=8.0) == []
    assert revisits.lost(log, {URL}, {URL: 1.0}, {URL}, high=6.0, latency=0.2, last_take=9.0) == []


def test_a_changing_page_changes_at_its_times_and_answers_304_while_unchanged() -> None:
    """Version n from n * every seconds; a conditional request for the current version
    is a 304, one for an older version a 200 with the new body."""
    change = changes.Change(5.0, "etag")
    first = changes.revised(change, b"<p>", {}, 4.9)
    assert (first.status, first.headers["etag"]) == (200, '"v0"')
    assert changes.revised(change, b"<p>", {"If-None-Match": '"v0"'}, 4.99).status == 304
    later = changes.revised(change, b"<p>", {"If-None-Match": '"v0"'}, 5.0)
    assert later.status == 200 and later.body != first.body
    dated = changes.Change(15.0, "last-modified")
    got = changes.revised(dated, b"<p>", {}, 1.0)
    since = {"If-Modified-Since": got.headers["last-modified"]}
    assert changes.revised(dated, b"<p>", since, 14.0).status == 304
    assert changes.revised(dated, b"<p>", since, 15.0).status == 200


def test_only_a_revisiting_example_changes_its_pages() -> None:
    """Without --revisit the web is as before: no page has changes, no body a version."""
    web = Web.of(Site(seed=3, hosts=3, pages=20))
    assert web.changes == {}
    page = next(url for url in revisits.revisited(web) if web.pages[url].kind == "ok")
    assert b"version" not in web.answer(page).body


def test_a_revisiting_crawl_through_a_crash_and_a_join_keeps_every_invariant() -> None:
    """Pages revisited on time, one host's revisits fetched by another worker after a
    crash and a join, 304s served: every invariant, never early and never lost included."""
    state = CrawlModel()
    state.setup(
        site=Site(seed=3, hosts=3, pages=20),
        workers=2,
        roots=[0, 1],
        faults=2,
        delay=1.0,
        revisit="6",
    )
    with contextlib.redirect_stdout(io.StringIO()):  # outside Hypothesis notes are printed
        for order in (1, 2):
            state.run(seconds=4.0, order=order)
        state.crash(w=0)
        state.run(seconds=4.0, order=3)
        state.join()
        state.run(seconds=4.0, order=4)
        state.teardown()
    world = state.w
    got = revisits.figures(world.fetches, revisits.revisited(world.web))
    assert got["revisit fetches"] >= 10 and got["304s"] >= 1
    assert got["revisits by another worker"] >= 1
    assert world.revisit is not None and world.revisit.takes


@pytest.mark.parametrize(
    ("fault", "caught_as", "seeds"),
    [
        ("revisit_stays_due", "sooner than its interval", (1, 2, 3)),
        # Scanned on 3ca49df (the rules had changed every seed's examples): seed 3
        # catches it at the 7th example and 2 at the 23rd (4 and 11 s of CPU alone); 6
        # (the first seed before), 4, 7 and 8 miss it in 40 (20-28 s of CPU each, which
        # made this the suite's longest test but the two halves while 6 came first).
        ("revisit_put_after_ack", "never fetched again", (3, 2)),
    ],
    ids=["revisit_stays_due", "revisit_put_after_ack"],
)
def test_simulation_catches_deliberate_revisit_bug(
    fault: str, caught_as: str, seeds: tuple[int, ...]
) -> None:
    """A take that leaves its records due repeats revisits; a put after the
    acknowledgement loses a page's revisits when its worker dies in between. Each seed
    is tried in turn for up to EXAMPLES examples: the later ones are spares, should a
    busy machine move the first one's catch later."""
    profile = profiles.Profile("teeth", examples=EXAMPLES, steps=profiles.QUICK.steps)
    for seed_value in seeds:
        try:
            teeth.run_with(fault, profile, seed_value=seed_value)
        except AssertionError as exc:
            assert re.search(caught_as, str(exc)), str(exc)
            return
    pytest.fail(f"{fault} not caught with seeds {seeds}, {EXAMPLES} examples each")
