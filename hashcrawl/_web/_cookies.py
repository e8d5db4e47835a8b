"""Cookies per host, kept by the host's owner and handed over with its pace record.

Each host (host key) has a jar of its own: a cookie one host sets is sent to that host
only, never to another, even in the same domain. The rules of which cookie goes with
which request (path, expiry, ``Secure``, ``Max-Age``) are the standard library's
``http.cookiejar``, through ``httpx.Cookies``; no jar is shared, so no state is.

Every bound is fixed: a host's jar holds at most ``max_bytes`` (``--max-cookie-bytes``,
:data:`MAX_JAR_BYTES` by default) of cookies as handed over (the largest cookies go
first when a response would overflow it), and an owner keeps the jars of at most
:data:`MAX_JARS` hosts (the least recently used go).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from http.cookiejar import Cookie
from typing import Any

import httpx

MAX_JAR_BYTES = 4096  # a host's cookies, as written in its pace record
MAX_JARS = 10_000  # hosts whose cookies one owner keeps
_FIELDS = 6  # name, value, domain, path, expires, secure


class Jars:
    """The cookie jars of the hosts one worker owns."""

    def __init__(self, max_bytes: int = MAX_JAR_BYTES) -> None:
        self.max_bytes = max_bytes
        self._jars: OrderedDict[str, httpx.Cookies] = OrderedDict()
        self._changed: set[str] = set()  # hosts whose cookies Redis does not hold yet
        self.dropped = 0  # cookies left out to keep a jar within MAX_JAR_BYTES

    def __contains__(self, host: str) -> bool:
        return host in self._jars

    def hosts(self) -> list[str]:
        return list(self._jars)

    def header(self, host: str, method: str, url: str) -> str | None:
        """The Cookie header for a request to ``url`` on ``host``, if any cookie goes."""
        jar = self._jars.get(host)
        if jar is None:
            return None
        self._jars.move_to_end(host)
        try:
            request = httpx.Request(method, url)
        except (httpx.InvalidURL, ValueError):
            return None
        jar.set_cookie_header(request)
        value: str | None = request.headers.get("cookie")
        return value

    def take(self, host: str, method: str, url: str, set_cookies: list[str]) -> None:
        """Keep what a response's ``Set-Cookie`` headers set (as its URL allows)."""
        if not set_cookies:
            return
        before = self.record(host)
        self._take(host, method, url, set_cookies)
        if self.record(host) != before:
            self._changed.add(host)

    def _take(self, host: str, method: str, url: str, set_cookies: list[str]) -> None:
        jar = self._jars.get(host)
        fresh = jar is None
        if jar is None:
            jar = httpx.Cookies()
        try:
            request = httpx.Request(method, url)
            response = httpx.Response(
                200, headers=[("set-cookie", c) for c in set_cookies], request=request
            )
            jar.extract_cookies(response)
        except Exception:  # a server's header is hostile input: it never ends a worker
            return
        self._fit(jar)
        if not list(jar.jar):
            self._jars.pop(host, None)
            return
        if fresh:
            self._jars[host] = jar
            while len(self._jars) > MAX_JARS:
                self._jars.popitem(last=False)
        self._jars.move_to_end(host)

    def pop(self, host: str) -> str:
        """Forget a host's cookies (it moves to another owner); return them as written
        in its pace record ('' for none)."""
        jar = self._jars.pop(host, None)
        self._changed.discard(host)
        return _encode(jar.jar) if jar is not None else ""

    def record(self, host: str) -> str:
        """A host's cookies as written in its pace record ('' for none)."""
        jar = self._jars.get(host)
        return _encode(jar.jar) if jar is not None else ""

    def changed(self) -> list[str]:
        """Hosts whose cookies changed since Redis last stored them (``stored``)."""
        return sorted(self._changed)

    def stored(self, host: str, text: str) -> None:
        """A commit made ``text`` durable as ``host``'s cookies: changed no more, unless
        they changed again meanwhile."""
        if self.record(host) == text:
            self._changed.discard(host)

    def adopt(self, host: str, text: str) -> None:
        """Take a host's cookies from its previous owner's record; bad text gives none."""
        cookies = _decode(text, 2 * self.max_bytes)
        if not cookies:
            return
        jar = self._jars.setdefault(host, httpx.Cookies())
        for cookie in cookies:
            jar.jar.set_cookie(cookie)
        self._fit(jar)
        while len(self._jars) > MAX_JARS:
            self._jars.popitem(last=False)

    def _fit(self, jar: httpx.Cookies) -> None:
        jar.jar.clear_expired_cookies()
        while len(_encode(jar.jar)) > self.max_bytes:
            largest = max(jar.jar, key=lambda c: len(c.name) + len(c.value or ""))
            jar.jar.clear(largest.domain, largest.path, largest.name)
            self.dropped += 1


def _encode(cookies: Iterable[Cookie]) -> str:
    rows = [
        [c.name, c.value, c.domain, c.path, c.expires, int(c.secure)]
        for c in cookies
        if not c.is_expired()
    ]
    return json.dumps(rows, separators=(",", ":"), ensure_ascii=False) if rows else ""


def _decode(text: str, limit: int = 2 * MAX_JAR_BYTES) -> list[Cookie]:
    """Cookies from a record of at most ``limit`` characters; anything malformed is left
    out (records are outside input)."""
    if not text or len(text) > limit:
        return []
    try:
        rows: Any = json.loads(text)
    except (ValueError, RecursionError):  # "[[[[..." nested past the parser's depth
        return []
    if not isinstance(rows, list):
        return []
    cookies = []
    for row in rows[:200]:
        if not (isinstance(row, list) and len(row) == _FIELDS):
            continue
        name, value, domain, path, expires, secure = row
        if not all(isinstance(x, str) for x in (name, value, domain, path)):
            continue
        if not (expires is None or type(expires) is int) or secure not in (0, 1):
            continue
        cookies.append(_cookie(name, value, domain, path, expires, bool(secure)))
    return cookies


def _cookie(
    name: str, value: str, domain: str, path: str, expires: int | None, secure: bool
) -> Cookie:
    return Cookie(
        version=0,
        name=name,
        value=value,
        port=None,
        port_specified=False,
        domain=domain,
        domain_specified=domain.startswith("."),
        domain_initial_dot=domain.startswith("."),
        path=path,
        path_specified=True,
        secure=secure,
        expires=expires,
        discard=expires is None,
        comment=None,
        comment_url=None,
        rest={},
    )
