"""Workers crawl a real loopback site through a real Redis: judged by the site's request log."""

from __future__ import annotations

import collections
import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from hashcrawl._core._ring import Ring
from hashcrawl._core._urls import host_key
from hashcrawl._exceptions import ConfigError, InvalidURL
from hashcrawl._output._sinks import JsonLinesSink
from hashcrawl._run._queue import Queue
from hashcrawl._run._worker import Worker
from hashcrawl._spiders._spider import Spider
from hashcrawl._store._server import RedisServer
from testing.fleet import (
    DEADLINE,
    ITEM_FIELDS,
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
    redirect,
    request_counts,
    root_and_two_pages,
    status_of,
    submit,
    tree_site,
)
from testing.testsite import Site, SiteServer, generate_site
from tests.watching import heartbeat_since, server_ms

ALLOWED = host(0)


def redirect_site() -> Site:
    """A root on one host whose redirects lead to pages reached in no other way."""
    a, b = host(0), host(1)
    return make_site(
        {
            (a, "/"): page("root", href(a, "/go"), href(a, "/moved")),
            (a, "/go"): redirect(302, href(b, "/target")),
            (a, "/moved"): redirect(301, "/new"),
            (a, "/new"): page("new"),
            (b, "/target"): page("target"),
        }
    )


def tree() -> Site:
    """A tree of 1 + 3 + 9 + 27 + 81 pages on 4 hosts, each page linked from its parent."""
    return tree_site(hosts=4, fanout=3, levels=4)[0]


def levels_of(crawled: Crawled) -> dict[str, int]:
    """Each page of the crawled tree site, by URL, with its distance from the root."""
    _, levels = tree_site(hosts=4, fanout=3, levels=4)
    return {crawled.site.url(*key): level for key, level in levels.items()}


PRIORITY_LOW = [f"/low/{n}.html" for n in range(20)]
PRIORITY_HIGH = [f"/high/{n}.html" for n in range(5)]


async def crawl_after_submitting_by_priority(redis_url: str, directory: Path) -> Crawled:
    """Submit 20 priority-0 then 5 priority-10 URLs of one host, then start one worker."""
    a = host(0)
    paths = PRIORITY_LOW + PRIORITY_HIGH
    site = make_site({(a, "/"): page("root"), **{(a, p): page(p) for p in paths}})
    crew = Crew(redis_url, new_crawl_name(), directory)
    with SiteServer(site) as server:
        # Nobody has joined yet: the submissions wait in the inbox, the low ones first.
        low = [server.site.url(a, p) for p in PRIORITY_LOW]
        high = [server.site.url(a, p) for p in PRIORITY_HIGH]
        await trio.to_thread.run_sync(lambda: submit(redis_url, crew.crawl, low, priority=0))
        await trio.to_thread.run_sync(lambda: submit(redis_url, crew.crawl, high, priority=10))
        with trio.fail_after(DEADLINE):
            await crew.run(crew.hire(fast_settings()))
        return Crawled(server.site, server.requests(), crew)


@pytest.fixture(scope="module")
def crawls(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    """Every crawl this module judges, run side by side."""
    url, directory = shared_redis.url, tmp_path_factory.mktemp("crawls")
    fleet_site = generate_site(pages=150, hosts=8, seed=4, port=0)
    return Scenarios(
        {
            "single": lambda: crawl_site(
                url, directory, generate_site(pages=100, hosts=5, seed=3, port=0), [fast_settings()]
            ),
            "fleet-2": lambda: crawl_site(url, directory, fleet_site, [fast_settings()] * 2),
            "fleet-3": lambda: crawl_site(url, directory, fleet_site, [fast_settings()] * 3),
            "redirects": lambda: crawl_site(url, directory, redirect_site(), [fast_settings()] * 2),
            "max-depth": lambda: crawl_site(url, directory, tree(), [fast_settings(max_depth=2)]),
            "tree": lambda: crawl_site(url, directory, tree(), [fast_settings()]),
            "allow-domain": lambda: crawl_site(
                url,
                directory,
                generate_site(pages=100, hosts=5, seed=5, port=0),
                [fast_settings(span_hosts=False, allow_domains=(ALLOWED,))],
            ),
            "priority": lambda: crawl_after_submitting_by_priority(url, directory),
        }
    ).run()


# --- one worker -------------------------------------------------------------------------


def test_single_worker_requests_every_expected_page_exactly_once(crawls: Scenarios) -> None:
    """Every URL a correct crawl fetches is requested once, and nothing else is."""
    single: Crawled = crawls["single"]
    counts = request_counts(single.requests)
    assert set(counts) == single.site.expected()
    assert {url: n for url, n in counts.items() if n > 1} == {}


def test_single_worker_writes_one_item_per_fetched_page(crawls: Scenarios) -> None:
    """The output file holds exactly one item for every page fetched."""
    single: Crawled = crawls["single"]
    urls = collections.Counter(item["url"] for item in single.crew.items())
    assert set(urls) == single.site.expected()
    assert {url: n for url, n in urls.items() if n > 1} == {}


def test_single_worker_items_describe_the_response(crawls: Scenarios) -> None:
    """Each item has the page fields, with the status the server sent and this worker's id."""
    single: Crawled = crawls["single"]
    served = {r.url: r.status for r in page_requests(single.requests)}
    (worker,) = single.crew.workers
    for item in single.crew.items():
        assert set(item) == ITEM_FIELDS, item
        if item["location"] is None:  # a redirect's final_url is where it leads
            assert item["final_url"] == item["url"]
        assert item["status"] == served[item["url"]]
        parts = urlsplit(item["url"])
        _, headers, body = single.site.response_for(parts.hostname or "", parts.path)
        assert (item["content_type"], item["length"]) == (headers["Content-Type"], len(body))
        assert item["worker"] == worker.id
        assert isinstance(item["depth"], int) and item["depth"] >= 0
        assert datetime.datetime.fromisoformat(item["fetched_at"]).tzinfo is not None
    root = next(item for item in single.crew.items() if item["url"] == single.site.root)
    assert (root["title"], root["depth"]) == (f"Page / on {single.site.hosts[0]}", 0)


def test_single_worker_ends_by_itself_once_the_crawl_is_idle(crawls: Scenarios) -> None:
    """The worker returned without being stopped, leaving an ended crawl with nothing held."""
    single: Crawled = crawls["single"]
    status = status_of(single.crew.redis_url, single.crew.crawl)
    ended = {key: status[key] for key in ("ended", "workers", "waiting", "held")}
    assert ended == {"ended": True, "workers": 0, "waiting": 0, "held": 0}


# --- fleets -------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [2, 3])
def test_fleet_never_requests_a_page_twice(crawls: Scenarios, workers: int) -> None:
    """Workers that share a crawl request each page once between them."""
    fleet: Crawled = crawls[f"fleet-{workers}"]
    counts = request_counts(fleet.requests)
    assert {url: n for url, n in counts.items() if n > 1} == {}


@pytest.mark.parametrize("workers", [2, 3])
def test_fleet_requests_every_expected_page(crawls: Scenarios, workers: int) -> None:
    """Nothing a correct crawl fetches is missed, and nothing else is requested."""
    fleet: Crawled = crawls[f"fleet-{workers}"]
    assert set(request_counts(fleet.requests)) == fleet.site.expected()


@pytest.mark.parametrize("workers", [2, 3])
def test_fleet_output_files_together_hold_every_page_once(crawls: Scenarios, workers: int) -> None:
    """The union of the workers' output files has every expected page, each exactly once."""
    fleet: Crawled = crawls[f"fleet-{workers}"]
    urls = collections.Counter(item["url"] for item in fleet.crew.items())
    assert set(urls) == fleet.site.expected()
    assert {url: n for url, n in urls.items() if n > 1} == {}


@pytest.mark.parametrize("workers", [2, 3])
def test_fleet_fetches_each_host_from_one_worker_while_membership_holds(
    crawls: Scenarios, workers: int
) -> None:
    """With every worker joined before the crawl starts, each host's pages come from one worker."""
    fleet: Crawled = crawls[f"fleet-{workers}"]
    workers_of_host = collections.defaultdict(set)
    for item in fleet.crew.items():
        workers_of_host[host_key(item["url"])].add(item["worker"])
    assert {name: ids for name, ids in workers_of_host.items() if len(ids) > 1} == {}


# --- redirects ------------------------------------------------------------------------------


def test_redirect_sources_and_targets_are_each_requested_once(crawls: Scenarios) -> None:
    """A redirect is requested, and its target (absolute or relative Location) once after it."""
    redirected: Crawled = crawls["redirects"]
    site = redirected.site
    order = [r.url for r in page_requests(redirected.requests)]
    assert collections.Counter(order) == {url: 1 for url in site.expected()}
    go, target = site.url(host(0), "/go"), site.url(host(1), "/target")
    moved, new = site.url(host(0), "/moved"), site.url(host(0), "/new")
    assert order.index(go) < order.index(target)
    assert order.index(moved) < order.index(new)


def test_redirect_is_written_as_the_redirect_response(crawls: Scenarios) -> None:
    """The redirect's own item keeps its 3xx status and says where it went (final_url,
    location; no title); the target gets an item of its own."""
    redirected: Crawled = crawls["redirects"]
    by_url = {item["url"]: item for item in redirected.crew.items()}
    go = by_url[redirected.site.url(host(0), "/go")]
    target = redirected.site.url(host(1), "/target")
    assert (go["status"], go["final_url"], go["location"], go["title"]) == (
        302,
        target,
        target,
        None,
    )
    assert by_url[redirected.site.url(host(1), "/target")]["status"] == 200


def test_redirect_target_is_fetched_by_its_hosts_owner(crawls: Scenarios) -> None:
    """A redirect to another host goes to that host's owner on the ring, which fetches it."""
    redirected: Crawled = crawls["redirects"]
    ring = Ring.of(0, [w.id for w in redirected.crew.workers])
    target = redirected.site.url(host(1), "/target")
    (item,) = [i for i in redirected.crew.items() if i["url"] == target]
    assert item["worker"] == ring.owner_of(host_key(target))


# --- limits -----------------------------------------------------------------------------------


def test_max_depth_stops_following_links_beyond_it(crawls: Scenarios) -> None:
    """With --max-depth 2, exactly the pages two links or fewer from the root are requested."""
    limited: Crawled = crawls["max-depth"]
    within = {url for url, level in levels_of(limited).items() if level <= 2}
    assert set(request_counts(limited.requests)) == within


def test_items_record_how_many_links_from_the_root_a_page_is(crawls: Scenarios) -> None:
    """Each item's depth is the page's distance in links from the submitted URL."""
    whole: Crawled = crawls["tree"]
    assert {item["url"]: item["depth"] for item in whole.crew.items()} == levels_of(whole)


def test_allow_domain_keeps_the_crawl_within_that_host(crawls: Scenarios) -> None:
    """Without --span-hosts, and --allow-domain naming the root's host only, the crawl
    requests that host's reachable pages only."""
    limited: Crawled = crawls["allow-domain"]
    # The same site with one host: a correct crawl of it drops links to any other host.
    within = Site(
        port=limited.site.port,
        hosts=(ALLOWED,),
        resources=limited.site.resources,
        crawl_delays=limited.site.crawl_delays,
    )
    assert {r.host for r in limited.requests} == {ALLOWED}
    assert set(request_counts(limited.requests)) == within.expected()


# --- priority ---------------------------------------------------------------------------------


def test_higher_priority_pages_of_a_host_are_fetched_before_waiting_lower_ones(
    crawls: Scenarios,
) -> None:
    """Five priority-10 URLs submitted after twenty priority-0 ones on one host go first."""
    prioritized: Crawled = crawls["priority"]
    order = [r.path for r in page_requests(prioritized.requests)]
    assert sorted(order) == sorted(PRIORITY_LOW + PRIORITY_HIGH)
    assert set(order[: len(PRIORITY_HIGH)]) == set(PRIORITY_HIGH)


async def test_a_worker_waits_for_the_first_submit_however_long_past_its_idle(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """A crawl nothing was ever submitted to has not begun: its worker stays past --idle
    (judged by Redis's clock, heartbeats later), then crawls what comes and ends idle."""
    site = root_and_two_pages()
    worker = Worker(
        redis_url,
        crawl_name,
        sink=JsonLinesSink(tmp_path / "items.jsonl"),
        **fast_settings(idle=0.2),
    )
    with SiteServer(site) as server, trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await await_until(lambda: status_of(redis_url, crawl_name)["workers"] == 1, what="join")
            joined = await trio.to_thread.run_sync(server_ms, redis_url, crawl_name)
            past_idle = joined + 5 * 200  # five times --idle, on the server's clock
            await await_until(
                lambda: heartbeat_since(redis_url, crawl_name, past_idle), what="heartbeats"
            )
            assert status_of(redis_url, crawl_name)["workers"] == 1
            await trio.to_thread.run_sync(submit, redis_url, crawl_name, [server.site.root])
        requests = server.requests()
    assert sorted(r.path for r in page_requests(requests)) == ["/", "/a", "/b"]


class LocalSpider(Spider):
    start_urls = ("http://127.0.0.9:9/",)


async def test_a_spiders_private_start_url_without_allow_nets_names_the_python_settings(
    redis_url: str, crawl_name: str
) -> None:
    """From Python, a loopback start URL the worker would refuse stops run() at once with
    one line naming allow_nets and allow_private, not the command line's flags."""
    worker = Worker(redis_url, crawl_name, spider=LocalSpider)
    with trio.fail_after(DEADLINE), pytest.raises(ConfigError) as raised:
        await worker.run()
    message = str(raised.value)
    assert message.startswith("start URL http://127.0.0.9:9/: 127.0.0.9 is not a public")
    assert "allow_nets=['CIDR'] or allow_private=True" in message and "--" not in message


@pytest.mark.parametrize("make", [Worker, Queue])
def test_a_bad_redis_url_or_crawl_name_from_python_names_the_parameter(make: Any) -> None:
    """InvalidURL and ConfigError raised from Python name ``redis`` and ``crawl``."""
    with pytest.raises(
        InvalidURL,
        match=r"^redis must be redis://, rediss://, redis\+unix:// or redis\+sentinel://",
    ):
        make("http://localhost:6379/0", "c")
    with pytest.raises(ConfigError, match=r"^crawl must be 1-64 letters"):
        make("redis://127.0.0.1:1/0", "no spaces allowed")
