"""Tests for hashcrawl on a Redis Cluster: any node's URL will do; a crawl's keys live on
the primary of its slot and are on its replica when a write returns; the slot is followed
when it moves, and the epoch then jumps past any the old primary may have lost; the
cluster's errors are QueueErrors that name the cause and never the password; and a crawl
survives its primary's death (the slow tests, judged from the test server's log)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest
import redis as redis_py

from hashcrawl._core._shards import shard_name
from hashcrawl._core._urls import fingerprint
from hashcrawl._exceptions import InvalidURL, QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._connection import _reason
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._shards import shard_tags, slot_of
from hashcrawl._store._store import Batch, Store
from testing.cluster import HOST, Cluster
from testing.practice import practice_failures, run_practice
from tests.conftest import CLUSTER_PASSWORD

LEASE_MS = 60_000


def url_of(cluster: Cluster, port: int | None, db: int = 0) -> str:
    return f"redis://:{quote(CLUSTER_PASSWORD, safe='')}@{HOST}:{port}/{db}"


def elsewhere(cluster: Cluster, store: Store) -> str:
    """The URL of a primary that does not hold ``store``'s crawl."""
    holder = cluster.primary_of(store.key("epoch"))
    other = next(n for n in cluster.primaries() if n is not holder)
    return url_of(cluster, other.port)


def cluster_store(cluster: Cluster, crawl: str, **options: float) -> Store:
    probe = Store(RedisURL.parse(cluster.url), crawl)
    url = elsewhere(cluster, probe)
    probe.close()
    return Store(RedisURL.parse(url), crawl, **options)


def one_page_with_links(store: Store, worker: str, epoch: int, links: int) -> Batch:
    """Read the one entry of ``worker``'s stream; a commit acking it and adding links."""
    [(eid, _)] = store.read(worker, count=1, block_ms=10)
    src = store.stream_of(worker)
    batch = Batch(worker=worker, epoch=epoch, src=src, ack=[eid])
    for i in range(links):
        url = f"http://h{i}.example/"
        batch.add.append([src, f'{{"u":"{url}"}}', *fingerprint(url), 1])
    return batch


def test_any_nodes_url_reaches_the_crawls_primary(redis_cluster: Cluster, crawl_name: str):
    """A store given another primary's URL finds the cluster and writes every key of the
    crawl to the primary of its slot, none anywhere else."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        assert store.in_cluster()
        _, epoch, _ = store.join("w1", {"host": "here"})
        raw = redis_cluster.client(redis_cluster.primary_of(store.key("epoch")))
        raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        result = store.commit(one_page_with_links(store, "w1", epoch, 3))
        assert (result.status, result.added, result.acked) == ("ok", 3, 1)
        assert store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch).alive
        assert raw.xlen(store.stream_of("w1")) == 3
        for node in redis_cluster.primaries():
            with redis_cluster.client(node) as client:
                keys = list(client.scan_iter(match=f"hc:{{{crawl_name}}}:*"))
            assert bool(keys) == (node is redis_cluster.primary_of(store.key("epoch")))
    finally:
        store.close()


def test_a_write_is_on_the_replica_when_it_returns(redis_cluster: Cluster, crawl_name: str):
    """join and commit return only once the primary's replica has their writes: a
    promotion right after them keeps them."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        _, epoch, _ = store.join("w1", {})
        primary = redis_cluster.primary_of(store.key("epoch"))
        [replica] = next(s["replicas"] for s in redis_cluster.shards() if s["primary"] is primary)
        with redis_cluster.client(primary) as raw:
            raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        store.commit(one_page_with_links(store, "w1", epoch, 5))
        with redis_cluster.client(replica) as copy:
            copy.execute_command("READONLY")  # a replica answers reads of its slots
            assert copy.zscore(store.key("members"), "w1") is not None
            assert copy.xlen(store.stream_of("w1")) == 5
            assert copy.hget(store.key("seenmeta"), "queued") == "5"
    finally:
        store.close()


def test_a_write_its_replica_does_not_confirm_fails(redis_cluster: Cluster, crawl_name: str):
    """With the primary's replica stopped, a commit fails with a QueueError saying the
    write was not confirmed (its caller sends it again); once the replica answers, the
    batch sent again is confirmed and adds nothing twice."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        _, epoch, _ = store.join("w1", {})
        primary = redis_cluster.primary_of(store.key("epoch"))
        [replica] = next(s["replicas"] for s in redis_cluster.shards() if s["primary"] is primary)
        with redis_cluster.client(primary) as raw:
            raw.xadd(store.stream_of("w1"), {"r": '{"u":"http://a.example/"}'})
        batch = one_page_with_links(store, "w1", epoch, 4)
        replica.pause()
        try:
            named = rf"node {HOST}:{primary.port} made a write .* did not confirm within"
            with pytest.raises(QueueError, match=named) as caught:
                store.commit(batch)
        finally:
            replica.resume()
        assert CLUSTER_PASSWORD not in str(caught.value)
        again = store.commit(batch)
        assert (again.status, again.added, again.acked) == ("ok", 0, 0)
        with redis_cluster.client(primary) as raw:
            assert raw.xlen(store.stream_of("w1")) == 4
    finally:
        store.close()


def test_a_stores_first_join_on_a_cluster_raises_the_epoch_as_after_a_move(
    redis_cluster: Cluster, crawl_name: str, redis_url: str
) -> None:
    """A store that never saw the crawl's node may be looking at a replica promoted
    without epochs the old primary issued; so its first join jumps the epoch to the
    server's clock before it adds one, and later joins of that store do not. On one
    server a join adds one, as before."""
    first, second = (cluster_store(redis_cluster, crawl_name) for _ in range(2))
    try:
        _, e1, _ = first.join("w1", {})
        assert e1 == 1  # a new crawl has no epoch to raise
        now, e2, _ = second.join("w2", {})
        assert now - 60_000 <= e2 - 1 and e2 > e1 + 1  # jumped, then one more for the join
        assert first.leave("w1", {}) == e2 + 1
        _, e3, _ = first.join("w1b", {})
        assert e3 == e2 + 2  # first has joined before: no jump this time
    finally:
        first.close()
        second.close()
    one = [Store(RedisURL.parse(redis_url), crawl_name + "one") for _ in range(2)]
    try:
        epochs = [store.join(f"w{i}", {})[1] for i, store in enumerate(one)]
        assert epochs == [1, 2]
    finally:
        for store in one:
            store.close()


def test_a_moved_slot_is_followed_and_the_epoch_jumps(redis_cluster: Cluster, crawl_name: str):
    """When the crawl's slot moves to another primary, the next call fails with a
    QueueError naming the move (the caller retries), the one after works there, and the
    epoch has jumped to the server's clock: no number the old primary issued comes back."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        _, epoch, _ = store.join("w1", {})
        holder = redis_cluster.primary_of(store.key("epoch"))
        target = next(n for n in redis_cluster.primaries() if n is not holder)
        redis_cluster.move_slot_of(store.key("epoch"), target)
        with pytest.raises(QueueError, match=r"served by .* now") as caught:
            store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
        assert CLUSTER_PASSWORD not in str(caught.value)
        assert quote(CLUSTER_PASSWORD, safe="") not in str(caught.value)
        beat = store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
        assert beat.alive and beat.members == ("w1",)
        assert beat.epoch >= beat.now_ms - 60_000 > epoch
        stale = store.commit(Batch(worker="w1", epoch=epoch))
        assert (stale.status, stale.epoch) == ("stale", beat.epoch)
    finally:
        store.close()


def test_a_call_during_a_slot_migration_is_refused_whole(redis_cluster: Cluster, crawl_name: str):
    """While the crawl's slot is being migrated, some keys moved and some not, a commit
    and a heartbeat are refused before their script runs (TRYAGAIN, never half applied
    over the keys still there); once the slot has moved they work on its new primary,
    and the entry the refused commit would have acknowledged is still pending there."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        _, epoch, _ = store.join("w1", {})
        stream = store.stream_of("w1")
        holder = redis_cluster.primary_of(store.key("epoch"))
        with redis_cluster.client(holder) as raw:
            raw.xadd(stream, {"r": '{"u":"http://a.example/"}'})
        batch = one_page_with_links(store, "w1", epoch, 3)
        target = next(n for n in redis_cluster.primaries() if n is not holder)
        move = redis_cluster.open_move(store.key("epoch"), target)
        move.migrate([stream])  # the stream has left; members, epoch and the rest have not
        with pytest.raises(QueueError, match="being migrated"):
            store.commit(batch)
        with pytest.raises(QueueError, match="being migrated"):
            store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
        left = move.keys(100)  # what the source still holds: no key a commit writes
        assert store.key("epoch") in left
        assert store.key("seenmeta") not in left
        while keys := move.keys(10):
            move.migrate(keys)
        move.close()
        with pytest.raises(QueueError, match=r"served by .* now"):
            store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
        beat = store.heartbeat("w1", lease_ms=LEASE_MS, applied=epoch, known_epoch=epoch)
        assert beat.alive and beat.members == ("w1",)
        with redis_cluster.client(target) as raw:
            assert raw.xpending(stream, "g")["pending"] == 1
            assert raw.hget(store.key("seenmeta"), "queued") is None
    finally:
        store.close()


def test_a_hung_primary_is_a_queue_error_without_the_password(
    redis_cluster: Cluster, crawl_name: str
):
    """A primary that stops answering makes calls fail within the store's timeout, with a
    message naming the timeout and not the password; the calls work once it answers."""
    store = cluster_store(redis_cluster, crawl_name, timeout=0.5)
    try:
        store.join("w1", {})
        primary = redis_cluster.primary_of(store.key("epoch"))
        primary.pause()
        try:
            with pytest.raises(QueueError, match="no answer in time") as caught:
                store.members()
        finally:
            primary.resume()
        assert CLUSTER_PASSWORD not in str(caught.value)
        assert store.members()[1] == ("w1",)
    finally:
        store.close()


def test_other_crawls_are_found_on_every_primary(redis_cluster: Cluster, crawl_name: str):
    """The crawls a store names as others are those on every primary, not only its own."""
    names = [f"{crawl_name}-{i}" for i in range(12)]
    holders = {n: redis_cluster.primary_of(f"hc:{{{n}}}:epoch") for n in names}
    mine = names[0]
    elsewhere = [n for n in names if holders[n] is not holders[mine]][:2]
    assert elsewhere, "twelve names all hashed to one primary"
    stores = [cluster_store(redis_cluster, name) for name in [mine, *elsewhere]]
    try:
        for store in stores:
            store.join("w1", {})
        found = stores[0].other_crawls()
        assert set(elsewhere) <= set(found) and mine not in found
    finally:
        for store in stores:
            store.close()


def test_a_cluster_url_naming_a_database_is_refused(redis_cluster: Cluster, crawl_name: str):
    """A cluster has database 0 only: a URL naming another is a flag's mistake."""
    port = redis_cluster.primaries()[0].port
    store = Store(RedisURL.parse(url_of(redis_cluster, port, db=2)), crawl_name)
    try:
        with pytest.raises(InvalidURL, match=r"names database 2.*Redis Cluster node"):
            store.ping()
    finally:
        store.close()


def test_a_single_server_is_not_taken_for_a_cluster(redis_url: str, crawl_name: str):
    """On one server the store talks to it as before: no cluster, no replica to wait for."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        assert not store.in_cluster()
        assert store._nodes.replicas == 0 and store._nodes.owner == ""
    finally:
        store.close()


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (redis_py.exceptions.MovedError("3999 127.0.0.1:7002"), "served by 127.0.0.1:7002"),
        (redis_py.exceptions.AskError("3999 127.0.0.1:7003"), "being migrated to 127.0.0.1:7003"),
        (redis_py.exceptions.TryAgainError("Multiple keys request"), "being migrated"),
        (redis_py.exceptions.ClusterDownError("The cluster is down"), "cannot serve"),
        (redis_py.exceptions.ReadOnlyError("You can't write"), "a replica now"),
    ],
)
def test_cluster_errors_are_explained(error: redis_py.RedisError, said: str) -> None:
    """Each of the cluster's own errors reads as what happened, its text kept."""
    assert said in _reason(error) and str(error) in _reason(error)


@pytest.mark.slow
def test_a_crawl_on_a_cluster_is_complete_and_polite(tmp_path: Path) -> None:
    """Three workers on a 3-primary cluster, one SIGKILLed and replaced: every page is
    fetched once and written, politely spaced, judged from the server's log."""
    verdict, exits = run_practice(
        pages=300, hosts=10, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lambda line: None, cluster=True,
    )  # fmt: skip
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.killed for exit in exits] == [True, False, False, False]


@pytest.mark.slow
def test_a_crawl_survives_the_death_of_its_primary(tmp_path: Path) -> None:
    """The crawl's primary SIGKILLed half-way: its replica takes over, every worker
    carries on without a restart and exits 0, no page is missing, none came too close.
    Duplicates are bounded by the practice's limit: what was fetched but not yet
    committed when the primary died is fetched again."""
    lines: list[str] = []
    verdict, exits = run_practice(
        pages=300, hosts=10, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lines.append, cluster=True,
        fail_primary=True, kill=False,
    )  # fmt: skip
    assert any("took over" in line for line in lines)
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.code for exit in exits] == [0, 0, 0]


def test_a_crawls_shards_spread_over_the_primaries(redis_cluster: Cluster, crawl_name: str):
    """Six shards on three primaries: two each, in six distinct slots, recorded once."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        tags = shard_tags(store, 6)
        names = [shard_name(crawl_name, tag) for tag in ["", *tags]]
        held = Counter(redis_cluster.primary_of(f"hc:{{{n}}}:epoch").port for n in names)
        assert sorted(held.values()) == [2, 2, 2]
        assert len({slot_of(n) for n in names}) == 6
        assert shard_tags(store, None) == tags
    finally:
        store.clear()
        store.close()


def test_a_new_crawl_on_a_cluster_takes_a_shard_a_primary(
    redis_cluster: Cluster, crawl_name: str
) -> None:
    """Without --shards, a crawl that starts on three primaries takes three shards, one on
    each, recorded for every later worker; status shows the spread."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        tags = shard_tags(store, None)
        names = [shard_name(crawl_name, tag) for tag in ["", *tags]]
        held = Counter(redis_cluster.primary_of(f"hc:{{{n}}}:epoch").port for n in names)
        assert sorted(held.values()) == [1, 1, 1]
        assert shard_tags(store, None) == tags
        with Queue(store.url, crawl_name) as queue:
            assert sorted(queue.status()["spread"].values()) == [1, 1, 1]
    finally:
        store.clear()
        store.close()


def test_a_crawl_begun_on_one_shard_keeps_it(redis_cluster: Cluster, crawl_name: str) -> None:
    """A crawl begun before (its marker set) takes no shards by default: its layout was
    fixed when it started."""
    store = cluster_store(redis_cluster, crawl_name)
    try:
        store.join("w-1", {"pid": 1})
        assert shard_tags(store, None) == []
    finally:
        store.clear()
        store.close()


@pytest.mark.slow
def test_a_sharded_crawl_on_a_cluster_is_complete_and_polite(tmp_path: Path) -> None:
    """Many hosts, six shards over three primaries, three workers: every page fetched
    once and written, politely spaced, judged from the server's log."""
    verdict, exits = run_practice(
        pages=1000, hosts=60, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lambda line: None, cluster=True,
        kill=False, shards=6,
    )  # fmt: skip
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert verdict.duplicates == 0
    assert [exit.code for exit in exits] == [0, 0, 0]


@pytest.mark.slow
def test_a_sharded_crawl_survives_a_worker_killed(tmp_path: Path) -> None:
    """The same with one worker SIGKILLed and replaced: its hosts in every shard go to
    the others after its lease; nothing is missing, nothing came too close."""
    verdict, exits = run_practice(
        pages=600, hosts=30, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lambda line: None, cluster=True,
        shards=6,
    )  # fmt: skip
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.killed for exit in exits] == [True, False, False, False]
    assert [exit.code for exit in exits[1:]] == [0, 0, 0]


@pytest.mark.slow
def test_a_sharded_crawl_survives_the_death_of_a_primary(tmp_path: Path) -> None:
    """Six shards; the primary of shard 0 (and of another shard) SIGKILLed half-way:
    both shards' stores follow the promotion and raise their epochs, every worker
    carries on and exits 0, nothing is missing, nothing came too close."""
    lines: list[str] = []
    verdict, exits = run_practice(
        pages=600, hosts=30, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lines.append, cluster=True,
        fail_primary=True, kill=False, shards=6,
    )  # fmt: skip
    assert any("took over" in line for line in lines)
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.code for exit in exits] == [0, 0, 0]


@pytest.mark.slow
def test_a_reshard_during_a_crawl_loses_nothing(tmp_path: Path) -> None:
    """Three shards, three workers; half-way, every shard's slot is migrated, keys and
    all, to another primary (SETSLOT and MIGRATE, as redis-cli --cluster reshard): the
    stores follow, no script runs half over a migrating slot, nothing is missing,
    nothing came too close, and every worker exits 0."""
    lines: list[str] = []
    verdict, exits = run_practice(
        pages=400, hosts=30, workers=3, delay=0.1, lease=10, idle=5, replace_after=3,
        workdir=tmp_path, timeout=300, progress=lines.append, cluster=True,
        reshard=True, kill=False, shards=3,
    )  # fmt: skip
    assert sum("moved the slot of" in line for line in lines) == 3
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.code for exit in exits] == [0, 0, 0]
