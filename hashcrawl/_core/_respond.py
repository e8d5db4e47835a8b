"""What a response leads to, from its facts alone: the response policy. Pure: no IO.

As h11 turns bytes into events, :func:`respond` turns one response's :class:`Facts`
(its status, its Location and Retry-After, the request's entry and attempts, who reads
the page, ``now``) into a :class:`Decision`: retry after a wait, give up (the dead
letters), follow a redirect, read a sitemap, hand the page to its errback, or parse it.
The caller (``_run._handler.Handler``) does the rest: it reads the sitemap in a thread,
runs the callbacks and collects what they give; a callback that raised is the
caller's to report, and :func:`parse_failed` says what follows (no backoff: the server
did nothing wrong).

A spider's callback sees 2xx responses and the statuses it or the request lists
(:func:`takes`); a redirect is followed, never passed to it; any other status goes to
the request's errback. The default parse (no callback) reads every response not retried;
a parse function sees every response but a followed redirect.
"""

from __future__ import annotations

import email.utils
import enum
import re
from collections.abc import Mapping
from datetime import UTC
from typing import NamedTuple

import attrs

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._links import request_url
from hashcrawl._core._outcome import failure_wait, is_last_attempt
from hashcrawl._core._urls import canonical_parts

MAX_REDIRECTS = 5  # hops in one chain, as RFC 9309 asks of robots.txt and browsers allow
REDIRECT_URLS_BYTES = 16384  # a spider's redirect_urls keeps its last hops within this
RETRY_AFTER_CAP = 600.0  # a server's Retry-After is honoured up to ten minutes
_MAX_RETRY_AFTER = 86400.0  # the most a Retry-After is read as (robots.txt's own cap)
_DELTA_SECONDS = re.compile(r"[+-]?[0-9]+")


class Reader(enum.Enum):
    """Who reads a page: which statuses reach it, and whether it sees a redirect."""

    DEFAULT = "default"  # no callback: one item per page, every link followed
    FUNCTION = "function"  # a parse function: every response but a followed redirect
    SPIDER = "spider"  # a spider's callback: 2xx and the statuses listed (``takes``)


class Facts(NamedTuple):
    """What the policy knows of one response to ``held``'s request.

    ``url`` is the response's (final) URL, that a Location is resolved against;
    ``headers`` its headers by lower-case name; ``now`` the UNIX time a Retry-After
    date is measured against; ``statuses`` the spider's ``handle_httpstatus_list``.
    (A named tuple, as ``Decision``: one of each is made per page, at a fifth of a
    frozen attrs class's cost.)
    """

    status: int
    url: str
    headers: Mapping[str, str]
    held: Held
    now: float
    max_attempts: int
    reader: Reader = Reader.DEFAULT
    statuses: frozenset[int] = frozenset()


class Act(enum.Enum):
    """What happens to a response's page."""

    RETRY = "retry"  # overloaded: the host waits ``wait``, then the page is tried again
    GIVE_UP = "give up"  # overloaded on the last attempt: dead-lettered, its errback told
    TOO_MANY_REDIRECTS = "too many redirects"  # dead-lettered at once, its errback told
    SITEMAP = "read the sitemap"  # hashcrawl's own request: its URLs if ``read``, no callback
    FOLLOW = "follow the redirect"  # a callback's page redirects: the target, nothing parsed
    ERRBACK = "errback"  # a status the spider's callback does not take: the errback's turn
    PARSE = "parse"  # the callback (or the default parse), and the redirect if any


class Decision(NamedTuple):
    """What :func:`respond` decided, with what the caller needs to do it.

    ``reason`` is the dead letter's error (RETRY, GIVE_UP, TOO_MANY_REDIRECTS);
    ``wait`` the seconds the host waits (RETRY, GIVE_UP); ``redirect`` the target to
    follow; ``widen`` the hosts the crawl's scope takes in (a submitted URL's redirect);
    ``read`` whether a sitemap's body is read (a 2xx).
    """

    act: Act
    reason: str = ""
    wait: float | None = None
    redirect: Entry | None = None
    widen: tuple[str, ...] = ()
    read: bool = False


_PARSE = Decision(Act.PARSE)  # most pages': made once
_ERRBACK = Decision(Act.ERRBACK)


def respond(facts: Facts) -> Decision:
    """What happens to the page ``facts`` describe (see the module's docstring)."""
    entry, status = facts.held.entry, facts.status
    listed = facts.reader is Reader.SPIDER and takes(entry, status, facts.statuses)
    if is_overloaded(status):
        last = is_last_attempt(entry, facts.max_attempts)
        if not (listed and last):  # a spider that lists it sees the last one
            wait = retry_wait(entry.attempts, facts.headers.get("retry-after"), facts.now)
            return Decision(Act.GIVE_UP if last else Act.RETRY, f"HTTP {status}", wait)
    redirect = None if listed or not 300 <= status < 400 else redirect_of(facts)
    most = MAX_REDIRECTS if entry.max_redirects is None else entry.max_redirects
    if redirect is not None and entry.hops >= most:
        why = f"more than {most} redirects (next: {redirect.url})"
        return Decision(Act.TOO_MANY_REDIRECTS, why)
    if entry.sitemap:
        return Decision(Act.SITEMAP, redirect=redirect, read=200 <= status < 300)
    # A submitted URL that redirects (http to https, a bare domain to www.) brings its
    # target's host into the scope, as wget takes the start URL's redirect.
    # (A spider's redirect keeps its depth: a start URL's whole chain is taken in.)
    widen = (redirect.host,) if redirect is not None and entry.depth == 0 else ()
    if redirect is not None and facts.reader is not Reader.DEFAULT:
        return Decision(Act.FOLLOW, redirect=redirect, widen=widen)
    if facts.reader is Reader.SPIDER and not listed:
        return _ERRBACK
    return _PARSE if redirect is None else Decision(Act.PARSE, redirect=redirect, widen=widen)


def parse_failed(entry: Entry, max_attempts: int, error: str) -> Decision:
    """What follows a parse callback (or the spider's) raising ``error`` on ``entry``'s
    page: retried, then dead-lettered with ``error`` on its last attempt, and never a
    wait for its host. The server answered; the bug is ours, and backing off (meant for
    429, 5xx, timeouts and resets) would slow every other page of the host for it."""
    last = is_last_attempt(entry, max_attempts)
    return Decision(Act.GIVE_UP if last else Act.RETRY, error)


def takes(entry: Entry, status: int, statuses: frozenset[int]) -> bool:
    """Whether a response of ``status`` goes to ``entry``'s spider callback: a 2xx, or
    one the spider (``statuses``) or the request lists (also by Scrapy's meta keys, when
    they are of the right types)."""
    if 200 <= status < 300 or status in statuses or status in entry.handle_httpstatus_list:
        return True
    meta = entry.meta if isinstance(entry.meta, dict) else {}
    if meta.get("handle_httpstatus_all") is True:
        return True
    listed = meta.get("handle_httpstatus_list")
    return isinstance(listed, list) and status in [s for s in listed if type(s) is int]


def redirect_of(facts: Facts) -> Entry | None:
    """A redirect's target, one hop deeper (and one level deeper, but for a spider's
    page: Scrapy's depth counts links, not redirects; a spider's target carries the
    chain in its meta, ``redirect_meta``); it never inherits ``dont_filter``, so a loop
    of redirects ends at the seen filter.

    As browsers do, a 301, 302 or 303 turns a request other than GET or HEAD into a
    GET without a body (307 and 308 keep both), and a request's headers do not
    follow it to another host."""
    location = facts.headers.get("location")
    if not (300 <= facts.status < 400 and location):
        return None
    target = request_url(facts.url, location)
    if target is None:
        return None
    entry = facts.held.entry
    method, body, headers = entry.method, entry.body, entry.headers
    if facts.status in (301, 302, 303) and method not in ("GET", "HEAD"):
        method, body = "GET", b""
        headers = tuple(h for h in headers if h[0].lower() != "content-type")
    try:
        same_host = canonical_parts(target)[1] == facts.held.host
    except ValueError:
        same_host = False
    spider = facts.reader is Reader.SPIDER
    return attrs.evolve(
        entry,
        url=target,
        attempts=0,
        suspect=False,
        dont_filter=False,
        depth=entry.depth + (not spider),  # Scrapy's DEPTH_LIMIT: a redirect is no level
        hops=entry.hops + 1,
        method=method,
        body=body,
        headers=headers if same_host else (),
        meta=redirect_meta(entry, facts.status) if spider else entry.meta,
    )


def redirect_meta(entry: Entry, status: int) -> object:
    """``entry``'s meta with its URL and ``status`` added to Scrapy's ``redirect_urls``
    and ``redirect_reasons``; a meta that is not a dict (or None) is left as it was. The
    oldest hops are forgotten past ``REDIRECT_URLS_BYTES`` of URLs (the last is always
    kept), so the entry stays within its size."""
    meta = entry.meta
    if meta is not None and not isinstance(meta, dict):
        return meta
    given = dict(meta or {})
    urls, reasons = given.get("redirect_urls"), given.get("redirect_reasons")
    urls = [*(u for u in urls if isinstance(u, str))] if isinstance(urls, list) else []
    reasons = reasons if isinstance(reasons, list) else []
    urls, reasons = [*urls, entry.url], [*reasons, status][-len(urls) - 1 :]
    while len(urls) > 1 and sum(len(u) for u in urls) > REDIRECT_URLS_BYTES:
        del urls[0]
    given["redirect_urls"], given["redirect_reasons"] = urls, reasons[-len(urls) :]
    return given


def is_overloaded(status: int) -> bool:
    """A status that asks to come back later: 429 and every 5xx, retried, never done."""
    return status == 429 or 500 <= status <= 599


def retry_wait(attempts: int, retry_after: str | None, now: float) -> float:
    """Seconds a host waits after a failure: its Retry-After (capped) or 1, 2, 4... to 60."""
    asked = parse_retry_after(retry_after, now)
    if asked is not None:
        return min(asked, RETRY_AFTER_CAP)
    return failure_wait(attempts)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Return the seconds a Retry-After header asks to wait, between 0 and a day.

    Args:
        value: delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT").
        now: the current UNIX time, against which a date is measured.

    Returns None for a missing or unreadable header; a time in the past gives 0.
    """
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return _clamp(float(value))
    return _seconds_until_date(value, now)


def _seconds_until_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (ValueError, TypeError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with the zone unknown (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return _clamp(when.timestamp() - now)


def _clamp(seconds: float) -> float:
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)
