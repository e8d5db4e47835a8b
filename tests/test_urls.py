"""Tests for hashcrawl._core._urls: canonical URLs, host keys, fingerprints and scoping."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hashcrawl._core._entry import Entry
from hashcrawl._core._urls import (
    canonical_parts,
    canonicalize,
    domain_allowed,
    fingerprint,
    host_key,
    join_url,
)
from hashcrawl._exceptions import InvalidURL
from tests.strategies import any_urls, ascii_hosts, hrefs, http_urls, paths, ports

# canonicalize


def test_scheme_and_host_are_lowercased() -> None:
    """Scheme and host are case-insensitive, so the canonical form is lowercase."""
    assert canonicalize("HTTP://Example.COM/Path") == "http://example.com/Path"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a", "https://example.com/a"),
    ],
)
def test_default_port_is_dropped(url: str, expected: str) -> None:
    """A port equal to the scheme's default is left out."""
    assert canonicalize(url) == expected


@pytest.mark.parametrize(
    "url", ["http://example.com:443/", "https://example.com:80/", "http://example.com:8080/"]
)
def test_non_default_port_is_kept(url: str) -> None:
    """A port that differs from the scheme's default stays in the URL."""
    assert canonicalize(url) == url


def test_dot_segments_are_resolved() -> None:
    """ "." and ".." segments are resolved, never climbing above the root."""
    assert canonicalize("http://example.com/a/./b/../c/../../../d") == "http://example.com/d"


def test_fragment_is_dropped() -> None:
    """The fragment names a part of the same page, so it is removed."""
    assert canonicalize("http://example.com/a?b=1#section") == "http://example.com/a?b=1"


def test_empty_path_becomes_slash() -> None:
    """A URL without a path gets "/"."""
    assert canonicalize("http://example.com") == "http://example.com/"


def test_query_arguments_are_sorted() -> None:
    """Query arguments are sorted so that their order does not split one page in two."""
    assert canonicalize("http://example.com/?b=2&a=1&c") == "http://example.com/?a=1&b=2&c="


def test_non_ascii_host_is_idna_encoded() -> None:
    """An internationalized host becomes its ASCII (punycode) form."""
    assert canonicalize("http://Bücher.de/") == "http://xn--bcher-kva.de/"


def test_non_ascii_path_is_percent_encoded_as_utf8() -> None:
    """Non-ASCII path characters are percent-encoded from UTF-8."""
    assert canonicalize("http://example.com/café") == "http://example.com/caf%C3%A9"


def test_trailing_dot_on_host_is_dropped() -> None:
    """ "example.com." and "example.com" name one host, so they share one form."""
    assert canonicalize("http://example.com./a") == "http://example.com/a"


def test_ipv6_host_keeps_brackets_and_is_normalized() -> None:
    """An IPv6 literal is written in its RFC 5952 form, inside brackets."""
    assert canonicalize("http://[2001:DB8::0:1]:80/") == "http://[2001:db8::1]/"


def test_surrounding_whitespace_is_ignored() -> None:
    """Whitespace around a URL is not part of it."""
    assert canonicalize("  http://example.com/a \n") == "http://example.com/a"


@pytest.mark.parametrize(
    "url", ["http://user:secret@example.com/", "http://user@example.com/", "http://@example.com/"]
)
def test_userinfo_is_rejected(url: str) -> None:
    """URLs carrying credentials are refused so they never travel through the queue."""
    with pytest.raises(InvalidURL, match="credentials"):
        canonicalize(url)


def test_rejection_message_does_not_repeat_the_password() -> None:
    """The error for a URL with credentials masks them."""
    with pytest.raises(InvalidURL) as caught:
        canonicalize("https://alice:hunter2@example.com/")
    assert "hunter2" not in str(caught.value)
    assert "alice" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "mailto:a@example.com",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "//example.com/a",
        "/relative/path",
        "example.com",
        "",
    ],
)
def test_non_http_urls_are_rejected(url: str) -> None:
    """Only absolute http and https URLs are accepted."""
    with pytest.raises(InvalidURL, match="not an http"):
        canonicalize(url)


@pytest.mark.parametrize("url", ["http:///path", "http://:80/", "http:example.com"])
def test_url_without_host_is_rejected(url: str) -> None:
    """An http URL must name a host."""
    with pytest.raises(InvalidURL, match="no host"):
        canonicalize(url)


@pytest.mark.parametrize(
    "url", ["http://example.com:abc/", "http://example.com:99999/", "http://example.com:0/"]
)
def test_unparsable_port_is_rejected(url: str) -> None:
    """A port must be a number from 1 to 65535."""
    with pytest.raises(InvalidURL, match=r"(?i)port"):
        canonicalize(url)


@pytest.mark.parametrize(
    "url",
    ["http://exa mple.com/", "http://a..b/", "http://" + "a" * 64 + ".com/", "http://[::zz]/"],
)
def test_invalid_host_is_rejected(url: str) -> None:
    """Hosts with spaces, empty labels, labels over 63 characters or bad IPs are refused."""
    with pytest.raises(InvalidURL):
        canonicalize(url)


def test_error_message_names_the_rule_and_the_url() -> None:
    """The message says which rule was broken and quotes the URL."""
    with pytest.raises(InvalidURL) as caught:
        canonicalize("ftp://x/")
    assert str(caught.value) == "not an http(s) URL: 'ftp://x/'"


def test_error_message_truncates_long_urls() -> None:
    """A very long URL is cut short in the message, which stays one line."""
    with pytest.raises(InvalidURL) as caught:
        canonicalize("ftp://x/" + "a" * 5000)
    message = str(caught.value)
    assert len(message) < 300
    assert "..." in message
    assert "\n" not in message


@given(any_urls)
def test_canonicalize_is_idempotent(url: str) -> None:
    """Canonicalizing a canonical URL changes nothing."""
    try:
        canonical = canonicalize(url)
    except InvalidURL:
        assume(False)
    assert canonicalize(canonical) == canonical


@given(http_urls)
def test_canonical_urls_have_no_fragment_and_a_path(url: str) -> None:
    """A canonical URL has no "#" and its path starts with "/"."""
    try:
        canonical = canonicalize(url)
    except InvalidURL:
        assume(False)
    assert "#" not in canonical
    assert canonical.split("://", 1)[1].find("/") > 0


# host_key


def test_default_port_is_dropped_from_host_key() -> None:
    """The scheme's default port is not part of the host key."""
    assert host_key("http://example.com:80/a") == "example.com"
    assert host_key("https://example.com:443/a") == "example.com"


def test_http_and_https_on_default_ports_share_a_host_key() -> None:
    """One host served on both default ports is one routing key."""
    assert host_key("http://example.com/") == host_key("https://example.com/") == "example.com"


def test_non_default_port_is_part_of_host_key() -> None:
    """A non-default port makes a distinct host key."""
    assert host_key("http://example.com:8080/") == "example.com:8080"
    assert host_key("https://example.com:80/") == "example.com:80"


def test_host_key_is_a_plain_str() -> None:
    """The key is exactly str, since the hash ring hashes str(key)."""
    assert type(host_key("http://example.com/")) is str


def test_host_key_of_ipv6_keeps_brackets() -> None:
    """IPv6 keys keep their brackets so the port stays unambiguous."""
    assert host_key("http://[::1]:8080/") == "[::1]:8080"


@pytest.mark.parametrize("url", ["ftp://example.com/", "http:///x", "/path"])
def test_host_key_rejects_urls_without_an_http_host(url: str) -> None:
    """Only http(s) URLs with a host have a host key."""
    with pytest.raises(InvalidURL):
        host_key(url)


@given(any_urls)
def test_host_key_is_stable_under_canonicalization(url: str) -> None:
    """The host key of a canonical URL survives canonicalizing again."""
    try:
        canonical = canonicalize(url)
    except InvalidURL:
        assume(False)
    assert host_key(canonical) == host_key(canonicalize(canonical))


@given(st.one_of(any_urls, http_urls))
def test_the_host_made_with_the_canonical_form_is_its_host_key(url: str) -> None:
    """``canonical_parts`` gives what ``canonicalize`` and ``host_key`` give one by one,
    and refuses what they refuse (an entry's ``host`` comes from it)."""
    try:
        canonical = canonicalize(url)
    except InvalidURL:
        with pytest.raises(InvalidURL):
            canonical_parts(url)
        return
    assert canonical_parts(url) == (canonical, host_key(canonical))
    entry = Entry(url=url)
    assert (entry.host, entry.canonical) == (host_key(canonical), canonical)


@given(st.sampled_from(["http", "https"]), ascii_hosts, ports, paths)
def test_host_key_is_lowercase_host_and_non_default_port(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    """The host key is the lowercased host, plus ":port" only when not the default."""
    authority = host if port is None else f"{host}:{port}"
    expected = host.lower().removesuffix(".")
    assume(not re.fullmatch(r"[0-9a-fx.]+", expected))  # maybe an IPv4 literal: see below
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        expected += f":{port}"
    assert host_key(canonicalize(f"{scheme}://{authority}{path}")) == expected


# fingerprint


def test_fingerprint_comes_from_the_first_eight_bytes_of_blake2b() -> None:
    """The two hashes are the big-endian first and second 4 bytes of a 128-bit blake2b."""
    url = "http://example.com/"
    digest = hashlib.blake2b(url.encode(), digest_size=16).digest()
    first = int.from_bytes(digest[:4], "big")
    second = int.from_bytes(digest[4:8], "big") | 1
    assert fingerprint(url) == (first, second)


def test_fingerprint_differs_between_urls() -> None:
    """Different URLs get different fingerprints."""
    assert fingerprint("http://example.com/a") != fingerprint("http://example.com/b")


@given(st.text())
def test_fingerprint_is_two_unsigned_32_bit_ints_the_second_nonzero(url: str) -> None:
    """Both hashes fit in 32 bits and the second is odd, hence never zero."""
    first, second = fingerprint(url)
    assert 0 <= first < 2**32
    assert 0 < second < 2**32
    assert second % 2 == 1


# domain_allowed


def test_empty_allowed_list_allows_every_host() -> None:
    """No allowed domains means no restriction."""
    assert domain_allowed("anything.example", ())


@pytest.mark.parametrize("host", ["example.com", "a.example.com", "b.a.example.com"])
def test_domain_and_its_subdomains_are_allowed(host: str) -> None:
    """An allowed domain admits itself and every host under it."""
    assert domain_allowed(host, ("example.com",))


@pytest.mark.parametrize("host", ["badexample.com", "example.com.evil.net", "com", "example.org"])
def test_lookalike_hosts_are_not_allowed(host: str) -> None:
    """Matching is by whole labels, not by string suffix."""
    assert not domain_allowed(host, ("example.com",))


def test_port_is_ignored_when_scoping() -> None:
    """The port of a host key plays no part in domain scoping."""
    assert domain_allowed("a.example.com:8080", ("example.com",))


def test_allowed_domains_are_normalized() -> None:
    """Allowed domains match regardless of case, dots at the ends or Unicode spelling."""
    assert domain_allowed("www.example.com", (".Example.COM.",))
    assert domain_allowed("xn--bcher-kva.de", ("bücher.de",))


def test_ipv6_host_key_matches_its_bracketed_literal() -> None:
    """An IPv6 host key is compared without its port, brackets kept."""
    assert domain_allowed("[::1]:8080", ("[::1]",))


def test_any_of_several_allowed_domains_suffices() -> None:
    """A host under any one allowed domain is allowed."""
    assert domain_allowed("docs.example.org", ("example.com", "example.org"))


# join_url


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("other.html", "http://example.com/dir/other.html"),
        ("../up", "http://example.com/up"),
        ("/abs?b=2&a=1", "http://example.com/abs?a=1&b=2"),
        ("?q=2", "http://example.com/dir/page.html?q=2"),
        ("//cdn.example.com/x.js", "http://cdn.example.com/x.js"),
        ("HTTPS://Other.Example:443/", "https://other.example/"),
    ],
)
def test_href_is_resolved_and_canonicalized(href: str, expected: str) -> None:
    """Relative and absolute hrefs become canonical absolute URLs."""
    assert join_url("http://example.com/dir/page.html?x=1", href) == expected


@pytest.mark.parametrize(
    "href",
    [
        "",
        "   ",
        "#top",
        "#",
        "mailto:a@example.com",
        "javascript:void(0)",
        "JavaScript:x",
        "java\nscript:x",
        "tel:+123",
        "data:text/html,hi",
        "ftp://example.com/",
        "http://[::1",
        "http://user:pw@example.com/",
    ],
)
def test_hrefs_that_lead_nowhere_crawlable_give_none(href: str) -> None:
    """Empty, fragment-only, non-http(s) and invalid hrefs are not links to crawl."""
    assert join_url("http://example.com/", href) is None


def test_href_whitespace_is_stripped() -> None:
    """Whitespace around an href is ignored, as browsers do."""
    assert join_url("http://example.com/", "\n  /a  \t") == "http://example.com/a"


def test_fragment_is_dropped_from_a_link_to_another_page() -> None:
    """A link with a path and a fragment keeps the path only."""
    assert join_url("http://example.com/", "/b#part") == "http://example.com/b"


def test_relative_href_against_a_non_http_base_gives_none() -> None:
    """Without an http(s) base, a relative href cannot be resolved to a crawlable URL."""
    assert join_url("about:blank", "/a") is None


@given(http_urls, hrefs)
def test_join_url_never_returns_a_fragment(base: str, href: str) -> None:
    """Whatever the href, a joined URL is canonical and carries no fragment."""
    joined = join_url(base, href)
    if joined is not None:
        assert "#" not in joined
        assert canonicalize(joined) == joined


def test_an_ip_address_allows_only_itself() -> None:
    """An address has no subdomains: --allow-domain 0.0.2 must not admit 127.0.0.2."""
    assert domain_allowed("127.0.0.2:8080", ("127.0.0.2",))
    assert not domain_allowed("127.0.0.2:8080", ("0.0.2",))


# IPv4 spellings and length


@pytest.mark.parametrize(
    "spelling",
    ["127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7F.0.0.1", "127.0.0.1."],
)
def test_every_spelling_of_an_ipv4_address_is_one_host(spelling: str) -> None:
    """Decimal, hex, octal and short forms the C resolver accepts name the same host."""
    url = canonicalize(f"http://{spelling}:8080/a")
    assert url == "http://127.0.0.1:8080/a"
    assert host_key(url) == "127.0.0.1:8080"


@pytest.mark.parametrize("name", ["1.2.3.4.5", "08.0.0.1", "example.123", "0xdead.com"])
def test_a_numeric_looking_name_that_is_no_address_stays_a_name(name: str) -> None:
    """Only what inet_aton reads as an address is rewritten; the rest is looked up."""
    assert host_key(canonicalize(f"http://{name}/")) == name


def test_a_url_longer_than_the_cap_is_refused_with_its_length() -> None:
    """A URL over MAX_URL_LENGTH characters is an InvalidURL naming the limit."""
    from hashcrawl._core._urls import MAX_URL_LENGTH

    assert canonicalize("http://a.test/" + "x" * (MAX_URL_LENGTH - 14))
    with pytest.raises(InvalidURL, match=f"longer than {MAX_URL_LENGTH} characters"):
        canonicalize("http://a.test/" + "x" * MAX_URL_LENGTH)


def test_a_url_that_escapes_past_the_cap_is_refused() -> None:
    """Percent-escaping can grow a URL past the cap; the canonical length counts too."""
    with pytest.raises(InvalidURL, match="longer than"):
        canonicalize("http://a.test/" + "é" * 3000)


def test_a_link_longer_than_the_cap_is_not_followed() -> None:
    """join_url drops a link whose URL is too long, as it drops any invalid one."""
    assert join_url("http://a.test/", "/" + "x" * 9000) is None


_PLAINISH = st.builds(
    "{}://{}{}{}".format,
    st.sampled_from(["http", "https", "HTTP", "ftp"]),
    st.one_of(
        st.from_regex(r"[a-zA-Z0-9_.-]{1,20}", fullmatch=True),
        st.from_regex(r"(0x)?[0-9]{1,4}(\.[0-9]{1,4}){0,3}", fullmatch=True),
    ),
    st.one_of(st.just(""), st.from_regex(r":[0-9]{1,6}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"/[A-Za-z0-9._~/%;?#-]{0,30}", fullmatch=True)),
)


@given(st.one_of(_PLAINISH, any_urls))
def test_the_plain_urls_fast_path_gives_what_the_full_pass_gives(url: str) -> None:
    """Where the fast path takes a URL (lower-case, unreserved path, no query), w3lib's
    pass and the rules on top of it give the same canonical form and host; it leaves every
    URL it is unsure of (dots, numeric hosts not in four decimals, ports out of range,
    upper case, escapes) to that pass."""
    from hashcrawl._core._urls import _full_parts, _plain_parts

    fast = _plain_parts(url)
    if fast is not None:
        assert fast == _full_parts(url)


def test_the_fast_path_takes_the_plain_urls_it_is_for() -> None:
    """As most links are written: it must take them, or it saves nothing."""
    from hashcrawl._core._urls import _plain_parts

    assert _plain_parts("http://127.0.0.21:51439/p/330.html") == (
        "http://127.0.0.21:51439/p/330.html",
        "127.0.0.21:51439",
    )
    assert _plain_parts("https://docs.example.org:443") == (
        "https://docs.example.org/",
        "docs.example.org",
    )
    for unsure in ("http://127.1/", "http://a/./b", "http://A/", "http://a:65536/", "http://a/?q"):
        assert _plain_parts(unsure) is None
