"""Every item format through a worker's SIGKILL: two workers share one file of each format,
one is killed a third of the way in and replaced; every file reads, every page is in it."""

from __future__ import annotations

import collections
import signal
from pathlib import Path

import pytest

from hashcrawl._store._server import RedisServer
from testing.fleet import (
    Gated,
    Process,
    Processes,
    flags,
    new_crawl_name,
    request_counts,
    status_of,
    submit,
    wait_until,
)
from testing.formats import FORMATS, read_items
from testing.testsite import SiteServer, generate_site


@pytest.mark.slow
def test_every_format_has_every_page_after_a_worker_is_killed_and_replaced(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """Two `join` processes write -o items.jsonl, .json, .csv, .xml and .parquet (the
    same files for both, as crawl's workers do); the busiest is SIGKILLed once a third
    of the 150 pages are requested and a third worker started. When the crawl ends,
    each file opens in its standard reader and holds an item for every page; the dead
    worker's Parquet journal is a part, and its joining line is in the --log-file."""
    site = generate_site(pages=150, hosts=6, seed=4949, port=0)
    crawl, url = new_crawl_name(), shared_redis.url
    outputs = [tmp_path / f"items.{ending}" for ending in FORMATS]
    arguments = ["join", "--redis", url, "--crawl", crawl, "--log-file", str(tmp_path / "log")]
    arguments += [arg for path in outputs for arg in ("-o", str(path))]
    arguments += flags(delay=0.02, lease=2, idle=0.5, concurrency=8, grace=5)
    gated = Gated(site)
    with SiteServer(gated) as server, Processes(url, crawl, tmp_path) as fleet:  # type: ignore[arg-type]
        submit(url, crawl, [server.site.root])
        try:
            for n in range(2):
                fleet.started.append(Process(arguments, tmp_path, f"worker-{n}"))
            wait_until(lambda: status_of(url, crawl)["workers"] == 2, what="2 members")
        finally:
            gated.open()
        third = len(server.site.expected()) // 3
        wait_until(lambda: len(server.requests()) >= third, what=f"{third} requests")
        victim = fleet.busiest_member()
        victim.signal(signal.SIGKILL)
        victim.wait()
        fleet.started.append(Process(arguments, tmp_path, "replacement"))
        exits = [p.wait() for p in fleet.started if p is not victim]
        requested = set(request_counts(server.requests()))
        status = status_of(url, crawl)
    assert exits == [0, 0]
    assert requested == server.site.expected() and status["ended"] is True
    for path in outputs:
        urls = collections.Counter(item["url"] for item in read_items(path))
        assert set(urls) == server.site.expected(), path
        print(f"{path.name}: {len(urls)} pages, {sum(urls.values()) - len(urls)} repeated")
    assert [p.name for p in outputs[-1].iterdir() if p.name.startswith(".")] == []
    assert (tmp_path / "log").read_text().count("joined crawl") == 3
