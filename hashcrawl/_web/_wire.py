"""What the default fetcher hands httpcore, built cheaply: a URL's parts, and requests.

httpx's ``URL`` parser and httpcore's ``Request`` constructor check and normalize every
part of every request; for the URLs and headers a crawl sends they change nothing, and
cost about as much as the rest of the request's way to the socket. ``plain_url`` takes
the URLs httpx would leave as written and declines the rest (httpx parses those).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import AsyncIterator
from typing import NamedTuple

import httpcore
import httpx


class URLParts(NamedTuple):
    """A URL's parts as httpx's ``URL`` gives them to httpcore, and its text."""

    text: str  # str(httpx.URL(...)): normalized
    scheme: bytes
    host: bytes
    port: int | None  # None for the scheme's default
    target: bytes  # path and query
    netloc: bytes  # the Host header's value

    @classmethod
    def of(cls, url: httpx.URL) -> URLParts:
        return cls(str(url), url.raw_scheme, url.raw_host, url.port, url.raw_path, url.netloc)


# A URL that httpx's parser leaves as it is: lower-case http(s), a lower-case host of
# letters, digits, dots and dashes, a port without leading zeros, and a path and query of
# characters it never escapes (percent signs included, which it keeps as written).
_PLAIN_URL = re.compile(
    r"(https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::([1-9][0-9]{0,4}))?"
    r"(/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*(?:\?[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*)?)"
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_IPV4_STYLE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")


def plain_url(text: str) -> URLParts | None:
    """``text``'s parts as ``httpx.URL(text)`` would give them, without its ~50 us of
    parsing, for a URL it would not change (tests/test_wire.py holds the two equal);
    None for any other URL: the caller asks httpx."""
    match = _PLAIN_URL.fullmatch(text) if len(text) <= 8192 else None
    if match is None:
        return None
    scheme, host, port_text, target = match.groups()
    path = target.partition("?")[0]
    if "/." in path or "//" in path:  # dot segments, which httpx removes
        return None
    port = int(port_text) if port_text else None
    if port == _DEFAULT_PORTS[scheme]:
        return None
    if _IPV4_STYLE.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:  # httpx refuses it: let it say so
            return None
    netloc = f"{host}:{port}" if port is not None else host
    return URLParts(text, scheme.encode(), host.encode(), port, target.encode(), netloc.encode())


class WireRequest(httpcore.Request):
    """httpcore's request made of parts that are bytes already, without the checks of
    each one that its constructor makes (they cost as much as the rest of the pool's
    work before the first write)."""

    def __init__(
        self, method: bytes, url: httpcore.URL, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        self.method, self.url, self.headers = method, url, headers
        self.stream = _Content(body)
        self.extensions = {}


class _Content:
    """A request body of bytes, in one piece, as httpcore reads it (``async for``)."""

    __slots__ = ("_body",)

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body
