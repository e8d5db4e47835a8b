"""Tests for hashcrawl._web._html: titles, links and content types."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hashcrawl import Request, Response
from hashcrawl._core._links import sendable
from hashcrawl._core._urls import canonicalize
from hashcrawl._web._html import Page, decode_body, is_html, parse_html
from tests.strategies import content_types, header_maps, html_like_bodies, http_urls

URL = "http://example.com/dir/page.html"


def links_of(html: str, url: str = URL) -> tuple[str, ...]:
    """Return the links parse_html finds in a UTF-8 encoded snippet."""
    return parse_html(html.encode("utf-8"), url).links


# titles


def test_title_is_stripped_and_whitespace_collapsed() -> None:
    """A title's surrounding whitespace goes and inner runs become one space."""
    page = parse_html(b"<title>\n  Hello\n   world  </title>", URL)
    assert page.title == "Hello world"


def test_missing_title_is_none() -> None:
    """A page without a <title> has title None."""
    assert parse_html(b"<p>no title here</p>", URL).title is None


def test_blank_title_is_none() -> None:
    """A <title> holding only whitespace counts as no title."""
    assert parse_html(b"<title>  \n </title>", URL).title is None


def test_first_title_wins() -> None:
    """When a page has several <title> elements, the first one is used."""
    assert parse_html(b"<title>one</title><title>two</title>", URL).title == "one"


def test_title_entities_are_decoded() -> None:
    """Character references in the title become characters."""
    assert parse_html(b"<title>Fish &amp; Chips &#8212; caf&eacute;</title>", URL).title == (
        "Fish & Chips \u2014 caf\u00e9"
    )


# links


def test_anchor_and_area_links_are_returned_in_document_order() -> None:
    """Both <a href> and <area href> are links, kept in the order they appear."""
    html = "<a href='/b'>b</a><map><area href='/a'></map><a href='c'>c</a>"
    assert links_of(html) == (
        "http://example.com/b",
        "http://example.com/a",
        "http://example.com/dir/c",
    )


def test_link_elements_are_followed_only_for_next_prev_and_alternate() -> None:
    """<link rel=next|prev|alternate> are links; stylesheets, icons and <base> are not."""
    html = (
        "<link rel='next' href='/n'><link rel='Prev' href='/p'>"
        "<link rel='alternate stylesheet' href='/alt.css'><link rel=stylesheet href='/s.css'>"
        "<link rel=icon href='/i.png'><base href='/dir/'>"
    )
    assert links_of(html) == (
        "http://example.com/n",
        "http://example.com/p",
        "http://example.com/alt.css",
    )


def test_frames_iframes_and_meta_refresh_are_links() -> None:
    """<frame src>, <iframe src> and a refresh's url= are followed, as wget follows them."""
    html = (
        "<meta http-equiv='Refresh' content='3; URL=\"/later.html\"'>"
        "<meta http-equiv=refresh content='5'><meta name=refresh content='0;url=/not'>"
        "<frameset><frame src='left.html'><frame src='/right.html#top'></frameset>"
        "<iframe src='inner.html'></iframe>"
    )
    page = parse_html(html.encode(), "http://example.com/dir/page")
    assert page.links == (
        "http://example.com/later.html",
        "http://example.com/dir/left.html",
        "http://example.com/right.html",
        "http://example.com/dir/inner.html",
    )


def test_canonical_link_is_reported_not_followed() -> None:
    """A page's <link rel=canonical> is its canonical field, and not one of its links."""
    page = parse_html(b"<link rel=canonical href='/real?b=1&a'>", "http://example.com/x")
    assert page.canonical == "http://example.com/real?b=1&a"
    assert page.links == ()


def test_duplicate_links_keep_their_first_position() -> None:
    """Links that are the same request appear once, where first seen."""
    html = "<a href='/a'>1</a><a href='/b'>2</a><a href='/a#x'>3</a><a href='/b'>4</a>"
    assert links_of(html) == ("http://example.com/a", "http://example.com/b")


def test_links_are_what_the_page_wrote_made_fit_to_send() -> None:
    """Scheme, host, default port and dot segments are normalised; query order and = kept."""
    assert links_of("<a href='HTTP://Other.COM:80/x/../y?b=1&a=2#f'>") == (
        "http://other.com/y?b=1&a=2",
    )


@pytest.mark.parametrize(
    ("href", "sent"),
    [
        (
            "index.html?java/lang/String.html",
            "http://example.com/dir/index.html?java/lang/String.html",
        ),
        ("a b/é.html?q=ü v", "http://example.com/dir/a%20b/%C3%A9.html?q=%C3%BC%20v"),
        ("/x?flag&b=%2F&a", "http://example.com/x?flag&b=%2F&a"),
        ("/%7euser/", "http://example.com/%7euser/"),
        ("https://example.com:443/s", "https://example.com/s"),
        ("http://example.com:8080/p", "http://example.com:8080/p"),
    ],
)
def test_a_link_is_requested_as_written(href: str, sent: str) -> None:
    """Only what must be escaped is; the canonical form (sorted, = added) is not what is sent."""
    assert links_of(f"<a href='{href}'>x</a>") == (sent,)


@pytest.mark.parametrize(
    "href", ["#top", "", "mailto:a@example.com", "javascript:void(0)", "tel:123", "ftp://x/"]
)
def test_fragment_only_and_non_http_links_are_dropped(href: str) -> None:
    """Links that lead to this same page or to no http(s) resource are left out."""
    assert links_of(f"<a href='{href}'>x</a>") == ()


def test_anchor_without_href_is_ignored() -> None:
    """An <a> with no href (a named anchor) is not a link."""
    assert links_of("<a name='here'>x</a>") == ()


def test_nofollow_links_are_still_returned() -> None:
    """rel=nofollow is not honoured here; callers may filter."""
    assert links_of("<a rel='nofollow' href='/x'>x</a>") == ("http://example.com/x",)


def test_links_resolve_against_base_href() -> None:
    """A <base href> changes what relative links resolve against."""
    html = "<head><base href='http://cdn.example.net/root/'></head><a href='x'>x</a>"
    assert links_of(html) == ("http://cdn.example.net/root/x",)


def test_relative_base_href_resolves_against_the_page_url() -> None:
    """A relative <base href> is itself resolved against the page URL."""
    html = "<base href='../other/'><a href='x'>x</a>"
    assert links_of(html) == ("http://example.com/other/x",)


def test_only_the_first_base_with_an_href_counts() -> None:
    """Later <base> elements are ignored, as in browsers."""
    html = "<base target='_top'><base href='/one/'><base href='/two/'><a href='x'>x</a>"
    assert links_of(html) == ("http://example.com/one/x",)


def test_unusable_base_href_falls_back_to_the_page_url() -> None:
    """A <base href> that is not an http(s) URL leaves links relative to the page."""
    html = "<base href='javascript:void(0)'><a href='x'>x</a>"
    assert links_of(html) == ("http://example.com/dir/x",)


def test_links_survive_broken_markup() -> None:
    """Unclosed and misnested tags do not hide the links."""
    html = "<div><a href='/a'>one<p><a href=/b>two</div></span><a href='/c'"
    assert links_of(html)[:2] == ("http://example.com/a", "http://example.com/b")


# bodies and encodings


@pytest.mark.parametrize("body", [b"", b"   \n", b"<!-- only a comment -->", b"\x00"])
def test_empty_or_contentless_body_gives_empty_page(body: bytes) -> None:
    """A body with nothing in it gives no title and no links."""
    assert parse_html(body, URL) == Page(None, ())


def test_meta_charset_is_used_to_decode() -> None:
    """Without a header charset, <meta charset> decides the encoding."""
    body = "<meta charset='iso-8859-1'><title>café</title>".encode("latin-1")
    assert parse_html(body, URL).title == "café"


def test_header_encoding_wins_over_meta_charset() -> None:
    """The encoding from the Content-Type header overrides the page's own claim."""
    body = "<meta charset='iso-8859-1'><title>café</title>".encode()
    assert parse_html(body, URL, encoding="utf-8").title == "café"


def test_unknown_encoding_falls_back_to_detection() -> None:
    """A charset name nobody knows is ignored rather than fatal."""
    assert parse_html(b"<title>ok</title>", URL, encoding="no-such-charset").title == "ok"


def test_xml_declaration_is_accepted() -> None:
    """An XHTML page with an XML declaration parses like any other."""
    body = b"<?xml version='1.0' encoding='utf-8'?><html><head><title>x</title></head></html>"
    assert parse_html(body, URL).title == "x"


def test_non_ascii_href_is_percent_encoded() -> None:
    """A link written in Unicode comes back as a percent-encoded URL."""
    assert links_of("<a href='/café'>x</a>") == ("http://example.com/caf%C3%A9",)


@given(st.binary(), http_urls)
def test_parse_html_never_raises_on_arbitrary_bytes(body: bytes, url: str) -> None:
    """Any bytes at all give a Page."""
    assert isinstance(parse_html(body, url), Page)


@given(html_like_bodies, http_urls)
def test_links_from_tag_soup_are_sendable_and_unique(body: bytes, url: str) -> None:
    """Links found in messy markup are fit to send as they are, fragment-free and unique."""
    links = parse_html(body, url).links
    assert len(set(links)) == len(links)
    for link in links:
        assert "#" not in link
        assert link.isascii() and not any(c.isspace() for c in link)
        assert sendable(link) == link
        canonicalize(link)  # and can be deduplicated and routed


# is_html


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html",
        "TEXT/HTML",
        "text/html; charset=utf-8",
        " text/html ;charset=x",
        "application/xhtml+xml",
        "Application/XHTML+XML; charset=UTF-8",
    ],
)
def test_html_content_types_are_html(content_type: str) -> None:
    """text/html and application/xhtml+xml count, whatever their case or parameters."""
    assert is_html(content_type)


@pytest.mark.parametrize(
    "content_type",
    [None, "", "text/plain", "application/json", "text/htmlx", "application/xml", "image/png"],
)
def test_other_content_types_are_not_html(content_type: str | None) -> None:
    """Missing and non-HTML content types are not HTML."""
    assert not is_html(content_type)


# decoding never raises


@pytest.mark.parametrize(
    "charset", ["bogus", "zlib", "base64", "idna", "punycode", "rot13", "undefined", "uu"]
)
def test_a_charset_that_names_no_text_encoding_falls_back_to_utf8(charset: str) -> None:
    """Unknown names and codecs that are not text encodings are passed over, not raised."""
    body = "<title>café</title>".encode()
    assert decode_body(body, f"text/html; charset={charset}") == "<title>café</title>"
    assert parse_html(body, URL, content_type=f"text/html; charset={charset}").title == "café"


def test_a_bogus_header_charset_gives_way_to_meta_charset() -> None:
    """Header charset, then <meta charset>, then UTF-8: a bad first choice is skipped."""
    body = "<meta charset='iso-8859-1'><title>café</title>".encode("latin-1")
    assert "café" in decode_body(body, "text/html; charset=bogus")


def test_a_byte_order_mark_wins_over_any_charset() -> None:
    """A BOM says what the body is, whatever the header claims."""
    body = "\ufeff<title>ü</title>".encode("utf-16-le")
    assert decode_body(body, "text/html; charset=zlib") == "<title>ü</title>"


def test_response_text_of_a_bogus_charset_is_the_body_as_utf8() -> None:
    """Response.text with charset=bogus decodes as UTF-8, replacing what is not."""
    response = Response(
        url=URL,
        status=200,
        headers={"content-type": "text/plain; charset=bogus"},
        body=b"ok \xff",
        request=Request(URL),
    )
    assert response.text == "ok \ufffd"


@given(st.binary(max_size=300) | html_like_bodies, content_types | st.none())
@example(b"\\\x00", "text/html; charset=unicode_escape")  # CI's draw: a stray backslash
@example(b"a\\u12", "text/html; charset=raw-unicode-escape")
def test_decoding_any_body_under_any_content_type_never_raises(
    body: bytes, content_type: str | None
) -> None:
    """decode_body and parse_html give text and a Page for any bytes and any header."""
    assert isinstance(decode_body(body, content_type), str)
    assert isinstance(parse_html(body, URL, content_type=content_type), Page)


@given(st.integers(100, 599), header_maps, st.binary(max_size=300) | html_like_bodies)
def test_a_response_of_any_headers_and_body_never_raises(
    status: int, headers: dict[str, str], body: bytes
) -> None:
    """Whatever a server sends, a Response's text, title, links and is_html answer."""
    response = Response(url=URL, status=status, headers=headers, body=body, request=Request(URL))
    assert isinstance(response.text, str)
    assert isinstance(response.links(), list)
    response.title()
    assert response.is_html in (True, False)
