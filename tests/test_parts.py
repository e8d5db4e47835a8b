"""Tests for hashcrawl._core._parts: the server clock, suspects in flight, the limits,
and the robots.txt and sitemap cache."""

from __future__ import annotations

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._parts import Clock, RobotsCache, Suspects, limit_reached
from hashcrawl._core._robotsrules import RULES_TTL, Robots, Unreachable


def held(n: int = 1, host: str = "a.test", **entry: object) -> Held:
    return Held(f"{n}-0", Entry(url=f"http://{host}/{n}", **entry), host)  # type: ignore[arg-type]


def test_the_clock_takes_the_offset_at_the_middle_of_the_round_trip() -> None:
    """Sent at 10 s, answered at 12 s with server time 100,000 ms: offset 89,000 ms."""
    clock = Clock()
    clock.sample(10.0, 12.0, 100_000)
    assert (clock.rtt, clock.offset_ms) == (2.0, 89_000.0)
    assert clock.local_time(clock.server_ms(5.0)) == 5.0


def test_the_clock_s_latest_reading_is_the_latest_the_exchange_allows() -> None:
    """Server time 100 s stamped somewhere between sent at 10 s and answered at 12 s: at
    local 12 s the server reads at most 102 s, and that bound, no later (5ec4f23c added
    a whole round trip: revisits stamped a round trip late)."""
    clock = Clock()
    clock.sample(10.0, 12.0, 100_000)
    assert clock.server_s_by(12.0) == 102.0


def test_a_blamed_suspect_goes_out_alone_among_suspects() -> None:
    """Once a suspect that used an attempt is out, no other suspect may start."""
    suspects = Suspects()
    blamed = held(1, suspect=True, attempts=1)
    assert suspects.started(blamed) == (1, ["1-0"])
    frontier = Frontier(delay=0, per_host=1)
    frontier.add(held(2, "b.test", suspect=True), epoch=1)
    waiting = frontier.hosts["b.test"]
    assert not suspects.may_start(waiting)
    suspects.ended(blamed)
    assert suspects.may_start(waiting)


def test_a_page_that_is_no_suspect_is_not_recorded() -> None:
    """Only suspects are written to the in-flight record."""
    assert Suspects().started(held(1)) is None


def test_the_first_limit_reached_is_named() -> None:
    """A limit of None is off; the first value at its limit is the one reported."""
    checks = (("--max-pages", None, 10.0), ("--max-errors", 3, 3.0), ("--max-time", 1, 5.0))
    assert limit_reached(checks) == ("--max-errors", 3)
    assert limit_reached((("--max-pages", 5, 4.0),)) is None


def test_rules_are_wanted_until_read_and_again_once_expired() -> None:
    """A host's robots.txt is fetched first, kept RULES_TTL, then fetched again."""
    cache, frontier, page = RobotsCache(), Frontier(delay=0, per_host=1), held()
    assert cache.wanted(page, 0.0)
    assert cache.read(page, Robots.allow_all(), 0.0, frontier, lease=10.0) is None
    assert not cache.wanted(page, RULES_TTL - 1)
    assert cache.wanted(page, RULES_TTL)


def test_unreachable_rules_keep_the_stale_copy_or_say_why() -> None:
    """Unreachable with no copy gives the reason; with one, the copy serves a while."""
    cache, frontier, page = RobotsCache(), Frontier(delay=0, per_host=1), held()
    assert cache.read(page, Unreachable("HTTP 503"), 0.0, frontier, lease=10.0) == "HTTP 503"
    cache.read(page, Robots.deny_all(), 0.0, frontier, lease=10.0)
    later = RULES_TTL + 1
    assert cache.read(page, Unreachable("HTTP 503", 7.0), later, frontier, lease=10.0) is None
    assert cache.of(page) == Robots.deny_all()
    assert not cache.wanted(page, later + 6.9)


def test_a_hosts_sitemaps_are_queued_once_until_it_is_forgotten() -> None:
    """The first page of a host brings its sitemaps; forgetting the host resets that."""
    cache, page = RobotsCache(), held()
    assert [e.url for e in cache.sitemaps_of(page)] == ["http://a.test/sitemap.xml"]
    assert cache.sitemaps_of(held(2)) == []
    cache.forget("a.test")
    assert len(cache.sitemaps_of(held(3))) == 1
