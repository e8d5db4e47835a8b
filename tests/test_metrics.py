"""A worker's /metrics, scraped over HTTP during a real crawl, and its status view."""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from hashcrawl import Queue, Worker
from hashcrawl._cli._progress import summary
from hashcrawl._cli._statusview import read_view, render_text
from hashcrawl._core._entry import Entry
from hashcrawl._exceptions import ConfigError
from hashcrawl._run._metrics import Tally, error_kind
from hashcrawl._web._models import Response
from testing.fleet import HTML, host, href, make_site, page, page_requests, request_counts
from testing.testsite import Resource, Site
from tests.watching import by_class, settled_crawl


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something is listening on."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield int(busy.getsockname()[1])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page: (name, labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


async def test_metrics_scraped_during_a_crawl_match_the_servers_request_log(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """/metrics counts the pages by status class and their bytes exactly as the site served."""
    port = free_port()
    async with settled_crawl(redis_url, crawl_name, tmp_path, metrics_port=port) as (_, server):
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/metrics")
        requests = server.requests()
    assert answer.status_code == 200
    got = samples(answer.text)
    pages = {dict(k[1])["class"]: v for k, v in got.items() if k[0] == "hashcrawl_pages_total"}
    assert pages == by_class(requests)
    served = sum(len(server.site.response_for(r.host, r.path)[2]) for r in page_requests(requests))
    assert got[("hashcrawl_response_bytes_total", ())] == served
    assert got[("hashcrawl_fetch_seconds_count", ())] == len(page_requests(requests))
    assert got[("hashcrawl_members", ())] == 1
    assert got[("hashcrawl_in_flight", ())] == 0
    assert got[("hashcrawl_links_found_total", ())] >= got[("hashcrawl_links_kept_total", ())] > 0
    assert got[("hashcrawl_commit_seconds_count", ())] > 0
    assert got[("hashcrawl_fleet_leases_reclaimed_total", ())] == 0
    assert got[("hashcrawl_fleet_outstanding", ())] == got[("hashcrawl_fleet_dead", ())] == 0


async def test_status_view_renders_a_live_crawls_figures_without_a_terminal(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """The --watch view, drawn at a fixed width off a terminal, shows the crawl's figures."""
    async with settled_crawl(redis_url, crawl_name, tmp_path) as (worker, server):
        with Queue(redis_url, crawl_name) as queue:
            view = await trio.to_thread.run_sync(read_view, queue)
        requests = server.requests()
    text = render_text(view, width=100)
    assert "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    pages = len(page_requests(requests))
    assert f"{pages:,} fetched" in text
    assert view["statuses"] == by_class(requests)
    for cls, count in by_class(requests).items():
        assert f"{cls} {count:,}" in text
    (row,) = [line for line in text.splitlines() if line.startswith(worker.id)]
    assert row.split()[2] == f"{pages:,}"  # worker, hosts, fetched
    assert view["members"][0]["heartbeat_age_s"] is not None
    assert "appendonly" in text and view["redis"]["used_memory"]


async def test_a_metrics_port_in_use_stops_the_worker_with_a_config_error(
    redis_url: str, crawl_name: str
) -> None:
    """A --metrics-port that cannot be bound is a one-line error naming the flag."""
    with taken_port() as port:
        worker = Worker(redis_url, crawl_name, metrics_port=port)
        with pytest.raises(ConfigError, match=f"--metrics-port {port}"):
            await worker.run()


@pytest.mark.parametrize("port", [0, 65536])
def test_a_metrics_port_out_of_range_is_refused(redis_url: str, port: int) -> None:
    """--metrics-port takes 1 to 65535."""
    with pytest.raises(ConfigError, match="--metrics-port must be from 1 to 65535"):
        Worker(redis_url, "c", metrics_port=port)


def test_error_kinds_stay_few_whatever_the_messages() -> None:
    """A fetcher inventing endless error messages cannot grow the labels past the bound."""
    tally = Tally()
    for n in range(500):
        tally.error(f"Kind{n}: boom")
    tally.error("body larger than 10 bytes")
    tally.error("\x00 not a name")
    assert len(tally.errors) <= 25
    assert error_kind("ReadTimeout: timed out") == "ReadTimeout"
    assert error_kind("body larger than 10 bytes") == "body_too_large"
    assert tally.errors["other"] > 0


def test_a_rejoined_worker_reports_only_the_pages_of_its_new_membership() -> None:
    """Heartbeat counts start from the membership's beginning, so status never counts twice."""
    tally = Tally()
    tally.response(200, 10, 0.01)
    tally.error("ReadTimeout: slow")
    base = tally.counts()
    tally.response(200, 5, 0.01)
    tally.response(503, 0, 0.01)
    fields = tally.beat_fields(1.0, since=base)
    assert (fields["status_2xx"], fields["status_5xx"], fields["bytes"]) == (1, 1, 5)
    assert fields["error_ReadTimeout"] == 0


NOBODY = "127.0.0.250"  # a test address nothing listens on: its connections are refused


def _failing_site() -> Site:
    """A root linking to a good page, a page that always answers 500, a page the parse
    callback below raises on, and a host that refuses connections (robots.txt first)."""
    return make_site(
        {
            (host(0), "/"): page(
                "root",
                href(host(0), "/a.html"),
                href(host(0), "/fail"),
                href(host(0), "/bad"),
                href(NOBODY, "/gone"),
            ),
            (host(0), "/a.html"): page("a"),
            (host(0), "/fail"): Resource(500, HTML, "<html><body>down</body></html>"),
            (host(0), "/bad"): page("bad"),
        }
    )


def _raising_parse(response: Response) -> Iterator[Any]:
    if response.url.endswith("/bad"):
        raise RuntimeError("the spider's bug")
    yield {"url": response.url}
    yield from response.links()


async def test_status_metrics_and_summary_count_retries_dead_letters_and_parse_errors(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Retries, dead letters and parse errors are counted as the site's log and the dead
    letters show them, alike in status, /metrics and the crawl's summary."""
    port = free_port()
    async with settled_crawl(
        redis_url,
        crawl_name,
        tmp_path,
        site=_failing_site(),
        parse=_raising_parse,
        max_attempts=3,
        metrics_port=port,
    ) as (_, server):
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/metrics")
        with Queue(redis_url, crawl_name) as queue:
            view = await trio.to_thread.run_sync(read_view, queue)
            dead = queue.dead()
            records = [json.loads(text) for text in queue._store.dead().values()]
        requests = server.requests()
    attempts = {Entry.decode(r["entry"]).url: r["attempts"] for r in records}
    counts = request_counts(requests)
    bad = server.site.url(host(0), "/bad")
    gone = f"http://{NOBODY}:{server.site.port}/gone"
    retries = sum(n - 1 for n in counts.values()) + 2  # a URL's requests after its first
    out_of_attempts = {url for url, n in counts.items() if n == 3}
    assert set(dead) == out_of_attempts | {gone}
    assert out_of_attempts == {bad, server.site.url(host(0), "/fail")}
    refused = attempts[gone]
    assert view["retries"] == retries
    assert view["dead"] == view["dead_letters"] == len(dead)
    assert view["errors"] == {"parse": counts[bad], "robots_unreachable": refused}
    assert view["failed"] == refused == 3
    assert view["statuses"] == by_class(requests)
    assert view["fetched"] == len(page_requests(requests))
    items = (tmp_path / "items.jsonl").read_text().splitlines()
    assert view["items"] == len(items) == 2  # the root's and a.html's
    got = samples(answer.text)
    assert got[("hashcrawl_retries_total", ())] == retries
    assert got[("hashcrawl_dead_letters_total", ())] == len(dead)
    assert got[("hashcrawl_fetch_errors_total", (("kind", "parse"),))] == counts[bad]
    assert got[("hashcrawl_fetch_errors_total", (("kind", "robots_unreachable"),))] == refused
    args = argparse.Namespace(crawl=crawl_name, state_dir=tmp_path, output=None)
    text = summary(view, elapsed=1.0, args=args)
    assert f"{view['fetched']} pages, {len(items)} items" in text
    assert f"errors: parse {counts[bad]}, robots_unreachable {refused}" in text
    assert f"retries: {retries}" in text
    assert f"dead letters: {len(dead)}" in text
