"""The revisit test site (testing/revisitsite.py) answers conditional requests as RFC
9110 says and logs what it saw, so crawls can be judged from its log."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from testing.revisitsite import Page, RevisitSite, changes_missed, smallest_gap


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def site(clock: Clock) -> Iterator[RevisitSite]:
    pages = [
        Page(kind="etag", period=10),
        Page(kind="lastmod", period=10),
        Page(kind="none", period=None),
    ]
    with RevisitSite(pages, clock=clock) as served:
        yield served


def get(site: RevisitSite, path: str, **headers: str) -> httpx.Response:
    return httpx.get(site.url(path), headers={k.replace("_", "-"): v for k, v in headers.items()})


def test_an_etag_page_answers_304_until_it_changes(site: RevisitSite, clock: Clock) -> None:
    """If-None-Match with the current ETag is a 304; after the period, a 200 with a new one."""
    first = get(site, "/p/0")
    assert first.status_code == 200 and first.headers["etag"] == '"v0"'
    assert get(site, "/p/0", If_None_Match='"v0"').status_code == 304
    clock.t = 10.0
    changed = get(site, "/p/0", If_None_Match='"v0"')
    assert changed.status_code == 200 and b"version 1" in changed.content


def test_a_lastmod_page_answers_if_modified_since(site: RevisitSite, clock: Clock) -> None:
    """A page with only Last-Modified answers If-Modified-Since, and sends no ETag."""
    first = get(site, "/p/1")
    assert "etag" not in first.headers
    since = first.headers["last-modified"]
    assert get(site, "/p/1", If_Modified_Since=since).status_code == 304
    clock.t = 10.0
    assert get(site, "/p/1", If_Modified_Since=since).status_code == 200


def test_a_page_without_validators_is_always_200(site: RevisitSite) -> None:
    """A page with neither validator ignores conditional headers."""
    first = get(site, "/p/2")
    assert "etag" not in first.headers and "last-modified" not in first.headers
    assert get(site, "/p/2", If_None_Match='"v0"').status_code == 200


def test_the_log_judges_missed_changes_and_gaps(site: RevisitSite, clock: Clock) -> None:
    """A change no fetch saw within the bound is missed; the gap is the smallest seen."""
    get(site, "/p/0")
    clock.t = 10.5  # version 1, seen half a second after it appeared
    get(site, "/p/0", If_None_Match='"v0"')
    clock.t = 31.0  # version 2 (at 20) was never fetched; version 3 (at 30) was
    get(site, "/p/0", If_None_Match='"v1"')
    assert changes_missed(site, 0, within=1.0) == [2]
    assert smallest_gap(site) == 10.5
    assert [hit.if_none_match for hit in site.hits(0)] == [None, '"v0"', '"v1"']


def test_every_request_is_logged_robots_txt_too(site: RevisitSite, clock: Clock) -> None:
    """A 404 (robots.txt, an unknown page) is in the log: politeness counts every request."""
    assert get(site, "/robots.txt").status_code == 404
    clock.t = 0.25
    get(site, "/p/0")
    assert [(hit.path, hit.status) for hit in site.log] == [("/robots.txt", 404), ("/p/0", 200)]
    assert smallest_gap(site) == 0.25
