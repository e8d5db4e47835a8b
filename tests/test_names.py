"""Static membership (``--name``): the decisions (take a stopped member's place, or
refuse a running one's name), and join.lua's takeover on a real server: the old
incarnation fenced, its stream an orphan, no host moved, and a refusal writing nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_py

from hashcrawl._core._batch import Batch
from hashcrawl._core._faults import Faults
from hashcrawl._core._names import (
    Holder,
    HolderBehind,
    Verdict,
    check_name,
    first_look,
    fresh_window_ms,
    next_look,
    refusal,
)
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import ConfigError, NameTaken
from hashcrawl._run._naming import claim
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from tests.test_scripts import LEASE, Clock, beat, queued

WINDOW = fresh_window_ms(60.0)  # 16 s: lease/4 and the margin
HERE = "box/boot-1/pid:[4026531836]"


LEASE_MS = 60_000


def held(
    *,
    beat_ms: int = 100_000,
    now_ms: int = 101_000,
    machine: str = HERE,
    pid: int = 41,
    behind: bool = False,
) -> Holder:
    return Holder(
        member="a~1",
        beat_ms=beat_ms,
        now_ms=now_ms,
        machine=machine,
        pid=pid,
        host="box",
        behind=behind,
    )


def look(holder: Holder, *, pid: int = 7, running: bool = True) -> Verdict:
    return first_look(
        holder, machine=HERE, pid=pid, window_ms=WINDOW, lease_ms=LEASE_MS, alive=lambda _: running
    )


def again(first: Holder, now: Holder | None) -> Verdict:
    return next_look(first, now, window_ms=WINDOW, lease_ms=LEASE_MS)


# -- the decisions -------------------------------------------------------------------------


def test_a_holder_whose_process_is_gone_from_this_machine_is_taken_over_at_once() -> None:
    assert look(held(), running=False) is Verdict.TAKE
    # Its pid is this very process's: a container's pid 1 again, or its own past membership.
    assert look(held(pid=7)) is Verdict.TAKE


def test_a_holder_that_beat_recently_is_watched_unless_provably_gone() -> None:
    assert look(held()) is Verdict.WATCH  # same machine, process running
    assert look(held(machine="other/boot-1/pid:[1]"), running=False) is Verdict.WATCH
    assert look(held(machine=""), running=False) is Verdict.WATCH  # machine unknown
    # A different boot of the same host: its pids say nothing.
    assert look(held(machine="box/boot-2/pid:[4026531836]"), running=False) is Verdict.WATCH


def test_a_holder_silent_past_the_fresh_window_is_taken_over_wherever_it_runs() -> None:
    at_edge = held(beat_ms=100_000, now_ms=100_000 + WINDOW, machine="far")
    assert look(at_edge) is Verdict.WATCH
    past = held(beat_ms=100_000, now_ms=100_001 + WINDOW, machine="far")
    assert look(past) is Verdict.TAKE


def test_a_watched_holder_that_beats_again_or_is_replaced_refuses_the_name() -> None:
    first = held()
    assert again(first, held(now_ms=102_000)) is Verdict.WATCH
    assert again(first, held(beat_ms=101_500)) is Verdict.REFUSE
    other = Holder(member="a~2", beat_ms=100_000, now_ms=102_000)
    assert again(first, other) is Verdict.REFUSE
    aged = held(now_ms=100_001 + WINDOW)
    assert again(first, aged) is Verdict.TAKE
    assert again(first, None) is Verdict.TAKE  # it left: the name is free


def test_a_holder_behind_the_newest_epoch_is_taken_over_only_past_its_lease() -> None:
    """It may still hold hosts that epoch moved to others, and wrote no pace records for
    them: its place is taken only as its expiry would take it."""
    assert look(held(behind=True), running=False) is Verdict.WATCH
    silent = held(behind=True, beat_ms=100_000, now_ms=100_001 + WINDOW, machine="far")
    assert look(silent) is Verdict.WATCH
    assert again(silent, silent) is Verdict.WATCH
    expired = held(behind=True, beat_ms=100_000, now_ms=100_001 + LEASE_MS, machine="far")
    assert look(expired) is Verdict.TAKE
    assert again(expired, expired) is Verdict.TAKE


def test_the_refusal_is_one_line_naming_the_running_worker() -> None:
    line = refusal("crawler-1", held())
    assert line == "a worker named crawler-1 is running (pid 41 on box); pick another --name"


@pytest.mark.parametrize("bad", ["", "-x", "a~b", "a b", "a" * 65, "é", "a\nb"])
def test_a_bad_name_is_refused_naming_the_rule(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"--name must be 1-64 letters"):
        check_name(bad)
    with pytest.raises(ConfigError, match=r"name must be 1-64 letters.*got 7"):
        check_name(7, called="name")  # type: ignore[arg-type]
    assert check_name("crawler-1.eu_2") == "crawler-1.eu_2"


def test_the_fresh_window_is_a_quarter_lease_and_a_margin() -> None:
    assert fresh_window_ms(60.0) == 16_000
    assert fresh_window_ms(4.0) == 2_000


# -- join.lua ------------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(redis_url: str, crawl_name: str, clock: Clock) -> Iterator[Store]:
    store = Store(RedisURL.parse(redis_url), crawl_name, clock=clock)
    yield store
    store.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis_py.Redis]:
    client = redis_py.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def dump(raw: redis_py.Redis, store: Store) -> dict[str, bytes | None]:
    return {key: raw.dump(key) for key in sorted(raw.keys(store.key("*")))}


def test_a_takeover_fences_the_old_incarnation_and_moves_no_host(store, raw, clock):
    """The new id replaces the old in one epoch: the old one's heartbeat and commits are
    refused, what it held is counted reclaimed and its stream waits to be drained, and
    the ring of the new epoch gives every host to the same name."""
    store.join("a~1", {"pid": 41})
    store.join("b", {})
    queued(store, raw, "a~1", "http://h1.example/", "http://h2.example/")
    before = Ring.of(2, ["a~1", "b"])
    beat(store, "a~1", applied=2, known=2)
    clock.ms += 3_000
    holder = store.holder("a")
    assert holder is not None and (holder.member, holder.pid, holder.behind) == ("a~1", 41, False)
    _, epoch, _ = store.join("a~2", {}, replaces=holder, lease_ms=LEASE)
    assert epoch == 3
    assert raw.zrange(store.key("members"), 0, -1) == ["b", "a~2"]
    assert store.stream_of("a~1") in raw.smembers(store.key("orphans"))
    assert raw.hget(store.key("stats"), "leases_reclaimed") == "2"
    assert raw.hget(store.key("stats"), "taken_over") == "1"
    assert raw.hget(store.key("applied"), "a~1") is None
    after = Ring.of(3, ["a~2", "b"])
    for host in (f"h{i}.example" for i in range(500)):
        old = before.owner_of(host)
        assert after.owner_of(host) == ("a~2" if old == "a~1" else old)
    assert not beat(store, "a~1", applied=2, known=2).alive
    assert store.commit(Batch(worker="a~1", epoch=3, ack=[])).status == "fenced"


def test_a_takeover_leaves_floors_under_the_old_members_hosts_for_any_next_owner(store, raw, clock):
    """The old member wrote no pace records: its hosts are floored at the takeover, and
    those it had pages of in hand at the takeover plus --timeout, for whoever owns them
    next (``pace`` reads them); an hour-old floor is pruned by the next takeover."""
    store.join("a~1", {})
    raw.hset(store.key("floors"), "stale.example", clock.ms - 3_600_001)
    raw.hset(store.key("floors"), "edge.example", clock.ms - 3_600_000)  # an hour: kept
    raw.hset(store.key("floors"), "later.example", clock.ms + 99_000)
    beat(store, "a~1", applied=1, known=1)
    taken_at = clock.ms
    in_hand = ["later.example", "busy.example"]
    store.join("a~2", {}, replaces=store.holder("a"), in_hand=in_hand, timeout_ms=30_000)
    clock.ms += 5_000
    assert raw.hget(store.key("floors"), "stale.example") is None
    assert raw.hget(store.key("floors"), "edge.example") is not None
    paces = store.pace(["busy.example", "idle.example", "later.example", "new.example"])
    assert paces.floors == {
        "busy.example": taken_at + 30_000,
        "idle.example": taken_at,
        "later.example": taken_at + 99_000,  # a later floor is kept
        "new.example": taken_at,
    }
    assert paces.records == {}


def test_hosts_read_with_no_takeover_have_no_floor(store, raw):
    store.join("a", {})
    store.leave("a", {"a.example": "1,0,0"})
    store.join("b", {})
    hosts = [f"h{i}.example" for i in range(2_500)] + ["a.example"]  # over one call's chunk
    paces = store.pace(hosts)
    assert (paces.records, paces.floors) == ({"a.example": "1,0,0"}, {})
    assert not raw.exists(store.key("floors"))


def test_a_name_whose_member_beat_since_it_was_seen_is_refused_writing_nothing(store, raw, clock):
    store.join("a~1", {})
    seen = store.holder("a")
    clock.ms += 1_000
    beat(store, "a~1", applied=1, known=1)
    before = dump(raw, store)
    with pytest.raises(NameTaken):
        store.join("a~2", {}, replaces=seen)
    with pytest.raises(NameTaken):  # nor may a worker join under a held name unasked
        store.join("a~3", {})
    assert dump(raw, store) == before


def test_a_holder_behind_the_newest_epoch_keeps_its_place_until_its_lease_ran_out(
    store, raw, clock
):
    store.join("a~1", {})
    store.join("b", {})  # epoch 2, which a~1 has not applied
    seen = store.holder("a")
    assert seen is not None and seen.behind
    before = dump(raw, store)
    clock.ms += LEASE
    with pytest.raises(HolderBehind):
        store.join("a~2", {}, replaces=seen, lease_ms=LEASE)
    assert dump(raw, store) == before
    clock.ms += 1
    _, epoch, _ = store.join("a~2", {}, replaces=seen, lease_ms=LEASE)
    assert epoch == 3
    assert raw.zrange(store.key("members"), 0, -1) == ["b", "a~2"]


def test_a_takeover_of_a_member_gone_meanwhile_is_a_plain_join(store, raw, clock):
    """The holder expired between the look and the join: the name is free, and the
    join changes the epoch once."""
    store.join("a~1", {})
    seen = store.holder("a")
    clock.ms += LEASE + 1
    store.join("b", {})
    assert beat(store, "b").alive  # expires a~1: epoch 3
    _, epoch, _ = store.join("a~2", {}, replaces=seen)
    assert epoch == 4
    assert raw.hget(store.key("stats"), "taken_over") is None
    assert store.holder("a") is not None and store.holder("b") is not None


def test_a_takeover_never_removes_a_member_of_another_name(store, raw):
    assert store.holder("b") is None
    store.join("b~1", {})
    wrong = store.holder("b")
    _, epoch, _ = store.join("a~1", {}, replaces=wrong)
    assert epoch == 2
    assert raw.zrange(store.key("members"), 0, -1) == ["a~1", "b~1"]


# -- the claim -----------------------------------------------------------------------------


class Beating:
    """A store whose name holder is a running worker on another machine: its heartbeat
    moves between two looks."""

    def __init__(self) -> None:
        self.looks = 0

    def holder(self, name: str) -> Holder:
        self.looks += 1
        beat = 100_000 + 500 * self.looks
        return Holder(
            member=f"{name}~1", beat_ms=beat, now_ms=beat + 200, machine="far", pid=9, host="far"
        )


async def persist(fn, *args):  # type: ignore[no-untyped-def]
    return fn(*args)


async def test_a_claim_on_a_running_workers_name_is_refused_and_the_deliberate_bug_is_not() -> None:
    """The claim watches the holder's heartbeat and refuses once it moves; with
    ``take_running`` it takes the running worker's place instead, which this catches."""
    store = Beating()
    with pytest.raises(NameTaken, match=r"a worker named a is running \(pid 9 on far\)"):
        await claim(store, persist, "a", 60.0, "--name")  # type: ignore[arg-type]
    assert store.looks == 2
    bugged = await claim(
        Beating(),  # type: ignore[arg-type]
        persist,
        "a",
        60.0,
        "--name",
        Faults.of(["take_running"]),
    )
    assert bugged is not None and bugged.member == "a~1"
