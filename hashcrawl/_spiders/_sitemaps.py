"""Sitemaps (sitemaps.org): where a host lists its pages, read with fixed bounds.

With ``--sitemaps``, the owner of a host queues ``/sitemap.xml`` and the ``Sitemap:``
lines of its robots.txt when it first fetches a page of the host; a sitemap is then an
entry like any page (paced, robots-checked, deduplicated) that :func:`read_sitemap`
turns into pages and nested sitemaps. Every cost has a fixed bound, the limits of the
sitemaps protocol itself: see the constants below. Pure, apart from decompression.

XML is parsed by lxml's ``iterparse`` with entities left unresolved, no network access
and ``huge_tree`` off, clearing each element once read, so memory stays small whatever
the document; an XML bomb or an external entity yields nothing rather than expanding.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator

import attrs
from lxml import etree

from hashcrawl._core._entry import Entry
from hashcrawl._core._links import request_url
from hashcrawl._core._robotsrules import MAX_ROBOTS_SITEMAPS as MAX_ROBOTS_SITEMAPS
from hashcrawl._core._robotsrules import first_sitemaps as first_sitemaps
from hashcrawl._core._robotsrules import sitemap_urls as sitemap_urls

MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # the protocol's limit, uncompressed
MAX_SITEMAP_URLS = 50_000  # the protocol's limit of <loc>s in one sitemap
MAX_SITEMAP_DEPTH = 3  # robots.txt -> index -> index -> sitemap; deeper ones are dropped
_GZIP_MAGIC = b"\x1f\x8b"


@attrs.frozen
class Sitemap:
    """What one sitemap lists: page URLs (a urlset) or sitemap URLs (an index)."""

    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()


def read_sitemap(body: bytes, url: str) -> Sitemap:
    """The URLs a sitemap lists, resolved against ``url`` and made fit to send.

    ``body`` may be gzipped (by its magic bytes, whatever the headers said). Never
    raises: what cannot be read gives an empty ``Sitemap``; a sitemap past the bounds
    gives what was read before them.
    """
    text = _gunzipped(body) if body.startswith(_GZIP_MAGIC) else body[:MAX_SITEMAP_BYTES]
    pages: list[str] = []
    sitemaps: list[str] = []
    for parent, loc in _locs(text):
        target = sitemaps if parent == "sitemap" else pages
        if (link := request_url(url, loc)) is not None:
            target.append(link)
    return Sitemap(tuple(dict.fromkeys(pages)), tuple(dict.fromkeys(sitemaps)))


def _gunzipped(body: bytes) -> bytes:
    """Decompress at most ``MAX_SITEMAP_BYTES``; a broken stream gives what came out."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        return inflater.decompress(body, MAX_SITEMAP_BYTES)
    except zlib.error:
        return b""


def _locs(text: bytes) -> Iterator[tuple[str, str]]:
    """(parent tag, text) of each <loc>, at most ``MAX_SITEMAP_URLS``, namespaces ignored."""
    events = etree.iterparse(
        io.BytesIO(text),
        events=("end",),
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        load_dtd=False,
        recover=True,
    )
    count = 0
    try:
        for _, element in events:
            tag = _local(element.tag)
            if tag == "loc" and element.text:
                parent = element.getparent()
                yield (_local(parent.tag) if parent is not None else ""), element.text.strip()
                count += 1
                if count >= MAX_SITEMAP_URLS:
                    return
            elif tag in ("url", "sitemap"):
                _forget(element)
    except etree.LxmlError:
        return  # what was read before the error stands


def _forget(element: etree._Element) -> None:
    """Free an element read in full, and the siblings before it (lxml keeps them)."""
    element.clear()
    parent = element.getparent()
    while parent is not None and element.getprevious() is not None:
        del parent[0]


def _local(tag: object) -> str:
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def sitemap_entries(entry: Entry, body: bytes, url: str) -> list[Entry]:
    """The entries a fetched sitemap leads to: its pages, one hop deeper than it, and its
    nested sitemaps, one level deeper (none past ``MAX_SITEMAP_DEPTH``)."""
    listed = read_sitemap(body, url)
    pages = [Entry(url=u, depth=entry.depth + 1) for u in listed.pages]
    if entry.sitemap >= MAX_SITEMAP_DEPTH:
        return pages
    nested = [Entry(url=u, depth=entry.depth, sitemap=entry.sitemap + 1) for u in listed.sitemaps]
    return nested + pages
