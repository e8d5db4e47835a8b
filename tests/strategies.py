"""Hypothesis strategies shared by the test suite."""

from __future__ import annotations

import json

from hypothesis import strategies as st

_LABELS = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)

#: ASCII host names, mixed case, sometimes with the trailing root dot.
ascii_hosts = st.builds(
    lambda labels, dot: ".".join(labels) + dot,
    st.lists(_LABELS, min_size=1, max_size=4),
    st.sampled_from(["", "."]),
)

#: Hosts as they appear in URLs, including IDNs and IP literals.
hosts = st.one_of(
    ascii_hosts,
    st.sampled_from(
        ["bücher.de", "ÉXAMPLE.com", "例え.jp", "127.0.0.1", "[::1]", "[2001:DB8::0:1]"]
    ),
)

#: A port in a URL: absent, a scheme default, or any valid one.
ports = st.one_of(st.none(), st.sampled_from([80, 443, 8080]), st.integers(1, 65535))

_SEGMENTS = st.one_of(
    st.sampled_from([".", "..", "", "%2e", "%7E", "%", "%zz", "%ff", "a b", "é", ";p"]),
    st.text(max_size=6),
)

#: Absolute paths with dot segments, odd escapes and arbitrary text.
paths = st.lists(_SEGMENTS, max_size=5).map(lambda segments: "/" + "/".join(segments))

_PAIRS = st.tuples(st.text(max_size=4), st.text(max_size=4)).map("=".join)

#: A query string with its "?", or nothing.
queries = st.one_of(
    st.just(""),
    st.lists(_PAIRS, max_size=4).map(lambda pairs: "?" + "&".join(pairs)),
    st.text(max_size=10).map("?".__add__),
)

#: A fragment with its "#", or nothing.
fragments = st.one_of(st.just(""), st.text(max_size=6).map("#".__add__))


def _url(scheme: str, host: str, port: int | None, path: str, query: str, fragment: str) -> str:
    authority = host if port is None else f"{host}:{port}"
    return f"{scheme}://{authority}{path}{query}{fragment}"


#: Well-formed http(s) URLs that are far from canonical.
http_urls = st.builds(
    _url,
    st.sampled_from(["http", "https", "HTTP", "hTTps"]),
    hosts,
    ports,
    paths,
    queries,
    fragments,
)

#: Anything that might be offered as a URL, well-formed or not.
any_urls = st.one_of(http_urls, st.text(), st.text().map("http://".__add__))

#: What an <a href> may hold: relative paths, absolute URLs, other schemes, junk.
hrefs = st.one_of(
    st.text(),
    paths,
    http_urls,
    st.builds("".join, st.lists(st.one_of(paths, queries, fragments), max_size=3)),
    st.sampled_from(["#top", "", " ", "mailto:a@b.c", "javascript:void(0)", "//cdn.example/x"]),
)

# Pieces of links where joining rules differ: dot segments, escapes, "//", params,
# brackets, schemes, whitespace and non-ASCII.
_LINK_PIECES = st.sampled_from(
    [*"abH/.?#=&;:%@!$()*+,-_~[]' \t\\é", "..", "./", "../", "%2e", "%2E", "%41", "%zz",
     "x:", "http://", "https://", "HTTP://", "//", "[::1]", ":80", ":0", "user@", "0x7f.1"]
)  # fmt: skip

#: Links built of those pieces, and the bases they are resolved against.
tricky_hrefs = st.lists(_LINK_PIECES, min_size=1, max_size=10).map("".join)
# Pieces of the plainest links (unreserved characters, "?=&"), and of what lies just
# outside them: origins and ports, dot segments, "//", an empty query, a fragment.
_PLAIN_PIECES = st.sampled_from(
    [*"aZ09-._~/?=&#", "..", "./", "//", ".x", "http://h", "https://h.example", "http://H",
     "http://127.0.0.2:8123", ":80", ":443", ":080", ":0", ":99999", ":8080", "http://a..b"]
)  # fmt: skip
#: Links most of which are as plain as a crawl's pages write them.
plain_hrefs = st.lists(_PLAIN_PIECES, min_size=1, max_size=10).map("".join)
tricky_bases = st.one_of(
    http_urls,
    st.sampled_from(
        [
            "http://example.com/a/b/c.html", "https://h.example:8443/x/y?q=1", "http://h/a;p/b;q?x",
            "http://0x7f.1/a/", "http://h:80/a", "http://h/./a/../b/c", "http://h/a/b?x=1&y=/.",
            "http://h/..a/.b/c.", "http://h/a/[b]/c", "http://h/a?", "http://h/@a/b:c/",
            "http://H/A", "ftp://f/x", "mailto:a@b.c", "",
        ]
    ),
)  # fmt: skip

_TAGS = st.sampled_from(
    ["<a href='", "<area href=", "<base href=", "<title>", "</title>", "'>", "<", ">", "<!--"]
)

#: Bytes that look somewhat like HTML: tag fragments, hrefs and random bytes.
html_like_bodies = st.lists(
    st.one_of(_TAGS, hrefs).map(lambda s: s.encode("utf-8")) | st.binary(max_size=8),
    max_size=12,
).map(b"".join)

_ENTRY_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
)

#: JSON objects shaped like entries, with any value (wrong types, out of range) in any field.
entry_like_json = st.dictionaries(
    st.sampled_from(["u", "d", "p", "a", "m", "c", "f", "s", "x"]), _ENTRY_VALUES, max_size=9
).map(lambda doc: json.dumps(doc).encode())

#: What a stream entry's payload may hold when anyone can XADD: arbitrary bytes, text,
#: entry-shaped JSON, deep nesting, and invalid UTF-8 spliced into valid JSON.
stream_payloads = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=60).map(lambda text: text.encode("utf-8", "surrogatepass")),
    entry_like_json,
    st.integers(1, 6000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.builds(
        lambda doc, junk: doc[:-1] + b',"m":"' + junk + b'"}',
        entry_like_json,
        st.binary(max_size=4),
    ),
)

#: Characters that break a naive parse of a Redis URL's password, or its masking.
_PASSWORD_TRAPS = st.sampled_from([*"#/?@:%&=+;[] é€\\'\"\n\t", "%41", "%zz", "***"])

#: Passwords as users pick them, typed raw into a URL: any text, often with the
#: characters above. The "Zq" prefix keeps a short one from matching a message by chance.
passwords = st.lists(
    st.one_of(_PASSWORD_TRAPS, st.characters(exclude_categories=("Cs",))), min_size=1, max_size=16
).map(lambda parts: "Zq" + "".join(parts))

_HEADER_NAMES = st.sampled_from(
    ["content-type", "location", "retry-after", "content-encoding", "x-anything"]
)
_HEADER_VALUES = st.one_of(
    st.sampled_from(
        [
            "text/html",
            "text/html; charset=bogus",
            "text/html; charset=utf-16",
            "text/plain; charset=zlib",
            "application/xhtml+xml; charset=idna",
            "/elsewhere",
            "http://[::1/",
            "//",
            "-1",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ]
    ),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
)
_BODIES = st.one_of(
    st.binary(max_size=300),
    st.lists(
        st.sampled_from([b"<a href='", b"'>", b"<base href=", b"<title>", b"\xff\xfe", b"x"]),
        max_size=30,
    ).map(b"".join),
)

#: What a server can hand a worker: any status, a few odd headers, any body.
responses = st.tuples(
    st.one_of(st.sampled_from([200, 301, 302, 404, 429, 500, 503]), st.integers(0, 999)),
    st.dictionaries(_HEADER_NAMES, _HEADER_VALUES, max_size=4),
    _BODIES,
)

# What the network hands a worker: headers and bodies, hostile or broken.

_CHARSETS = st.one_of(
    st.sampled_from(
        [
            "utf-8",
            "bogus",
            "zlib",
            "idna",
            "utf-16",
            "punycode",
            "unicode_escape",
            "base64",
            "x-user-defined",
            "",
            '"',
            "utf-7",
            "rot13",
            "undefined",
            "latin-1",
            "cp1252",
        ]
    ),
    st.text(max_size=12),
)

#: Content-Type values: real media types with odd charsets, or any text.
content_types = st.one_of(
    st.builds(
        "{}; charset={}".format,
        st.sampled_from(["text/html", "text/plain", "application/xhtml+xml", "TEXT/HTML"]),
        _CHARSETS,
    ),
    st.text(max_size=40),
)

#: Response headers a server may send (lower-case names, as a Mapping is read).
header_maps = st.fixed_dictionaries(
    {},
    optional={
        "content-type": content_types,
        "retry-after": st.one_of(st.text(max_size=30), st.integers().map(str)),
        "location": hrefs,
        "content-encoding": st.sampled_from(["gzip", "gzip, gzip", "br", "identity", ""]),
    },
)

_ROBOTS_LINES = st.sampled_from(
    ["User-agent: *", "User-agent: hashcrawl", "Disallow: /", "Disallow:", "Allow: /a*",
     "Disallow: /*.php$", "Disallow: /*a*a*a*a*b", "Crawl-delay: 5", "Crawl-delay: -1",
     "Crawl-delay: nan", "Crawl-delay: 1e999", "Sitemap: x", "Request-rate: 1/0",
     "Visit-time: 2500-0100", "\ufeffUser-agent: *", "# comment", "Disallow: /%zz%"]
)  # fmt: skip

#: robots.txt bodies: directives, odd values and random bytes, in any order.
robots_bodies = st.lists(
    _ROBOTS_LINES.map(str.encode) | st.binary(max_size=20) | st.text(max_size=20).map(str.encode),
    max_size=15,
).map(b"\n".join)

#: Revisit records as the core writes them (ETags within the kept length).
revisit_records = st.builds(
    lambda due, quiet, digest, modified, tag: (due, quiet, digest, modified, tag),
    st.integers(0, 2**32 - 1),
    st.integers(0, 5 * 365 * 86_400),
    st.binary(min_size=8, max_size=8),
    st.integers(0, 2**32 - 1),
    st.one_of(
        st.just(""),
        st.from_regex(r'(W/)?"[A-Za-z0-9\-]{0,18}"', fullmatch=True),
    ),
)
