"""The URLs a response links to, as they are sent (hashcrawl._core._links)."""

from __future__ import annotations

from urllib.parse import urljoin

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashcrawl._core._entry import Entry
from hashcrawl._core._links import header_links, request_url, sendable
from hashcrawl._core._urls import canonicalize
from hashcrawl._web._models import Request, Response
from tests.strategies import hrefs, plain_hrefs, tricky_bases, tricky_hrefs

BASE = "http://example.com/dir/page.html"


def test_link_header_gives_next_prev_and_alternate_only() -> None:
    """A Link: header's next, prev and alternate targets are links; other rels are not."""
    value = (
        '</p2>; rel="next", <https://example.com/p0>; rel=prev, '
        '</style.css>; rel=stylesheet, </fr>; rel="alternate"; hreflang=fr, </c>; rel=canonical'
    )
    assert header_links(value, BASE) == [
        "http://example.com/p2",
        "https://example.com/p0",
        "http://example.com/fr",
    ]


def test_response_links_include_its_link_headers() -> None:
    """An HTML response's links are its Link: header targets, then its page's links."""
    response = Response(
        url=BASE,
        status=200,
        headers={"content-type": "text/html", "link": "</next>; rel=next"},
        body=b"<a href='a.html'>a</a>",
        request=Request(BASE),
    )
    assert response.links() == ["http://example.com/next", "http://example.com/dir/a.html"]


def test_non_html_responses_have_no_links() -> None:
    """Only HTML and XHTML are parsed for links, whatever the body looks like."""
    response = Response(
        url=BASE,
        status=200,
        headers={"content-type": "text/plain", "link": "</next>; rel=next"},
        body=b"<a href='a.html'>a</a>",
        request=Request(BASE),
    )
    assert response.links() == []


def test_header_charset_wins_over_meta_charset() -> None:
    """The Content-Type charset decodes the page, before its <meta charset>."""
    body = "<meta charset='utf-8'><a href='/é'>x</a>".encode("latin-1")
    response = Response(
        url=BASE,
        status=200,
        headers={"content-type": "text/html; charset=latin-1"},
        body=body,
        request=Request(BASE),
    )
    assert response.links() == ["http://example.com/%C3%A9"]


@pytest.mark.parametrize("href", ["http://user:pw@example.com/", "http://[::1/", "http://h:99999/"])
def test_unsendable_links_are_dropped(href: str) -> None:
    """A link with credentials, a broken host or a bad port is not followed."""
    assert request_url(BASE, href) is None


def test_an_entry_stores_one_url_and_derives_the_canonical_form() -> None:
    """An entry carries the URL as sent; its canonical form is computed, not stored."""
    url = "http://example.com/index.html?java/lang/String.html"
    entry = Entry(url=url)
    assert entry.canonical == canonicalize(url) != url
    assert Entry.decode(entry.encode()) == entry
    assert entry.encode() == '{"u":"http://example.com/index.html?java/lang/String.html"}'
    moved = attrs.evolve(entry, url="http://EXAMPLE.com/b?z=1&a=2")  # asked once, not carried
    assert moved.canonical == "http://example.com/b?a=2&z=1"
    assert moved != entry and attrs.evolve(moved, url=url) == entry


def _joined_by_urllib(base: str, href: str) -> str | None:
    """request_url as it was before its fast paths: urljoin, sendable, canonicalize."""
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        url = sendable(urljoin(base, href))
        canonicalize(url)
    except ValueError:
        return None
    return url


@settings(max_examples=1000, deadline=None)  # no timed assertion: the machine may be busy
@given(tricky_bases, tricky_hrefs)
def test_fast_joins_send_what_urljoin_sends(base: str, href: str) -> None:
    """ada-url's fast path and the absolute-link cache give urljoin's URL, quirks and all."""
    assert request_url(base, href) == _joined_by_urllib(base, href)


@settings(max_examples=1000, deadline=None)
@given(tricky_bases, plain_hrefs)
def test_plain_links_are_sent_as_urljoin_sends_them(base: str, href: str) -> None:
    """A link of unreserved characters, sent as written after the base's directory or
    origin, is the URL urljoin and escaping make of it; so is any near one."""
    assert request_url(base, href) == _joined_by_urllib(base, href)


@settings(deadline=None)
@given(tricky_bases, hrefs)
def test_fast_joins_agree_on_ordinary_links(base: str, href: str) -> None:
    """On the links pages write, the fast path and urljoin agree too."""
    assert request_url(base, href) == _joined_by_urllib(base, href)


@settings(max_examples=1000, deadline=None)
@given(tricky_bases, st.sampled_from(["", "b.html", "c/d?x=1", "e?", "f/../g"]), tricky_hrefs)
def test_pages_of_one_directory_resolve_a_link_alike(base: str, other: str, href: str) -> None:
    """A link resolved for one page of a directory (and remembered) is resolved for
    another page of that directory, whatever its name or query, as urllib resolves it."""
    sibling = base.rpartition("/")[0] + "/" + other if "/" in base else base
    for page in (base, sibling, base):
        assert request_url(page, href) == _joined_by_urllib(page, href)


@pytest.mark.parametrize(
    ("href", "sent"),
    [
        ("../../java/lang/String.html#m()", "http://h/api/java/lang/String.html"),
        ("a//b", "http://h/api/java/io/a/b"),  # urljoin merges the empty segment
        ("%2e%2e/x", "http://h/api/java/io/%2e%2e/x"),  # WHATWG would read a dot segment
        ("x?a='1'", "http://h/api/java/io/x?a='1'"),  # WHATWG would escape the quotes
        ("?", "http://h/api/java/io/X.html"),  # urljoin keeps the page's own URL
        ("http://H:80/a#f", "http://h/a"),
        ("http://h/" + "a" * 2000, "http://h/" + "a" * 2000),  # too long to cache: resolved
    ],
)
def test_links_are_joined_as_urljoin_joins_them(href: str, sent: str) -> None:
    """Where WHATWG and urljoin part, a link is still sent the way urljoin resolves it."""
    assert request_url("http://h/api/java/io/X.html", href) == sent
