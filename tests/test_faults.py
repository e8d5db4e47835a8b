"""Bad entries, failing and poisonous pages, stop limits, and Redis restarting or refusing."""

from __future__ import annotations

import json
import random
import signal
import textwrap
from pathlib import Path

import redis as redis_py
import trio

import hashcrawl
from hashcrawl._store._server import RedisServer
from testing.fleet import (
    DEADLINE,
    Crew,
    Processes,
    await_until,
    crawl_in_process,
    fast_settings,
    flags,
    host,
    href,
    make_site,
    page,
    request_counts,
    status_of,
    tree_site,
    wait_until,
)
from testing.testsite import SITE_NETS, SiteServer


def one_line_about_redis(lines: list[str], password: str) -> bool:
    """Whether ``lines`` is one line that names Redis and does not give ``password`` away."""
    return len(lines) == 1 and "redis" in lines[0].lower() and password not in lines[0]


def _two_host_site(pages: int = 12):
    resources = {
        (host(0), "/"): page("root", *[href(host(i % 2), f"/p/{i}.html") for i in range(pages)])
    }
    for i in range(pages):
        resources[host(i % 2), f"/p/{i}.html"] = page(f"page {i}")
    return make_site(resources)


async def test_unreadable_entries_are_dropped_counted_and_crash_nothing(
    redis_url, crawl_name, tmp_path
):
    """Garbage written into the queue by hand is dropped and counted as queue_bad."""
    with SiteServer(_two_host_site()) as server:
        raw = redis_py.Redis.from_url(redis_url)
        inbox = f"hc:{{{crawl_name}}}:inbox"
        raw.xadd(inbox, {"r": "not json at all"})
        raw.xadd(inbox, {"other": "field"})
        raw.xadd(inbox, {"r": json.dumps({"u": "ftp://x.example/"})})
        raw.close()
        crew = Crew(redis_url, crawl_name, tmp_path)
        await crawl_in_process(crew, [fast_settings(idle=2)], [server.site.root])
        counts = request_counts(server.requests())
    assert status_of(redis_url, crawl_name)["queue_bad"] == 3
    assert set(counts) == set(server.site.expected())
    assert max(counts.values()) == 1


def hostile_payloads() -> list[bytes | None]:
    """Stream payloads no worker may choke on: the issue's cases, then random bytes."""
    fixed: list[bytes | None] = [
        b"\xff",
        b'{"u":"http://a.example/","m":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"u":"http://a.example/","a":-1000000000}',
        b'{"u":"http://a.example/","d":-99999}',
        b'{"u":"http://a.example/","p":NaN}',
        b'{"u":"http://a.example/' + b"x" * 70_000 + b'"}',
        rb'{"u":"\ud800"}',
        b'{"u":"ftp://a.example/"}',
        None,  # no "r" field at all
    ]
    rng = random.Random(11)
    return fixed + [rng.randbytes(rng.randrange(1, 60)) for _ in range(20)]


async def test_hostile_entries_in_live_streams_are_counted_and_every_good_one_fetched(
    redis_url, crawl_name, tmp_path
):
    """Bad payloads written into each member's stream and the inbox mid-crawl, between good
    entries: both workers stay up, every good page is requested, every bad one is counted."""
    bad = hostile_payloads()
    with SiteServer(_two_host_site()) as server:
        crew = Crew(redis_url, crawl_name, tmp_path)
        good = sorted(server.site.expected())
        raw = redis_py.Redis.from_url(redis_url)
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                for settings in (fast_settings(idle=2), fast_settings(idle=2)):
                    nursery.start_soon(crew.run, crew.hire(settings))
                await await_until(lambda: crew.members() == 2, what="both workers to join")
                streams = [f"hc:{{{crawl_name}}}:q:{w.id}" for w in crew.workers]
                streams.append(f"hc:{{{crawl_name}}}:inbox")
                for i, payload in enumerate(bad):
                    fields = {"other": b"x"} if payload is None else {"r": payload}
                    raw.xadd(streams[i % 3], fields)  # type: ignore[arg-type]
                    if i < len(good):
                        raw.xadd(streams[(i + 1) % 3], {"r": json.dumps({"u": good[i]})})
        raw.close()
        counts = request_counts(server.requests())
    status = status_of(redis_url, crawl_name)
    assert status["queue_bad"] == len(bad)
    assert 0 < len(status["bad_samples"]) <= 20
    assert set(counts) == set(good)


class Plain(hashcrawl.Spider):
    """A spider with no callback but parse."""

    def parse(self, response):
        yield {"url": response.url}


async def test_an_entry_naming_a_callback_its_owner_lacks_is_dead_lettered_with_why(
    redis_url, crawl_name, tmp_path
):
    """Routed to its host's owner first, an entry naming a callback the owner's spider lacks
    is dead-lettered with the reason, never fetched and never silently dropped."""
    resources = {(host(0), "/"): page("root"), (host(0), "/hidden.html"): page("hidden")}
    with SiteServer(make_site(resources)) as server:
        hidden = f"{server.site.root}hidden.html"
        raw = redis_py.Redis.from_url(redis_url)
        entry = json.dumps({"u": hidden, "c": "parse_item"})
        raw.xadd(f"hc:{{{crawl_name}}}:inbox", {"r": entry})
        raw.close()
        crew = Crew(redis_url, crawl_name, tmp_path)
        settings = [fast_settings(idle=2, spider=Plain), fast_settings(idle=2, spider=Plain)]
        await crawl_in_process(crew, settings, [server.site.root])
        counts = request_counts(server.requests())
    with hashcrawl.Queue(redis_url, crawl_name) as queue:
        assert queue.dead() == {hidden: "spider Plain has no callback 'parse_item'"}
    assert hidden not in counts
    assert status_of(redis_url, crawl_name)["queue_bad"] == 0


async def test_a_page_that_keeps_failing_is_dead_lettered_and_can_be_retried(
    redis_url, crawl_name, tmp_path
):
    """A page whose host refuses connections ends in the dead letters; retry-dead puts it back."""
    dead_url = "http://127.0.0.250:9/never.html"  # the discard port: nobody listens there
    resources = {(host(0), "/"): page("root", href(host(0), "/ok.html"), dead_url)}
    resources[host(0), "/ok.html"] = page("ok")
    with SiteServer(make_site(resources)) as server:
        crew = Crew(redis_url, crawl_name, tmp_path)
        await crawl_in_process(
            crew, [fast_settings(max_attempts=2, timeout=2.0, idle=2)], [server.site.root]
        )
        from hashcrawl import Queue

        with Queue(redis_url, crawl_name) as queue:
            dead = queue.dead()
            assert list(dead) == [dead_url]
            assert "2 attempts" in dead[dead_url] or dead[dead_url]
            assert queue.retry_dead() == 1
            assert queue.dead() == {}
            assert queue.status()["waiting"] == 1
    assert request_counts(server.requests())[f"{server.site.root}ok.html"] == 1


async def test_max_pages_stops_one_worker_and_the_others_finish_its_hosts(
    redis_url, crawl_name, tmp_path
):
    """A worker at --max-pages stops and hands its hosts back; nothing is lost or repeated."""
    site, _ = tree_site(hosts=4, fanout=4, levels=3)
    with SiteServer(site) as server:
        crew = Crew(redis_url, crawl_name, tmp_path)
        settings = [fast_settings(max_pages=5, idle=2), fast_settings(idle=2)]
        await crawl_in_process(crew, settings, [server.site.root])
        counts = request_counts(server.requests())
    assert crew.workers[0].tally.fetched <= 5 + crew.workers[0].settings.concurrency
    assert set(counts) == set(server.site.expected())
    assert max(counts.values()) == 1
    assert status_of(redis_url, crawl_name)["leases_reclaimed"] == 0


POISON_SPIDER = """
import os
import hashcrawl

class Poisoned(hashcrawl.Spider):
    def parse(self, response):
        if response.url.endswith("/poison.html"):
            os._exit(3)  # the parser crashes the whole process, every time
        yield {"url": response.url}
        yield from response.links()
"""


def test_a_page_that_kills_every_worker_ends_in_the_dead_letters(redis_url, crawl_name, tmp_path):
    """A page whose parse kills its worker is dead-lettered after --max-attempts deaths."""
    spider = tmp_path / "poisoned.py"
    spider.write_text(textwrap.dedent(POISON_SPIDER))
    links = [href(host(i % 3), f"/p/{i}.html") for i in range(9)] + [href(host(1), "/poison.html")]
    resources = {(host(0), "/"): page("root", *links)}
    for i in range(9):
        resources[host(i % 3), f"/p/{i}.html"] = page(f"page {i}")
    resources[host(1), "/poison.html"] = page("poison")
    worker_flags = [
        "-v",
        "--spider",
        str(spider),
        *flags(delay=0.02, lease=1.5, idle=1, max_attempts=2),
    ]
    with (
        SiteServer(make_site(resources)) as server,
        Processes(redis_url, crawl_name, tmp_path) as fleet,
    ):
        fleet.join(*worker_flags)
        wait_until(
            lambda: status_of(redis_url, crawl_name)["workers"] == 1, what="the worker to join"
        )
        from hashcrawl import Queue

        with Queue(redis_url, crawl_name) as queue:
            queue.submit([server.site.root], allow_nets=SITE_NETS)
        deaths = 0
        # A supervisor (systemd, Kubernetes) restarts whatever dies; the crawl must end anyway.
        while True:
            process = fleet.started[-1]
            code = process.wait(timeout=DEADLINE)
            if code == 0:
                break
            assert code == 3
            deaths += 1
            assert deaths <= 3, "the poison page kept killing workers"
            fleet.join(*worker_flags)
        with Queue(redis_url, crawl_name) as queue:
            dead = queue.dead()
        counts = request_counts(server.requests())
    poison = f"http://{host(1)}:{server.site.port}/poison.html"
    assert poison in dead
    # The first death makes it a suspect, then one per attempt. A page that happened to
    # be in flight beside it at two deaths can be dead-lettered with it (rare; see the
    # session note); every other page is fetched.
    assert deaths == 3
    assert all(counts[u] >= 1 for u in server.site.expected() if u != poison)


def test_workers_carry_on_through_a_redis_restart_with_aof(tmp_path):
    """Redis restarted mid-crawl with AOF on: workers reconnect, the crawl finishes complete."""
    site, _ = tree_site(hosts=4, fanout=5, levels=3)
    server_dir = tmp_path / "redis"
    with (
        RedisServer(directory=server_dir, appendonly=True, appendfsync="always") as redis_server,
        SiteServer(site, latency=0.01) as server,
        Processes(redis_server.url, "restart", tmp_path) as fleet,
    ):
        workers = [fleet.join(*flags(delay=0.02, lease=10, idle=1)) for _ in range(2)]
        wait_until(
            lambda: status_of(redis_server.url, "restart")["workers"] == 2, what="two workers"
        )
        from hashcrawl import Queue

        with Queue(redis_server.url, "restart") as queue:
            queue.submit([server.site.root], allow_nets=SITE_NETS)
        expected = server.site.expected()
        wait_until(lambda: len(server.requests()) > len(expected) // 3, what="a third of the crawl")
        redis_server.restart()
        codes = [w.wait(timeout=90) for w in workers]
        counts = request_counts(server.requests())
    assert codes == [0, 0]
    assert set(counts) == set(expected)


def test_a_redis_that_refuses_writes_stops_the_worker_with_one_line(tmp_path):
    """Redis at maxmemory refusing every write: the worker exits 1 within a lease, one line."""
    with (
        RedisServer(directory=tmp_path / "redis", password="pw-refuse") as redis_server,
        Processes(redis_server.url, "refuse", tmp_path) as fleet,
    ):
        worker = fleet.join(*flags(delay=0.02, lease=2, idle="none"))
        wait_until(lambda: status_of(redis_server.url, "refuse")["workers"] == 1, what="the worker")
        raw = redis_py.Redis.from_url(redis_server.url)
        raw.config_set("maxmemory-policy", "noeviction")
        raw.config_set("maxmemory", "1")
        code = worker.wait(timeout=DEADLINE)
        raw.config_set("maxmemory", "0")
        raw.close()
        lines = worker.error_lines()
    assert code == 1
    assert one_line_about_redis(lines, "pw-refuse"), lines


def test_sigterm_during_a_redis_outage_still_exits(tmp_path):
    """A worker asked to stop while Redis is paused exits within a lease, not never."""
    with (
        RedisServer(directory=tmp_path / "redis") as redis_server,
        Processes(redis_server.url, "outage", tmp_path) as fleet,
    ):
        worker = fleet.join(*flags(delay=0.02, lease=2, idle="none"))
        wait_until(lambda: status_of(redis_server.url, "outage")["workers"] == 1, what="the worker")
        redis_server.pause()
        try:
            worker.signal(signal.SIGTERM)
            code = worker.wait(timeout=DEADLINE)
        finally:
            redis_server.resume()
    assert code in (0, 1)


del Path


async def _stopped_early(redis_url, crawl_name, tmp_path, delay=0.02, **limit):
    """Crawl a tree with one limited worker and one plain one; return the crew and counts.
    Both take the same ``delay``: a crawl's delay is one for the fleet."""
    site, _ = tree_site(hosts=4, fanout=4, levels=3)
    with SiteServer(site) as server:
        crew = Crew(redis_url, crawl_name, tmp_path)
        settings = [fast_settings(idle=2, delay=delay, **limit), fast_settings(idle=2, delay=delay)]
        await crawl_in_process(crew, settings, [server.site.root])
        counts = request_counts(server.requests())
        expected = server.site.expected()
    assert set(counts) == set(expected), "the other worker finishes the crawl"
    assert max(counts.values()) == 1, "nothing the stopped worker held is fetched twice"
    return crew


async def test_max_items_stops_one_worker_not_the_crawl(redis_url, crawl_name, tmp_path):
    """--max-items stops the worker that wrote that many items; the crawl completes."""
    crew = await _stopped_early(redis_url, crawl_name, tmp_path, max_items=5)
    assert crew.workers[0].tally.items < len(crew.items())


async def test_max_time_stops_one_worker_not_the_crawl(redis_url, crawl_name, tmp_path):
    """--max-time stops the worker after that many seconds; the crawl completes."""
    crew = await _stopped_early(redis_url, crawl_name, tmp_path, max_time=0.3, delay=0.05)
    assert crew.workers[0].tally.fetched < crew.workers[1].tally.fetched


async def test_max_memory_stops_a_worker_over_it(redis_url, crawl_name, tmp_path):
    """--max-memory below what Python itself takes stops the worker at once."""
    crew = await _stopped_early(redis_url, crawl_name, tmp_path, max_memory=1)
    assert crew.workers[0].tally.fetched <= crew.workers[0].settings.concurrency


async def test_max_errors_stops_a_worker_whose_fetches_fail(redis_url, crawl_name, tmp_path):
    """--max-errors stops a worker after that many failed fetches."""
    resources = {
        (host(0), "/"): page("root", *[f"http://127.0.0.250:9/{i}.html" for i in range(6)])
    }
    with SiteServer(make_site(resources)) as server:
        crew = Crew(redis_url, crawl_name, tmp_path)
        settings = [fast_settings(idle=2, max_errors=2, timeout=1.0, max_attempts=1)]
        await crawl_in_process(crew, settings, [server.site.root])
    assert 2 <= crew.workers[0].tally.failed < 6
    assert status_of(redis_url, crawl_name)["workers"] == 0
