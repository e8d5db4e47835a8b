"""A spider's :class:`~hashcrawl.Request` into an :class:`Entry` and back, and a
response's cookies: the only places the request a spider makes meets the entry the core
routes, so the core never imports the web's models."""

from __future__ import annotations

import httpx

from hashcrawl._core._entry import MAX_ENTRY_BYTES, Entry
from hashcrawl._core._links import request_url
from hashcrawl._exceptions import ConfigError
from hashcrawl._web._models import Request, Response


def entry_following(thing: Request | str, base_url: str, depth: int) -> Entry | None:
    """The entry a page's request (or URL) makes, resolved against the page's URL;
    None for a URL that cannot be fetched.

    Raises:
        ConfigError: the request would make an entry too big for the queue.
    """
    request = thing if isinstance(thing, Request) else Request(thing)
    url = request_url(base_url, request.url)
    if url is None:
        return None
    entry = Entry(
        url=url,
        depth=depth,
        priority=request.priority,
        meta=request.meta,
        callback=request.callback,
        dont_filter=request.dont_filter,
        method=request.method,
        headers=request.headers,
        body=request.body,
        timeout=request.timeout,
        max_redirects=request.max_redirects,
    )
    if request.body or request.headers:  # a plain GET's entry is as small as its URL
        size = len(entry.encode().encode("utf-8"))
        if size > MAX_ENTRY_BYTES:
            raise ConfigError(
                f"Request {request.method} {url:.100} would be a {size}-byte queue entry, "
                f"over the {MAX_ENTRY_BYTES} an entry holds: send a smaller body"
            )
    return entry


def request_of(entry: Entry, cookie: str | None = None) -> Request:
    """The request to send for ``entry``, with its host's ``cookie`` header if any."""
    extra = (("Cookie", cookie),) if cookie else ()
    return Request(
        entry.url,
        priority=entry.priority,
        meta=entry.meta,
        callback=entry.callback,
        dont_filter=entry.dont_filter,
        depth=entry.depth,
        method=entry.method,
        headers=(*entry.headers, *extra),
        body=entry.body,
        timeout=entry.timeout,
        max_redirects=entry.max_redirects,
    )


def set_cookies(response: Response) -> list[str]:
    """The ``Set-Cookie`` headers of ``response``, each on its own."""
    if "set-cookie" not in response.headers:
        return []
    return httpx.Headers(response.headers).get_list("set-cookie")
