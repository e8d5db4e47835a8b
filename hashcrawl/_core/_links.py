"""The links a response writes, as URLs to request: what a page links, frames and refreshes to.

A link is sent as the page wrote it (:func:`request_url`), not in its canonical form:
the canonical form (``_urls.canonicalize``) sorts the query and rewrites escapes, which
makes it good for telling two URLs apart and wrong for asking a server for a page. The
sources followed are wget's: ``<a href>``, ``<area href>``, ``<frame src>``,
``<iframe src>``, ``<meta http-equiv="refresh">``, and ``<link>`` elements and ``Link:``
headers whose rel is next, prev (previous) or alternate. Every function is pure.

Most links take a fast path. The plainest, a path of unreserved characters (no segment
starting with a dot, none empty) and maybe a query of them and "=&", are sent as
written, after the base's directory or origin when relative: that is what ``urljoin``
and escaping make of them, found with one regular expression and no cache, so their
cost does not grow with the crawl. Other relative references of plain ASCII against a
plain base are joined by ada-url (the WHATWG URL parser in C++, which Node.js uses),
where WHATWG and ``urllib.parse.urljoin`` give the same URL; other absolute links are
resolved once however many pages write them. Everything else goes the way all links
went before, through ``urljoin`` and w3lib, so odd links are sent exactly as they were.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit, urlunsplit

import ada_url
from w3lib.url import safe_url_string

from hashcrawl._core._urls import canonical_parts, canonicalize

if TYPE_CHECKING:
    # Only the elements' type: the caller (``_web._html``) parses, so the core loads no lxml.
    from lxml import html as lxml_html

_DEFAULT_PORTS = {"http": 80, "https": 443}
_FOLLOWED_RELS = frozenset({"next", "prev", "previous", "alternate"})
# content="5; url=/next.html", with the url= part optional and the URL maybe quoted.
_REFRESH = re.compile(
    r"""^\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?(?P<q>['"]?)(?P<url>.*?)(?P=q)\s*$""",
    re.IGNORECASE | re.DOTALL,
)
# Only characters RFC 3986 lets stand in a URL (safe_url_string would change none of them).
_NOTHING_TO_ESCAPE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*", re.ASCII)
# One link-value of a Link header: <uri-reference>; params (RFC 8288).
# The fast path's domain, where ada-url's join and urljoin agree (a differential test
# holds them to it): a relative reference without scheme or authority, no "//" (urljoin
# merges empty segments), no ";" (urlparse's params), no "'" (WHATWG escapes it in a
# query), no "%2" (WHATWG reads "%2e" as a dot), no "[" or "]" (w3lib escapes them when
# something else in the link needs escaping), no fragment; and a base of the same
# characters whose path has no dot segment or "//".
_FAST_HREF = re.compile(r"(?![^/?]*:)[A-Za-z0-9\-._~/?=&,+!$*()@%:]+", re.ASCII)
_PLAIN_BASE = re.compile(
    r"(?P<origin>https?://[a-z0-9.-]+(?::[1-9][0-9]{0,4})?)"
    r"/[A-Za-z0-9\-._~/=&,+!$*()@:%]*(?:\?[A-Za-z0-9\-._~/?=&,+!$*()@:%]*)?",
    re.ASCII,
)
_UNPLAIN_PATH = re.compile(r"/\.\.?(?:/|$)|//|%2", re.IGNORECASE)
# Links that urljoin and sendable leave as written (a relative one after the base's
# directory or origin, an absolute one with "/" for an empty path): segments of unreserved
# characters, none empty or starting with a dot (so no dot segment), then maybe a query
# of them and "=&". An absolute one's scheme and host are in lower case; its port, if
# the scheme's default, is sendable's to drop.
_PLAIN_SEGMENTS = r"[A-Za-z0-9\-_~][A-Za-z0-9\-._~]*(?:/[A-Za-z0-9\-_~][A-Za-z0-9\-._~]*)*/?"
_PLAIN_QUERY = r"(?:\?[A-Za-z0-9\-._~=&]+)?"
_PLAIN_RELATIVE = re.compile(rf"(?:/|/?{_PLAIN_SEGMENTS}){_PLAIN_QUERY}", re.ASCII)
_PLAIN_ABSOLUTE = re.compile(
    rf"(https?)://[a-z0-9._-]+(?::([0-9]{{1,5}}))?(/(?:{_PLAIN_SEGMENTS})?)?{_PLAIN_QUERY}",
    re.ASCII,
)
# A scheme and a non-empty authority: urljoin ignores the base ("http:///x" it does not,
# nor "http://\t/x", since urlsplit removes tabs and newlines first).
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\t\r\n]")
# Links longer than this are resolved every time: a hostile page's long links would
# otherwise fill the cache with their megabytes.
_CACHED_HREF = 1024
_OUTSIDE = ""  # what _relative_url gives for a link its fast path does not take
_LINK_VALUE = re.compile(r"<([^>]*)>((?:\s*;\s*[^,;]*(?:\"[^\"]*\")?)*)")
_REL_PARAM = re.compile(r""";\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,]*))""", re.IGNORECASE)


def request_url(base: str, href: str) -> str | None:
    """Resolve ``href`` against ``base`` and return it as a URL fit to send.

    The fragment goes; characters that must be percent-encoded are (UTF-8, as WHATWG
    URL does for paths and queries), the scheme and host are lower-cased and a default
    port dropped. Query order, ``=`` signs and escapes already valid are kept.

    Returns None when there is nothing to crawl: an empty or fragment-only href, a
    non-http(s) scheme, or a URL that ``canonicalize`` would reject.
    """
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    plain = _plain_url(base, href.partition("#")[0])
    if plain is not None:
        return _crawlable(plain)
    if _ABSOLUTE.match(href) and len(href) <= _CACHED_HREF:  # urljoin reads only the scheme
        return _absolute_url(_scheme_of(base), href)
    written = href.partition("#")[0]
    directory = _directory_of(base)
    # A reference with a path has a URL that depends on the base's directory alone: the
    # pages of one directory share it, however many of them write the link.
    if directory is not None and written[0] != "?" and len(directory + written) <= _CACHED_HREF:
        url = _relative_url(directory, written)
        if url != _OUTSIDE:
            return url
    url = _fast_join(base, written)
    if url is None:
        return _joined_url(base, href)
    try:
        canonicalize(url)
    except ValueError:
        return None
    return url


def _plain_url(base: str, written: str) -> str | None:
    """``written`` (a link without its fragment) resolved against ``base`` if it is
    plain (``_PLAIN_RELATIVE`` or ``_PLAIN_ABSOLUTE``), else None."""
    if ":" not in written:  # no scheme: the quick test first, as most links are relative
        if _PLAIN_RELATIVE.fullmatch(written) is None:
            return None
        prefixes = _plain_prefixes(base)
        if prefixes is None:
            return None
        return (prefixes[0] if written[0] == "/" else prefixes[1]) + written
    match = _PLAIN_ABSOLUTE.fullmatch(written)
    if match is None:
        return None
    scheme, port, path = match.groups()
    if port is not None and int(port) == _DEFAULT_PORTS[scheme]:
        return None  # sendable writes it out ("http://h:080/" too)
    if path is None:  # "http://h" or "http://h?q": sendable's path is "/"
        origin, mark, query = written.partition("?")
        return f"{origin}/{mark}{query}"
    return written


@functools.lru_cache(maxsize=64)  # as _scheme_of: the few bases of the pages in hand
def _plain_prefixes(base: str) -> tuple[str, str] | None:
    """The origin and directory of a plain base, which a plain link's URL starts with;
    None for another base, or one with a default port (sendable writes it out)."""
    origin = _plain_origin(base)
    directory = _directory_of(base)
    if origin is None or directory is None:
        return None
    scheme, _, authority = origin.partition("://")
    port = authority.partition(":")[2]
    if port and int(port) == _DEFAULT_PORTS[scheme]:
        return None
    return origin, directory


def _crawlable(url: str) -> str | None:
    """``url``, or None if ``canonicalize`` refuses it."""
    try:
        canonical_parts(url)
    except ValueError:
        return None
    return url


@functools.lru_cache(maxsize=16384)
def _absolute_url(base_scheme: str, href: str) -> str | None:
    return _joined_url(f"{base_scheme}://h/", href)


@functools.lru_cache(maxsize=64)  # a page's links share its base: the last few suffice
def _scheme_of(base: str) -> str:
    try:
        return urlsplit(base).scheme
    except ValueError:
        return ""


@functools.lru_cache(maxsize=64)  # as _scheme_of: the few bases of the pages in hand
def _directory_of(base: str) -> str | None:
    """A plain base (the fast path's domain) up to the last "/" of its path, else None."""
    origin = _plain_origin(base)
    if origin is None:
        return None
    path = base[len(origin) :].partition("?")[0]
    return origin + path[: path.rindex("/") + 1]


@functools.lru_cache(maxsize=16384)
def _relative_url(directory: str, written: str) -> str | None:
    """``request_url`` of a reference that is not a query alone, against any base of
    ``directory``: ``_OUTSIDE`` when it is outside the fast path's domain."""
    url = _fast_join(directory, written)
    if url is None:
        return _OUTSIDE
    try:
        canonicalize(url)
    except ValueError:
        return None
    return url


def _joined_url(base: str, href: str) -> str | None:
    try:
        url = sendable(urljoin(base, href))
        canonicalize(url)  # what cannot be deduplicated or routed is not followed
    except ValueError:  # InvalidURL is a ValueError; urljoin raises one on bad IPv6
        return None
    return url


def _fast_join(base: str, href: str) -> str | None:
    """``href`` joined to ``base`` by ada-url, or None outside the fast path's domain."""
    if href == "?" or "//" in href or "%2" in href or not _FAST_HREF.fullmatch(href):
        return None
    origin = _plain_origin(base)
    if origin is None:
        return None
    try:
        joined: str = ada_url.join_url(base, href)
    except ValueError:
        return None
    # WHATWG rewrites some hosts and ports (0x7f.1, :80) that a plain base may hold.
    if not joined.startswith(origin) or joined[len(origin)] != "/":
        return None
    if joined[-1] == "?" and joined.index("?") == len(joined) - 1:
        return joined[:-1]  # urlunsplit drops an empty query
    return joined


@functools.lru_cache(maxsize=64)
def _plain_origin(base: str) -> str | None:
    """The scheme and authority of a base in the fast path's domain, else None."""
    match = _PLAIN_BASE.fullmatch(base)
    if match is None or _UNPLAIN_PATH.search(base[match.end("origin") :].partition("?")[0]):
        return None
    return match.group("origin")


def sendable(url: str) -> str:
    """``url`` without its fragment, escaped where it must be, scheme and host in lower case.

    Raises:
        ValueError: the URL cannot be parsed (a bad port or IPv6 address, say).
    """
    url = url.strip()
    # Most links need no escaping: w3lib's full pass is for those that do.
    parts = urlsplit(url if _NOTHING_TO_ESCAPE.fullmatch(url) else safe_url_string(url))
    scheme = parts.scheme.lower()
    netloc = parts.netloc.rpartition("@")
    host_port = netloc[2].lower()
    port = parts.port  # raises ValueError on a bad port
    if port is not None and port == _DEFAULT_PORTS.get(scheme):
        host_port = host_port.rpartition(":")[0]
    authority = netloc[0] + netloc[1] + host_port
    return urlunsplit((scheme, authority, _resolved_path(parts.path), parts.query, ""))


def _resolved_path(path: str) -> str:
    """``path`` with its "." and ".." segments resolved (RFC 3986 5.2.4), "/" if empty."""
    if "/." not in path:  # a dot segment starts after a slash
        return path or "/"
    # urljoin resolves dot segments of a relative reference, not of an absolute URL.
    return urlsplit(urljoin("http://h/", path)).path or "/"


def link_targets(root: lxml_html.HtmlElement) -> Iterator[str]:
    """What each link, frame or refresh of an HTML document points to, as written:
    cheap to count, since nothing is resolved."""
    for element in root.iter("a", "area", "frame", "iframe", "link", "meta"):
        target = _target(element)
        if target is not None:
            yield target


def canonical_link(root: lxml_html.HtmlElement, base: str) -> str | None:
    """The URL of the page's first ``<link rel="canonical">``, as written, if any."""
    for element in root.iter("link"):
        if "canonical" in _rels(element.get("rel")) and element.get("href") is not None:
            return request_url(base, element.get("href"))
    return None


def header_links(value: str | None, base: str) -> list[str]:
    """The URLs of a ``Link:`` header's values whose rel is next, prev or alternate."""
    urls = []
    for target, params in _LINK_VALUE.findall(value or ""):
        rel = _REL_PARAM.search(params)
        rels = _rels((rel.group(1) or rel.group(2)) if rel else None)
        if rels & _FOLLOWED_RELS and (url := request_url(base, target)) is not None:
            urls.append(url)
    return urls


def _target(element: lxml_html.HtmlElement) -> str | None:
    tag = element.tag
    href: str | None = element.get("href")
    if tag in ("a", "area"):
        return href
    if tag in ("frame", "iframe"):
        src: str | None = element.get("src")
        return src
    if tag == "link":
        return href if _rels(element.get("rel")) & _FOLLOWED_RELS else None
    if (element.get("http-equiv") or "").strip().lower() == "refresh":
        return _refresh_target(element.get("content") or "")
    return None


def _refresh_target(content: str) -> str | None:
    """The URL of a refresh's content ("5; url=next.html"); None for a plain reload."""
    match = _REFRESH.match(content)
    url = match.group("url").strip() if match else ""
    return url or None


def _rels(value: str | None) -> frozenset[str]:
    return frozenset((value or "").lower().split())
