"""Requests and responses: the values a fetcher, a parse callback and a sink exchange."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import httpx

from hashcrawl._core._entry import (
    GROWTH,
    MAX_ENTRY_BYTES,
    Entry,
)
from hashcrawl._core._links import request_url
from hashcrawl._core._proxies import Proxy
from hashcrawl._core._steps import Rendered, Step, steps_of
from hashcrawl._exceptions import ConfigError
from hashcrawl._web._fields import (
    Headers,
    _body,
    _callback_name,
    _cb_kwargs,
    _headers,
    _json_meta,
    _method,
    _redirects,
    _statuses,
    _timeout,
)

if TYPE_CHECKING:
    from parsel import Selector, SelectorList

    from hashcrawl._web._html import Page


class Linked(Protocol):
    """A found link: a LinkExtractor's :class:`~hashcrawl.Link` (its ``url``)."""

    @property
    def url(self) -> str: ...


@attrs.frozen
class Request:
    """A request to make, with what travels with it through Redis.

    Everything here is written to the crawl's queue in Redis, headers and body
    included, where anyone who can read that Redis can read it: give credentials with
    the ``headers`` setting (``--header``), which never leaves the worker.

    Args:
        url: an absolute http(s) URL (or any URL a custom fetcher understands).
        method: the HTTP method, upper case.
        headers: headers to send (a mapping or (name, value) pairs).
        body: the body to send (text is sent as UTF-8); a few KiB at most, since an
            entry holds at most 64 KiB.
        timeout: seconds for this request's fetch (default: the ``timeout`` setting).
        max_redirects: redirects followed from this request (default 5, at most 20).
        priority: higher is fetched first among a host's waiting requests.
        meta: JSON-serialisable data handed to the callback with the response.
        callback: the spider method that parses the response, or its name.
        dont_filter: enqueue even if the request was seen before.
        errback: the spider method (or its name) called with a :class:`Failure` when
            the fetch fails for good or the answer's status is not one the callback takes.
        cb_kwargs: keyword arguments for the callback: a dict, JSON, at most 16 KiB.
        handle_httpstatus_list: statuses besides 2xx that go to the callback (a 3xx
            listed here is not followed), as Scrapy's meta key of that name.
        rule: the index of the spider's rule that led here (set by :class:`CrawlSpider`).
        render: fetch the page in the worker's browser: the callback's response holds
            the DOM once its scripts ran and ``steps`` were done (a worker renders
            only with a browser, see ``--render``).
        steps: what to do in the page before its DOM is read, in order: step objects
            such as ``{"click": "button.more"}`` (docs/api.md lists them); they need
            ``render=True``.
        proxy: the forward proxy to send it through, ``http://host:port`` without
            credentials (``meta["proxy"]`` as Scrapy's says the same); a worker takes it
            only with ``--allow-request-proxy``, else the page is refused.
    """

    url: str
    # The one argument after the URL, as in Scrapy: Request(url, self.parse_item).
    callback: str | None = attrs.field(default=None, converter=_callback_name)
    method: str = attrs.field(default="GET", kw_only=True, validator=_method)
    headers: Headers = attrs.field(default=(), kw_only=True, converter=_headers)
    body: bytes = attrs.field(default=b"", kw_only=True, converter=_body)
    timeout: float | None = attrs.field(default=None, kw_only=True, validator=_timeout)
    max_redirects: int | None = attrs.field(default=None, kw_only=True, validator=_redirects)
    priority: int = attrs.field(default=0, kw_only=True)
    meta: Any = attrs.field(default=None, kw_only=True, validator=_json_meta)
    dont_filter: bool = attrs.field(default=False, kw_only=True)
    depth: int = attrs.field(default=0, kw_only=True)
    errback: str | None = attrs.field(default=None, kw_only=True, converter=_callback_name)
    cb_kwargs: dict[str, Any] | None = attrs.field(default=None, kw_only=True, validator=_cb_kwargs)
    handle_httpstatus_list: tuple[int, ...] = attrs.field(
        default=(), kw_only=True, converter=_statuses
    )
    rule: int | None = attrs.field(default=None, kw_only=True)
    render: bool = attrs.field(default=False, kw_only=True)
    steps: tuple[Step, ...] = attrs.field(default=(), kw_only=True, converter=steps_of)
    proxy: str | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.steps and not self.render:
            raise ConfigError(f"Request {self.url:.100}: steps need render=True")

    @property
    def asked_proxy(self) -> str | None:
        """The proxy this request names: ``proxy``, else ``meta["proxy"]`` (Scrapy's key)."""
        if self.proxy is not None:
            return self.proxy
        asked = self.meta.get("proxy") if isinstance(self.meta, dict) else None
        return asked if asked is None or isinstance(asked, str) else repr(asked)[:100]

    def replace(self, **changes: Any) -> Request:
        """This request with ``changes`` (any of its arguments), as Scrapy's ``replace``."""
        return attrs.evolve(self, **changes)

    def to_entry(self, base_url: str, depth: int) -> Entry | None:
        """The queue entry of this request, its URL resolved against ``base_url``; None
        for a URL that cannot be fetched.

        Raises:
            ConfigError: the entry would be too big for the queue, or its proxy is
                malformed or carries credentials.
        """
        url = request_url(base_url, self.url)
        if url is None:
            return None
        if self.asked_proxy is not None:  # here, not at init: a queue's entry is the fetcher's
            _check_proxy(url, self.asked_proxy)
        entry = Entry(url=url, depth=depth, **{name: getattr(self, name) for name in CARRIED})
        if (
            self.body or self.headers or self.cb_kwargs or self.steps
        ):  # a plain GET's entry is its URL
            size = len(entry.encode().encode("utf-8"))
            if size > MAX_ENTRY_BYTES - GROWTH:  # room to be retried, or marked a suspect
                raise ConfigError(
                    f"Request {self.method} {url:.100} would be a {size}-byte queue entry, "
                    f"over the {MAX_ENTRY_BYTES - GROWTH} an entry holds: send a smaller body"
                )
        return entry

    @classmethod
    def from_entry(cls, entry: Entry, extra_headers: Headers = ()) -> Request:
        """The request to send for ``entry``, with ``extra_headers`` (a cookie) added."""
        carried = {name: getattr(entry, name) for name in CARRIED}
        carried["headers"] = (*entry.headers, *extra_headers)
        return cls(entry.url, depth=entry.depth, **carried)


def _check_proxy(url: str, asked: str) -> None:
    """Refuse a request's proxy that is malformed or carries credentials."""
    try:
        Proxy.of_request(asked)
    except ConfigError as exc:
        raise ConfigError(f"Request {url:.100}: {exc}") from None


#: The fields a Request and an Entry both declare, copied as they are either way (the
#: URL is resolved, and the depth is the page's, so those two are set by hand).
CARRIED = tuple(
    name for name in attrs.fields_dict(Request) if name in attrs.fields_dict(Entry)
    and name not in ("url", "depth")
)  # fmt: skip


def _response_headers(given: Mapping[str, str]) -> httpx.Headers:
    # UTF-8, not httpx's ASCII, for str values: a user's fetcher may pass any text.
    return given if isinstance(given, httpx.Headers) else httpx.Headers(given, encoding="utf-8")


@attrs.frozen(kw_only=True)
class Exchange:
    """One HTTP exchange as it went over the wire, kept for an archive (see ``WarcSink``).

    Args:
        request_head: the request line and header lines as sent, ending in a blank line.
        request_body: the request's body as sent.
        response_head: the status line and header lines as received (a
            ``Transfer-Encoding`` line renamed, since ``body`` is no longer chunked),
            ending in a blank line.
        body: the body as received, content coding kept and chunking removed; cut where
            the response says ``truncated``.
        started: when the request was sent (UTC).
        address: the IP address the response came from, if known.
    """

    request_head: bytes
    request_body: bytes
    response_head: bytes
    body: bytes
    started: datetime.datetime
    address: str | None = None


@attrs.frozen
class Response:
    """What a fetcher got for a request: status, headers and body.

    Header names are case-insensitive, as in HTTP.

    ``url`` is where the body came from (after any redirect the fetcher followed itself).
    ``max_links`` caps what :meth:`links` returns (the worker sets its ``--max-links``).
    ``truncated`` says the body is only the first part of what the server had: the
    default fetcher keeps at most ``max_body`` bytes (after decoding) and reads no more.
    ``exchange`` is the exchange as it went over the wire, when the fetcher kept it (the
    default one does when the worker writes an archive). ``latency`` is how many seconds
    the fetch took, as the worker timed it (Scrapy's ``download_latency``).
    """

    url: str
    status: int
    headers: Mapping[str, str] = attrs.field(converter=_response_headers)
    body: bytes
    request: Request
    max_links: int | None = attrs.field(default=None, kw_only=True)
    truncated: bool = attrs.field(default=False, kw_only=True)
    exchange: Exchange | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)
    render: Rendered | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)
    latency: float | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)
    _parsed: list[Page | None] = attrs.field(factory=list, init=False, eq=False, repr=False)
    _cache: dict[str, Any] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    @property
    def meta(self) -> dict[str, Any]:
        """The request's ``meta`` as a dict, as Scrapy's ``response.meta``: what the
        request carried, with what Scrapy's middlewares put there that spiders read:
        ``depth``, ``download_latency`` (seconds the fetch took, when the worker timed
        it), ``redirect_urls`` and ``redirect_reasons`` after a redirect, ``link_text``
        for a page a CrawlSpider rule led to. The same dict on every read, so a callback
        may add to it and pass it on (``meta=response.meta``). A ``meta`` that is not a
        dict (hashcrawl takes any JSON) is on ``response.request.meta`` only."""
        if "meta" not in self._cache:
            given = self.request.meta
            meta = dict(given) if isinstance(given, dict) else {}
            meta["depth"] = self.request.depth
            if self.latency is not None:
                meta["download_latency"] = self.latency
            self._cache["meta"] = meta
        return self._cache["meta"]  # type: ignore[no-any-return]

    @property
    def cb_kwargs(self) -> dict[str, Any]:
        """The request's ``cb_kwargs`` (empty if none), as Scrapy's ``response.cb_kwargs``."""
        return dict(self.request.cb_kwargs or {})

    @property
    def text(self) -> str:
        """The body as text: by its byte-order mark, else the Content-Type charset, else
        a ``<meta charset>``, else UTF-8; undecodable bytes become U+FFFD. Never raises."""
        from hashcrawl._web._html import decode_body

        return decode_body(self.body, self.headers.get("content-type"))

    @property
    def is_html(self) -> bool:
        from hashcrawl._web._html import is_html

        return is_html(self.headers.get("content-type"))

    def links(self) -> list[str]:
        """The URLs to request that the page links (none unless the body is HTML).

        Those of its ``Link:`` headers (rel next, prev or alternate) come first.
        """
        from hashcrawl._core._links import header_links

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

    @property
    def selector(self) -> Selector:
        """A parsel ``Selector`` over the body, as Scrapy's ``response.selector``.

        An HTML page's selector wraps the tree already parsed for :meth:`links` and
        :meth:`title` (parsed once, on first use); any other body is parsed as its
        Content-Type says (XML for an XML type, else HTML). A page that never asks for
        a selector pays nothing for it.
        """
        if "selector" not in self._cache:
            from parsel import Selector

            page = self._page()
            if page is not None and page.root is not None:
                selector = Selector(root=page.root, type="html", base_url=self.url)
            else:
                media = (self.headers.get("content-type") or "").partition(";")[0].strip()
                kind = "xml" if media.lower().endswith(("/xml", "+xml")) else "html"
                selector = Selector(text=self.text or "<html/>", type=kind, base_url=self.url)
            self._cache["selector"] = selector
        return self._cache["selector"]  # type: ignore[no-any-return]

    def css(self, query: str) -> SelectorList[Selector]:
        """``response.css("h1::text").get()``: parsel's CSS selection, as in Scrapy."""
        return self.selector.css(query)

    def xpath(self, query: str, **namespaces_and_variables: Any) -> SelectorList[Selector]:
        """``response.xpath("//h1/text()").get()``: parsel's XPath selection, as in Scrapy."""
        return self.selector.xpath(query, **namespaces_and_variables)

    def json(self) -> Any:
        """The body decoded as JSON, as Scrapy's ``response.json()`` (parsed once).

        Raises:
            ValueError: the body is not JSON.
        """
        if "json" not in self._cache:
            self._cache["json"] = json.loads(self.text)
        return self._cache["json"]

    def urljoin(self, href: str) -> str | None:
        """``href`` resolved the way the crawler resolves a page's links: against the
        page's ``<base href>`` if it has one, fragment dropped, escaped to be sent;
        None for nothing crawlable (see ``_links.request_url``)."""
        from hashcrawl._core._links import request_url

        page = self._page()
        base = page.base if page is not None and page.base else self.url
        return request_url(base, href)

    def follow(self, url: str | Selector | Linked, callback: Any = None, **request: Any) -> Request:
        """A :class:`Request` for a link of this page, as Scrapy's ``response.follow``.

        ``url`` is a URL (relative or not), a :class:`~hashcrawl.Link`, or a selector
        of an ``<a>``/``<link>`` element or of an attribute; ``callback`` the spider
        method (or its name) that parses the page, given by position or by name as in
        Scrapy; ``request`` holds the Request's other arguments (``meta=``,
        ``errback=``, ``cb_kwargs=``...).

        Raises:
            ValueError: the link leads nowhere crawlable (mailto:, javascript:, empty).
        """
        written = _href(url)
        joined = self.urljoin(written)
        if joined is None:
            raise ValueError(f"response.follow: nothing to crawl at {written!r:.200}")
        return Request(joined, callback, **request)

    def follow_all(
        self,
        urls: Iterable[str | Selector | Linked] | None = None,
        callback: Any = None,
        *,
        css: str | None = None,
        xpath: str | None = None,
        **request: Any,
    ) -> list[Request]:
        """Requests for many links, as Scrapy's ``response.follow_all``: of ``urls``, or
        of the elements ``css`` or ``xpath`` select (``<a>`` and ``<link>`` give their
        href); ``callback`` by position or by name, as in :meth:`follow`. Links that
        lead nowhere crawlable are left out.
        """
        if sum(x is not None for x in (urls, css, xpath)) != 1:
            raise ValueError("response.follow_all takes exactly one of urls, css and xpath")
        found: Iterable[str | Selector | Linked]
        if css is not None:
            found = self.css(css)
        elif xpath is not None:
            found = self.xpath(xpath)
        else:
            assert urls is not None
            found = urls
        requests = []
        for href in found:
            url = self.urljoin(_href(href))
            if url is not None:
                requests.append(Request(url, callback, **request))
        return requests

    def _page(self) -> Page | None:
        # Parsed once however many of links() and title() are asked for.
        if not self._parsed:
            from hashcrawl._web._html import parse_html

            content_type = self.headers.get("content-type")
            page = None
            if self.is_html:
                cap = self.max_links
                page = parse_html(self.body, self.url, content_type=content_type, max_links=cap)
            self._parsed.append(page)
        return self._parsed[0]


def _href(href: str | Selector | Linked) -> str:
    """What a link (a URL, a link extractor's Link, or a selector of an element or of an
    attribute) points to."""
    if isinstance(href, str):
        return href
    root = getattr(href, "root", None)
    if root is None:  # a LinkExtractor's Link, as Scrapy's follow takes
        url = getattr(href, "url", None)
        if not isinstance(url, str):
            raise ValueError(f"cannot follow {href!r:.80}: not a URL, Link or selector")
        return url
    if isinstance(root, str):
        return root
    tag = getattr(root, "tag", None)
    if tag not in ("a", "link", "area"):
        raise ValueError(f"only <a>, <area> and <link> elements can be followed, got <{tag}>")
    return str(root.get("href") or "")
