"""What a crawler needs from an HTML page: its title, the links to follow, its canonical URL.

Parsing is lxml's HTML parser, which repairs broken markup the way libxml2 does rather
than refusing it; decoding follows the browsers' order (byte-order mark, then the
Content-Type charset, then ``<meta charset>``, then UTF-8) with w3lib's pieces, and
never raises: a charset that is unknown, or names no text encoding ("zlib", "idna"),
is passed over for the next.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

import attrs
import lxml.html
from lxml import etree
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    to_unicode,
)

from hashcrawl._core._links import canonical_link, link_targets, request_url

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Text is re-encoded to UTF-8 before lxml sees it: lxml refuses str input that carries
# an XML declaration, and this parser's declared encoding then overrides any in the page.
_PARSER = lxml.html.HTMLParser(encoding="utf-8")
# Text codecs that raise whatever the error handler, or can take quadratic time.
# Python codecs that are no web encoding and misbehave on arbitrary bytes: the escape
# codecs read backslashes as escapes (and warn or fail on a stray one).
_UNSAFE_CODECS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"}
)


@attrs.frozen
class Page:
    """The title (None if absent or blank), the unique links as URLs to request, and the
    page's ``<link rel="canonical">`` (None if absent).

    ``dropped`` counts the link elements left unread once ``max_links`` were kept.
    ``root`` is the parsed document (None if the body did not parse) and ``base`` the
    URL its links resolve against, so that selectors and ``follow`` reuse this parse.
    """

    title: str | None
    links: tuple[str, ...]
    canonical: str | None = None
    dropped: int = 0
    root: lxml.html.HtmlElement | None = attrs.field(default=None, eq=False, repr=False)
    base: str | None = attrs.field(default=None, eq=False, repr=False)


def parse_html(
    body: bytes,
    url: str,
    *,
    encoding: str | None = None,
    content_type: str | None = None,
    max_links: int | None = None,
) -> Page:
    """Extract the title, the links (see ``_links``) and the canonical link of a page.

    Links are resolved against the first ``<base href>`` (itself resolved against
    ``url``) or else ``url``, made fit to send (``_links.request_url``), and kept in
    first-seen order without duplicates; fragment-only, non-http(s) and invalid links
    are dropped. Never raises: an empty or unparsable body gives ``Page(None, ())``.

    Args:
        body: the response body, undecoded.
        url: the URL the page was fetched from (after redirects).
        encoding: the charset from the Content-Type header, if any; it wins over a
            ``<meta charset>`` in the page, as in browsers.
        content_type: the whole Content-Type header, instead of ``encoding``.
        max_links: keep at most this many links; the elements after them are only
            counted, not resolved, so a page of 100,000 links costs little more than
            its parse.
    """
    if encoding:
        content_type = f"text/html; charset={encoding}"
    root = _parse(body, content_type)
    if root is None:
        return Page(None, ())
    base = _base_url(root, url)
    targets = link_targets(root)
    links = _resolved(targets, base, max_links)
    dropped = sum(1 for _ in targets)  # counted as written, not resolved: cheap
    return Page(_title(root), links, canonical_link(root, base), dropped, root, base)


def is_html(content_type: str | None) -> bool:
    """Return True for a text/html or application/xhtml+xml Content-Type header."""
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type in _HTML_TYPES


def decode_body(body: bytes, content_type: str | None) -> str:
    """Decode a body as browsers do; never raises (see the module's docstring)."""
    bom_encoding, bom = read_bom(body)
    if bom_encoding is not None and bom is not None:
        return body[len(bom) :].decode(bom_encoding, errors="replace")
    for encoding in (
        http_content_type_encoding(content_type),
        html_body_declared_encoding(body),  # looks at the first 4 KiB only
    ):
        text = _decoded(body, encoding)
        if text is not None:
            return text
    return body.decode("utf-8", errors="replace")


def _decoded(body: bytes, encoding: str | None) -> str | None:
    if encoding is None:
        return None
    try:
        if codecs.lookup(encoding).name in _UNSAFE_CODECS:
            return None
        return to_unicode(body, encoding)
    except (LookupError, ValueError, TypeError):  # UnicodeError is a ValueError
        return None


def _parse(body: bytes, content_type: str | None) -> lxml.html.HtmlElement | None:
    text = decode_body(body, content_type)
    try:
        return lxml.html.document_fromstring(text.encode("utf-8", "replace"), parser=_PARSER)
    except (etree.LxmlError, ValueError):  # "Document is empty" is an LxmlError
        return None


def _title(root: lxml.html.HtmlElement) -> str | None:
    element = next(root.iter("title"), None)
    if element is None:
        return None
    # Titles often wrap across lines in the source; one line is what a reader sees.
    text = " ".join(element.text_content().split())
    return text or None


def _base_url(root: lxml.html.HtmlElement, url: str) -> str:
    """Return the page's base URL: the first ``<base href>`` if it resolves, else ``url``."""
    for element in root.iter("base"):
        href = element.get("href")
        if href is not None:
            return request_url(url, href) or url
    return url


def _resolved(targets: Iterator[str], base: str, most: int | None) -> tuple[str, ...]:
    """The unique URLs of ``targets``, in first-seen order, at most ``most`` (the targets
    after the last one kept are left in ``targets``). Each target is resolved once as
    first written: a page repeats its links (navigation bars, tables of contents), and
    the same href against the same base resolves the same."""
    written: set[str] = set()
    kept: dict[str, None] = {}
    for target in targets:
        if target in written:
            continue
        written.add(target)
        url = request_url(base, target)
        if url is not None:
            kept[url] = None
            if most is not None and len(kept) >= most:
                break
    return tuple(kept)
