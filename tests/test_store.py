"""Tests for hashcrawl._store._store: the heartbeat's idle check counts for real, once per idle
spell; a worker's record of the suspects it is fetching is never replaced by an older one;
scripts are all or nothing at any size; a crawl knows when its state is gone; and the
keys a long crawl leaves behind are pruned."""

from __future__ import annotations

import pytest
import redis as redis_py

from hashcrawl import Queue
from hashcrawl._core._batch import SPLIT_AT
from hashcrawl._core._entry import Entry
from hashcrawl._core._outcome import dead_letter
from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import StateLost
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Batch, Store

LEASE_MS = 60_000


def beat(store: Store, worker: str) -> int:
    """One heartbeat of ``worker``; returns the idle_since it reports (-1: not idle)."""
    got = store.heartbeat(worker, lease_ms=LEASE_MS, applied=0, known_epoch=0)
    assert got.alive
    return got.idle_since


def xlen_calls(raw: redis_py.Redis) -> int:
    stats = raw.info("commandstats")
    return int(stats.get("cmdstat_xlen", {}).get("calls", 0))


def test_an_idle_looking_crawl_with_an_entry_is_not_called_idle(redis_url, crawl_name):
    """A counter that says 0 while a stream holds an entry is corrected, not believed."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url)
    try:
        store.join("w1", {})
        raw.hset(store.key("seenmeta"), "queued", 1)  # a crawl that has begun
        raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        assert beat(store, "w1") == -1
        assert int(raw.hget(store.key("seenmeta"), "outstanding")) == 1
    finally:
        raw.close()
        store.close()


def test_an_idle_fleet_counts_its_streams_once_not_on_every_heartbeat(redis_server: RedisServer):
    """While the fleet waits out --idle, heartbeats cost the same however many members."""
    store = Store(RedisURL.parse(redis_server.url), "idle")
    raw = redis_py.Redis.from_url(redis_server.url)
    try:
        members = [f"w{i}" for i in range(5)]
        for worker in members:
            store.join(worker, {})
        raw.hset(store.key("seenmeta"), "queued", 1)  # it queued (and finished) an entry
        first = beat(store, members[0])
        before = xlen_calls(raw)
        rounds = 3
        for _ in range(rounds):
            assert [beat(store, worker) for worker in members] == [first] * len(members)
        assert first > 0
        # One XLEN a heartbeat (the inbox), not one for every member's stream too.
        assert xlen_calls(raw) - before == rounds * len(members)
    finally:
        raw.close()
        store.close()


def test_a_fleet_nothing_was_submitted_to_is_not_idle_and_heartbeats_stay_cheap(
    redis_server: RedisServer,
) -> None:
    """A crawl that never queued an entry has not begun: no idle_since, however long,
    and its heartbeats count no member's stream."""
    store = Store(RedisURL.parse(redis_server.url), "unbegun")
    raw = redis_py.Redis.from_url(redis_server.url)
    try:
        members = [f"w{i}" for i in range(5)]
        for worker in members:
            store.join(worker, {})
        before = xlen_calls(raw)
        assert [beat(store, worker) for worker in members * 3] == [-1] * 15
        assert xlen_calls(raw) - before == 15  # the inbox's, one a heartbeat
    finally:
        raw.close()
        store.close()


def test_a_late_record_of_suspects_in_flight_does_not_replace_a_newer_one(redis_url, crawl_name):
    """Records go out from threads and can land out of order; the newest one stays.

    Were the older record kept, a suspect still being fetched would go unnamed, and if
    it killed its worker it would cost no attempt: a poison page could kill workers
    past --max-attempts (seen in CI, four deaths for two attempts).
    """
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        store.join("w1", {})
        assert store.note_in_flight("w1", 2, ["1-0", "2-0"])
        assert not store.note_in_flight("w1", 1, ["1-0"])
        beat(store, "w1")  # the heartbeat's counters leave the record alone
        assert store.in_flight_of(store.stream_of("w1")) == {"1-0", "2-0"}
        assert store.note_in_flight("w1", 3, [])
        assert store.in_flight_of(store.stream_of("w1")) == set()
    finally:
        store.close()


def test_held_lists_the_entries_read_and_not_acknowledged(redis_url, crawl_name):
    """held() gives the entries a member has read and not acknowledged, not those still
    unread: what a successor of its name reads to find the hosts it had in hand."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url)
    try:
        store.join("w1", {})
        stream = store.stream_of("w1")
        assert store.held(stream, count=10) == []
        for n in range(3):
            raw.xadd(stream, {"r": f'{{"u": "http://h{n}.test/"}}'})
        read = store.read("w1", count=2, block_ms=0)
        assert [eid for eid, _ in store.held(stream, count=10)] == [eid for eid, _ in read]
        assert store.held(stream, count=1) == read[:1]
        assert store.held(store.stream_of("nobody"), count=10) == []
    finally:
        raw.close()
        store.close()


HOSTS = 50_000


def paced(count: int, prefix: str = "h") -> dict[str, str]:
    return {f"{prefix}{i}.example": f"{i},0,0.0" for i in range(count)}


def test_a_handoff_of_50000_paced_hosts_is_done_whole(redis_url, crawl_name):
    """A handoff commit with 50,000 pace records and moves applies every one, and the epoch."""
    store = Store(RedisURL.parse(redis_url), crawl_name, timeout=60)
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.join("w1", {})
        store.join("w2", {})
        src = store.stream_of("w1")
        ids = [raw.xadd(src, {"r": f'{{"u":"http://h{i}.example/"}}'}) for i in range(5000)]
        store.read("w1", count=5000, block_ms=10)
        batch = Batch(worker="w1", epoch=2, src=src, applied=2)
        batch.pace = [x for pair in paced(HOSTS).items() for x in pair]
        batch.mv = [[eid, store.stream_of("w2"), '{"u":"http://x.example/"}'] for eid in ids]
        result = store.commit(batch)
        assert (result.status, result.moved) == ("ok", 5000)
        assert raw.hlen(store.key("pace")) == HOSTS
        assert raw.hget(store.key("applied"), "w1") == "2"
        assert (raw.xlen(src), raw.xlen(store.stream_of("w2"))) == (0, 5000)
    finally:
        raw.close()
        store.close()


def test_leaving_with_50000_paced_hosts_leaves_and_keeps_every_record(redis_url, crawl_name):
    """leave() with 50,000 pace records takes the worker out and writes every record."""
    store = Store(RedisURL.parse(redis_url), crawl_name, timeout=60)
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.join("w1", {})
        assert store.leave("w1", paced(HOSTS)) == 2
        assert raw.hlen(store.key("pace")) == HOSTS
        assert store.members() == (2, ())
    finally:
        raw.close()
        store.close()


def link_batch(store: Store, links: int, *, ack: str) -> Batch:
    src = store.stream_of("w1")
    batch = Batch(worker="w1", epoch=1, src=src, ack=[ack])
    for i in range(links):
        url = f"http://h{i % 50}.example/{i}"
        batch.add.append([src, f'{{"u":"{url}"}}', *fingerprint(url), 1])
    return batch


def test_a_page_with_many_links_commits_in_parts_and_a_resend_adds_nothing_twice(
    redis_url, crawl_name
):
    """A big commit goes as several calls; when only its first parts ran, the whole batch
    sent again adds none of their links twice and acknowledges the page."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.join("w1", {})
        page = raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        store.read("w1", count=1, block_ms=10)
        batch = link_batch(store, 3000, ack=page)
        parts = batch.parts()
        assert len(parts) > 3 and all(part.weight() <= SPLIT_AT for part in parts)
        for part in parts[:-1]:  # the worker died before the last part, which acknowledges
            assert store.commit(part).status == "ok"
        assert raw.xlen(store.stream_of("w1")) == 3001
        again = store.commit(link_batch(store, 3000, ack=page))
        assert (again.status, again.added, again.acked) == ("ok", 0, 1)
        assert raw.xlen(store.stream_of("w1")) == 3000
    finally:
        raw.close()
        store.close()


def test_a_crawl_whose_keys_vanish_tells_its_workers_the_state_is_lost(redis_server):
    """After FLUSHALL the heartbeat says lost, and a rejoin with the old marker is refused
    without writing anything."""
    store = Store(RedisURL.parse(redis_server.url), "lost")
    raw = redis_py.Redis.from_url(redis_server.url)
    try:
        _, _, marker = store.join("w1", {})
        assert store.instance() == marker
        assert store.heartbeat(
            "w1", lease_ms=LEASE_MS, applied=0, known_epoch=0, instance=marker
        ).alive
        raw.flushall()
        beat = store.heartbeat("w1", lease_ms=LEASE_MS, applied=0, known_epoch=0, instance=marker)
        assert beat.lost and not beat.alive
        with pytest.raises(StateLost, match="state in Redis is gone"):
            store.join("w2", {}, instance=marker)
        assert raw.dbsize() == 0
    finally:
        raw.close()
        store.close()


def test_the_first_submit_sets_the_marker_that_workers_then_join_under(redis_url, crawl_name):
    """A submit before any worker sets the instance marker; a joining worker adopts it."""
    with Queue(redis_url, crawl_name) as queue:
        queue.submit(["http://a.example/"])
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        marker = store.instance()
        assert marker is not None
        assert store.join("w1", {})[2] == marker
    finally:
        store.close()


def test_departed_workers_keys_are_pruned_and_their_counters_kept(redis_url, crawl_name):
    """Once a departed worker's stream is drained and a while has passed, its w:ID hash and
    workers entry go, while the fleet's totals still count what it fetched."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.join("w1", {"host": "a"})
        store.join("w2", {"host": "b"})
        store.heartbeat("w1", lease_ms=LEASE_MS, applied=2, known_epoch=2, stats={"fetched": 7})
        store.leave("w1", {})
        assert store.release(store.stream_of("w1"))
        store.heartbeat("w2", lease_ms=LEASE_MS, applied=3, known_epoch=3)  # not yet a while
        assert raw.exists(store.key("w:w1"))
        store.heartbeat("w2", lease_ms=LEASE_MS, applied=3, known_epoch=3, forget_ms=0)
        assert not raw.exists(store.key("w:w1"))
        assert raw.smembers(store.key("workers")) == {"w2"}
        assert raw.zcard(store.key("departed")) == 0
        assert store.status()["fetched"] == 7
    finally:
        raw.close()
        store.close()


def test_pace_records_read_by_their_new_owner_are_deleted_by_its_next_commit(redis_url, crawl_name):
    """A commit's unpace list deletes the pace records its worker has read, unless rewritten
    since (the worker may have handed the host on: that record is the next owner's)."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url, decode_responses=True)
    try:
        store.join("w1", {})
        store.leave("w1", {"a.example": "1,0,0", "b.example": "2,0,0"})
        store.join("w2", {})
        assert store.pace(["a.example"]).records == {"a.example": "1,0,0"}
        assert store.pace(["b.example"]).records == {"b.example": "2,0,0"}
        raw.hset(store.key("pace"), "b.example", "9,0,0")  # handed on again meanwhile
        unpace = ["a.example", "1,0,0", "b.example", "2,0,0"]
        assert store.commit(Batch(worker="w2", epoch=3, unpace=unpace)).status == "ok"
        assert raw.hgetall(store.key("pace")) == {"b.example": "9,0,0"}
    finally:
        raw.close()
        store.close()


def test_dead_letters_are_keyed_by_fingerprint_and_listed_by_url(redis_url, crawl_name):
    """A dead letter of a 20 KB URL takes a 16-character key; dead() still shows the URL,
    and retry-dead puts it back."""
    url = "http://a.example/" + "x" * 8_000  # just under the URL cap
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        store.join("w1", {})
        batch = Batch(worker="w1", epoch=1, dead=dead_letter(Entry(url=url, attempts=4), "boom", 0))
        assert store.commit(batch).status == "ok"
        assert [len(key) for key in store.dead()] == [16]
        with Queue(redis_url, crawl_name) as queue:
            assert queue.dead() == {url: "boom"}
            assert queue.retry_dead() == 1
            assert queue.dead() == {}
    finally:
        store.close()


def test_unreadable_entries_are_counted_once_with_bounded_samples(redis_url, crawl_name):
    """Each bad entry is counted once, however many drainers report it, and leaves a sample
    for status: only the newest 20."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    raw = redis_py.Redis.from_url(redis_url)
    try:
        store.join("w1", {})
        src = store.stream_of("w1")
        ids = [raw.xadd(src, {"r": b"\xff"}).decode() for _ in range(30)]
        batch = Batch(worker="w1", epoch=1, src=src, bad=[[i, f"{i}: not UTF-8"] for i in ids])
        assert store.commit(batch).acked == 30
        assert store.commit(batch).acked == 0  # a second drainer of the same entries
        status = store.status()
        assert status["queue_bad"] == 30
        assert status["bad_samples"][0] == f"{ids[-1]}: not UTF-8"
        assert len(status["bad_samples"]) == 20
        assert raw.xlen(src) == 0
    finally:
        raw.close()
        store.close()


def test_status_shows_a_fleet_that_mixes_spiders(redis_url, crawl_name):
    """Each member's spider, recorded at join, is in status, which flags a mixed fleet."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        store.join("w1", {"spider": "Books"})
        assert (store.status()["spiders"], store.status()["mixed_spiders"]) == (["Books"], False)
        store.join("w2", {"spider": "Movies"})
        status = store.status()
        assert (status["spiders"], status["mixed_spiders"]) == (["Books", "Movies"], True)
        assert {m["spider"] for m in status["members"]} == {"Books", "Movies"}
    finally:
        store.close()


def test_durability_warning_names_a_redis_without_appendonly(redis_server):
    """At join a worker is told, in one line, that this Redis would lose the crawl on restart."""
    store = Store(RedisURL.parse(redis_server.url), "warn")
    raw = redis_py.Redis.from_url(redis_server.url)
    try:
        warning = store.durability_warning()
        assert warning is not None and "appendonly" in warning and "\n" not in warning
        raw.config_set("appendonly", "yes")
        raw.config_set("maxmemory-policy", "allkeys-lru")
        assert "allkeys-lru" in (store.durability_warning() or "")
        raw.config_set("maxmemory-policy", "noeviction")
        assert store.durability_warning() is None
    finally:
        # Redis refuses to shut down while it writes the AOF that "appendonly yes" began
        # ("Writing initial AOF, can't exit"): the fixture's stop would wait 10 s to kill it.
        raw.config_set("appendonly", "no")
        raw.close()
        store.close()
