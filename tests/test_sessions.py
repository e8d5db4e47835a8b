"""Cookies per host: kept by the host's owner, handed over with its pace record, bounded,
and off with --no-cookies. Judged from the site's own request log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import hashcrawl
from hashcrawl._core._ring import Ring
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._run._worker import new_worker_id
from hashcrawl._store._server import RedisServer
from hashcrawl._web._cookies import MAX_JAR_BYTES, Jars
from testing.fleet import (
    DEADLINE,
    Crew,
    await_until,
    crawl_in_process,
    fast_settings,
    new_crawl_name,
    read_items,
    submit,
)
from testing.formsite import PASSWORD, USER, FormSite, Seen

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
PAGES = 30


class Member(hashcrawl.Spider):
    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        body = f"user={USER}&password={PASSWORD}"
        yield response.follow("/login", method="POST", body=body, headers=FORM, callback="account")

    def account(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield response.follow("/account", callback="pages")

    def pages(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield {"user": response.css("h1.user::text").get()}
        yield from response.follow_all(css="a", callback="page")

    def page(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield {"page": response.title(), "status": response.status}


def taking_id(first: str, host: str) -> str:
    """A worker id that, joining ``first``, becomes the owner of ``host``."""
    while True:
        candidate = new_worker_id()
        if Ring.of(2, [first, candidate]).owner_of(host) == candidate:
            return candidate


def page_requests(seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if s.path.startswith("/page/")]


async def handoff_crawl(redis_url: str, directory: Path, **changes: Any) -> tuple[Crew, list[Seen]]:
    """A logged-in crawl of the form site; a second worker joins after a few member pages
    and takes the site's host."""
    crew = Crew(redis_url, new_crawl_name(), directory)
    settings = fast_settings(spider=Member, delay=0.2, **changes)  # 6 s of member pages
    with FormSite(pages=PAGES) as site:
        host = site.root.split("/")[2]
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                first = crew.hire(settings)
                nursery.start_soon(crew.run, first)
                await await_until(lambda: crew.members() == 1, what="the first worker")
                second = crew.hire(settings)
                second.id = taking_id(first.id, host)
                await trio.to_thread.run_sync(submit, crew.redis_url, crew.crawl, [site.root])
                await await_until(
                    lambda: len(page_requests(site.seen())) >= 3, what="a few member pages"
                )
                nursery.start_soon(crew.run, second)
        return crew, site.seen()


@pytest.fixture(scope="module")
def handed_over(
    shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Crew, list[Seen]]:
    directory = tmp_path_factory.mktemp("sessions")
    return trio.run(handoff_crawl, shared_redis.url, directory)


def test_a_login_cookie_survives_a_handoff_between_workers(
    handed_over: tuple[Crew, list[Seen]],
) -> None:
    """One login; every member page, before and after the host moved, was let in."""
    _, seen = handed_over
    logins = [s for s in seen if s.path == "/login"]
    assert [(s.method, s.status) for s in logins] == [("POST", 200)]
    pages = page_requests(seen)
    assert len(pages) == PAGES
    assert {s.status for s in pages} == {200}
    assert all("session=" in s.cookie for s in pages)


def test_the_second_worker_fetched_member_pages_after_taking_the_host(
    handed_over: tuple[Crew, list[Seen]],
) -> None:
    """The joining worker's own output holds member pages it fetched logged in."""
    crew, _ = handed_over
    first, second = (read_items([path]) for path in crew.outputs)
    assert first and second
    assert {i["status"] for i in second if "page" in i} == {200}
    assert len([i for i in first + second if "page" in i]) == PAGES


def test_no_cookies_sends_none(shared_redis: RedisServer, tmp_path: Path) -> None:
    """With --no-cookies the login's cookie is not kept: member pages are refused (403)."""
    crew = Crew(shared_redis.url, new_crawl_name(), tmp_path)
    settings = fast_settings(spider=Member, cookies=False)
    with FormSite(pages=2) as site:
        trio.run(crawl_in_process, crew, [settings], [site.root])
        seen = site.seen()
    account = [s for s in seen if s.path == "/account"]
    assert [(s.status, s.cookie) for s in account] == [(403, "")]


def test_a_hosts_jar_is_bounded_dropping_the_largest_cookies_first() -> None:
    """Cookies past 4 KiB a host are dropped, largest first, and counted."""
    jars = Jars()
    big = [f"big{n}={'x' * 1500}; Path=/" for n in range(4)]
    jars.take("h", "GET", "http://h.example/", ["session=abc; Path=/", *big])
    assert len(jars.record("h")) <= MAX_JAR_BYTES
    assert "session=abc" in (jars.header("h", "GET", "http://h.example/") or "")
    assert jars.dropped == 2


def test_cookies_stay_with_the_host_that_set_them() -> None:
    """A cookie one host sets is not sent to another, nor one a host sets for another domain."""
    jars = Jars()
    jars.take("a.example", "GET", "http://a.example/", ["s=1", "t=2; Domain=b.example"])
    assert jars.header("a.example", "GET", "http://a.example/x") == "s=1"
    assert jars.header("b.example", "GET", "http://b.example/") is None


@pytest.mark.parametrize(
    "record",
    ["", "not json", "{}", '[["a"]]', "[[1,2,3,4,5,6]]", '[["a","b","c","/",1.5,0]]', "[" * 9000],
)
def test_a_malformed_cookie_record_gives_no_cookies(record: str) -> None:
    """Pace records are outside input: a bad cookie part is ignored, never raised."""
    jars = Jars()
    jars.adopt("h", record)
    assert "h" not in jars


@given(st.lists(st.text(max_size=300), max_size=5))
def test_no_set_cookie_headers_make_a_jar_raise_or_outgrow_its_bound(lines: list[str]) -> None:
    """Whatever a server's Set-Cookie headers hold, they are taken or ignored, within 4 KiB."""
    jars = Jars()
    jars.take("h", "GET", "http://h.example/a/b", lines)
    assert len(jars.record("h").encode()) <= MAX_JAR_BYTES
    jars.header("h", "GET", "http://h.example/a/b")


@given(st.text(max_size=500))
def test_no_cookie_record_makes_adopting_it_raise(record: str) -> None:
    """Any text as a pace record's cookie part gives cookies or none, never an exception."""
    jars = Jars()
    jars.adopt("h", record)
    jars.header("h", "GET", "http://h.example/")


def test_a_jar_takes_the_bound_it_is_given() -> None:
    """A jar made with a smaller bound keeps to it, the largest cookies first out."""
    jars = Jars(max_bytes=200)
    jars.take("h", "GET", "http://h.example/", ["s=abc", f"big={'x' * 300}"])
    assert len(jars.record("h")) <= 200 and jars.header("h", "GET", "http://h.example/") == "s=abc"


def test_max_cookie_bytes_bounds_a_jar_and_its_handover() -> None:
    """--max-cookie-bytes bounds what a host's jar keeps (the largest cookies go first),
    and a jar allowed more reads back a record larger than the default bound."""
    url = "http://a.test/"
    big = [f"c{n}={'v' * 1500}; Path=/" for n in range(6)]  # about 9 KB of cookies
    small, large = Jars(), Jars(max_bytes=16_384)
    small.take("a.test", "GET", url, big)
    large.take("a.test", "GET", url, big)
    assert 0 < len(small.record("a.test")) <= 4096 < len(large.record("a.test")) <= 16_384
    moved = Jars(max_bytes=16_384)
    moved.adopt("a.test", large.record("a.test"))
    assert moved.record("a.test") == large.record("a.test")
    default = Jars()
    default.adopt("a.test", large.record("a.test"))  # past its bound: read as none
    assert default.record("a.test") == ""


def test_max_cookie_bytes_is_refused_outside_its_range() -> None:
    """A jar bound of 0 or over 64 KiB is refused with one line naming the flag."""
    for bad in (0, 65_537):
        with pytest.raises(ConfigError, match="--max-cookie-bytes must be 1 to 65536"):
            Settings(max_cookie_bytes=bad)
