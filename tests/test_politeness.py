"""Politeness, as the site's server saw it: per-host spacing, concurrency, robots.txt, back-off."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from hashcrawl import HttpxFetcher, JsonLinesSink, QueueError, Request, Response
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._urls import host_key
from hashcrawl._run._worker import Worker
from hashcrawl._store._server import RedisServer
from testing.fleet import (
    DEADLINE,
    BusyOnce,
    Crawled,
    Crew,
    Scenarios,
    await_until,
    crawl_site,
    fast_settings,
    host,
    href,
    make_site,
    new_crawl_name,
    page,
    page_requests,
    request_counts,
    robots,
    robots_requests_per_host,
    status_of,
    submit,
    times_by_host,
)
from testing.testsite import ROBOTS_PATH, SITE_NETS, Site, SiteServer, generate_site, judge

DELAY = 0.05
LATENCY = 0.1  # how long the slow server holds each response
CRAWL_DELAY = 0.3
RETRY_AFTER = 1
# Long enough that a new owner could only keep it by using the pacing its predecessor
# handed over: a handoff takes a heartbeat or two (0.1-0.5 s here).
HANDOFF_DELAY = 1.0
HANDOFF_HOSTS = 8


def per_host_site() -> Site:
    """A root linking a hub on each of 3 hosts, each hub linking 12 pages of its host."""
    leaves = {host(n): [f"/leaf/{k}.html" for k in range(12)] for n in range(3)}
    resources = {(host(0), "/"): page("root", *(href(h, "/hub") for h in leaves))}
    for name, paths in leaves.items():
        resources[name, "/hub"] = page("hub", *(href(name, p) for p in paths))
        resources.update({(name, p): page(p) for p in paths})
    return make_site(resources)


def crawl_delay_site() -> Site:
    """Two hosts of 4 pages each; the root's host asks for a Crawl-delay of 0.3 s."""
    slow, fast = host(0), host(1)
    pages = [f"/p/{k}.html" for k in range(4)]
    resources = {
        (slow, "/"): page("root", *(href(h, p) for h in (slow, fast) for p in pages)),
        (slow, ROBOTS_PATH): robots(f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n"),
        **{(h, p): page(p) for h in (slow, fast) for p in pages},
    }
    return make_site(resources, crawl_delays={slow: CRAWL_DELAY})


def busy_site(path: str, status: int) -> Site:
    """One host of 5 pages, whose `path` first answers `status` with Retry-After: 1."""
    a = host(0)
    others = [f"/p/{k}.html" for k in range(4)]
    resources = {
        (a, "/"): page("root", href(a, "/busy"), *(href(a, p) for p in others)),
        (a, "/busy"): page("busy"),
        **{(a, p): page(p) for p in others},
    }
    return BusyOnce(make_site(resources), {(a, path): (status, RETRY_AFTER)})  # type: ignore[return-value]


def spread_site(*, hosts: int, pages: int) -> Site:
    """A root that links `pages` pages on each of `hosts` hosts (its own included)."""
    paths = [f"/p/{k}.html" for k in range(pages)]
    links = [href(host(n), p) for n in range(hosts) for p in paths]
    resources = {(host(0), "/"): page("root", *links)}
    resources.update({(host(n), p): page(p) for n in range(hosts) for p in paths})
    return make_site(resources)


async def crawl_with_handoff(redis_url: str, directory: Path, *, change: str) -> Crawled:
    """Crawl the spread site and, once a page of each host is in, make hosts change owner.

    `change` is "stop" (the busiest of three workers stops) or "join" (two workers join one).
    """
    crew = Crew(redis_url, new_crawl_name(), directory)
    first = 3 if change == "stop" else 1
    # A crawl idles only once something was submitted, so the workers wait for it.
    settings = fast_settings(delay=HANDOFF_DELAY, idle=1.0)
    with SiteServer(spread_site(hosts=HANDOFF_HOSTS, pages=2)) as server, trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for _ in range(first):
                nursery.start_soon(crew.run, crew.hire(settings))
            await await_until(lambda: crew.members() == first, what=f"{first} members")
            await trio.to_thread.run_sync(submit, redis_url, crew.crawl, [server.site.root])
            # A page (not only robots.txt) of every host, so the items show who fetched what.
            await await_until(
                lambda: len(page_requests(server.requests())) > HANDOFF_HOSTS,
                what="a page per host",
            )
            if change == "stop":
                (await busiest_worker(crew)).stop()
            else:
                for _ in range(2):
                    nursery.start_soon(crew.run, crew.hire(settings))
        return Crawled(server.site, server.requests(), crew)


async def busiest_worker(crew: Crew) -> Worker:
    """The crew's worker that owns the most hosts, by its last heartbeat."""
    status = await trio.to_thread.run_sync(status_of, crew.redis_url, crew.crawl)
    busiest = max(status["members"], key=lambda member: member["hosts"])
    return next(w for w in crew.workers if w.id == busiest["id"])


@pytest.fixture(scope="module")
def crawls(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    """Every crawl this module judges, run side by side."""
    url, directory = shared_redis.url, tmp_path_factory.mktemp("crawls")
    one = [fast_settings()]
    return Scenarios(
        {
            "paced": lambda: crawl_site(
                url,
                directory,
                generate_site(pages=100, hosts=6, seed=6, port=0),
                [fast_settings(delay=DELAY)],
            ),
            "per-host-2": lambda: crawl_site(
                url, directory, per_host_site(), [fast_settings(per_host=2)], latency=LATENCY
            ),
            "crawl-delay": lambda: crawl_site(url, directory, crawl_delay_site(), one),
            "robots-503": lambda: crawl_site(url, directory, busy_site(ROBOTS_PATH, 503), one),
            "busy-429": lambda: crawl_site(url, directory, busy_site("/busy", 429), one),
            "busy-503": lambda: crawl_site(url, directory, busy_site("/busy", 503), one),
            "stop": lambda: crawl_with_handoff(url, directory, change="stop"),
            "join": lambda: crawl_with_handoff(url, directory, change="join"),
        }
    ).run()


# --- spacing ------------------------------------------------------------------------------


def test_requests_to_one_host_are_never_closer_than_the_delay(crawls: Scenarios) -> None:
    """With per_host 1, arrivals at a host (robots.txt included) are at least --delay apart."""
    paced: Crawled = crawls["paced"]
    verdict = judge(paced.site, paced.requests, [], delay=DELAY)
    assert verdict.too_close == 0, verdict.min_gap


def test_per_host_2_keeps_at_most_two_requests_in_flight_to_a_host(crawls: Scenarios) -> None:
    """With per_host 2 and a slow server, no three requests to one host are ever answered at once.

    The server holds every response for LATENCY seconds after the request arrives, so
    three arrivals at one host within LATENCY would mean three requests in flight.
    """
    slow: Crawled = crawls["per-host-2"]
    times = times_by_host(slow.requests)
    overlapped = [b - a < LATENCY for stamps in times.values() for a, b in apart(stamps, 1)]
    assert any(overlapped), "no two requests to a host overlapped: per_host 2 was not exercised"
    three_at_once = {
        name: [(a, c) for a, c in apart(stamps, 2) if c - a < LATENCY]
        for name, stamps in times.items()
    }
    assert {name: pairs for name, pairs in three_at_once.items() if pairs} == {}


def apart(stamps: Sequence[float], by: int) -> list[tuple[float, float]]:
    """Pairs of times `by` positions apart in a sorted list."""
    return list(zip(stamps, stamps[by:], strict=False))


# --- robots.txt ---------------------------------------------------------------------------


def test_pages_robots_txt_forbids_are_never_requested(crawls: Scenarios) -> None:
    """No URL that a host's robots.txt disallows is requested, though such URLs are linked."""
    paced: Crawled = crawls["paced"]
    assert paced.site.forbidden(), "the site links no forbidden page: the test shows nothing"
    assert set(request_counts(paced.requests)) & paced.site.forbidden() == set()


async def test_a_link_its_own_hosts_robots_txt_forbids_is_never_queued(
    redis_url: str, tmp_path: Path
) -> None:
    """The owner drops such a link at once, counting it as robots.txt-denied; one to
    another host is queued for its owner, which refuses it (counted too)."""
    rules = "User-agent: *\nDisallow: /private/\n"
    site = make_site(
        {
            (host(0), "/"): page(
                "root",
                href(host(0), "/ok.html"),
                href(host(0), "/private/a.html"),
                href(host(1), "/private/b.html"),
            ),
            (host(0), "/ok.html"): page("ok"),
            (host(0), ROBOTS_PATH): robots(rules),
            (host(1), ROBOTS_PATH): robots(rules),
        }
    )
    crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings()])
    status = status_of(redis_url, crawled.crew.crawl)
    assert status["seen"] == 3  # the root, /ok.html and host 1's /private/b.html
    assert status["robots_denied"] == 2  # /private/a.html at extraction, b.html by its owner
    assert {r.path for r in page_requests(crawled.requests)} == {"/", "/ok.html"}


def test_a_single_worker_requests_robots_txt_once_per_host(crawls: Scenarios) -> None:
    """One worker that owns every host throughout reads each host's robots.txt exactly once."""
    paced: Crawled = crawls["paced"]
    assert robots_requests_per_host(paced.requests) == {name: 1 for name in paced.site.hosts}


def test_crawl_delay_longer_than_the_delay_spaces_that_hosts_requests(crawls: Scenarios) -> None:
    """A robots.txt Crawl-delay of 0.3 s is kept on its host although --delay is 0.02."""
    delayed: Crawled = crawls["crawl-delay"]
    verdict = judge(delayed.site, delayed.requests, [], delay=0.02)
    assert verdict.fetched == verdict.expected == 9
    assert verdict.too_close == 0, verdict.min_gap


def test_robots_txt_briefly_unavailable_is_read_again_and_the_host_crawled(
    crawls: Scenarios,
) -> None:
    """A robots.txt that first answers 503 with Retry-After: 1 does not cost the host its pages."""
    unavailable: Crawled = crawls["robots-503"]
    assert set(request_counts(unavailable.requests)) == unavailable.site.expected()


# --- back-off -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_holds_back_every_request_to_that_host(crawls: Scenarios, status: int) -> None:
    """After a 429/503 with Retry-After: 1, the host's next request comes at least 1 s later."""
    busy: Crawled = crawls[f"busy-{status}"]
    records = sorted(busy.requests, key=lambda r: r.time)
    refused = next(r for r in records if r.status == status)
    after = [r for r in records if r.time > refused.time]
    assert after, "nothing was requested after the refusal"
    assert after[0].time - refused.time >= RETRY_AFTER


@pytest.mark.parametrize("status", [429, 503])
def test_page_refused_with_retry_after_is_retried_until_fetched(
    crawls: Scenarios, status: int
) -> None:
    """The refused page is requested again, fetched, and written once with status 200."""
    busy: Crawled = crawls[f"busy-{status}"]
    url = busy.site.url(host(0), "/busy")
    assert [r.status for r in busy.requests if r.url == url] == [status, 200]
    assert [i["status"] for i in busy.crew.items() if i["url"] == url] == [200]


# --- politeness across owners -----------------------------------------------------------


@pytest.mark.parametrize("change", ["stop", "join"])
def test_hosts_that_change_owner_stay_paced(crawls: Scenarios, change: str) -> None:
    """When a worker stops or others join mid-crawl, a host's new owner keeps --delay after the
    old owner's last request to it."""
    handed: Crawled = crawls[change]
    owners: dict[str, set[str]] = {}
    for item in handed.crew.items():
        owners.setdefault(host_key(item["url"]), set()).add(item["worker"])
    assert any(len(ids) > 1 for ids in owners.values()), "no host changed owner"
    verdict = judge(handed.site, handed.requests, handed.crew.outputs, delay=HANDOFF_DELAY)
    assert verdict.missing == ()
    assert verdict.too_close == 0, verdict.min_gap


@pytest.mark.parametrize("change", ["stop", "join"])
def test_a_host_that_changes_owner_gets_no_second_robots_txt_request(
    crawls: Scenarios, change: str
) -> None:
    """The old owner hands a host's fresh robots.txt over with its pace record: the site
    sees one /robots.txt request per host although hosts changed owner mid-crawl."""
    handed: Crawled = crawls[change]
    owners: dict[str, set[str]] = {}
    for item in handed.crew.items():
        owners.setdefault(host_key(item["url"]), set()).add(item["worker"])
    moved = [name for name, ids in owners.items() if len(ids) > 1]
    assert moved, "no host changed owner"
    assert robots_requests_per_host(handed.requests) == {name: 1 for name in handed.site.hosts}


class Counted:
    """A fetcher that counts the fetches begun through it, each done by ``inner``."""

    def __init__(self, inner: HttpxFetcher) -> None:
        self.inner = inner
        self.begun = 0

    async def fetch(self, request: Request) -> Response:
        self.begun += 1
        return await self.inner.fetch(request)


async def test_a_request_held_up_until_its_worker_went_stale_is_not_sent(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A request that waits for a connection is checked again when it gets one.

    Both pages pass the worker's check and go to the fetcher; one waits for the only
    connection while the server holds the other. Redis then goes silent: by the time
    the connection is free, the worker has gone a quarter lease without a heartbeat,
    and may no longer fetch (the hosts' next owner could be fetching them already).
    """
    logged = await requests_sent_by_a_worker_gone_stale(redis_server, tmp_path, "held")
    assert len(logged) == 1, logged


async def test_the_stale_request_test_catches_a_driver_that_sends_unchecked(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With the deliberate bug ``send_unchecked`` on (the trio driver no longer asks the
    session right before a request leaves), the test above sees both requests sent."""
    faults = Faults.of(["send_unchecked"])
    logged = await requests_sent_by_a_worker_gone_stale(redis_server, tmp_path, "unchecked", faults)
    assert len(logged) == 2, logged


async def requests_sent_by_a_worker_gone_stale(
    redis_server: RedisServer, tmp_path: Path, crawl: str, faults: Faults = NO_FAULTS
) -> list[tuple[str, str]]:
    """Two pages, one connection, a slow server, then Redis paused: the requests the
    site received, as (host, path)."""
    site = make_site({(host(0), "/"): page("a"), (host(1), "/"): page("b")})
    fetcher = Counted(HttpxFetcher(max_connections=1, allow_nets=SITE_NETS))
    worker = Worker(
        redis_server.url,
        crawl,
        fetcher=fetcher,
        sink=JsonLinesSink(tmp_path / f"{crawl}.jsonl"),
        faults=faults,
        concurrency=2,
        obey_robots=False,
        delay=0,
        lease=4.0,
        idle=None,
    )

    async def run_until_it_gives_up() -> None:
        with pytest.raises(QueueError, match="without a heartbeat"):
            await worker.run()

    with SiteServer(site, latency=2.0) as server:
        roots = [f"http://{h}:{server.site.port}/" for h in (host(0), host(1))]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_until_it_gives_up)
                await await_until(
                    lambda: status_of(redis_server.url, crawl)["workers"] == 1, what="the worker"
                )
                await trio.to_thread.run_sync(submit, redis_server.url, crawl, roots)
                await await_until(
                    lambda: fetcher.begun == 2 and len(server.requests()) == 1,
                    what="both fetches begun, one of them sent",
                )
                redis_server.pause()
        finally:
            redis_server.resume()
            await fetcher.inner.aclose()
        return [(r.host, r.path) for r in server.requests()]
