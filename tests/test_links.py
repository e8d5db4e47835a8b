"""The URLs a response links to, as they are sent (hashcrawl._core._links)."""

from __future__ import annotations

import pytest

from hashcrawl._core._entry import Entry
from hashcrawl._core._links import header_links, request_url
from hashcrawl._core._urls import canonicalize
from hashcrawl._web._models import Request, Response

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
