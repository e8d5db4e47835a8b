"""Tests for a crawl spread over shards: a host's shard is stable and spread; the shards'
tags spread their slots over the primaries; the end of a sharded crawl needs every shard
idle at one instant (a link in flight between two shards keeps it going); and on one
server, the shards' record, the submit's routing, status and clear over every shard."""

from __future__ import annotations

import collections
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._settings import Settings
from hashcrawl._core._shards import Ends, Report, choose_tags, shard_name, shard_of
from hashcrawl._core._urls import host_key
from hashcrawl._exceptions import ConfigError, ShardsChanged
from hashcrawl._run._queue import Queue
from hashcrawl._run._sharding import Sharded, share
from hashcrawl._run._worker import Worker
from hashcrawl._store._crawlconfig import change
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._shards import (
    Shards,
    _record,
    shard_tags,
    slot_of,
    still_one_shard,
    stored_tags,
)
from hashcrawl._store._store import Store
from testing.fleet import (
    DEADLINE,
    Crawled,
    Crew,
    await_until,
    crawl_site,
    fast_settings,
    host,
    href,
    make_site,
    new_crawl_name,
    page,
    redirect,
    request_counts,
    status_of,
    submit,
)
from testing.testsite import Site, SiteServer, generate_site


def test_a_hosts_shard_is_a_stable_hash_spread_over_the_shards() -> None:
    """The same in every process (no PYTHONHASHSEED), and about even."""
    assert shard_of("example.com", 1) == 0
    assert shard_of("example.org", 6) == 3
    assert [shard_of(f"h{i}.example", 6) for i in range(8)] == [
        shard_of(f"h{i}.example", 6) for i in range(8)
    ]
    assert shard_of("example.com", 6) == 0  # fixed: a change would move every host
    counts = Counter(shard_of(f"host{i}.example", 6) for i in range(6000))
    assert set(counts) == set(range(6)) and min(counts.values()) > 850


@given(st.text(min_size=1, max_size=30), st.integers(min_value=1, max_value=64))
def test_a_shard_is_always_in_range(host: str, shards: int) -> None:
    assert 0 <= shard_of(host, shards) < shards


@pytest.mark.parametrize(("shards", "primaries"), [(6, 3), (4, 3), (12, 6), (2, 1), (5, 2)])
def test_tags_spread_the_shards_slots_evenly_over_the_primaries(
    shards: int, primaries: int
) -> None:
    """Distinct slots; each primary holds S/N shards, give or take one."""
    width = 16384 // primaries

    def primary_of(slot: int) -> str:
        return f"p{min(slot // width, primaries - 1)}"

    tags = choose_tags("crawl", shards, slot_of, primary_of)
    names = [shard_name("crawl", t) for t in ["", *tags]]
    slots = [slot_of(name) for name in names]
    assert len(tags) == shards - 1 and len(set(slots)) == shards
    held = Counter(primary_of(slot) for slot in slots)
    assert len(held) == min(shards, primaries)
    assert max(held.values()) - min(held.values()) <= 1
    assert all("{" not in t and "}" not in t and "~" not in t for t in tags)


def report(marker: str | None, at: float, quiet: bool = True) -> Report:
    return Report(marker, quiet, at, at + 0.01)


def test_a_sharded_crawl_ends_only_after_two_sweeps_with_every_shard_unchanged() -> None:
    ends = Ends(2)
    assert not ends.report(0, report("100", 1.0))
    assert not ends.report(1, report("200", 1.1))  # one sweep: not an instant for all yet
    assert not ends.report(0, report("100", 2.0))
    assert ends.report(1, report("200", 2.1))
    assert ends.report(0, report(None, 3.0))  # once over, over


def test_a_link_in_flight_between_two_shards_keeps_the_crawl_going() -> None:
    """Shard 1 read idle before a delivery into it lands; shard 0 read idle after its
    ack: each shard idle in some report, never both at one instant. Shard 1's idle
    marker changes (the delivery deleted idle_since, a later beat set it anew)."""
    ends = Ends(2)
    ends.report(1, report("100", 1.0))  # idle; then a link from shard 0 lands in it
    ends.report(0, report(None, 1.5))  # shard 0: the page is not yet acknowledged
    ends.report(0, report("1600", 2.0))  # acknowledged: shard 0 idle
    ends.report(0, report("1600", 3.0))
    # Shard 1 fetched the link and went idle again: a new marker, a new run.
    assert not ends.report(1, report("2500", 3.1))
    assert not ends.report(0, report("1600", 4.0))
    assert ends.report(1, report("2500", 4.1))


def test_a_shard_not_quiet_long_enough_or_busy_holds_the_end() -> None:
    ends = Ends(2)
    for at in (1.0, 2.0):
        ends.report(0, report("100", at))
        ends.report(1, report("200", at + 0.1, quiet=False))
    assert not ends.over()
    ends.report(1, report(None, 3.0))  # busy: its run starts again
    ends.report(1, report("200", 3.1))
    assert not ends.over()


def test_shards_nothing_was_queued_in_end_with_the_others_but_not_alone() -> None:
    ends = Ends(2)
    for at in (1.0, 2.0):
        ends.report(0, report("unbegun", at))
        ends.report(1, report("unbegun", at + 0.1))
    assert not ends.over()  # an unbegun crawl is not idle, as on one shard
    ends.report(1, report("300", 3.0))
    assert not ends.report(1, report("300", 4.0))  # shard 0's last report is before 3.0
    assert ends.report(0, report("unbegun", 4.5))


def test_the_shards_are_recorded_once_and_fixed(redis_url: str, crawl_name: str) -> None:
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        assert shard_tags(store, None) == [] and stored_tags(store) is None
        tags = shard_tags(store, 3)
        assert len(tags) == 2 and stored_tags(store) == tags
        assert shard_tags(store, None) == tags == shard_tags(store, 3)
        with pytest.raises(ConfigError, match="runs on 3 shards, not --shards 4"):
            shard_tags(store, 4)
    finally:
        store.clear()
        store.close()


def test_a_crawl_begun_on_one_shard_refuses_more(redis_url: str, crawl_name: str) -> None:
    with Queue(redis_url, crawl_name) as queue:
        queue.submit(["http://a.example/"])
        with pytest.raises(ConfigError, match=r"runs on 1 shard, not --shards 2: .* fixed"):
            Queue(redis_url, crawl_name, shards=2).submit(["http://b.example/"])
        queue.clear()


def test_a_layout_is_recorded_only_before_the_crawl_begins_and_a_join_sees_it(
    redis_url: str, crawl_name: str
) -> None:
    """The two orders of a race between a worker of three shards and one of one: a join
    before the record makes the record fail (the crawl has begun on one shard); a record
    before the join is found by the joined worker's check."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    other = Store(RedisURL.parse(redis_url), crawl_name + "-b")
    try:
        assert shard_tags(store, None) == []  # the one-shard worker looks: nothing yet
        store.join("w1", {})
        assert _record(store, ["x", "y"]) is None and stored_tags(store) is None
        with pytest.raises(ConfigError, match="runs on 1 shard, not --shards 3"):
            shard_tags(store, 3)
        still_one_shard(store)  # nothing recorded: it carries on
        assert shard_tags(other, None) == []  # the one-shard worker looks: nothing yet
        tags = shard_tags(other, 3)  # the other records three shards before it joins
        other.join("w2", {})
        with pytest.raises(ShardsChanged, match="was given 3 shards"):
            still_one_shard(other)
        assert stored_tags(other) == tags
    finally:
        for each in (store, other):
            each.clear()
            each.close()


def test_two_workers_starting_a_crawl_with_different_shards_end_with_one_layout(
    redis_url: str, tmp_path: Path
) -> None:
    """Two workers start one new crawl at the same moment, one with --shards 3 and one
    without: whichever the server ordered first, the crawl has one layout (the one
    without takes the three shards, or the one with them refuses in one line), every
    page is requested once, and each host's pages come from one worker."""
    site = generate_site(pages=60, hosts=6, seed=9, port=0)
    crew = Crew(redis_url, new_crawl_name(), tmp_path)
    refused: list[str] = []

    async def run(worker: Any) -> None:
        try:
            await crew.run(worker)
        except ConfigError as exc:
            refused.append(str(exc))

    async def crawl(server: SiteServer) -> None:
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                for settings in (fast_settings(shards=3), fast_settings()):
                    nursery.start_soon(run, crew.hire(settings))
                await await_until(lambda: bool(refused) or crew.members() == 2, what="a layout")
                await trio.to_thread.run_sync(submit, redis_url, crew.crawl, [server.site.root])

    with SiteServer(site, latency=0.02) as server:
        trio.run(crawl, server)
        requests = server.requests()
    counts = request_counts(requests)
    assert set(counts) == server.site.expected()
    assert {url: n for url, n in counts.items() if n > 1} == {}
    owners = collections.defaultdict(set)
    for item in crew.items():
        owners[host_key(item["url"])].add(item["worker"])
    assert {name: ids for name, ids in owners.items() if len(ids) > 1} == {}
    with Queue(redis_url, crew.crawl) as queue:
        layout = queue.status()["shards"]
    if refused:
        assert layout == 1 and len(refused) == 1
        assert "\n" not in refused[0] and "not --shards 3" in refused[0]
    else:
        assert layout == 3


def test_a_submit_goes_to_each_hosts_shard_and_status_and_clear_cover_all(
    redis_url: str, crawl_name: str
) -> None:
    urls = [f"http://h{i}.example/" for i in range(30)]
    with Queue(redis_url, crawl_name, shards=3) as queue:
        assert queue.submit(urls) == 30
        assert queue.submit(urls) == 0  # each shard's seen filter
        status = queue.status()
        assert (status["waiting"], status["queued"], status["shards"]) == (30, 30, 3)
        first = Store(RedisURL.parse(redis_url), crawl_name)
        shards = Shards(first, stored_tags(first) or [], timeout=5)
        for number, store in enumerate(shards.stores):
            hosts = {m.removeprefix("host:") for m in store.scope() if m.startswith("host:")}
            assert len(hosts) == 30  # every shard's scope has every submitted host
            assert len({m for m in store.scope() if m.startswith("dir:")}) == 30  # directory
            inbox = [p for _, p in store.entries(store.inbox, count=100)]
            mine = [u for u in urls if shards.shard_of(host_key(u)) == number]
            assert len(inbox) == len(mine) > 0
        assert queue.clear() > 0
        assert all(not s._redis.keys(s.prefix + "*") for s in shards.stores)
        shards.close()
        first.close()


def crawled_by_shards(redis_url: str, tmp_path: Path, site: Site, workers: int) -> Crawled:
    settings = [fast_settings(shards=3)] * workers

    async def crawl() -> Crawled:
        return await crawl_site(redis_url, tmp_path, site, settings)

    return trio.run(crawl)


def test_a_sharded_fleet_requests_every_page_once_each_host_from_one_worker(
    redis_url: str, tmp_path: Path
) -> None:
    """Two workers, three shards on one server: every expected page requested once,
    written once, each host's pages from one worker (links cross shards all the time)."""
    crawled = crawled_by_shards(
        redis_url, tmp_path, generate_site(pages=150, hosts=8, seed=4, port=0), 2
    )
    counts = request_counts(crawled.requests)
    assert set(counts) == crawled.site.expected()
    assert {url: n for url, n in counts.items() if n > 1} == {}
    items = collections.Counter(item["url"] for item in crawled.crew.items())
    assert set(items) == crawled.site.expected() and max(items.values()) == 1
    owners = collections.defaultdict(set)
    for item in crawled.crew.items():
        owners[host_key(item["url"])].add(item["worker"])
    assert {name: ids for name, ids in owners.items() if len(ids) > 1} == {}
    status = status_of(redis_url, crawled.crew.crawl)
    assert (status["ended"], status["waiting"], status["held"]) == (True, 0, 0)


def test_a_sharded_crawl_follows_redirects_across_shards(redis_url: str, tmp_path: Path) -> None:
    """Redirects to eight other hosts: some in other shards than the root's (a host's
    shard depends on its port too), each source and target requested once."""
    a = host(0)
    targets = {(host(n), "/target"): page(f"target {n}") for n in range(1, 9)}
    goes = {(a, f"/go{n}"): redirect(302, href(host(n), "/target")) for n in range(1, 9)}
    links = [href(a, f"/go{n}") for n in range(1, 9)]
    site = make_site({(a, "/"): page("root", *links), **goes, **targets})
    crawled = crawled_by_shards(redis_url, tmp_path, site, 1)
    counts = request_counts(crawled.requests)
    assert set(counts) == crawled.site.expected() and max(counts.values()) == 1
    shards = {shard_of(host_key(url), 3) for url in counts}
    assert len(shards) > 1  # the crawl did cross shards


def test_a_stopped_worker_leaves_every_shard_and_the_other_finishes(
    redis_url: str, tmp_path: Path
) -> None:
    """One of two workers stopped mid-crawl hands back its hosts in every shard once all
    its shards are flushed, and returns; the other crawls every page."""
    site = generate_site(pages=120, hosts=6, seed=7, port=0)
    crew = Crew(redis_url, new_crawl_name(), tmp_path)

    async def crawl(server: SiteServer) -> None:
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                first, second = (crew.hire(fast_settings(shards=3)) for _ in range(2))
                nursery.start_soon(crew.run, first)
                nursery.start_soon(crew.run, second)
                await await_until(lambda: crew.members() == 2, what="both to join")
                await trio.to_thread.run_sync(submit, redis_url, crew.crawl, [server.site.root])
                await await_until(lambda: len(server.requests()) >= 30, what="30 requests")
                first.stop()

    with SiteServer(site, latency=0.02) as server:
        trio.run(crawl, server)
        requests = server.requests()
    assert set(request_counts(requests)) >= server.site.expected()
    status = status_of(redis_url, crew.crawl)
    assert (status["ended"], status["workers"], status["held"]) == (True, 0, 0)


def test_a_shards_share_of_the_concurrency_is_a_ceiling_of_at_least_one() -> None:
    """64 over 3 shards is 22 each (the worker may run a few more, never fewer); 2 over 4
    is still 1 each, or a shard could never fetch."""
    assert share(Settings(concurrency=64), 3).concurrency == 22
    assert share(Settings(concurrency=64), 1).concurrency == 64
    assert share(Settings(concurrency=2), 4).concurrency == 1


async def test_a_sharded_worker_takes_on_a_configured_change_in_every_shard(
    redis_url: str, crawl_name: str
) -> None:
    """configure --delay 0.7 under a worker of three shards: the crawl's settings are
    shard 0's to follow, and every shard's frontier paces by 0.7 once it has."""
    worker = Worker(redis_url, crawl_name, idle=None, lease=2.0, grace=0.5, shards=3, delay=0.2)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run)
        started = lambda: isinstance(worker._driver, Sharded)  # noqa: E731
        await await_until(started, what="the sharded worker started")
        sharded = worker._driver
        assert isinstance(sharded, Sharded)
        await await_until(lambda: all(s is not None for s in sharded._sessions()), what="joined")
        store = Store(RedisURL.parse(redis_url), crawl_name)
        try:
            await trio.to_thread.run_sync(lambda: change(store, {"delay": 0.7}))
        finally:
            store.close()
        # Shard 0 beats every lease / 4 or the worker loses its membership: ten leases
        # without the change taken is a worker that never takes it.
        with trio.fail_after(10 * 2.0):
            await await_until(lambda: worker.settings.delay == 0.7, what="the change taken")
        assert [s.frontier.delay for s in sharded._sessions()] == [0.7] * 3
        assert worker.crawl_settings is not None and worker.crawl_settings.version == 2
        worker.stop()
