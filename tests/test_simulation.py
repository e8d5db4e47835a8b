"""The crash simulation: it passes its quick profile, it catches deliberate bugs, and it
replays the bugs it found as listed (see docs/simulation.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from simulations import checks, known, profiles, teeth, world
from simulations.fleet import Fleet, hosts_moved_per_join
from simulations.web import Site, Web

# What each deliberate bug breaks first, as the violation message says it.
CAUGHT_AS = {
    "ack_before_write": "neither queued, done nor dead",
    "reclaim_live": "reclaimed alive|fetched at once|less than its delay|times",
    "skip_seen_filter": "was fetched [0-9]+ times",
    "drop_pace": "less than its delay|fetched at once",
}
TEETH = profiles.Profile("teeth", examples=600, steps=50)
# A seeded switch is tried with each of its seeds in turn, each for up to SEEDED_EXAMPLES
# examples, and is caught when one of them catches it. Alone the runs are deterministic;
# a change to the simulation's rules changes every seed's examples, so the seeds here are
# rescanned then (docs/simulation.md). On 3ca49df: seed 11 catches ack_before_write at
# the 10th example, 8 at the 8th (2-3 s of CPU each); 7 (the first seed before, at the
# 9th then), 12 and 13 miss it in 40 (20-35 s of CPU each: the suite's third-longest
# test while 7 came first; 14 ended in Hypothesis's FlakyStrategyDefinition at load 30).
# In CI's parallel run one seed once missed its early catch twice (cause not found): the
# later seed is its spare, so the test neither hangs on one path nor fails on one miss.
# How often a whole quick run catches each is measured by ``python -m simulations.teeth``
# (docs/simulation.md).
SEEDED = {"ack_before_write": (11, 8)}
SEEDED_EXAMPLES = 40
# A timing switch likewise, by its seeds in turn, each for up to SEEDED_EXAMPLES examples.
# wide_fresh_window's one seed (6) caught it only after 150 s, the suite's third-longest
# test. Alone, each first seed here catches its switch in 1-3 s, its spares in 3-9 s
# (wide_fresh_window: seeds 1 and 8-11 miss it in 40; the scan: docs/simulation.md).
TIMING = {
    "newest_as_settled": ("two workers fetched at once|less than its delay", (5, 2, 3)),
    "wide_fresh_window": ("fetched at once|less than its delay", (7, 2, 3)),
    "send_stale": ("fetched at once|less than its delay", (1, 9, 4)),
}


# The suite runs 160 of the quick profile's 220 examples, as two halves drawn from two
# seeds, which two xdist workers run side by side: one CPU-bound test of minutes would
# otherwise be the whole suite's floor, and the whole 220 were a third of the suite's CPU
# (CI's budget is 10 minutes on 2 cores). `python -m simulations` runs it whole, and
# scripts/mutants uses it whole.
SUITE_EXAMPLES = 160
QUICK_HALF = profiles.Profile("quick", examples=SUITE_EXAMPLES // 2, steps=profiles.QUICK.steps)


@pytest.mark.parametrize("half", [1, 2])
def test_quick_profile_keeps_every_invariant(half: int) -> None:
    """Random crashes, pauses, cut-offs, joins, leaves and Redis restarts break nothing."""
    # The same examples on every run (a fixed seed, no database): CI fails only when the
    # code does.
    report = profiles.run(QUICK_HALF, seed_value=half, database=None)
    assert report.examples >= QUICK_HALF.examples
    assert report.pages > 0 and sum(report.faults.values()) > 0


@pytest.mark.parametrize("fault", sorted(CAUGHT_AS))
def test_simulation_catches_deliberate_bug(fault: str) -> None:
    """With one deliberate bug switched on, the simulation finds a broken invariant."""
    if fault not in SEEDED:
        with pytest.raises(AssertionError, match=CAUGHT_AS[fault]):
            _run_with(fault, TEETH, derandomize=True)
        return
    profile = profiles.Profile("teeth", examples=SEEDED_EXAMPLES, steps=TEETH.steps)
    for seed_value in SEEDED[fault]:
        try:
            _run_with(fault, profile, seed_value=seed_value)
        except AssertionError as exc:
            assert re.search(CAUGHT_AS[fault], str(exc)), str(exc)
            return
    pytest.fail(f"{fault} not caught with seeds {SEEDED[fault]}, {SEEDED_EXAMPLES} examples each")


def _run_with(fault: str, profile: profiles.Profile, **run: Any) -> None:
    teeth.run_with(fault, profile, **run)


@pytest.mark.parametrize("fault", sorted(TIMING))
def test_simulation_catches_deliberate_timing_bug(fault: str) -> None:
    """A timing bug (an epoch, a lease window, a check before sending) breaks politeness."""
    caught_as, seeds = TIMING[fault]
    profile = profiles.Profile("timing", examples=SEEDED_EXAMPLES, steps=profiles.QUICK.steps)
    for seed_value in seeds:
        try:
            _run_with(fault, profile, seed_value=seed_value)
        except AssertionError as exc:
            assert re.search(caught_as, str(exc)), str(exc)
            return
    pytest.fail(f"{fault} not caught with seeds {seeds}, {SEEDED_EXAMPLES} examples each")


def test_cli_prints_every_script_when_hypothesis_finds_several(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two distinct failures print two replayable scripts and both errors, exit status 1."""
    from simulations import __main__ as cli

    def two_failures(*args: object, **kwargs: object) -> profiles.Report:
        failures = [AssertionError("first broke"), AssertionError("second broke")]
        for n, failure in enumerate(failures):
            failure.add_note(f"state = CrawlModel()\nstate.step{n}()")
        raise ExceptionGroup("Hypothesis found 2 distinct failures", failures)

    monkeypatch.setattr(cli.profiles, "run", two_failures)
    assert cli.main([]) == 1
    out, err = capsys.readouterr()
    assert "state.step0()" in out and "state.step1()" in out
    assert "first broke" in err and "second broke" in err


@pytest.mark.parametrize("name", sorted([*known.OPEN, *known.FIXED]))
def test_known_bug_replays_as_listed(name: str) -> None:
    """An open bug's shortest script still breaks an invariant; a fixed one's no longer.

    When an open bug's replay passes, the bug is fixed: move its entry in
    simulations/known.py to FIXED, and the simulation stops steering around it.
    """
    if name in known.OPEN:
        with pytest.raises(AssertionError):
            known.replay(name)
    else:
        known.replay(name)


def test_ring_moves_about_one_host_in_n_plus_one_per_join() -> None:
    """Adding a 21st worker to a ring of 20 moves close to 1/21 of 10,000 hosts."""
    moved = hosts_moved_per_join(members=20, hosts=10_000)
    assert 0.02 < moved < 0.08


def test_small_fleet_crawls_everything_with_churn() -> None:
    """A small fleet with joins and crashes ends with every page done and figures to show."""
    fleet = Fleet(workers=6, hosts=40, pages_per_host=20, seed=1, churn_every=3.0)
    figures = fleet.run(churn=True)
    assert figures.pages_done == figures.pages_total
    assert figures.commands_per_page > 0
    assert figures.reclaim_seconds and max(figures.reclaim_seconds) < 3 * figures.lease


def test_a_killer_page_is_drawn_apart_and_judged_by_the_deaths_it_costs() -> None:
    """One site in three has a killer page, an ordinary page and the only one that kills
    its reader; more member deaths than --max-attempts + 1 break its invariant."""
    webs = [Web.of(Site(seed, 3, 20)) for seed in range(300)]
    killers = [web.killer for web in webs if web.killer is not None]
    assert 60 < len(killers) < 140
    web = next(web for web in webs if web.killer is not None)
    assert web.pages[web.killer].kind == "ok" and web.kills(web.killer)
    assert not any(web.kills(url) for url in web.pages if url != web.killer)
    assert checks.killer(4, max_attempts=3) == []
    assert "killed 5 members" in checks.killer(5, max_attempts=3)[0]


def test_reach_is_drawn_apart_from_the_site_and_in_about_half_the_sites() -> None:
    """Parking and a small seen filter come to about half the sites each, a page cap to
    about a third (2 or 3 pages a host), drawn from the site's seed alone, so every page
    and killer page stays as it was."""
    reaches = [world.Reach.of(seed) for seed in range(400)]
    assert 140 < sum(r.park for r in reaches) < 260
    assert 140 < sum(r.seen_layer is not None for r in reaches) < 260
    assert 90 < sum(r.cap is not None for r in reaches) < 180
    assert {r.cap for r in reaches} == {None, *world.CAPS}
    assert {(r.park, r.seen_layer is None) for r in reaches} == {
        (a, b) for a in (True, False) for b in (True, False)
    }
    assert Web.of(Site(7, 3, 20)).pages == Web.of(Site(7, 3, 20)).pages


def test_outstanding_may_fall_short_by_the_entries_written_by_hand_never_more() -> None:
    assert checks.accounting(5, 5) == []
    assert checks.accounting(2, 5, planted=3) == []
    assert "written by hand" in checks.accounting(1, 5, planted=3)[0]
    assert checks.accounting(6, 5, planted=3)  # above the entries: never
    assert checks.accounting(-2, 2, planted=3)  # a recount gone negative


def test_a_delay_change_is_kept_by_requests_from_its_bound_on() -> None:
    """Before a change, and within FOLLOW_WITHIN of it, the lesser delay; after, the new."""

    class Timeline:
        delays = [(float("-inf"), 1.0), (10.0, 3.0), (20.0, 2.0)]

    timeline: Any = Timeline()
    assert world.delay_at(timeline, 5.0) == 1.0
    assert world.delay_at(timeline, 10.0 + world.FOLLOW_WITHIN - 1) == 1.0
    assert world.delay_at(timeline, 20.0 + world.FOLLOW_WITHIN - 1) == 2.0  # 3 and 2 in force
    assert world.delay_at(timeline, 20.0 + world.FOLLOW_WITHIN + 1) == 2.0
    early = [(float("-inf"), 1.0), (10.0, 3.0)]
    timeline.delays = early
    assert world.delay_at(timeline, 10.0 + world.FOLLOW_WITHIN + 1) == 3.0
