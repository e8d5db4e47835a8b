"""Requests and responses: the values a fetcher, a parse callback and a sink exchange."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import httpx

from ._exceptions import ConfigError

if TYPE_CHECKING:
    from ._html import Page


def _json_meta(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise ConfigError(f"Request.meta must be JSON-serialisable, got {value!r:.80}") from None


@attrs.frozen
class Request:
    """A URL to fetch, with what travels with it through Redis.

    Args:
        url: an absolute http(s) URL (or any URL a custom fetcher understands).
        priority: higher is fetched first among a host's waiting requests.
        meta: JSON-serialisable data handed to the callback with the response.
        callback: the name of the spider method that parses the response.
        dont_filter: enqueue even if the URL was seen before.
    """

    url: str
    priority: int = attrs.field(default=0, kw_only=True)
    meta: Any = attrs.field(default=None, kw_only=True, validator=_json_meta)
    callback: str | None = attrs.field(default=None, kw_only=True)
    dont_filter: bool = attrs.field(default=False, kw_only=True)
    depth: int = attrs.field(default=0, kw_only=True)


def _headers(given: Mapping[str, str]) -> httpx.Headers:
    # UTF-8, not httpx's ASCII, for str values: a user's fetcher may pass any text.
    return given if isinstance(given, httpx.Headers) else httpx.Headers(given, encoding="utf-8")


@attrs.frozen
class Response:
    """What a fetcher got for a request: status, headers and body.

    Header names are case-insensitive, as in HTTP.

    ``url`` is where the body came from (after any redirect the fetcher followed itself).
    ``max_links`` caps what :meth:`links` returns (the worker sets its ``--max-links``).
    ``truncated`` says the body is only the first part of what the server had: the
    default fetcher keeps at most ``max_body`` bytes (after decoding) and reads no more.
    """

    url: str
    status: int
    headers: Mapping[str, str] = attrs.field(converter=_headers)
    body: bytes
    request: Request
    max_links: int | None = attrs.field(default=None, kw_only=True)
    truncated: bool = attrs.field(default=False, kw_only=True)
    _parsed: list[Page | None] = attrs.field(factory=list, init=False, eq=False, repr=False)

    @property
    def text(self) -> str:
        """The body as text: by its byte-order mark, else the Content-Type charset, else
        a ``<meta charset>``, else UTF-8; undecodable bytes become U+FFFD. Never raises."""
        from ._html import decode_body

        return decode_body(self.body, self.headers.get("content-type"))

    @property
    def is_html(self) -> bool:
        from ._html import is_html

        return is_html(self.headers.get("content-type"))

    def links(self) -> list[str]:
        """The URLs to request that the page links (none unless the body is HTML).

        Those of its ``Link:`` headers (rel next, prev or alternate) come first.
        """
        from ._links import header_links

        page = self._page()
        if page is None:
            return []
        found = header_links(self.headers.get("link"), self.url)
        return list(dict.fromkeys([*found, *page.links]))

    def canonical(self) -> str | None:
        """The page's ``<link rel="canonical">`` URL (None if absent or not HTML)."""
        page = self._page()
        return page.canonical if page is not None else None

    def title(self) -> str | None:
        """The page's <title>, whitespace collapsed (None unless the body is HTML)."""
        page = self._page()
        return page.title if page is not None else None

    def _page(self) -> Page | None:
        # Parsed once however many of links() and title() are asked for.
        if not self._parsed:
            from ._html import parse_html

            content_type = self.headers.get("content-type")
            page = None
            if self.is_html:
                cap = self.max_links
                page = parse_html(self.body, self.url, content_type=content_type, max_links=cap)
            self._parsed.append(page)
        return self._parsed[0]
