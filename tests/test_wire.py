"""Tests for hashcrawl._web._wire: the URL parts the fetcher sends, parsed without httpx."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._web._wire import URLParts, plain_url
from tests.strategies import http_urls

# Pieces where httpx's parser changes a URL or refuses it: case, dot segments, "//",
# escapes, default and zero-led ports, IPv4-like hosts, brackets, spaces, non-ASCII.
_PIECES = st.sampled_from(
    [*"aZ09/.?#=&;:%@!$()*+,-_~[]' é|^`{}\"", "..", "./", "../", "%2e", "%41", "%zz", "//",
     ":80", ":443", ":8080", ":0", ":080", ":99999", "http://", "https://", "HTTP://",
     "127.0.0.2", "999.1.1.1", "1.2.3", "[::1]", "xn--bcher-kva", "Host", "user@"]
)  # fmt: skip
_BUILT = st.lists(_PIECES, min_size=1, max_size=12).map("".join)


@given(st.one_of(_BUILT, st.builds(str.__add__, st.sampled_from(["http://", "https://"]), _BUILT)))
def test_a_plain_url_is_parsed_as_httpx_parses_it(text: str):
    """For every URL plain_url takes, its parts are httpx.URL's; the rest it declines."""
    check_against_httpx(text)


@given(http_urls)
def test_plain_url_agrees_with_httpx_on_far_from_canonical_urls(text: str):
    """Mixed case, IDNs, IP literals, odd escapes: taken only where httpx agrees."""
    check_against_httpx(text)


_NEAR_PLAIN = st.from_regex(
    r"https?://[a-z0-9.-]{1,12}(:[0-9]{1,5})?/[A-Za-z0-9%./?;=&@:~!$'()*+,_-]{0,24}", fullmatch=True
)


@given(_NEAR_PLAIN)
def test_plain_url_agrees_with_httpx_on_urls_near_its_domain(text: str):
    """Hosts of dots and dashes, every port, paths of the characters it takes."""
    check_against_httpx(text)


def check_against_httpx(text: str) -> None:
    parts = plain_url(text)
    if parts is None:
        return
    assert parts == URLParts.of(httpx.URL(text))


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.2:8080/",
        "http://127.0.0.2:8080/p/12.html",
        "https://docs.example.org/a-b/c_d/~e/f.html?x=1&y=%20;z",
        "http://h/a%2Fb%zz/@:!$'()*+,=",
    ],
)
def test_the_urls_a_crawl_sends_take_the_fast_way(text: str):
    """A crawl's URLs, as ``request_url`` writes them, need no httpx parse."""
    assert plain_url(text) == URLParts.of(httpx.URL(text))


@pytest.mark.parametrize(
    "text",
    [
        "http://H/",
        "http://h:80/",
        "https://h:443/x",
        "http://h/a/../b",
        "http://h/./b",
        "http://h//b",
        "http://999.1.1.1/",
        "http://h/a#f",
        "http://h/a b",
        "http://h",
        "ftp://h/",
    ],
)
def test_urls_httpx_would_change_or_refuse_are_left_to_it(text: str):
    """Case, default ports, dot segments, "//", bad IPv4, fragments, spaces, no path."""
    assert plain_url(text) is None
