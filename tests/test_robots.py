"""Tests for hashcrawl._robots: robots.txt rules, their URL and Retry-After."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._exceptions import ConfigError
from hashcrawl._robots import Robots, parse_retry_after, robots_for_status, robots_url

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
