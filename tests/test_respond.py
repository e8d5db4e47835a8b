"""The response policy (hashcrawl/_core/_respond.py): a response's facts in, a decision
out, one table row per kind of answer; then the link rules a page's follows pass
(``Origin``), and that robots.txt reads Retry-After the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Denied, Origin, SeenCache, failure_wait
from hashcrawl._core._respond import (
    MAX_REDIRECTS,
    RETRY_AFTER_CAP,
    Act,
    Decision,
    Facts,
    Reader,
    parse_failed,
    parse_retry_after,
    respond,
    retry_wait,
    takes,
)
from hashcrawl._core._robotsrules import Robots, Unreachable
from hashcrawl._core._urls import canonicalize, fingerprint
from hashcrawl._web._robots import RobotsFetch

NOW = 1_700_000_000.0
PAGE = "http://a.test/page"
HTTP_DATE_IN_90_S = format_datetime(datetime.fromtimestamp(NOW + 90, UTC), usegmt=True)


def facts(
    status: int,
    *,
    headers: dict[str, str] | None = None,
    reader: Reader = Reader.DEFAULT,
    statuses: frozenset[int] = frozenset(),
    max_attempts: int = 3,
    **entry: Any,
) -> Facts:
    held = Held("1-0", Entry(url=PAGE, **entry), "a.test")
    return Facts(status, PAGE, headers or {}, held, NOW, max_attempts, reader, statuses)


def target(url: str, **changed: Any) -> Entry:
    """The entry a redirect from ``PAGE`` (depth 0, hop 0) to ``url`` follows."""
    return Entry(url=url, **{"depth": 1, "hops": 1, **changed})


LOCATION = {"location": "/next"}
NEXT = "http://a.test/next"

# (case, facts, decision): every row is one kind of answer the policy tells apart.
TABLE = [
    ("200 parses", facts(200), Decision(Act.PARSE)),
    ("204 parses", facts(204), Decision(Act.PARSE)),
    ("404 parses (the default parse writes its item)", facts(404), Decision(Act.PARSE)),
    ("404 to a parse function parses", facts(404, reader=Reader.FUNCTION), Decision(Act.PARSE)),
    (
        "404 to a spider goes to its errback",
        facts(404, reader=Reader.SPIDER),
        Decision(Act.ERRBACK),
    ),
    (
        "304 to a spider goes to its errback",
        facts(304, reader=Reader.SPIDER),
        Decision(Act.ERRBACK),
    ),
    ("304 (no Location) parses", facts(304), Decision(Act.PARSE)),
    ("301 without a Location parses", facts(301), Decision(Act.PARSE)),
    (
        "302 with a Location: the default parse parses and follows",
        facts(302, headers=LOCATION),
        Decision(Act.PARSE, redirect=target(NEXT), widen=("a.test",)),
    ),
    (
        "302 one level down does not widen the scope",
        facts(302, headers=LOCATION, depth=1),
        Decision(Act.PARSE, redirect=Entry(url=NEXT, depth=2, hops=1)),
    ),
    (
        "303 to a parse function: followed, not parsed",
        facts(303, headers=LOCATION, reader=Reader.FUNCTION),
        Decision(Act.FOLLOW, redirect=target(NEXT), widen=("a.test",)),
    ),
    (
        "307 to a spider: followed",
        facts(307, headers={"location": "http://b.test/"}, reader=Reader.SPIDER),
        Decision(
            Act.FOLLOW,
            redirect=target(
                "http://b.test/",
                depth=0,  # Scrapy's depth: a redirect is no level
                meta={"redirect_urls": [PAGE], "redirect_reasons": [307]},
            ),
            widen=("b.test",),
        ),
    ),
    (
        "308 a spider lists goes to its callback, not followed",
        facts(308, headers=LOCATION, reader=Reader.SPIDER, statuses=frozenset({308})),
        Decision(Act.PARSE),
    ),
    (
        "a Location that is no URL to crawl is no redirect",
        facts(301, headers={"location": "mailto:x@a.test"}),
        Decision(Act.PARSE),
    ),
    (
        "the fifth hop is followed",
        facts(301, headers=LOCATION, hops=MAX_REDIRECTS - 1),
        Decision(Act.PARSE, redirect=target(NEXT, hops=MAX_REDIRECTS), widen=("a.test",)),
    ),
    (
        "one past the redirect limit is dead-lettered",
        facts(301, headers=LOCATION, hops=MAX_REDIRECTS),
        Decision(Act.TOO_MANY_REDIRECTS, f"more than {MAX_REDIRECTS} redirects (next: {NEXT})"),
    ),
    (
        "a request's own redirect limit",
        facts(301, headers=LOCATION, max_redirects=0),
        Decision(Act.TOO_MANY_REDIRECTS, f"more than 0 redirects (next: {NEXT})"),
    ),
    ("503 is retried", facts(503), Decision(Act.RETRY, "HTTP 503", 1.0)),
    (
        "500 on the second try waits 2 s",
        facts(500, attempts=1),
        Decision(Act.RETRY, "HTTP 500", 2.0),
    ),
    ("599 is a server error too", facts(599), Decision(Act.RETRY, "HTTP 599", 1.0)),
    (
        "429 with Retry-After in seconds",
        facts(429, headers={"retry-after": "120"}),
        Decision(Act.RETRY, "HTTP 429", 120.0),
    ),
    (
        "503 with Retry-After as an HTTP-date",
        facts(503, headers={"retry-after": HTTP_DATE_IN_90_S}),
        Decision(Act.RETRY, "HTTP 503", 90.0),
    ),
    (
        "a Retry-After past ten minutes is capped",
        facts(503, headers={"retry-after": "86400"}),
        Decision(Act.RETRY, "HTTP 503", RETRY_AFTER_CAP),
    ),
    (
        "an unreadable Retry-After: 1, 2, 4... s",
        facts(429, headers={"retry-after": "soon"}, attempts=2, max_attempts=5),
        Decision(Act.RETRY, "HTTP 429", 4.0),
    ),
    (
        "a 5xx on the last attempt gives up",
        facts(502, attempts=2),
        Decision(Act.GIVE_UP, "HTTP 502", 4.0),
    ),
    (
        "a 503 a spider lists is retried while it may be",
        facts(503, reader=Reader.SPIDER, statuses=frozenset({503})),
        Decision(Act.RETRY, "HTTP 503", 1.0),
    ),
    (
        "a 503 a spider lists reaches its callback on the last attempt",
        facts(503, reader=Reader.SPIDER, statuses=frozenset({503}), attempts=2),
        Decision(Act.PARSE),
    ),
    (
        "a 404 the request lists reaches the spider's callback",
        facts(404, reader=Reader.SPIDER, handle_httpstatus_list=(404,)),
        Decision(Act.PARSE),
    ),
    (
        "meta handle_httpstatus_all",
        facts(410, reader=Reader.SPIDER, meta={"handle_httpstatus_all": True}),
        Decision(Act.PARSE),
    ),
    (
        "meta handle_httpstatus_list",
        facts(410, reader=Reader.SPIDER, meta={"handle_httpstatus_list": [410]}),
        Decision(Act.PARSE),
    ),
    (
        "meta handle_httpstatus_list of the wrong types is ignored",
        facts(410, reader=Reader.SPIDER, meta={"handle_httpstatus_list": ["410", True]}),
        Decision(Act.ERRBACK),
    ),
    ("a 2xx sitemap is read", facts(200, sitemap=1), Decision(Act.SITEMAP, read=True)),
    ("a 404 sitemap is not", facts(404, sitemap=1), Decision(Act.SITEMAP)),
    (
        "a sitemap's redirect is followed, nothing widened",
        facts(301, headers=LOCATION, sitemap=1),
        Decision(Act.SITEMAP, redirect=target(NEXT, sitemap=1)),
    ),
    ("a 503 sitemap is retried", facts(503, sitemap=1), Decision(Act.RETRY, "HTTP 503", 1.0)),
]


@pytest.mark.parametrize(
    ("facts", "decision"), [row[1:] for row in TABLE], ids=[r[0] for r in TABLE]
)
def test_each_kind_of_answer_gets_its_decision(facts: Facts, decision: Decision) -> None:
    assert respond(facts) == decision


def test_the_table_covers_every_act() -> None:
    """A new kind of decision gets its row above."""
    assert {decision.act for _, _, decision in TABLE} == set(Act)


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_301_302_or_303_turns_a_post_into_a_get_without_body_or_content_type(
    status: int,
) -> None:
    headers = (("Content-Type", "application/json"), ("X-Token", "t"))
    held = Held("1-0", Entry(url=PAGE, method="POST", body=b"{}", headers=headers), "a.test")
    redirect = respond(Facts(status, PAGE, LOCATION, held, NOW, 3)).redirect
    assert redirect is not None
    assert (redirect.method, redirect.body, redirect.headers) == ("GET", b"", (("X-Token", "t"),))


@pytest.mark.parametrize("status", [307, 308])
def test_a_307_or_308_keeps_the_method_and_body(status: int) -> None:
    held = Held("1-0", Entry(url=PAGE, method="POST", body=b"{}", headers=(("X", "1"),)), "a.test")
    redirect = respond(Facts(status, PAGE, LOCATION, held, NOW, 3)).redirect
    assert redirect is not None
    assert (redirect.method, redirect.body, redirect.headers) == ("POST", b"{}", (("X", "1"),))


def test_a_redirect_to_another_host_leaves_the_requests_headers_behind() -> None:
    held = Held("1-0", Entry(url=PAGE, headers=(("Authorization", "secret"),)), "a.test")
    away = respond(Facts(302, PAGE, {"location": "http://b.test/"}, held, NOW, 3)).redirect
    home = respond(Facts(302, PAGE, LOCATION, held, NOW, 3)).redirect
    assert away is not None and home is not None
    assert (away.headers, home.headers) == ((), (("Authorization", "secret"),))


def test_a_redirect_starts_its_attempts_afresh_and_is_never_dont_filter() -> None:
    held = Held("1-0", Entry(url=PAGE, attempts=1, suspect=True, dont_filter=True), "a.test")
    redirect = respond(Facts(302, PAGE, LOCATION, held, NOW, 3)).redirect
    assert redirect is not None
    assert (redirect.attempts, redirect.suspect, redirect.dont_filter) == (0, False, False)


def test_a_location_is_resolved_against_the_final_url() -> None:
    """Against the URL the response came from, not the entry's (which may differ)."""
    held = Held("1-0", Entry(url=PAGE), "a.test")
    got = respond(Facts(302, "http://a.test/dir/final", {"location": "x"}, held, NOW, 3))
    assert got.redirect is not None and got.redirect.url == "http://a.test/dir/x"


def test_a_retry_after_date_is_measured_against_the_facts_now() -> None:
    later = facts(503, headers={"retry-after": HTTP_DATE_IN_90_S})._replace(now=NOW + 60)
    assert respond(later).wait == 30.0


@pytest.mark.parametrize("attempts", [0, 1, 5, 6, 10_000])
def test_a_connection_error_waits_what_an_answer_without_retry_after_waits(attempts: int) -> None:
    """No response, nothing to judge: the core's ``Fetches.failed`` retries it after
    ``failure_wait``, the wait the policy gives a 5xx that names none."""
    assert (
        retry_wait(attempts, None, NOW)
        == failure_wait(attempts)
        == min(60.0, 2.0 ** min(attempts, 6))
    )


def test_takes_is_2xx_and_what_the_spider_or_the_request_lists() -> None:
    entry = Entry(url=PAGE, handle_httpstatus_list=(404,))
    assert [takes(entry, s, frozenset({500})) for s in (200, 299, 404, 500, 301, 410)] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_robots_txt_reads_retry_after_with_the_same_parser() -> None:
    """robots.txt's 503 waits what its Retry-After asks, as a page's does (uncapped
    there: its own cap is a day)."""
    got = RobotsFetch(PAGE, "hashcrawl").answered(503, {"retry-after": HTTP_DATE_IN_90_S}, b"", NOW)
    assert isinstance(got, Unreachable)
    assert got.retry_after == parse_retry_after(HTTP_DATE_IN_90_S, NOW) == 90.0


# The link rules a page's follows pass: Origin's, beside the fields they read.

HELD = Held("1-0", Entry(url=PAGE), "a.test")
ROBOTS = Robots.parse("User-agent: *\nDisallow: /private", "hashcrawl")


def test_a_link_to_its_own_host_passes_its_robots_txt_and_other_hosts_are_theirs() -> None:
    origin = Origin("w", ROBOTS)
    links = [
        Entry(url=u, depth=1)
        for u in ("http://a.test/ok", "http://a.test/private", "http://b.test/private")
    ]
    denied = Denied()
    kept = origin.kept(links, HELD, None, denied)
    assert [e.url for e in kept] == ["http://a.test/ok", "http://b.test/private"]
    assert kept.denied == 1  # the private page of its own host, counted
    again = origin.kept(links, HELD, None, denied)
    assert (len(again), again.denied) == (2, 0)  # the same link found again: counted once


def test_a_full_host_keeps_no_link_to_itself() -> None:
    links = [Entry(url="http://a.test/x", depth=1), Entry(url="http://b.test/x", depth=1)]
    kept = Origin("w", host_full=True).kept(links, HELD, None, Denied())
    assert ([e.url for e in kept], kept.denied) == (["http://b.test/x"], 0)  # not robots'


def test_a_link_past_max_depth_is_not_kept() -> None:
    links = [Entry(url="http://b.test/1", depth=1), Entry(url="http://b.test/2", depth=2)]
    assert [e.url for e in Origin("w").kept(links, HELD, 1, Denied())] == ["http://b.test/1"]


def test_links_queued_already_come_apart_and_are_counted_as_kept_if_the_rules_would_keep_them() -> (
    None
):
    seen = SeenCache()
    queued = ["http://a.test/private", "http://a.test/old", "http://b.test/old"]
    seen.remember([["s", "p", *fingerprint_of(url), 1] for url in queued])
    origin = Origin("w", ROBOTS, seen=seen)
    follows, known = origin.unqueued([*queued, "http://a.test/new"], 1)
    assert [e.url for e in follows] == ["http://a.test/new"]
    assert known == [(u, u.split("/")[2]) for u in queued]
    assert origin.known_kept(known, HELD, None) == 2  # not the private one
    assert origin.known_kept(known, HELD, 0) == 0  # all one level too deep


def test_without_a_seen_cache_every_link_is_an_entry() -> None:
    follows, known = Origin("w").unqueued(["http://a.test/1", "http://b.test/2"], 3)
    assert (follows, known) == (
        [Entry(url="http://a.test/1", depth=3), Entry(url="http://b.test/2", depth=3)],
        [],
    )


def fingerprint_of(url: str) -> tuple[int, int]:
    return fingerprint(canonicalize(url))


# -- a callback that raised -----------------------------------------------------------------


@pytest.mark.parametrize("attempts", [0, 1, 2, 10_000])
def test_a_callback_that_raised_is_retried_then_given_up_and_its_host_never_waits(
    attempts: int,
) -> None:
    """The server answered: no wait for its host, whatever the attempts (even a hostile
    count); retried until the last attempt, then given up with the callback's error."""
    error = "the parse callback Q.parse_item raised KeyError: 'x'"
    decision = parse_failed(Entry(url=PAGE, attempts=attempts), 3, error)
    act = Act.GIVE_UP if attempts >= 2 else Act.RETRY
    assert decision == Decision(act, error, wait=None)


def test_an_overloaded_answer_still_makes_the_host_wait() -> None:
    """Backoff stays for what the server signals: a 503 on a first try waits."""
    decision = respond(facts(503, reader=Reader.SPIDER))
    assert (decision.act, decision.wait) == (Act.RETRY, failure_wait(0))
