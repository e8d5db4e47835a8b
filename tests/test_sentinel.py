"""Tests for hashcrawl under Redis Sentinel: a redis+sentinel:// URL reaches the primary
the sentinels name; a write returns once the replica Sentinel could promote has it; a
failover is followed without a restart and the epoch then jumps past any the old primary
may have lost; errors are QueueErrors that say what happened and never show the
password; and a crawl survives its primary's SIGKILL (the slow test, judged from the test
server's log)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from redis.sentinel import MasterNotFoundError

from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._connection import _reason
from hashcrawl._store._nodes import _promotable
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Batch, Store
from testing.practice import practice_failures, run_practice
from testing.sentinel import HOST, SERVICE, Sentinels
from tests.conftest import CLUSTER_PASSWORD

LEASE_MS = 60_000


@pytest.fixture(scope="module")
def refused_port() -> Iterator[int]:
    """A port bound and never listened on, so every connection is refused."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        yield sock.getsockname()[1]


def one_page_with_links(store: Store, worker: str, epoch: int, links: int) -> Batch:
    """Read the one entry of ``worker``'s stream; a commit acking it and adding links."""
    [(eid, _)] = store.read(worker, count=1, block_ms=10)
    src = store.stream_of(worker)
    batch = Batch(worker=worker, epoch=epoch, src=src, ack=[eid])
    for i in range(links):
        url = f"http://h{i}.example/"
        batch.add.append([src, f'{{"u":"{url}"}}', *fingerprint(url), 1])
    return batch


def queue_one_page(sentinels: Sentinels, store: Store, worker: str) -> None:
    with sentinels.client(sentinels.primary()) as raw:
        raw.xadd(store.stream_of(worker), {"r": '{"u":"http://a.example/"}'})


def test_a_sentinel_url_reaches_the_primary_and_its_replica_confirms(
    redis_sentinels: Sentinels, crawl_name: str
) -> None:
    """A store given the sentinels' URL writes to the primary they name, and join and
    commit return only once the replica has their writes: a promotion keeps them."""
    store = Store(RedisURL.parse(redis_sentinels.url), crawl_name)
    try:
        assert store.may_fail_over() and not store.in_cluster()
        _, epoch, _ = store.join("w1", {})
        assert store._nodes.owner == f"{HOST}:{redis_sentinels.primary().port}"
        assert store._nodes.replicas == 1
        queue_one_page(redis_sentinels, store, "w1")
        result = store.commit(one_page_with_links(store, "w1", epoch, 5))
        assert (result.status, result.added, result.acked) == ("ok", 5, 1)
        [replica] = redis_sentinels.replicas()
        with redis_sentinels.client(replica) as copy:
            assert copy.zscore(store.key("members"), "w1") is not None
            assert copy.xlen(store.stream_of("w1")) == 5
            assert copy.hget(store.key("seenmeta"), "queued") == "5"
    finally:
        store.clear()
        store.close()


def test_the_python_api_takes_a_sentinel_url(redis_sentinels: Sentinels, crawl_name: str) -> None:
    """Queue (as Worker) takes the redis+sentinel:// URL as its ``redis``: a submit lands
    on the primary the sentinels name, and status reads it back."""
    with Queue(redis_sentinels.url, crawl_name) as queue:
        assert queue.submit(["http://a.example/", "http://b.example/"]) == 2
        assert queue.status()["queued"] == 2
        queue.clear()


def test_a_write_the_replica_does_not_confirm_fails(
    redis_sentinels: Sentinels, crawl_name: str
) -> None:
    """With the replica stopped, a commit fails with a QueueError saying the write was
    not confirmed (its caller sends it again), without the password; sent again once the
    replica answers, it is confirmed and adds nothing twice."""
    store = Store(RedisURL.parse(redis_sentinels.url), crawl_name, timeout=2.0)
    try:
        _, epoch, _ = store.join("w1", {})
        queue_one_page(redis_sentinels, store, "w1")
        batch = one_page_with_links(store, "w1", epoch, 4)
        [replica] = redis_sentinels.replicas()
        replica.pause()
        try:
            with pytest.raises(QueueError, match="did not confirm within 1000 ms") as caught:
                store.commit(batch)
        finally:
            replica.resume()
        assert CLUSTER_PASSWORD not in str(caught.value)
        assert quote(CLUSTER_PASSWORD, safe="") not in str(caught.value)
        again = store.commit(batch)
        assert (again.status, again.added, again.acked) == ("ok", 0, 0)
        with redis_sentinels.client(redis_sentinels.primary()) as raw:
            assert raw.xlen(store.stream_of("w1")) == 4
    finally:
        store.clear()
        store.close()


def test_a_stores_first_join_under_sentinel_raises_the_epoch(
    redis_sentinels: Sentinels, crawl_name: str
) -> None:
    """A store that never saw the primary may be looking at a replica promoted without
    epochs the old primary issued; so its first join jumps the epoch to the server's
    clock first, and its later joins do not."""
    first, second = (Store(RedisURL.parse(redis_sentinels.url), crawl_name) for _ in range(2))
    try:
        _, e1, _ = first.join("w1", {})
        assert e1 == 1  # a new crawl has no epoch to raise
        now, e2, _ = second.join("w2", {})
        assert now - 60_000 <= e2 - 1 and e2 > e1 + 1
        _, e3, _ = second.join("w3", {})
        assert e3 == e2 + 1
    finally:
        first.clear()
        first.close()
        second.close()


@pytest.mark.parametrize("where", ["no sentinel", "unknown service"])
def test_no_primary_named_is_a_queue_error_without_the_password(
    redis_sentinels: Sentinels, crawl_name: str, refused_port: int, where: str
) -> None:
    """Sentinels that do not answer, or that watch no such service, make a call fail
    with one line saying no sentinel names a primary, and no password in it."""
    secret = f":{quote(CLUSTER_PASSWORD, safe='')}@"
    members = redis_sentinels.url.split("@", 1)[1].split("/", 1)[0]
    url = {
        "no sentinel": f"redis+sentinel://{secret}{HOST}:{refused_port}/{SERVICE}",
        "unknown service": f"redis+sentinel://{secret}{members}/other",
    }[where]
    store = Store(RedisURL.parse(url), crawl_name, timeout=2.0)
    try:
        with pytest.raises(QueueError, match="no sentinel names a primary that is up") as caught:
            store.ping()
    finally:
        store.close()
    message = str(caught.value)
    assert "\n" not in message
    assert CLUSTER_PASSWORD not in message and quote(CLUSTER_PASSWORD, safe="") not in message


def test_master_not_found_is_explained() -> None:
    """redis-py's MasterNotFoundError reads as a failover under way, its text kept."""
    said = _reason(MasterNotFoundError("No master found for 'svc'"))
    assert "a failover under way?" in said and "No master found for 'svc'" in said


LINKED = {"is_sdown": False, "is_odown": False, "is_disconnected": False, "slave-priority": 100}
LINKED |= {"down-after-milliseconds": 2000, "master-link-down-time": 0}


@pytest.mark.parametrize(
    ("change", "waited_for"),
    [
        ({}, True),
        ({"master-link-down-time": 20_000}, True),  # ten down-after periods: still eligible
        ({"master-link-down-time": 20_001}, False),
        ({"is_sdown": True}, False),
        ({"is_odown": True}, False),
        ({"is_disconnected": True}, False),  # the dead primary, just listed as a replica
        ({"slave-priority": 0}, False),
    ],
)
def test_a_write_waits_for_the_replicas_sentinel_could_promote(
    change: dict[str, object], waited_for: bool
) -> None:
    """A replica is waited for exactly when Sentinel's own rules let it be promoted."""
    assert _promotable(LINKED | change) is waited_for


def test_a_failover_is_followed_and_the_epoch_jumps(tmp_path: Path, crawl_name: str) -> None:
    """The primary SIGKILLed and its replica promoted: the next call fails with a
    QueueError (its caller retries), the one after works on the new primary, what a
    confirmed commit wrote before the kill is there, and the epoch has jumped to the
    server's clock, so a commit routed by an epoch from before is refused as stale."""
    with Sentinels(tmp_path / "sentinel", password=CLUSTER_PASSWORD) as sentinels:
        store = Store(RedisURL.parse(sentinels.url), crawl_name)
        try:
            _, epoch, _ = store.join("w1", {})
            queue_one_page(sentinels, store, "w1")
            store.commit(one_page_with_links(store, "w1", epoch, 3))
            dead = sentinels.kill_primary()
            with pytest.raises(QueueError) as caught:
                store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
            assert CLUSTER_PASSWORD not in str(caught.value)
            beat = store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
            assert beat.alive and beat.members == ("w1",)
            assert beat.epoch >= beat.now_ms - 60_000 > epoch
            assert store._nodes.owner != f"{HOST}:{dead.port}"
            assert store._nodes.replicas == 0  # the dead primary is listed, not promotable
            stale = store.commit(Batch(worker="w1", epoch=epoch))
            assert (stale.status, stale.epoch) == ("stale", beat.epoch)
            with sentinels.client(sentinels.primary()) as raw:
                assert raw.xlen(store.stream_of("w1")) == 3
        finally:
            store.close()


def test_a_demoted_primary_is_left_for_the_new_one(tmp_path: Path, crawl_name: str) -> None:
    """A failover with the old primary alive (SENTINEL FAILOVER): it refuses the next
    write as a replica (a QueueError saying so; the caller retries), the store asks the
    sentinels again, and the call after works on the new primary with the epoch raised."""
    with Sentinels(tmp_path / "sentinel") as sentinels:
        store = Store(RedisURL.parse(sentinels.url), crawl_name)
        try:
            _, epoch, _ = store.join("w1", {})
            old = sentinels.fail_over()
            with pytest.raises(QueueError, match="a replica now"):
                store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
            beat = store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
            assert beat.alive and beat.epoch >= beat.now_ms - 60_000 > epoch
            assert (
                store._nodes.owner == f"{HOST}:{sentinels.primary().port}" != f"{HOST}:{old.port}"
            )
        finally:
            store.close()


@pytest.mark.slow
def test_a_crawl_through_sentinel_survives_the_death_of_its_primary(tmp_path: Path) -> None:
    """A crawl through a redis+sentinel:// URL, the primary SIGKILLed half-way: the
    sentinels promote its replica, every worker follows it without a restart (each logs
    the epoch raised) and exits 0, no page is missing, none came too close. Duplicates
    are bounded by the practice's limit."""
    lines: list[str] = []
    verdict, exits = run_practice(
        pages=300, hosts=10, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lines.append, sentinel=True,
        fail_primary=True, kill=False,
    )  # fmt: skip
    assert any("took over" in line for line in lines)
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.code for exit in exits] == [0, 0, 0]
    for n in (1, 2, 3):
        assert "its primary changed, epoch raised" in (tmp_path / f"worker-{n}.log").read_text()
