"""Tests for hashcrawl._store: the heartbeat's idle check counts for real, once per idle
spell; a worker's record of the suspects it is fetching is never replaced by an older one."""

from __future__ import annotations

import redis as redis_py

from hashcrawl._redisurl import RedisURL
from hashcrawl._server import RedisServer
from hashcrawl._store import Store

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
        raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        assert beat(store, "w1") == -1
        assert int(raw.get(store.key("outstanding"))) == 1
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
