"""The Lua scripts' contracts, one script at a time, on a real server: what each writes,
what it refuses, and where its boundaries are (a lease's last millisecond, an unpark's
count, a commit's fencing). Each test pins a property a one-line slip in the script
would break, found by scripts/mutants (docs/simulation.md, "Mutants")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_py

import hashcrawl._store
from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import Fenced, StateLost
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Batch, Store

LEASE = 8_000


class Clock:
    """Milliseconds the scripts take for "now", moved by hand."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


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


def beat(store: Store, worker: str, *, applied: int = 0, known: int = 0, **more: object):  # type: ignore[no-untyped-def]
    return store.heartbeat(worker, lease_ms=LEASE, applied=applied, known_epoch=known, **more)  # type: ignore[arg-type]


def begun(store: Store, raw: redis_py.Redis) -> None:
    """Mark the crawl as one that has queued an entry: only such a crawl can be idle."""
    raw.hset(store.key("seenmeta"), "queued", 1)


def entry(url: str) -> str:
    return json.dumps({"u": url})


def queued(store: Store, raw: redis_py.Redis, worker: str, *urls: str) -> list[str]:
    """``urls`` in ``worker``'s stream, delivered to it (pending), as a commit would find
    them; counted in 'outstanding' as a commit adding them would."""
    ids = [raw.xadd(store.stream_of(worker), {"r": entry(u)}) for u in urls]
    raw.hincrby(store.key("seenmeta"), "outstanding", len(ids))
    store.read(worker, count=len(ids), block_ms=10)
    return [str(i) for i in ids]


def link(store: Store, worker: str, url: str, *, filtered: bool = True) -> list[object]:
    h1, h2 = fingerprint(url)
    return [store.stream_of(worker), entry(url), h1, h2, 1 if filtered else 0]


def urls_in(raw: redis_py.Redis, stream: str) -> list[str]:
    return [json.loads(fields["r"])["u"] for _, fields in raw.xrange(stream)]


# -- join.lua -------------------------------------------------------------------------


def test_a_join_makes_a_member_at_a_new_epoch_with_its_own_empty_stream(store, raw, clock):
    """A new member: epoch + 1, applied at that epoch, heartbeat at now, a stream and group."""
    _, first, _ = store.join("w1", {"host": "a"})
    now, epoch, marker = store.join("w2", {"host": "b"})
    assert (first, epoch, now) == (1, 2, clock.ms)
    assert raw.zscore(store.key("members"), "w2") == clock.ms
    assert raw.hget(store.key("applied"), "w2") == "2"
    assert raw.sismember(store.key("workers"), "w2")
    assert raw.hget(store.key("w:w2"), "host") == "b"
    assert raw.xinfo_groups(store.stream_of("w2"))[0]["name"] == "g"
    assert marker == raw.get(store.key("instance")) != ""


def test_a_join_without_a_clock_takes_the_servers_time_in_ms(redis_url, crawl_name, raw):
    """A worker passes no clock (``hashcrawl join``): join.lua reads the server's TIME,
    and the member's heartbeat and the reply's now are that time in ms, between the
    server's ms before and after the call (a slip of the microseconds' part would put a
    new member's lease up to a second off)."""
    store = Store(RedisURL.parse(redis_url), crawl_name)  # no clock: the server's TIME

    def server_ms() -> int:
        seconds, micros = raw.time()
        return seconds * 1000 + micros // 1000

    try:
        for worker in ("w1", "w1"):  # a new member, then the same one joining again
            before = server_ms()
            now, _, _ = store.join(worker, {})
            after = server_ms()
            assert before <= now <= after
            assert raw.zscore(store.key("members"), worker) == now
    finally:
        store.close()


def test_joining_again_while_a_member_keeps_the_stream_and_renews_the_lease(store, raw, clock):
    """A retried join changes no epoch and loses no entry; the lease runs from the retry."""
    store.join("w1", {})
    raw.xadd(store.stream_of("w1"), {"r": entry("http://a.example/")})
    clock.ms += 5_000
    _, epoch, _ = store.join("w1", {})
    assert epoch == 1
    assert raw.xlen(store.stream_of("w1")) == 1
    assert raw.zscore(store.key("members"), "w1") == clock.ms


def test_a_former_member_is_fenced_and_a_lost_marker_refused(store, raw):
    """An id that lost its membership may not join again; a crawl whose marker changed
    refuses a worker that knew the old one, writing nothing."""
    _, _, marker = store.join("w1", {})
    store.leave("w1", {})
    with pytest.raises(Fenced):
        store.join("w1", {})
    raw.set(store.key("instance"), "another")
    with pytest.raises(StateLost):
        store.join("w2", {}, instance=marker)
    assert not raw.zscore(store.key("members"), "w2")


# -- heartbeat.lua ------------------------------------------------------------------------


def test_a_member_silent_for_exactly_its_lease_is_kept_and_one_ms_more_expired(store, raw, clock):
    """Expiry takes a whole lease of silence: the last millisecond still counts as alive."""
    store.join("w1", {})
    store.join("w2", {})
    clock.ms += LEASE
    assert beat(store, "w2").alive
    assert raw.zscore(store.key("members"), "w1") is not None
    clock.ms += 1
    got = beat(store, "w2", known=2)
    assert got.epoch == 3 and got.members == ("w2",)
    assert raw.zscore(store.key("members"), "w1") is None


def test_a_worker_beating_after_its_lease_is_told_it_is_gone(store, clock):
    """A worker's own heartbeat after a lease of silence expires it: it must not go on."""
    store.join("w1", {})
    clock.ms += LEASE
    assert beat(store, "w1").alive
    clock.ms += LEASE + 1
    assert not beat(store, "w1").alive
    assert not beat(store, "w1").alive


def test_an_expired_member_leaves_its_stream_as_an_orphan_and_counts_what_it_held(
    store, raw, clock
):
    """Expiry: out of members and applied, epoch + 1, its stream an orphan, its pending
    entries counted as leases reclaimed."""
    store.join("w1", {})
    store.join("w2", {})
    queued(store, raw, "w1", "http://a.example/1", "http://a.example/2")
    clock.ms += LEASE
    beat(store, "w2", applied=2, known=2)
    clock.ms += 1
    got = beat(store, "w2", applied=2, known=2)
    assert raw.hget(store.key("applied"), "w1") is None
    assert raw.smembers(store.key("orphans")) == {store.stream_of("w1")}
    assert raw.hget(store.key("stats"), "leases_reclaimed") == "2"
    assert (got.epoch, got.orphans) == (3, 1)


def test_a_heartbeat_reports_the_oldest_applied_epoch_as_settled(store, raw):
    """Settled is the epoch every member has applied: the least of them."""
    store.join("w1", {})
    store.join("w2", {})
    store.join("w3", {})
    beat(store, "w1", applied=3)
    beat(store, "w2", applied=2)
    got = beat(store, "w3", applied=3, known=3)
    assert (got.epoch, got.settled) == (3, 2)
    assert got.members is None  # it knew the epoch: no member list
    assert raw.hget(store.key("applied"), "w2") == "2"


def test_a_heartbeat_names_the_members_behind_and_the_rings_they_fetch_by(store, raw):
    """While a member has not applied the newest epoch, the heartbeat reports each member
    behind with its applied epoch and that epoch's members; once settled, nothing, and the
    rings below the settled epoch are pruned."""
    store.join("w1", {})
    store.join("w2", {})
    got = beat(store, "w2", applied=2, known=2)
    assert (got.settled, dict(got.behind)) == (1, {"w1": 1})
    assert got.rings == {1: ("w1",)}
    got = beat(store, "w1", applied=2, known=2)
    assert (got.settled, dict(got.behind), dict(got.rings)) == (2, {}, {})
    assert set(raw.hkeys(store.key("rings"))) == {"2"}


def test_a_heartbeat_sent_before_a_handoff_never_takes_the_applied_epoch_back(store, raw):
    """A heartbeat that reports an older applied epoch than Redis holds (sent before the
    handoff commit, run after it) leaves it: a member behind is judged by its ring."""
    store.join("w1", {})
    store.join("w2", {})
    beat(store, "w1", applied=2, known=2)
    beat(store, "w1", applied=1, known=2)
    assert raw.hget(store.key("applied"), "w1") == "2"


def test_a_heartbeat_records_the_workers_counters(store, raw):
    """The stats pairs replace the worker's own counters."""
    store.join("w1", {})
    beat(store, "w1", stats={"fetched": 3, "failed": 1})
    assert raw.hget(store.key("w:w1"), "fetched") == "3"
    assert raw.hget(store.key("w:w1"), "failed") == "1"


def test_submissions_waiting_in_the_inbox_count_as_an_orphan_and_keep_the_crawl_busy(store, raw):
    """An inbox with entries is drained like an orphan; the crawl is not idle meanwhile."""
    store.join("w1", {})
    assert beat(store, "w1").orphans == 0
    raw.xadd(store.inbox, {"r": entry("http://a.example/")})
    got = beat(store, "w1")
    assert (got.orphans, got.idle_since) == (1, -1)


def test_idle_since_is_set_once_when_nothing_is_outstanding_and_cleared_by_work(store, raw, clock):
    """The crawl is idle from the first heartbeat that finds nothing outstanding; later
    ones keep that time; an entry added ends the idle spell."""
    begun(store, raw)
    store.join("w1", {})
    first = beat(store, "w1").idle_since
    assert first == clock.ms
    clock.ms += 500
    assert beat(store, "w1").idle_since == first
    added = store.commit(Batch(worker="w1", epoch=1, add=[link(store, "w1", "http://a.example/")]))
    assert added.added == 1
    assert raw.get(store.key("idle_since")) is None
    assert beat(store, "w1").idle_since == -1
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"


def test_an_outstanding_count_that_went_wrong_is_recounted_from_streams_and_parked(store, raw):
    """Before the crawl is called idle, queued and parked entries are counted for real."""
    begun(store, raw)
    store.join("w1", {})
    raw.xadd(store.stream_of("w1"), {"r": entry("http://a.example/")})
    raw.zadd(store.key("park:b.example"), {"1-0 x": 1})
    raw.sadd(store.key("parked"), "b.example")
    raw.hset(store.key("seenmeta"), "outstanding", 0)
    assert beat(store, "w1").idle_since == -1
    assert raw.hget(store.key("seenmeta"), "outstanding") == "2"


@pytest.mark.parametrize("written", ["many", "1.5e", "-"])
def test_an_outstanding_count_that_is_not_a_number_costs_nothing_and_is_recounted(
    store, raw, written
):
    """A count written by hand that is no number: the commit counts from 0 rather than
    failing, and the next heartbeat that would call the crawl idle recounts it."""
    begun(store, raw)
    store.join("w1", {})
    raw.hset(store.key("seenmeta"), "outstanding", written)
    added = store.commit(Batch(worker="w1", epoch=1, add=[link(store, "w1", "http://a.example/")]))
    assert added.added == 1
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"
    raw.hset(store.key("seenmeta"), "outstanding", written)
    assert beat(store, "w1").idle_since == -1
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"


# -- leave.lua and release.lua ----------------------------------------------------------------


def test_leaving_hands_the_stream_on_as_an_orphan_at_a_new_epoch_once(store, raw):
    """leave: out of members and applied, its stream an orphan, epoch + 1; again: 0."""
    store.join("w1", {})
    store.join("w2", {})
    assert store.leave("w1", {"a.example": "1,0,0"}) == 3
    assert raw.zscore(store.key("members"), "w1") is None
    assert raw.hget(store.key("applied"), "w1") is None
    assert raw.smembers(store.key("orphans")) == {store.stream_of("w1")}
    assert raw.hget(store.key("pace"), "a.example") == "1,0,0"
    assert store.leave("w1", {}) == 0
    assert raw.get(store.key("epoch")) == "3"


def test_a_drained_orphan_is_released_and_one_with_entries_kept(store, raw, clock):
    """release deletes only an empty stream, and marks its worker departed at now."""
    store.join("w1", {})
    store.join("w2", {})
    queued(store, raw, "w1", "http://a.example/")
    store.leave("w1", {})
    stream = store.stream_of("w1")
    assert not store.release(stream)
    assert raw.exists(stream) and raw.sismember(store.key("orphans"), stream)
    raw.xtrim(stream, maxlen=0)
    assert store.release(stream)
    assert not raw.exists(stream) and not raw.sismember(store.key("orphans"), stream)
    assert raw.zscore(store.key("departed"), "w1") == clock.ms


def test_a_commit_parks_its_entries_by_host_and_skips_one_a_drain_took(store, raw):
    """park: each entry still in the stream leaves it (acknowledged, deleted) for its
    host's overflow set, scored as given; one already gone (a drain moved it) is parked
    nowhere; the parked set names each host with entries once, and stats counts the
    entries parked."""
    begun(store, raw)
    store.join("w1", {})
    urls = ["http://a.example/1", "http://a.example/2", "http://b.example/1", "http://c.example/1"]
    ids = queued(store, raw, "w1", *urls)
    raw.xack(store.stream_of("w1"), "g", ids[3])  # c.example's: a drain took it meanwhile
    raw.xdel(store.stream_of("w1"), ids[3])
    hosts = ["a.example", "a.example", "b.example", "c.example"]
    park = [
        [i, host, n, entry(u)] for n, (i, host, u) in enumerate(zip(ids, hosts, urls, strict=True))
    ]
    store.commit(Batch(worker="w1", epoch=1, src=store.stream_of("w1"), park=park))
    assert urls_in(raw, store.stream_of("w1")) == []
    assert raw.xpending(store.stream_of("w1"), "g")["pending"] == 0
    assert raw.zrange(store.key("park:a.example"), 0, -1, withscores=True) == [
        (f"{ids[0]} {entry(urls[0])}", 0.0),
        (f"{ids[1]} {entry(urls[1])}", 1.0),
    ]
    assert raw.zrange(store.key("park:b.example"), 0, -1) == [f"{ids[2]} {entry(urls[2])}"]
    assert not raw.exists(store.key("park:c.example"))
    assert raw.smembers(store.key("parked")) == {"a.example", "b.example"}
    assert raw.hget(store.key("stats"), "parks") == "3"


# -- unpark.lua -------------------------------------------------------------------------------


def parked(store: Store, raw: redis_py.Redis, host: str, *urls: str) -> None:
    """``urls`` in ``host``'s overflow set, the first the most urgent."""
    for n, url in enumerate(urls):
        raw.zadd(store.key(f"park:{host}"), {f"{n}-0 {entry(url)}": n})
    raw.sadd(store.key("parked"), host)


def test_unpark_brings_the_most_urgent_entries_back_whole_and_keeps_the_rest(store, raw):
    """Up to ``count`` entries, lowest score first, payloads intact; the host stays parked
    while entries remain, and leaves the parked set with the last."""
    store.join("w1", {})
    urls = [f"http://a.example/{n}" for n in range(3)]
    parked(store, raw, "a.example", *urls)
    assert store.unpark("w1", 1, "a.example", 2) == ("ok", 2, 1)
    assert urls_in(raw, store.stream_of("w1")) == urls[:2]
    assert raw.sismember(store.key("parked"), "a.example")
    assert store.unpark("w1", 1, "a.example", 2) == ("ok", 1, 0)
    assert urls_in(raw, store.stream_of("w1")) == urls
    assert not raw.sismember(store.key("parked"), "a.example")


def test_unpark_refuses_a_stale_epoch_and_a_non_member_moving_nothing(store, raw):
    """An unpark routed by an old ring, or by a worker that lost its membership, moves
    nothing: the entries may belong to another owner now."""
    store.join("w1", {})
    parked(store, raw, "a.example", "http://a.example/")
    assert store.unpark("w1", 0, "a.example", 5)[0] == "stale"
    assert store.unpark("w9", 1, "a.example", 5)[0] == "fenced"
    assert raw.zcard(store.key("park:a.example")) == 1
    assert raw.xlen(store.stream_of("w1")) == 0


# -- commit.lua ---------------------------------------------------------------------------------


def test_a_commit_is_refused_for_a_non_member_a_stale_epoch_or_a_grown_scope(store, raw):
    """Every check comes before any write: a refused commit adds nothing."""
    store.join("w1", {})
    add = [link(store, "w1", "http://a.example/")]
    assert store.commit(Batch(worker="w9", epoch=1, add=add)).status == "fenced"
    stale = store.commit(Batch(worker="w1", epoch=2, add=add))
    assert (stale.status, stale.epoch) == ("stale", 1)
    rescope = store.commit(Batch(worker="w1", epoch=1, add=add, scope=1))
    assert (rescope.status, rescope.scope) == ("rescope", 0)
    assert raw.xlen(store.stream_of("w1")) == 0
    assert store.commit(Batch(worker="w1", epoch=1, add=add, scope=0)).added == 1


def test_a_submitter_commits_without_membership(store, raw):
    """A submit (worker '') is not fenced: it routes to the inbox while nobody is alive."""
    got = store.commit(
        Batch(worker="", epoch=0, add=[[store.inbox, entry("http://a.example/"), 1, 2, 1]])
    )
    assert (got.status, got.added) == ("ok", 1)
    assert raw.xlen(store.inbox) == 1


def test_the_seen_filter_stops_a_link_twice_but_not_an_unfiltered_entry(store, raw):
    """A filtered link is added once; an entry past the filter is added every time."""
    store.join("w1", {})
    a = link(store, "w1", "http://a.example/")
    b = link(store, "w1", "http://b.example/", filtered=False)
    assert store.commit(Batch(worker="w1", epoch=1, add=[a, b])).added == 2
    assert store.commit(Batch(worker="w1", epoch=1, add=[a, b])).added == 1
    assert raw.hget(store.key("seenmeta"), "outstanding") == "3"
    meta = raw.hgetall(store.key("seenmeta"))
    assert (meta["seen"], meta["queued"]) == ("1", "3")


def test_an_acknowledged_entry_leaves_the_stream_and_the_count_once(store, raw):
    """Acknowledging deletes the entry and lowers 'outstanding'; sent again, nothing more."""
    store.join("w1", {})
    ids = queued(store, raw, "w1", "http://a.example/1", "http://a.example/2")
    batch = Batch(worker="w1", epoch=1, src=store.stream_of("w1"), ack=ids[:1])
    assert store.commit(batch).acked == 1
    assert store.commit(batch).acked == 0
    assert urls_in(raw, store.stream_of("w1")) == ["http://a.example/2"]
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"
    assert raw.xpending(store.stream_of("w1"), "g")["pending"] == 1


def test_a_moved_entry_goes_once_and_keeps_the_count(store, raw):
    """A move re-routes an entry still there, acknowledging it; an entry gone is skipped."""
    store.join("w1", {})
    store.join("w2", {})
    (eid,) = queued(store, raw, "w1", "http://a.example/")
    mv = [[eid, store.stream_of("w2"), entry("http://a.example/")]]
    batch = Batch(worker="w1", epoch=2, src=store.stream_of("w1"), mv=mv)
    assert store.commit(batch).moved == 1
    assert store.commit(batch).moved == 0
    assert raw.xlen(store.stream_of("w1")) == 0
    assert raw.xpending(store.stream_of("w1"), "g")["pending"] == 0
    assert urls_in(raw, store.stream_of("w2")) == ["http://a.example/"]
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"


def test_a_parked_entry_leaves_the_stream_for_its_hosts_overflow_set(store, raw):
    """Parking moves an entry from the stream to park:host, scored, and names the host."""
    store.join("w1", {})
    (eid,) = queued(store, raw, "w1", "http://a.example/")
    park = [[eid, "a.example", 7, entry("http://a.example/")]]
    assert (
        store.commit(Batch(worker="w1", epoch=1, src=store.stream_of("w1"), park=park)).status
        == "ok"
    )
    assert raw.xlen(store.stream_of("w1")) == 0
    assert raw.xpending(store.stream_of("w1"), "g")["pending"] == 0
    assert raw.zrange(store.key("park:a.example"), 0, -1, withscores=True) == [
        (f"{eid} {entry('http://a.example/')}", 7.0)
    ]
    assert store.parked_hosts() == {"a.example"}
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"


def test_an_entrys_retry_is_added_only_while_the_entry_is_still_there(store, raw):
    """The once list: acknowledged with what it led to, and only once however often sent."""
    store.join("w1", {})
    (eid,) = queued(store, raw, "w1", "http://a.example/")
    once = [[eid, store.stream_of("w1"), entry("http://a.example/?retry")]]
    batch = Batch(worker="w1", epoch=1, src=store.stream_of("w1"), once=once)
    first = store.commit(batch)
    assert (first.added, first.acked) == (1, 1)
    again = store.commit(batch)
    assert (again.added, again.acked) == (0, 0)
    assert urls_in(raw, store.stream_of("w1")) == ["http://a.example/?retry"]
    assert raw.hget(store.key("seenmeta"), "outstanding") == "1"


def test_a_commit_records_pace_applied_dead_letters_and_counters(store, raw):
    """The handoff's records and the counters land as given."""
    store.join("w1", {})
    batch = Batch(
        worker="w1",
        epoch=1,
        pace=["a.example", "5,0,0"],
        applied=1,
        dead=["k1", "r1", "k2", "r2"],
        stats={"fetched": 2, "none": 0},
    )
    assert store.commit(batch).status == "ok"
    assert raw.hget(store.key("pace"), "a.example") == "5,0,0"
    assert raw.hget(store.key("applied"), "w1") == "1"
    assert raw.hgetall(store.key("dead")) == {"k1": "r1", "k2": "r2"}
    stats = raw.hgetall(store.key("stats"))
    assert (stats["dead"], stats["fetched"]) == ("2", "2")
    assert "none" not in stats


def test_a_full_seen_filter_layer_still_lets_one_new_link_in(store, raw):
    """When a layer fills, the next link opens a new one: one new link is added, not lost,
    and the full layer still stops the links it holds."""
    store.join("w1", {})
    raw.hset(store.key("seenmeta"), mapping={"c0": 2})
    first = [link(store, "w1", f"http://a.example/{n}") for n in range(2)]
    assert store.commit(Batch(worker="w1", epoch=1, add=first)).added == 2
    new = link(store, "w1", "http://a.example/new")
    assert store.commit(Batch(worker="w1", epoch=1, add=[*first, new])).added == 1
    assert raw.hget(store.key("seenmeta"), "L") == "2"
    assert store.commit(Batch(worker="w1", epoch=1, add=[*first, new])).added == 0


def test_a_commit_that_adds_nothing_leaves_an_idle_spell_alone(store, raw):
    """Only an added entry ends the idle spell: a handoff's records do not restart it."""
    begun(store, raw)
    store.join("w1", {})
    idle = beat(store, "w1").idle_since
    assert (
        store.commit(Batch(worker="w1", epoch=1, applied=1, pace=["a.example", "1,0,0"])).status
        == "ok"
    )
    assert raw.get(store.key("idle_since")) == str(idle)


def test_an_orphan_waiting_to_be_drained_keeps_the_crawl_from_looking_idle(store, raw):
    """While a departed worker's stream waits for a drainer, the crawl is not idle."""
    begun(store, raw)
    store.join("w1", {})
    store.join("w2", {})
    assert beat(store, "w2").idle_since > 0
    store.leave("w1", {})
    got = beat(store, "w2", applied=3, known=3)
    assert (got.orphans, got.idle_since) == (1, -1)


def test_a_busy_fleets_heartbeat_counts_no_streams(redis_server: RedisServer) -> None:
    """While entries are outstanding, a heartbeat trusts the counter: one XLEN (the
    inbox's), never one per member's stream."""
    store = Store(RedisURL.parse(redis_server.url), "busy")
    raw = redis_py.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        for worker in ("w1", "w2", "w3"):
            store.join(worker, {})
        store.commit(Batch(worker="w1", epoch=3, add=[link(store, "w1", "http://a.example/")]))
        before = int(raw.info("commandstats").get("cmdstat_xlen", {}).get("calls", 0))
        for worker in ("w1", "w2", "w3"):
            assert beat(store, worker, applied=3, known=3).idle_since == -1
        after = int(raw.info("commandstats")["cmdstat_xlen"]["calls"])
        assert after - before == 3
    finally:
        raw.close()
        store.close()


def test_failover_raises_the_epoch_to_the_servers_clock_in_ms_once(redis_url, crawl_name, raw):
    """Without a clock from the caller, failover.lua reads the server's TIME: the epoch
    lands between the server's ms before and after the call, and a second call (the
    clock has not passed it by much) leaves a higher epoch alone."""
    store = Store(RedisURL.parse(redis_url), crawl_name)  # no clock: the server's TIME
    try:
        _, epoch, _ = store.join("w1", {})
        script = raw.register_script(
            (Path(hashcrawl._store.__file__).parent / "lua" / "failover.lua").read_text()
        )

        def server_ms() -> int:
            seconds, micros = raw.time()
            return seconds * 1000 + micros // 1000

        before = server_ms()
        raised = int(script(keys=[store.key("epoch")], args=[store.prefix, ""]))
        after = server_ms()
        assert epoch < before <= raised <= after
        assert int(raw.get(store.key("epoch"))) == raised
        raw.set(store.key("epoch"), after + 60_000)  # an epoch ahead of the clock
        assert int(script(keys=[store.key("epoch")], args=[store.prefix, ""])) == after + 60_000
        assert int(raw.get(store.key("epoch"))) == after + 60_000
    finally:
        store.close()


def test_a_workers_first_in_flight_record_is_written_and_an_older_one_dropped(store):
    """Session.suspects_noted starts at 1: that first record must land, or the first
    suspect a worker dies of costs it no attempt."""
    stream = store.stream_of("w1")
    assert store.note_in_flight("w1", 1, ["1-0"])
    assert store.in_flight_of(stream) == {"1-0"}
    assert store.note_in_flight("w1", 2, ["1-0", "2-0"])
    assert not store.note_in_flight("w1", 1, ["3-0"])
    assert store.in_flight_of(stream) == {"1-0", "2-0"}
