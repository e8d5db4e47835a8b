"""A crawl with --revisit, end to end on loopback, judged from the test site's own log:
revisits come back conditional, unchanged pages answer 304 and write no item, changed
pages are found, quiet pages are fetched ever less often, and the host's pace holds."""

from __future__ import annotations

import collections
import itertools
import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from hashcrawl._output._sinks import JsonLinesSink
from hashcrawl._run._worker import Worker
from hashcrawl._store._server import RedisServer
from testing.fleet import (
    DEADLINE,
    Processes,
    await_until,
    fast_settings,
    flags,
    new_crawl_name,
    submit,
    wait_until,
)
from testing.revisitjudge import RESOLUTION
from testing.revisitsite import Page, RevisitSite, changes_missed, smallest_gap

DELAY = 0.2
LOW, HIGH = 3, 6
CHANGES_EVERY = 4.0
# What a due record waits beyond its interval: the taker's second, the heartbeat that
# reports the inbox, the drain, the host's pace behind the other pages.
SLACK = 4.0
PAGES = [Page(kind=kind, period=period) for kind in ("etag", "lastmod", "none")
         for period in (CHANGES_EVERY, None)]  # fmt: skip
Crawled = tuple[RevisitSite, list[dict[str, Any]]]
QUIET = [n for n, page in enumerate(PAGES) if page.period is None]
# Enough for a quiet page's interval to climb: it stays at LOW until the page has been
# quiet for 5 x LOW (the rule's SHARE), then grows. Its quiet time grows by each
# interval (0, 3, 6, ... 18, 22, 26 s), so the intervals after its fetches are these:
QUIET_INTERVALS = [3, 3, 3, 3, 3, 3, 4, 4, 5]
FETCHES_OF_QUIET = len(QUIET_INTERVALS) + 1
# How early a revisit may seem on the site's clock: the crawler stamps its due time by
# the Redis server's clock, through an offset sampled at the middle of a loopback round
# trip (off by at most half of one, a few ms here).
CLOCK_SLIP = 0.1


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Crawled:
    """One crawl of the site, run until every quiet page was fetched FETCHES_OF_QUIET
    times, then stopped."""
    out = tmp_path_factory.mktemp("revisit") / "items.jsonl"
    site = RevisitSite(PAGES)
    crawl = "r" + uuid.uuid4().hex[:10]

    async def main() -> None:
        worker = Worker(
            shared_redis.url,
            crawl,
            sink=JsonLinesSink(out),
            **fast_settings(
                idle=None, delay=DELAY, revisit="adaptive", revisit_min=LOW, revisit_max=HIGH
            ),
        )
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run)
                await trio.to_thread.run_sync(submit, shared_redis.url, crawl, [site.url()])
                await await_until(
                    lambda: all(len(site.hits(n)) >= FETCHES_OF_QUIET for n in QUIET),
                    what="quiet pages fetched often enough",
                )
                worker.stop()

    with site:
        trio.run(main)
    items = [json.loads(line) for line in out.read_text().splitlines()]
    return site, items


@pytest.mark.slow
def test_revisits_are_conditional_on_their_validators(crawled: Crawled) -> None:
    """A revisit of an ETag page sends If-None-Match; of a Last-Modified page,
    If-Modified-Since; of a page with neither, no condition."""
    site, _ = crawled
    for n, page in enumerate(PAGES):
        revisits = site.hits(n)[1:]
        assert revisits, f"page {n} was never revisited"
        if page.kind == "etag":
            assert all(hit.if_none_match for hit in revisits)
        if page.kind == "lastmod":
            assert all(hit.if_modified_since and not hit.if_none_match for hit in revisits)
        if page.kind == "none":
            assert not any(hit.if_none_match or hit.if_modified_since for hit in revisits)


@pytest.mark.slow
def test_unchanged_pages_answer_304_and_write_no_item(crawled: Crawled) -> None:
    """Quiet pages with validators are answered 304; every page has one item per version
    a 200 brought, so neither a 304 nor the same content again writes one."""
    site, items = crawled
    for n in QUIET:
        if PAGES[n].kind != "none":
            assert {hit.status for hit in site.hits(n)[1:]} == {304}
    written = collections.Counter(item["url"] for item in items)
    for n in range(len(PAGES)):
        versions = {hit.version for hit in site.hits(n) if hit.status == 200}
        assert written[site.url(f"/p/{n}")] == len(versions)


@pytest.mark.slow
def test_every_change_is_found_within_its_pages_interval(crawled: Crawled) -> None:
    """A page changing every 4 s has each change found within --revisit-max and the
    slack of taking it; a change overwritten before that is a miss."""
    site, _ = crawled
    for n, page in enumerate(PAGES):
        if page.period is not None:
            assert changes_missed(site, n, within=HIGH + SLACK) == []


@pytest.mark.slow
def test_quiet_pages_are_fetched_ever_less_often(crawled: Crawled) -> None:
    """A page that never changes comes back later as it stays quiet, up to
    --revisit-max: never sooner than the interval its quiet time gives. (That bound is
    exact; how much later than its due time a revisit comes depends on the machine's
    load, so gaps are not compared with each other: 3 s plus a busy second exceeds 4.)"""
    assert QUIET_INTERVALS[-1] > QUIET_INTERVALS[0] == LOW and max(QUIET_INTERVALS) <= HIGH
    site, _ = crawled
    for n in QUIET:
        times = [hit.at for hit in site.hits(n)]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        for k, (gap, interval) in enumerate(zip(gaps, QUIET_INTERVALS, strict=False)):
            assert gap >= interval - CLOCK_SLIP, (n, k, gaps)


@pytest.mark.slow
def test_the_hosts_pace_holds_through_revisits(crawled: Crawled) -> None:
    """No two requests to the site came closer than --delay: exactly, to the log clock's
    resolution (a host is paced from its last answer, on the same clock as the log)."""
    site, _ = crawled
    assert smallest_gap(site) >= DELAY - RESOLUTION


@pytest.mark.slow
def test_a_killed_owner_loses_no_revisit_and_the_pace_holds(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """Two worker processes revisit the site; its owner is killed (SIGKILL) mid-run. Every
    page is revisited again afterwards, by the survivor, and no two requests to the site
    ever came closer than --delay."""
    crawl = new_crawl_name()
    worker_flags = flags(
        delay=DELAY, lease=2.0, idle="none", revisit="adaptive", revisit_min=LOW, revisit_max=HIGH
    )
    with RevisitSite(PAGES) as site, Processes(shared_redis.url, crawl, tmp_path) as fleet:
        submit(shared_redis.url, crawl, [site.url()])
        for _ in range(2):
            fleet.join(*worker_flags)
        wait_until(lambda: all(len(site.hits(n)) >= 2 for n in QUIET), what="first revisits")
        fleet.busiest_member().signal(signal.SIGKILL)
        killed_at = site.now()
        wait_until(
            lambda: all(
                sum(hit.at > killed_at for hit in site.hits(n)) >= 2 for n in range(len(PAGES))
            ),
            what="two revisits of every page after the kill",
        )
    assert smallest_gap(site) >= DELAY - RESOLUTION


@pytest.mark.slow
def test_a_revisit_crawls_archive_holds_each_304_as_a_revisit_record(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """Archived with -o NAME.warc.gz: each 304 the site logged is a revisit record of the
    server-not-modified profile, each 200 a response record, and `warcio check` passes
    on the file (the record digests included)."""
    import subprocess
    import sys

    from warcio.archiveiterator import ArchiveIterator

    from hashcrawl import WarcSink
    from hashcrawl._output._warc import NOT_MODIFIED_PROFILE

    site = RevisitSite(PAGES)
    warc = WarcSink(tmp_path / "revisits.warc.gz")
    crawl = "r" + uuid.uuid4().hex[:10]

    async def main() -> None:
        settings = fast_settings(
            idle=None, delay=DELAY, revisit="adaptive", revisit_min=LOW, revisit_max=HIGH
        )
        items = JsonLinesSink(tmp_path / "items.jsonl")
        worker = Worker(shared_redis.url, crawl, sink=[items, warc], **settings)
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run)
                await trio.to_thread.run_sync(submit, shared_redis.url, crawl, [site.url()])
                await await_until(
                    lambda: sum(hit.status == 304 for hit in site.log) >= 6, what="six 304s"
                )
                worker.stop()

    with site:
        trio.run(main)
    warc.close()  # idempotent if the worker closed it
    kinds: collections.Counter[tuple[str, str]] = collections.Counter()
    for path in warc.files:
        with open(path, "rb") as stream:
            for record in ArchiveIterator(stream, check_digests="raise"):
                profile = record.rec_headers.get_header("WARC-Profile") or ""
                kinds[(record.rec_type, profile)] += 1
        checked = subprocess.run(
            [Path(sys.executable).parent / "warcio", "check", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    pages = [hit for hit in site.log if hit.path != "/robots.txt"]
    assert kinds[("revisit", NOT_MODIFIED_PROFILE)] == sum(hit.status == 304 for hit in pages)
    assert kinds[("response", "")] >= sum(hit.status == 200 for hit in pages)
