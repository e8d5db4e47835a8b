"""The hostile web, worker side: nothing a server does ends a worker, every trap is capped."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hashcrawl import Queue, Request, Response
from hashcrawl._exceptions import Refused
from hashcrawl._output._sinks import JsonLinesSink
from hashcrawl._run._worker import Worker
from testing.fleet import DEADLINE, await_until, read_items, status_of
from testing.fleet import fast_settings as fleet_settings
from testing.hostile import Hit, HostileServer, Reply, Route, html, redirect
from testing.hostile_run import merged_work, run_hostile
from tests.strategies import responses

A, B, C = "127.0.1.2", "127.0.1.3", "127.0.1.4"
CASE_NETS = ("127.0.1.0/24", "127.0.2.0/24", "127.0.3.0/24")  # the cases; not 127.0.5.7


def fast_settings(**changes: Any) -> dict[str, Any]:
    """The fleet's fast settings, allowed to reach the cases' hosts (and no other)."""
    return fleet_settings(**{"allow_nets": CASE_NETS, **changes})


@attrs.frozen
class Result:
    """A finished crawl of hostile hosts: the server's log, dead letters, status, items."""

    hits: list[Hit]
    dead: dict[str, str]
    status: dict[str, Any]
    items: list[dict[str, Any]]

    def pages(self, host: str = A) -> list[str]:
        return [h.path for h in self.hits if h.host == host and not h.is_robots]


def routes(table: Mapping[str, Reply]) -> Route:
    return lambda path: table.get(path, Reply(status=404, body=b"none"))


async def crawl(
    redis_url: str,
    crawl_name: str,
    tmp_path: Path,
    hosts: Mapping[str, Route],
    starts: Sequence[str],
    *,
    dont_filter: bool = False,
    workers: Sequence[Worker] = (),
    **settings: Any,
) -> Result:
    """Serve ``hosts``, crawl from ``starts`` (paths on host A, or URLs) with one worker
    (or ``workers``) until the crawl is idle, and return what happened."""
    with HostileServer(hosts) as server:
        output = tmp_path / f"{crawl_name}.jsonl"
        crew = list(workers) or [
            Worker(redis_url, crawl_name, sink=JsonLinesSink(output), **fast_settings(**settings))
        ]
        urls = [s if "://" in s else server.url(A, s) for s in starts]
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                for worker in crew:
                    nursery.start_soon(worker.run)
                await await_until(
                    lambda: status_of(redis_url, crawl_name)["workers"] == len(crew),
                    what="the workers to join",
                )
                with Queue(redis_url, crawl_name) as queue:
                    queue.submit(urls, dont_filter=dont_filter, allow_private=True)
        for worker in crew:
            worker.sink.close()
        with Queue(redis_url, crawl_name) as queue:
            dead, status = queue.dead(), queue.status()
        return Result(server.hits(), dead, status, read_items([output]))


async def test_a_robots_txt_in_a_bogus_charset_is_obeyed_and_ends_no_worker(
    redis_url, crawl_name, tmp_path
):
    """A robots.txt whose Content-Type names an unknown charset is read as UTF-8."""
    bogus = Reply(
        headers=(("Content-Type", "text/plain; charset=bogus"),),
        body=b"User-agent: *\nDisallow: /private\n",
    )
    site = routes({"/robots.txt": bogus, "/": html("root", "/private/x", "/public")})
    got = await crawl(redis_url, crawl_name, tmp_path, {A: site}, ["/"])
    assert sorted(got.pages()) == ["/", "/public"]


async def test_server_errors_are_retried_then_dead_lettered_and_never_written(
    redis_url, crawl_name, tmp_path
):
    """500, 502, 504 and 429 are asked --max-attempts times, then dead-lettered; no item."""
    codes = (500, 502, 504, 429)
    table = {f"/{c}": Reply(status=c, headers=(("Retry-After", "0"),)) for c in codes}
    table["/"] = html("root", *table)
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(table)}, ["/"], max_attempts=3)
    assert sorted(got.pages()) == sorted(["/"] + [f"/{c}" for c in codes for _ in range(3)])
    errors = {url.rsplit("/", 1)[1]: error for url, error in got.dead.items()}
    assert errors == {str(c): f"HTTP {c}" for c in codes}
    assert [item["status"] for item in got.items] == [200]


async def test_a_retry_after_is_honoured_before_the_page_is_asked_again(
    redis_url, crawl_name, tmp_path
):
    """A 503 with Retry-After: 1 is asked again no sooner than a second later."""
    table = {"/": Reply(status=503, headers=(("Retry-After", "1"),))}
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(table)}, ["/"], max_attempts=2)
    first, second = (h.time for h in got.hits if h.path == "/")
    assert second - first >= 1.0 - 0.01


async def test_a_redirect_chain_stops_after_five_hops_with_the_reason(
    redis_url, crawl_name, tmp_path
):
    """/r/0 -> /r/1 -> ... : six requests (five redirects), then /r/5 is dead-lettered."""
    chain = {f"/r/{i}": redirect(f"/r/{i + 1}") for i in range(40)}
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(chain)}, ["/r/0"])
    assert got.pages() == [f"/r/{i}" for i in range(6)]
    [(url, error)] = got.dead.items()
    assert url.endswith("/r/5") and "more than 5 redirects" in error


async def test_each_redirect_counts_against_max_depth(redis_url, crawl_name, tmp_path):
    """With --max-depth 2 a redirect chain is followed two hops deep, no further."""
    chain = {f"/r/{i}": redirect(f"/r/{i + 1}") for i in range(40)}
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(chain)}, ["/r/0"], max_depth=2)
    assert got.pages() == ["/r/0", "/r/1", "/r/2"]


async def test_a_redirect_loop_submitted_with_dont_filter_goes_idle(
    redis_url, crawl_name, tmp_path
):
    """a -> b -> a: the target never inherits dont_filter, so the seen filter ends it."""
    loop = routes({"/a": redirect("/b"), "/b": redirect("/a")})
    got = await crawl(redis_url, crawl_name, tmp_path, {A: loop}, ["/a"], dont_filter=True)
    assert got.pages() in (["/a", "/b"], ["/a", "/b", "/a"])


async def test_links_past_max_links_are_dropped_and_counted_in_status(
    redis_url, crawl_name, tmp_path
):
    """A page of 50 links with --max-links 10: the first 10 are followed, 40 counted."""
    links = [f"/p/{i}" for i in range(50)]
    table = {"/": html("root", *links), **{link: html(link) for link in links}}
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(table)}, ["/"], max_links=10)
    assert sorted(got.pages()) == sorted(["/", *links[:10]])
    assert got.status["links_dropped"] == 40


async def test_a_callback_giving_more_than_max_links_is_capped_too(redis_url, crawl_name, tmp_path):
    """Requests a parse callback yields past --max-links are dropped and counted."""

    def parse(response: Response) -> Any:
        if response.url.endswith("/"):
            yield from (f"/p/{i}" for i in range(30))

    table = {"/": html("root"), **{f"/p/{i}": html("p") for i in range(30)}}
    sink = JsonLinesSink(tmp_path / "items.jsonl")
    worker = Worker(redis_url, crawl_name, parse=parse, sink=sink, **fast_settings(max_links=5))
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(table)}, ["/"], workers=[worker])
    assert sorted(got.pages()) == sorted(["/"] + [f"/p/{i}" for i in range(5)])
    assert got.status["links_dropped"] == 25


def next_page(path: str) -> Reply:
    """Page /p/N links /p/N+1, for ever."""
    n = int(path.rsplit("/", 1)[1]) if path.startswith("/p/") else 0
    return html("p", f"/p/{n + 1}")


def day(path: str) -> Reply:
    """A calendar: every day links the next two, for ever."""
    n = int(path.rsplit("/", 1)[1]) if path.startswith("/day/") else 0
    return html("day", f"/day/{n + 1}", f"/day/{n + 2}")


async def test_max_pages_per_host_caps_an_endless_host(redis_url, crawl_name, tmp_path):
    """A calendar whose every day links the next two gets exactly --max-pages-per-host."""

    got = await crawl(
        redis_url, crawl_name, tmp_path, {A: day, B: day}, ["/day/0"], max_pages_per_host=5
    )
    assert len(got.pages(A)) == 5
    assert got.pages(B) == []


async def test_a_parse_callback_that_raises_fails_only_its_page(redis_url, crawl_name, tmp_path):
    """A callback's exception on one page dead-letters that page; the rest are written."""

    def parse(response: Response) -> Any:
        if response.url.endswith("/bad"):
            raise LookupError("unknown encoding: bogus")
        yield {"url": response.url}
        yield from response.links()

    table = {"/": html("root", "/bad", "/good"), "/bad": html("bad"), "/good": html("good")}
    output = tmp_path / "items.jsonl"
    worker = Worker(
        redis_url, crawl_name, parse=parse, sink=JsonLinesSink(output), **fast_settings()
    )
    got = await crawl(redis_url, crawl_name, tmp_path, {A: routes(table)}, ["/"], workers=[worker])
    assert sorted(item["url"].rsplit("/", 1)[1] for item in read_items([output])) == ["", "good"]
    [(url, error)] = got.dead.items()
    assert url.endswith("/bad") and "LookupError: unknown encoding" in error


class Raising:
    """A user's fetcher that raises what no fetcher should, for robots.txt (the first time
    it is asked) and for one page."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def fetch(self, request: Request) -> Response:
        self.asked.append(request.url)
        first_robots = request.url.endswith("/robots.txt") and self.asked.count(request.url) == 1
        if first_robots or request.url.endswith("/boom"):
            raise RuntimeError("a bug in the user's fetcher")
        if request.url.endswith("/refused"):
            raise Refused("connection to a private address refused")
        body = b'<a href="/boom">b</a><a href="/refused">r</a><a href="/ok">o</a>'
        headers = {"content-type": "text/html"}
        return Response(url=request.url, status=200, headers=headers, body=body, request=request)


async def test_a_fetcher_that_raises_fails_only_its_page(redis_url, crawl_name, tmp_path):
    """A fetcher's bug on robots.txt or a page fails that request only (robots.txt is then
    unreachable: the page waits and robots.txt is asked again, RFC 9309); a refusal is
    dead-lettered at once, without retries."""
    fetcher = Raising()
    sink = JsonLinesSink(tmp_path / "items.jsonl")
    settings = fast_settings(max_attempts=3, idle=1)
    worker = Worker(redis_url, crawl_name, fetcher=fetcher, sink=sink, **settings)
    root = "http://fake.example/"
    got = await crawl(redis_url, crawl_name, tmp_path, {}, [root], workers=[worker])
    asked = [url.removeprefix(root) for url in fetcher.asked]
    expected = ["robots.txt", "robots.txt", "", "boom", "boom", "boom", "refused", "ok"]
    assert sorted(asked) == sorted(expected)
    errors = {url.removeprefix(root): error for url, error in got.dead.items()}
    assert errors == {
        "boom": "a bug in the user's fetcher",
        "refused": "connection to a private address refused",
    }


@pytest.mark.slow
@pytest.mark.alone  # its crawl must end within max_run: no other crawl beside it
def test_the_hostile_web_ends_as_the_rules_say(tmp_path):
    """Three worker processes crawl every hostile case beside a normal site: all live,
    the normal site is complete and polite, each case ends as its rule says."""
    run = run_hostile(
        tmp_path,
        pages=40,
        hosts=4,
        delay=0.1,
        bomb_mib=16,
        robots_mib=2,
        pages_per_host=20,
        max_run=35,
        progress=lambda line: None,
    )
    without = {"hostile-fetch", "store-entries"} - merged_work()
    # Speed is judged by scripts/hostile (the slowest Redis command under 50 ms), not here.
    assert run.failures(without=without, timed=False) == []


async def test_endless_drips_hold_up_neither_a_joiner_nor_their_hosts_handoff(
    redis_url, crawl_name, tmp_path
):
    """While the first worker is stuck on bodies that drip for ever, a second joins: it
    fetches at once, gets the dripping hosts handed over, and no host is ever asked while
    an earlier request to it is still out."""
    drips = [f"127.0.2.{n}" for n in range(2, 14)]
    plain = [f"127.0.3.{n}" for n in range(2, 10)]
    drip = routes({"/": Reply(body=b"x" * 100_000, drip=0.1)})
    hosts = {**dict.fromkeys(drips, drip), **dict.fromkeys(plain, next_page)}
    settings = fast_settings(delay=0.5, grace=1.0, concurrency=32, max_pages_per_host=20)
    sink = lambda n: JsonLinesSink(tmp_path / f"items-{n}.jsonl")  # noqa: E731
    # The user agent is the crawl's; a header of each worker's own tells them apart.
    first = Worker(redis_url, crawl_name, headers=["X-Worker: first"], sink=sink(1), **settings)
    joiner = Worker(redis_url, crawl_name, headers=["X-Worker: joiner"], sink=sink(2), **settings)

    def by_joiner(hosts: list[str]) -> bool:
        return any(h.worker == "joiner" and h.host in hosts for h in server.hits())

    with HostileServer(hosts) as server, trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(first.run)
            await await_until(
                lambda: status_of(redis_url, crawl_name)["workers"] == 1, what="a join"
            )
            with Queue(redis_url, crawl_name) as queue:
                queue.submit([server.url(h, "/") for h in [*drips, *plain]], allow_private=True)
            await await_until(
                lambda: sum(h.path == "/" and h.host in drips for h in server.hits()) == 12,
                what="every drip to start",
            )
            nursery.start_soon(joiner.run)
            await await_until(lambda: by_joiner(plain), what="the joiner's first page")
            await await_until(lambda: by_joiner(drips), what="a drip host handed over")
            first.stop()
            joiner.stop()
        hits = server.hits()
    for name in drips + plain:
        mine = sorted((h for h in hits if h.host == name), key=lambda h: h.time)
        for before, after in itertools.pairwise(mine):
            assert before.ended is not None and before.ended <= after.time


class Scripted:
    """A fetcher that answers each host's n-th URL with the n-th given response."""

    def __init__(self, pages: list[tuple[int, dict[str, str], bytes]], robots: Any) -> None:
        self.pages, self.robots = pages, robots

    async def fetch(self, request: Request) -> Response:
        host = request.url.split("/")[2]
        status, headers, body = (
            self.robots
            if request.url.endswith("/robots.txt")
            else (self.pages[int(host.split(".")[0][1:])])
        )
        return Response(url=request.url, status=status, headers=headers, body=body, request=request)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(pages=st.lists(responses, min_size=1, max_size=5), robots=responses)
def test_whatever_a_server_sends_the_worker_ends_each_page(redis_url, tmp_path, pages, robots):
    """Arbitrary statuses, headers and bodies, for pages and robots.txt, end every page
    done or dead-lettered, and the worker ends its crawl normally."""
    status, headers, body = robots
    robots = (200 + status % 300, headers, body)  # a 5xx robots.txt waits a minute: not here
    crawl_name = "fuzz" + uuid.uuid4().hex[:8]
    sink = JsonLinesSink(tmp_path / f"{crawl_name}.jsonl")
    # The worker's idle clock starts when it joins, before the URLs go in: 0.3 s of idle
    # ended it before the submit once, with the suite on 4 xdist workers (4 left waiting).
    settings_ = fast_settings(max_attempts=1, idle=1.0)
    worker = Worker(redis_url, crawl_name, fetcher=Scripted(pages, robots), sink=sink, **settings_)
    urls = [f"http://p{i}.fuzz.example/" for i in range(len(pages))]
    got = trio.run(lambda: crawl(redis_url, crawl_name, tmp_path, {}, urls, workers=[worker]))
    assert (got.status["waiting"], got.status["held"]) == (0, 0)
