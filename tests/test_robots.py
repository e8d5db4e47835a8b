"""Tests for hashcrawl._web._robots: robots.txt rules, their URL and Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl import JsonLinesSink, Queue, Request, Response, Worker
from hashcrawl._exceptions import ConfigError
from hashcrawl._web._robots import (
    MAX_REDIRECTS,
    MAX_ROBOTS_BYTES,
    RULES_TTL,
    Robots,
    RobotsFetch,
    Unreachable,
    parse_retry_after,
    robots_for_status,
    robots_url,
)
from testing.fleet import (
    Crew,
    crawl_in_process,
    crawl_site,
    fast_settings,
    host,
    href,
    make_site,
    new_crawl_name,
    page,
    redirect,
    submit,
)
from testing.rawserver import RawServer
from testing.testsite import ROBOTS_PATH, Resource
from tests.strategies import header_maps, robots_bodies

UA = "hashcrawl/0.1.0 (+https://example.org/bot)"

ROBOTS = """\
User-agent: *
Disallow: /private
Crawl-delay: 5

User-agent: hashcrawl
Disallow: /*.php$
Disallow: /tmp/
Allow: /tmp/public
"""


def robots(text: str = ROBOTS, user_agent: str = UA) -> Robots:
    """Parse robots.txt text for a user agent, by default ours."""
    return Robots.parse(text, user_agent)


# rules


def test_disallowed_path_is_not_allowed() -> None:
    """A Disallow prefix blocks the paths under it."""
    assert not robots().allowed("http://example.com/tmp/x")
    assert robots().allowed("http://example.com/other")


def test_longest_matching_rule_wins() -> None:
    """A longer Allow overrides a shorter Disallow, per Google's spec."""
    assert robots().allowed("http://example.com/tmp/public/page")


def test_wildcards_and_end_anchor_are_understood() -> None:
    """ "*" matches any run of characters and "$" anchors the end of the path."""
    assert not robots().allowed("http://example.com/a/b/index.php")
    assert robots().allowed("http://example.com/index.php?x=1")


def test_group_naming_our_agent_replaces_the_star_group() -> None:
    """Rules for "*" do not apply to an agent that has its own group."""
    assert robots().allowed("http://example.com/private")


def test_agent_is_matched_on_the_product_token_of_the_user_agent() -> None:
    """The version and comment of the User-Agent string play no part."""
    assert robots(user_agent="HashCrawl/9.9").agent == "hashcrawl"
    assert not robots(user_agent="HashCrawl/9.9").allowed("http://example.com/tmp/x")


def test_other_agents_get_the_star_group() -> None:
    """An agent not named in robots.txt follows the "*" group."""
    other = robots(user_agent="otherbot/1.0")
    assert not other.allowed("http://example.com/private")
    assert other.allowed("http://example.com/tmp/x")


def test_user_agent_without_product_token_is_rejected() -> None:
    """A User-Agent must start with a product token to be matched against groups."""
    with pytest.raises(ConfigError, match="product token"):
        robots(user_agent="(compatible)")


def test_allow_all_allows_everything() -> None:
    """The rules used when there is no robots.txt block nothing."""
    assert Robots.allow_all().allowed("http://example.com/private/anything")


def test_deny_all_denies_every_page() -> None:
    """The rules used when robots.txt is unreachable block every page."""
    assert not Robots.deny_all().allowed("http://example.com/")
    assert not Robots.deny_all().allowed("http://example.com/a?b=c")


def test_robots_txt_itself_stays_fetchable_under_deny_all() -> None:
    """robots.txt is always allowed, so it can be fetched again later."""
    assert Robots.deny_all().allowed("http://example.com/robots.txt")


def test_rules_from_the_same_text_and_agent_are_equal_and_hashable() -> None:
    """Robots values compare by their text and agent, and hash accordingly."""
    assert robots() == robots(user_agent="hashcrawl")
    assert hash(robots()) == hash(robots(user_agent="hashcrawl"))
    assert robots() != robots(user_agent="otherbot")
    assert Robots.allow_all() != Robots.deny_all()


def test_remembered_verdicts_are_each_rules_own_and_bounded() -> None:
    """Verdicts are remembered per rules: two hosts' rules (and rules read again) asked
    the same URLs answer as their own text says, and the memory stays bounded."""
    from hashcrawl._core import _robotsrules as _rules

    urls = [f"http://h/{d}/{i}" for d in ("a", "b") for i in range(3)] + ["http://h/a/" + "x" * 600]
    hosts = [robots("User-agent: *\nDisallow: /a/\n"), robots("User-agent: *\nDisallow: /b/\n")]
    hosts.append(hosts[0].kept_until(5.0))  # the same rules kept again
    for _ in range(2):  # the second round reads what the first remembered
        for rules in hosts:
            verdicts = [rules.allowed(u) for u in urls]
            assert verdicts == [rules._parser.can_fetch(u, rules.agent) for u in urls]
    assert [hosts[0].allowed(u) for u in urls[:6]] == [False] * 3 + [True] * 3
    assert [hosts[1].allowed(u) for u in urls[:6]] == [True] * 3 + [False] * 3
    for i in range(_rules.VERDICTS_KEPT + 10):
        hosts[0].allowed(f"http://h/c/{i}")
    assert 0 < len(_rules._VERDICTS) <= _rules.VERDICTS_KEPT


# crawl delay


def test_crawl_delay_comes_from_our_group() -> None:
    """Crawl-delay is read from the group that names our agent."""
    text = "User-agent: hashcrawl\nCrawl-delay: 2.5\n\nUser-agent: *\nCrawl-delay: 9\n"
    assert robots(text).crawl_delay == 2.5


def test_crawl_delay_falls_back_to_the_star_group() -> None:
    """With no group naming our agent, the "*" group's Crawl-delay applies."""
    assert robots(user_agent="otherbot").crawl_delay == 5.0


def test_our_group_without_crawl_delay_has_none() -> None:
    """A group naming us replaces "*" entirely, its Crawl-delay included."""
    assert robots().crawl_delay is None


def test_crawl_delay_is_none_without_robots_rules() -> None:
    """No robots.txt means no delay asked."""
    assert Robots.allow_all().crawl_delay is None


# robots_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/a/b?c=d", "http://example.com/robots.txt"),
        ("https://example.com/", "https://example.com/robots.txt"),
        ("http://example.com:8080/x", "http://example.com:8080/robots.txt"),
        ("https://[::1]:8443/x", "https://[::1]:8443/robots.txt"),
    ],
)
def test_robots_url_is_at_the_root_of_the_authority(url: str, expected: str) -> None:
    """robots.txt sits at the root of the same scheme, host and port."""
    assert robots_url(url) == expected


# robots_for_status


@pytest.mark.parametrize("status", [200, 203, 299])
def test_success_status_parses_the_body(status: int) -> None:
    """A 2xx response's body is the rules."""
    assert robots_for_status(status, ROBOTS, UA) == robots()


@pytest.mark.parametrize("status", [301, 400, 401, 403, 404, 410, 499])
def test_client_error_status_allows_everything(status: int) -> None:
    """A 4xx (or an unfollowed redirect) means there is no robots.txt: all allowed."""
    assert robots_for_status(status, "User-agent: *\nDisallow: /", UA) == Robots.allow_all()


@pytest.mark.parametrize("status", [429, 500, 503, 599, 99, 600])
def test_server_error_status_denies_everything(status: int) -> None:
    """A 5xx or 429 means the rules are unknown, so nothing is fetched for now."""
    assert robots_for_status(status, "", UA) == Robots.deny_all()


# parse_retry_after

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("value", "expected"), [("120", 120.0), (" 7 ", 7.0), ("0", 0.0)])
def test_delta_seconds_are_returned_as_float(value: str, expected: float) -> None:
    """A number of seconds is taken as is."""
    assert parse_retry_after(value, NOW) == expected


def test_negative_delay_becomes_zero() -> None:
    """A negative wait means no wait."""
    assert parse_retry_after("-30", NOW) == 0.0


def test_delay_is_capped_at_one_day() -> None:
    """No server may park a host for more than a day."""
    assert parse_retry_after("999999999", NOW) == 86400.0


def test_http_date_gives_seconds_until_then() -> None:
    """An HTTP-date is measured from ``now``."""
    when = datetime.fromtimestamp(NOW + 90, UTC)
    assert parse_retry_after(format_datetime(when, usegmt=True), NOW) == 90.0


def test_http_date_in_the_past_gives_zero() -> None:
    """A date already gone means no wait."""
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW) == 0.0


def test_http_date_without_zone_is_taken_as_utc() -> None:
    """A "-0000" zone (UTC, origin unknown) is read as UTC."""
    assert parse_retry_after("Mon, 01 Jan 2024 12:01:00 -0000", NOW) == 60.0


@pytest.mark.parametrize(
    "value", [None, "", "soon", "1.5", "12abc", "Mon, 99 Jan 2024 12:00:00 GMT"]
)
def test_missing_or_unreadable_value_gives_none(value: str | None) -> None:
    """Anything that is neither delta-seconds nor an HTTP-date gives None."""
    assert parse_retry_after(value, NOW) is None


@given(st.text(), st.floats(0, 4e9))
def test_retry_after_never_raises_and_stays_within_a_day(value: str, now: float) -> None:
    """Any header value gives None or a wait between zero and one day."""
    seconds = parse_retry_after(value, now)
    assert seconds is None or 0.0 <= seconds <= 86400.0


# RobotsFetch: RFC 9309's rules for fetching

PAGE = "http://a.test/some/page"


def fetch() -> RobotsFetch:
    """A fetch of a.test's robots.txt for our agent."""
    return RobotsFetch(PAGE, UA)


def test_a_fetch_starts_at_the_hosts_robots_txt() -> None:
    """The first URL asked for is the robots.txt at the root of the page's origin."""
    assert fetch().url == "http://a.test/robots.txt"


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_followed_to_another_scheme_and_host(status: int) -> None:
    """A 3xx gives its Location, resolved, as the next URL; http to https and other hosts too."""
    f = fetch()
    assert f.answered(status, {"location": "https://b.test/real.txt"}, b"", NOW) == (
        "https://b.test/real.txt"
    )
    assert f.answered(301, {"location": "/r2"}, b"", NOW) == "https://b.test/r2"


def test_after_five_redirects_there_is_no_file_so_all_is_allowed() -> None:
    """The sixth redirect in a row is not followed: robots.txt is "unavailable" (RFC 9309)."""
    f = fetch()
    hops = [f.answered(301, {"location": f"/r{n}"}, b"", NOW) for n in range(MAX_REDIRECTS + 1)]
    assert hops[:MAX_REDIRECTS] == [f"http://a.test/r{n}" for n in range(MAX_REDIRECTS)]
    assert hops[MAX_REDIRECTS] == Robots.allow_all()


def test_a_redirect_without_a_usable_location_means_no_rules() -> None:
    """A 3xx with no Location, or one that is not an http(s) URL, leads to no file."""
    assert fetch().answered(302, {}, b"", NOW) == Robots.allow_all()
    assert fetch().answered(302, {"location": "mailto:x@y"}, b"", NOW) == Robots.allow_all()


def test_a_2xx_gives_the_rules_of_its_body() -> None:
    """The body of a 2xx is parsed for our agent."""
    got = fetch().answered(200, {"content-type": "text/plain"}, ROBOTS.encode(), NOW)
    assert got == robots()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451, 499])
def test_a_4xx_means_every_page_is_allowed(status: int) -> None:
    """RFC 9309 2.3.1.3: "unavailable" lets the crawler access any resource."""
    assert fetch().answered(status, {}, b"User-agent: *\nDisallow: /", NOW) == Robots.allow_all()


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 599, 600, 100])
def test_a_5xx_or_429_is_unreachable_with_its_retry_after(status: int) -> None:
    """RFC 9309 2.3.1.4 (and Google for 429): unreachable, so nothing may be fetched yet."""
    got = fetch().answered(status, {"retry-after": "7"}, b"", NOW)
    assert got == Unreachable(f"robots.txt unreachable: HTTP {status} from {fetch().url}", 7.0)


def test_a_network_failure_is_unreachable() -> None:
    """A timeout or a refused connection is unreachable too, with the error as the reason."""
    assert fetch().failed("ConnectError: refused") == Unreachable(
        "robots.txt unreachable: ConnectError: refused"
    )


def test_unreachable_waits_retry_after_else_as_long_as_a_failed_page() -> None:
    """The backoff is the server's Retry-After if it gave one, else 1, 2, 4... s, at most 60."""
    assert Unreachable("x", 5.0).wait(attempts=3) == 5.0
    assert [Unreachable("x").wait(n) for n in (0, 1, 2, 9)] == [1.0, 2.0, 4.0, 60.0]


def test_only_the_first_500_kib_of_a_robots_txt_is_parsed() -> None:
    """A rule past MAX_ROBOTS_BYTES is ignored (RFC 9309 2.5); one before it applies."""
    head = b"User-agent: *\nDisallow: /early\n"
    filler = b"# " + b"x" * (MAX_ROBOTS_BYTES - len(head) - 3) + b"\n"
    body = head + filler + b"Disallow: /late\n"
    rules = fetch().answered(200, {}, body, NOW)
    assert isinstance(rules, Robots)
    assert not rules.allowed("http://a.test/early")
    assert rules.allowed("http://a.test/late")


@pytest.mark.parametrize("truncated", [False, True])
def test_a_line_cut_at_the_limit_is_dropped_not_read_short(truncated: bool) -> None:
    """ "Disallow: /x" cut to "Disallow: /" at 500 KiB (or at the fetcher's cap) must not
    disallow everything: the cut line is left out."""
    head = b"User-agent: *\n"
    body = head + b"#" * (MAX_ROBOTS_BYTES - len(head) - 12) + b"\nDisallow: /x\n"
    cut = body[:MAX_ROBOTS_BYTES] if truncated else body
    rules = fetch().answered(200, {}, cut, NOW, truncated=truncated)
    assert isinstance(rules, Robots)
    assert rules.allowed("http://a.test/")


@pytest.mark.parametrize("charset", ["bogus", "zlib", "idna", "base64"])
def test_a_bogus_charset_on_robots_txt_is_decoded_as_utf8(charset: str) -> None:
    """A charset that names no text encoding never raises: the body is read as UTF-8."""
    headers = {"content-type": f"text/plain; charset={charset}"}
    rules = fetch().answered(200, headers, b"User-agent: *\nDisallow: /x\n", NOW)
    assert isinstance(rules, Robots)
    assert not rules.allowed("http://a.test/x")


def test_rules_expire_when_kept_until_passes() -> None:
    """Rules kept until a time are due again at that time, not before; by default never."""
    kept = robots().kept_until(100.0)
    assert (kept.expired(99.9), kept.expired(100.0)) == (False, True)
    assert not robots().expired(1e18)
    assert kept == robots()  # when to fetch again is not part of what the rules are
    assert RULES_TTL == 24 * 3600


def test_rules_from_a_big_file_are_heavy() -> None:
    """Rules from more than 32 KiB of text are checked off the event loop."""
    assert not robots().heavy
    assert Robots.parse("User-agent: *\n" + "Disallow: /x\n" * 5000, UA).heavy


@given(st.integers(0, 999), header_maps, robots_bodies)
def test_no_response_makes_a_robots_fetch_raise(
    status: int, headers: dict[str, str], body: bytes
) -> None:
    """Any status, headers and body give a URL, rules or Unreachable, never an exception."""
    got = fetch().answered(status, headers, body, NOW)
    assert isinstance(got, str | Robots | Unreachable)
    if isinstance(got, Robots):
        got.allowed("http://a.test/x")
        assert got.crawl_delay is None or got.crawl_delay >= 0


# against a real server on loopback


def robots_site(robots_resource: Resource, **more: Resource) -> Any:
    """host(0) links to /private and /public; its robots.txt is ``robots_resource``."""
    resources = {
        (host(0), "/"): page("root", href(host(0), "/private"), href(host(0), "/public")),
        (host(0), ROBOTS_PATH): robots_resource,
        (host(0), "/private"): page("private"),
        (host(0), "/public"): page("public"),
    }
    resources.update({(host(1), path): r for path, r in more.items()})
    return make_site(resources)


DISALLOW_PRIVATE = "User-agent: *\nDisallow: /private\n"


async def test_a_robots_txt_redirected_to_another_host_is_obeyed(
    redis_url: str, tmp_path: Path
) -> None:
    """/robots.txt answering 301 to another host's file: that file's rules apply."""
    site = robots_site(
        redirect(301, href(host(1), "/rules.txt")),
        **{"/rules.txt": Resource(200, "text/plain", DISALLOW_PRIVATE)},
    )
    crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings()])
    paths = [(r.host, r.path) for r in crawled.requests]
    assert (host(1), "/rules.txt") in paths
    assert (host(0), "/public") in paths
    assert (host(0), "/private") not in paths


async def test_a_robots_txt_with_a_bogus_charset_is_obeyed(redis_url: str, tmp_path: Path) -> None:
    """Content-Type: text/plain; charset=bogus neither stops the worker nor the rules."""
    site = robots_site(Resource(200, "text/plain; charset=bogus", DISALLOW_PRIVATE))
    crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings()])
    paths = [r.path for r in crawled.requests]
    assert "/public" in paths
    assert "/private" not in paths


async def test_while_robots_txt_is_unreachable_nothing_else_is_fetched(
    redis_url: str, tmp_path: Path
) -> None:
    """A robots.txt that answers 503 lets no page through; the page is dead-lettered with why."""
    site = robots_site(Resource(503, "text/plain", "down"))
    crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings(max_attempts=1)])
    assert [r.path for r in crawled.requests] == [ROBOTS_PATH]
    with Queue(redis_url, crawled.crew.crawl) as queue:
        dead = queue.dead()
    assert list(dead) == [crawled.site.root]
    assert "robots.txt unreachable: HTTP 503" in dead[crawled.site.root]


async def test_a_robots_txt_that_never_answers_is_unreachable(
    redis_url: str, tmp_path: Path
) -> None:
    """A robots.txt dripped past --timeout disallows the host: its page is not fetched."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n"
    with RawServer(lambda path: [head, *[p for _ in range(50) for p in (0.1, b"#")]]) as server:
        site_url = server.url("/page")
        crew = Crew(redis_url, new_crawl_name(), tmp_path)
        settings = fast_settings(max_attempts=1, timeout=1.0, allow_nets=[server.host])
        await crawl_in_process(crew, [settings], [site_url])
        with Queue(redis_url, crew.crawl) as queue:
            dead = queue.dead()
    assert server.paths == [ROBOTS_PATH]
    assert "robots.txt unreachable" in dead[site_url]
    assert "timeout" in dead[site_url]


class RobotsBreaks:
    """A user's fetcher with a bug: it raises on robots.txt, and answers pages."""

    async def fetch(self, request: Request) -> Response:
        if request.url.endswith(ROBOTS_PATH):
            raise RuntimeError("a bug in the fetcher")
        return Response(
            request.url, 200, {"content-type": "text/html"}, b"<title>x</title>", request
        )


async def test_a_fetcher_raising_on_robots_txt_fails_the_page_not_the_worker(
    redis_url: str, tmp_path: Path
) -> None:
    """Any exception while fetching robots.txt means unreachable: the page is dead-lettered."""
    crawl = new_crawl_name()
    worker = Worker(
        redis_url,
        crawl,
        fetcher=RobotsBreaks(),
        sink=JsonLinesSink(tmp_path / "items.jsonl"),
        **fast_settings(max_attempts=1),
    )
    await trio.to_thread.run_sync(submit, redis_url, crawl, ["http://a.test/"])
    await worker.run()
    with Queue(redis_url, crawl) as queue:
        assert queue.dead() == {"http://a.test/": ANY}
        why = queue.dead()["http://a.test/"]
    assert "robots.txt unreachable: RuntimeError: a bug in the fetcher" in why


async def test_a_robots_txt_bigger_than_the_body_cap_still_gives_its_first_rules(
    redis_url: str, tmp_path: Path
) -> None:
    """2 MiB of robots.txt under a 1 MiB --max-body: the first 500 KiB are obeyed."""
    text = DISALLOW_PRIVATE + "# filler\n" * (2 * 2**20 // 9)
    site = robots_site(Resource(200, "text/plain", text))
    crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings(max_body=2**20)])
    paths = [r.path for r in crawled.requests]
    assert "/public" in paths
    assert "/private" not in paths


async def test_a_robots_txt_redirected_to_a_private_address_is_no_file(
    redis_url: str, tmp_path: Path
) -> None:
    """A redirect to an address not allowed is not followed: no rules, and no request there."""
    with RawServer(lambda path: [b"HTTP/1.1 200 OK\r\n\r\n"], "127.0.5.7") as inner:
        site = robots_site(redirect(301, inner.url("/robots.txt")))
        crawled = await crawl_site(redis_url, tmp_path, site, [fast_settings()])
    assert inner.paths == []
    assert {"/public", "/private"} <= {r.path for r in crawled.requests}
