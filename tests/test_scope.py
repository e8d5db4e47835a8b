"""A crawl's scope: the hosts of its submitted URLs by default, widened by --allow-domain,
opened by --span-hosts, shared by the whole fleet through Redis (hashcrawl._core._scope)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from hashcrawl._core._scope import Scope, members
from hashcrawl._run._queue import Queue
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Batch, Store
from testing.fleet import (
    DEADLINE,
    Crawled,
    Crew,
    Scenarios,
    await_until,
    crawl_in_process,
    fast_settings,
    host,
    href,
    make_site,
    new_crawl_name,
    page,
    redirect,
)
from testing.testsite import Site, SiteServer


def test_scope_allows_its_hosts_its_domains_or_everything() -> None:
    """A host is in scope when it was submitted, is under an allowed domain, or spans."""
    scope = Scope.from_members(members(hosts={"a.example:8080"}, domains={"B.example."}))
    assert scope.allows("a.example:8080")
    assert not scope.allows("a.example")  # another port is another host
    assert scope.allows("b.example") and scope.allows("www.b.example:81")
    assert not scope.allows("notb.example")
    assert Scope.from_members(members(span=True)).allows("anything.example")
    assert not Scope().allows("a.example")


def test_the_scope_version_is_the_size_of_its_set() -> None:
    """The stored set only grows, so its size tells a reader whether it has grown."""
    assert Scope.from_members(members(hosts={"a", "b"}, span=True)).version == 3


def test_a_commit_filtered_by_an_outgrown_scope_is_refused(redis_url: str, crawl_name: str) -> None:
    """A worker's commit names the scope it filtered by; once the set grew, it must refilter."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        store.join("w1", {})
        epoch = store.members()[0]
        store.widen_scope(members(hosts={"a.example"}))
        stale = store.commit(Batch(worker="w1", epoch=epoch, scope=0))
        assert (stale.status, stale.scope) == ("rescope", 1)
        assert store.commit(Batch(worker="w1", epoch=epoch, scope=1)).status == "ok"
    finally:
        store.close()


def test_a_commit_can_widen_the_scope_and_reports_its_new_size(
    redis_url: str, crawl_name: str
) -> None:
    """A batch's widen members are stored atomically with it; the reply gives the new size."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        store.join("w1", {})
        epoch = store.members()[0]
        batch = Batch(worker="w1", epoch=epoch, scope=0, widen=sorted(members(hosts={"b.x"})))
        assert store.commit(batch).scope == 1
        assert store.scope() == {"host:b.x"}
    finally:
        store.close()


def test_submit_takes_the_scope_flags_and_stores_them(redis_url: str, crawl_name: str) -> None:
    """`hashcrawl submit --allow-domain D --span-hosts URL` widens the stored scope."""
    command = [sys.executable, "-m", "hashcrawl", "submit", "--new", "--redis", redis_url]
    command += ["--crawl", crawl_name, "--allow-domain", "Example.ORG", "--span-hosts"]
    done = subprocess.run([*command, "http://a.example:8080/x"], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        widened = {"host:a.example:8080", "domain:example.org", "span"}
        assert store.scope() == widened | {"dir:a.example:8080/"}  # its start directory
    finally:
        store.close()


# --- crawls judged by the server's log ------------------------------------------------------


def three_hosts() -> Site:
    """Host n's root links its /own and host n+1's /x, which links host n+2's root."""
    resources = {}
    for n in range(3):
        nxt, after = (n + 1) % 3, (n + 2) % 3
        resources[host(n), "/"] = page(f"root {n}", href(host(n), "/own"), href(host(nxt), "/x"))
        resources[host(n), "/own"] = page(f"own {n}")
        resources[host(nxt), "/x"] = page(f"x {nxt}", href(host(after), "/"))
    return make_site(resources)


async def crawl_three_hosts(
    redis_url: str,
    directory: Path,
    settings: Mapping[str, Any],
    submits: Sequence[Sequence[int]],
    **submit_options: Any,
) -> Crawled:
    """Crawl `three_hosts` with one worker that joins first; each submit names host numbers."""
    crew = Crew(redis_url, new_crawl_name(), directory)
    with SiteServer(three_hosts()) as server:
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(crew.run, crew.hire(settings))
                await await_until(lambda: crew.members() == 1, what="the worker to join")
                for numbers in submits:
                    urls = [server.site.url(host(n), "/") for n in numbers]
                    await trio.to_thread.run_sync(submit_with, crew, urls, submit_options)
        return Crawled(server.site, server.requests(), crew)


def redirecting_seed() -> Site:
    """Host 0's root redirects to host 1's root, which links host 1's /own and host 2's /x."""
    resources = {
        (host(0), "/"): redirect(301, href(host(1), "/")),
        (host(1), "/"): page("root 1", href(host(1), "/own"), href(host(2), "/x")),
        (host(1), "/own"): page("own 1"),
        (host(2), "/x"): page("x 2"),
    }
    return make_site(resources)


async def crawl_redirecting_seed(redis_url: str, directory: Path) -> Crawled:
    crew = Crew(redis_url, new_crawl_name(), directory)
    with SiteServer(redirecting_seed()) as server:
        settings = fast_settings(span_hosts=False)
        await crawl_in_process(crew, [settings, settings], [server.site.root])
        return Crawled(server.site, server.requests(), crew)


def submit_with(crew: Crew, urls: list[str], options: Mapping[str, Any]) -> None:
    with Queue(crew.redis_url, crew.crawl) as queue:
        queue.submit(urls, **options, allow_private=True)


@pytest.fixture(scope="module")
def crawls(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    """Every crawl this module judges, run side by side."""
    url, directory = shared_redis.url, tmp_path_factory.mktemp("scope")
    own = fast_settings(span_hosts=False)
    return Scenarios(
        {
            "default": lambda: crawl_three_hosts(url, directory, own, [[0]]),
            "two-seeds": lambda: crawl_three_hosts(url, directory, own, [[0], [2]]),
            "allow-domain-flag": lambda: crawl_three_hosts(
                url, directory, fast_settings(span_hosts=False, allow_domains=(host(1),)), [[0]]
            ),
            "allow-domain-submit": lambda: crawl_three_hosts(
                url, directory, own, [[0]], allow_domains=(host(1),)
            ),
            "span-submit": lambda: crawl_three_hosts(url, directory, own, [[0]], span_hosts=True),
            "redirecting-seed": lambda: crawl_redirecting_seed(url, directory),
        }
    ).run()


def requested(crawled: Crawled) -> set[tuple[str, str]]:
    """The (host, path) of every page the server was asked for."""
    return {(r.host, r.path) for r in crawled.requests if not r.is_robots}


def test_a_crawl_stays_on_the_hosts_of_its_submitted_urls(crawls: Scenarios) -> None:
    """Without --allow-domain or --span-hosts, a link to another host is not followed."""
    assert requested(crawls["default"]) == {(host(0), "/"), (host(0), "/own")}


def test_a_host_submitted_later_is_in_scope_for_links_found_before(crawls: Scenarios) -> None:
    """Host 2, submitted after the worker joined and read the scope, is followed into; host 1
    (linked, never submitted) is not: the worker learnt the second submit from its commit."""
    assert requested(crawls["two-seeds"]) == {
        (host(0), "/"),
        (host(0), "/own"),
        (host(2), "/"),
        (host(2), "/own"),
        (host(0), "/x"),
    }


def test_allow_domain_on_a_worker_widens_the_scope(crawls: Scenarios) -> None:
    """A worker's --allow-domain adds that domain's hosts to the crawl's scope."""
    assert requested(crawls["allow-domain-flag"]) == {
        (host(0), "/"),
        (host(0), "/own"),
        (host(1), "/x"),
    }


def test_allow_domain_on_submit_widens_the_scope_for_every_worker(crawls: Scenarios) -> None:
    """`submit --allow-domain` stores the domain in the crawl's scope, which workers read."""
    assert requested(crawls["allow-domain-submit"]) == requested(crawls["allow-domain-flag"])


def test_span_hosts_on_submit_opens_the_crawl_to_every_host(crawls: Scenarios) -> None:
    """`submit --span-hosts` lets links lead anywhere: every page of the three hosts."""
    assert requested(crawls["span-submit"]) == {
        (host(n), path) for n in range(3) for path in ("/", "/own", "/x")
    }


def test_a_submitted_url_that_redirects_brings_its_target_host_into_scope(
    crawls: Scenarios,
) -> None:
    """As wget takes its start URL's redirect: host 1 is crawled, host 2 is still not."""
    assert requested(crawls["redirecting-seed"]) == {
        (host(0), "/"),
        (host(1), "/"),
        (host(1), "/own"),
    }
