"""Tests for hashcrawl._core._pace: the pace record as text and back, hostile records,
and the hosts whose records wait for the fleet to settle."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Release
from hashcrawl._core._frontier import Frontier, Held, Host
from hashcrawl._core._pace import MAX_HANDED_ROBOTS, Carry, PaceRecord, Paces
from hashcrawl._core._parts import Clock
from hashcrawl._core._robotsrules import Robots
from tests.test_core import ready
from tests.test_page import dispatched

records = st.builds(
    PaceRecord,
    last_ms=st.integers(0, 2**53),
    backoff_ms=st.integers(0, 2**53),
    crawl_delay=st.floats(0, 1e6, allow_nan=False),
    taken=st.integers(0, 10**9),
    cookies=st.text(st.characters(blacklist_characters=";\x1e"), max_size=40),
)


@given(records)
def test_a_record_reads_back_as_it_was_written(record: PaceRecord) -> None:
    """from_text(to_text(r)) is r, for every record a worker can write."""
    assert PaceRecord.from_text(record.to_text()) == record


@given(records, st.text(max_size=60), st.integers(1, 10**15 - 1))
def test_a_record_with_robots_txt_reads_back_as_it_was_written(
    record: PaceRecord, robots: str, until_ms: int
) -> None:
    """The robots.txt text comes back whole, whatever it holds (``;``, ``,``, ``\x1e``)."""
    handed = attrs.evolve(record, robots=robots, robots_until_ms=until_ms)
    assert PaceRecord.from_text(handed.to_text()) == handed


def test_robots_txt_too_long_or_with_no_expiry_is_not_read() -> None:
    """A record written by hand: rules past MAX_HANDED_ROBOTS, or with an expiry that is
    not a whole number, are left out (the next owner fetches robots.txt)."""
    long = PaceRecord(robots="x" * (MAX_HANDED_ROBOTS + 1), robots_until_ms=5).to_text()
    assert PaceRecord.from_text(long).robots_until_ms == 0
    assert PaceRecord.from_text("1,0,0.0\x1esoon\x1eUser-agent: *").robots_until_ms == 0
    assert PaceRecord.from_text("1,0,0.0\x1e9\x1eUser-agent: *").robots == "User-agent: *"


def test_a_host_with_work_queued_hands_its_fresh_robots_txt_to_its_next_owner() -> None:
    """The old owner's record carries the rules and their expiry in server time; the new
    owner keeps them until then and does not fetch robots.txt; a host with nothing
    queued, or rules expired, hands none over."""
    old, _ = dispatched(obey_robots=True)
    rules = Robots.parse("User-agent: *\nDisallow: /private/\n", "hashcrawl")
    old.robots.rules["a.test"] = rules.kept_until(500.0)
    ready(old, "http://a.test/next")  # still queued: its next owner needs the rules
    text = old.pacing.records(["a.test"], 10.0)["a.test"]
    record = PaceRecord.from_text(text)
    assert record.robots == rules.text
    assert record.robots_until_ms == old.clock.server_ms(500.0)
    assert old.pacing.records(["a.test"], 600.0).get("a.test", "").find("\x1e") == -1
    new, held = dispatched(obey_robots=True)
    new.robots.rules.pop("a.test", None)
    new.pacing.adopt(new.frontier.hosts["a.test"], record)
    assert not new.robots.wanted(held, 10.0)
    assert not new.robots.rules["a.test"].allowed("http://a.test/private/x")
    assert new.robots.wanted(held, 600.0)  # fresh only as long as it was for the old one
    idle, _ = dispatched(obey_robots=True)
    idle.robots.rules["a.test"] = rules.kept_until(500.0)
    idle.frontier.hosts["a.test"].queue.clear()
    idle.frontier.hosts["a.test"].in_flight = 0
    assert "\x1e" not in idle.pacing.records(["a.test"], 10.0).get("a.test", "")


def test_a_record_written_by_an_older_worker_reads_without_taken_or_cookies() -> None:
    """Three numbers are a whole record: no page count, no cookies."""
    assert PaceRecord.from_text("1700000000000,0,2.5") == PaceRecord(
        last_ms=1700000000000, crawl_delay=2.5
    )


def test_taken_and_cookies_are_written_only_when_there_are_some() -> None:
    """A record stays as short as the old format when nothing more is carried."""
    assert PaceRecord(last_ms=5, crawl_delay=1.0).to_text() == "5,0,1.0"
    assert PaceRecord(taken=3, cookies="[]").to_text() == "0,0,0.0,3;[]"


@given(st.text(max_size=60))
def test_any_text_reads_as_a_record_without_raising(text: str) -> None:
    """What Redis holds is input from outside: nothing in it raises."""
    record = PaceRecord.from_text(text)
    assert record.readable or (record.last_ms, record.taken) == (0, 0)


def test_unreadable_numbers_still_hand_over_the_cookies() -> None:
    """A record whose numbers are garbage keeps its cookies, and says it is unreadable."""
    record = PaceRecord.from_text("x,y,z;[cookies]")
    assert (record.readable, record.cookies) == (False, "[cookies]")
    assert not PaceRecord.from_text("inf,0,0").readable  # a time forever away is not kept


def frontier_with(*names: str, since: int) -> Frontier:
    frontier = Frontier(delay=0.0, per_host=1)
    for name in names:
        frontier.add(Held(f"1-{name}", Entry(url=f"http://{name}/"), name), epoch=since)
    return frontier


def test_a_record_is_read_only_once_the_fleet_has_settled_the_hosts_epoch() -> None:
    """A host gained at epoch 3 waits while the fleet has settled 2, and is due at 3."""
    carry, frontier = Carry(), frontier_with("a.test", since=3)
    carry.want(["a.test"], frontier, Release(settled=2))
    assert carry.take_due() == []
    carry.want([], frontier, Release(settled=3))
    assert carry.take_due() == ["a.test"]
    assert carry.take_due() == []


def test_a_host_no_longer_held_is_not_read() -> None:
    """A host handed on before its record was due is dropped from the wait."""
    carry = Carry()
    carry.want(["gone.test"], frontier_with(since=1), Release(settled=5))
    assert (carry.take_due(), carry.unpaced) == ([], set())


def test_a_commit_forgets_the_records_it_deleted() -> None:
    """Records read are remembered until a commit deletes them from Redis."""
    carry = Carry(read={"a.test": "1,0,0", "b.test": "2,0,0"})
    carry.committed(["a.test", "1,0,0"])
    assert carry.read == {"b.test": "2,0,0"}


def test_a_host_still_paced_hands_its_last_request_over_in_server_time() -> None:
    """A host whose delay runs past now carries its last request's end, a little late."""
    clock = Clock(offset_ms=1_000_000.0, rtt=0.02)
    host = Host("a.test", since=1, last_end=10.0, last_start=9.5)
    record = PaceRecord.of(host, 2.0, 11.0, clock, taken=0, cookies="")
    assert record == PaceRecord(last_ms=clock.server_ms(10.01), crawl_delay=0.0)


def test_a_free_host_without_count_or_cookies_hands_nothing_over() -> None:
    """Past its delay, with no page count and no cookies, a host needs no record."""
    host = Host("a.test", since=1, last_end=1.0)
    assert PaceRecord.of(host, 2.0, 10.0, Clock(), taken=0, cookies="") is None
    assert PaceRecord.of(None, 2.0, 10.0, Clock(), taken=3, cookies="") == PaceRecord(taken=3)


def test_the_next_owner_waits_at_least_as_long_as_the_record_says() -> None:
    """Adopting a record never lets the host go sooner, margin included."""
    clock = Clock(offset_ms=0.0, rtt=0.1)
    host = Host("a.test", since=1)
    PaceRecord(last_ms=5_000, backoff_ms=9_000, crawl_delay=3.0).pace(host, clock)
    assert host.last_end == host.last_start == 5.0 + 0.105
    assert (host.backoff_until, host.crawl_delay) == (9.0 + 0.105, 3.0)


def test_a_host_is_paced_from_its_floor_as_well_as_from_its_record() -> None:
    """After a takeover by name, whoever owns a host next paces it from the floor the
    takeover left (``lua/join.lua``) as well as from any record: both are adopted, and
    adopting never lets a host go sooner."""
    carry = Carry()
    frontier = frontier_with("busy.test", "idle.test", "calm.test", since=1)
    adopted: dict[str, list[int]] = {}
    paces = Paces({"busy.test": "7000,0,0"}, {"busy.test": 35_000, "idle.test": 5_000})
    carry.loaded(
        ["busy.test", "idle.test", "calm.test"],
        paces,
        Release(settled=1),
        frontier,
        lambda host, record: adopted.setdefault(host.name, []).append(record.last_ms),
    )
    assert adopted == {"busy.test": [7_000, 35_000], "idle.test": [5_000]}
    assert all(frontier.hosts[name].paced for name in ("busy.test", "idle.test", "calm.test"))
    assert carry.read == {"busy.test": "7000,0,0"}
