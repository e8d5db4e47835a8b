"""From a response to an :class:`~hashcrawl._core._outcome.Outcome`: items, follows, backoff.

A :class:`Handler` turns responses into outcomes through an optional parse callback;
with none it writes one item per page and follows every link. It knows nothing of the
worker: what it needs of the page's host (its robots.txt rules, whether it has had its
pages) comes in with the response, and how long the host should wait goes out in the
outcome.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from hashcrawl._core._due import bucket_bits, judged
from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._links import request_url
from hashcrawl._core._outcome import PARSE_FAULT, Kind, Outcome, failure_wait, is_last_attempt
from hashcrawl._core._outcome import Origin as Origin
from hashcrawl._core._revisit import Policy, Verdict
from hashcrawl._core._urls import canonical_parts
from hashcrawl._exceptions import ConfigError, HttpError
from hashcrawl._run._callbacks import (
    ParseTimeout,
    Steps,
    failure,
    fetched,
    page_item,
    spider_frames,
    unix_now,
    unread_links,
)
from hashcrawl._settings import Settings, revisit_policy
from hashcrawl._web._models import Request, Response
from hashcrawl._web._parsing import ENABLED as PARSE_PROCESS
from hashcrawl._web._parsing import Parser
from hashcrawl._web._robots import parse_retry_after
from hashcrawl._web._sinks import as_dict
from hashcrawl._web._sitemaps import sitemap_entries
from hashcrawl._web._spider import Calls, Failure

Parse = Callable[[Response], Any]
MAX_REDIRECTS = 5  # hops in one chain, as RFC 9309 asks of robots.txt and browsers allow
RETRY_AFTER_CAP = 600.0  # a server's Retry-After is honoured up to ten minutes
LOOP_HOLD_WARNING = 1.0  # seconds a callback may hold the event loop before it is reported
MAX_DENIED = 100_000  # robots.txt-denied link URLs a worker remembers, to count each once


def is_overloaded(status: int) -> bool:
    """A status that asks to come back later: 429 and every 5xx, retried, never done."""
    return status == 429 or 500 <= status <= 599


def retry_wait(attempts: int, retry_after: str | None) -> float:
    """Seconds a host waits after a failure: its Retry-After (capped) or 1, 2, 4... to 60."""
    asked = parse_retry_after(retry_after, unix_now())
    if asked is not None:
        return min(asked, RETRY_AFTER_CAP)
    return failure_wait(attempts)


log = logging.getLogger("hashcrawl")


@attrs.define
class _Produced:
    """What a parse callback has produced so far (kept if it then raises)."""

    items: list[Any] = attrs.Factory(list)
    follows: list[Entry] = attrs.Factory(list)
    dropped: int = 0  # requests past --max-links, not even read
    # Links of the default parse that the worker queued already (``Origin.seen``), with
    # their hosts: never made entries, but counted as found, and as kept if the rules
    # would keep them.
    known: list[tuple[str, str]] = attrs.Factory(list)


class Handler:
    """Turns a response into an outcome, through an optional parse callback.

    The callback takes a :class:`Response` and returns (or yields) items (dicts or attrs
    instances) and things to follow (:class:`Request` objects or URL strings). It may be
    a plain function, a generator, or async. Without one, each page gives one item and
    every link is followed.
    """

    def __init__(
        self,
        parse: Parse | None = None,
        *,
        spider: Calls | None = None,
        blocking: bool = False,
        settings: Settings | None = None,
        name: str = "-",
    ):
        self.parse = parse
        self.spider = spider
        self.name = name  # the spider's, or the parse function's, for dead letters' reasons
        self.blocking = blocking or (spider is not None and spider.blocking)
        self.settings = settings if settings is not None else Settings()
        self.denied = Denied()  # links robots.txt kept out, each counted once
        self._policy_of: tuple[Settings, Policy | None] | None = None
        # HASHCRAWL_PARSE_PROCESS=1: the default parse in a process of its own (_parsing)
        self.parser = Parser() if PARSE_PROCESS and parse is None and spider is None else None

    async def handle(
        self, held: Held, response: Response, origin: Origin, *, server_s: float | None = None
    ) -> Outcome:
        """The outcome of a response (``_handled``) and, with ``--revisit``, the page's
        next revisit record, due ``server_s`` (the server's clock now, as the session
        knows it; this machine's clock without) plus its interval. A revisit that found
        the page unchanged (a 304, or the same content) writes no item and follows
        nothing: its callback saw it already."""
        # Rounded up, so a revisit never comes before the interval has passed.
        now_s = math.ceil(unix_now() if server_s is None else server_s)
        policy, fetch = self._revisit_policy(), None
        if policy is not None:
            bits = bucket_bits(self.settings.revisit_pages)  # fixed with the crawl
            fetch = judged(held.entry, fetched(response), policy, now_s, bits=bits)
        if fetch is not None and fetch.verdict is Verdict.UNCHANGED:
            return attrs.evolve(Outcome.done(held, [], []), revisit=fetch)
        outcome = await self._handled(held, response, origin)
        if fetch is None or outcome.kind is not Kind.DONE:
            return outcome  # a retried page's record waits, its requeue lease running
        return attrs.evolve(outcome, revisit=fetch)

    def _revisit_policy(self) -> Policy | None:
        """``revisit_policy(self.settings)``, parsed once for each settings value given."""
        settings = self.settings
        if self._policy_of is None or self._policy_of[0] is not settings:
            self._policy_of = (settings, revisit_policy(settings))
        return self._policy_of[1]

    async def _handled(self, held: Held, response: Response, origin: Origin) -> Outcome:
        """The outcome of a response: retried if the server is overloaded, dead-lettered
        if it redirects once too often, else the items and follows it gives.

        A spider's callback sees 2xx responses and the statuses it lists; a redirect is
        followed, never passed to it; any other status goes to the request's errback.
        The default parse (none given) writes an item for every response not retried;
        a ``parse`` function sees every response but a followed redirect.
        """
        entry = held.entry
        listed = self.spider is not None and self.spider.takes(entry, response.status)
        if is_overloaded(response.status) and not (listed and self._last_try(held)):
            wait = retry_wait(entry.attempts, response.headers.get("retry-after"))
            outcome = Outcome.retry(held, f"HTTP {response.status}", backoff=wait)
            if self._last_try(held):
                return await self.failed(held, outcome, HttpError(response))
            return outcome
        redirect = [] if listed else self._redirect(held, response)
        most = MAX_REDIRECTS if entry.max_redirects is None else entry.max_redirects
        if redirect and entry.hops >= most:
            reason = f"more than {most} redirects (next: {redirect[0].url})"
            return await self.failed(held, Outcome.dead(held, reason), HttpError(response))
        if entry.sitemap:  # hashcrawl's own request: no item, no parse callback
            # Up to 50,000 URLs to read and escape: a thread's work, not the event loop's.
            found = await trio.to_thread.run_sync(
                sitemap_entries, entry, response.body, response.url
            )
            follows = found if 200 <= response.status < 300 else []
            follows += redirect
            kept = self._allowed(follows, held, origin)
            return Outcome.done(held, [], kept, denied=kept.denied)
        # A submitted URL that redirects (http to https, a bare domain to www.) brings
        # its target's host into the scope, as wget takes the start URL's redirect.
        widen = [e.host for e in redirect if entry.depth == 0]
        if redirect and (self.parse is not None or self.spider is not None):
            kept = self._allowed(redirect, held, origin)
            return Outcome.done(held, [], kept, widen, found=len(redirect), denied=kept.denied)
        if self.spider is not None and not listed:
            outcome = Outcome.done(held, [], [])
            return await self.failed(held, outcome, HttpError(response), origin)
        return await self._parsed(held, response, origin, redirect, widen)

    async def _parsed(
        self,
        held: Held,
        response: Response,
        origin: Origin,
        redirect: list[Entry],
        widen: list[str],
    ) -> Outcome:
        """The outcome of parsing ``response``: its callback's items and follows (and
        the redirect's target), or a retry if the callback raised."""
        settings = self.settings
        capped = attrs.evolve(response, max_links=settings.max_links)
        produced = _Produced()
        if self.parser is not None and 200 <= capped.status < 300 and capped.is_html:
            page = await self.parser.parse(
                capped.body, capped.url, capped.headers.get("content-type"), capped.max_links
            )
            if page is not None:  # else links() parses it here
                capped._parsed.append(page)
        try:
            if self._callback_for(held) is None:  # no checkpoint: no timeout could cut it
                self._default(held, capped, origin, produced)
            else:
                await self._timed(self._produce(held, capped, origin, produced))
        except Exception as exc:  # a callback's bug fails its page, not the worker
            error = f"the parse callback {self._name_of(held)} {failure(exc)}"
            log.error("parsing %s failed: %s\n%s", held.entry.url, error, spider_frames(exc))
            wait = retry_wait(held.entry.attempts, None)
            if not is_last_attempt(held.entry, settings.max_attempts):
                # The retry produces them again.
                return Outcome.retry(held, error, backoff=wait, fault=PARSE_FAULT)
            # The page goes to the dead letters: what came before the exception is kept.
            kept = self._allowed(produced.follows, held, origin)
            return Outcome.retry(held, error, produced.items, kept, backoff=wait, fault=PARSE_FAULT)
        follows = produced.follows + redirect
        kept = self._allowed(follows, held, origin)
        return Outcome.done(
            held,
            produced.items,
            kept,
            widen,
            denied=kept.denied,
            found=len(follows) + len(produced.known),
            dropped=produced.dropped + unread_links(capped),
            known=_known_kept(settings.max_depth, produced.known, held, origin),
        )

    async def _timed(self, work: Awaitable[None]) -> None:
        """``work``, cancelled past ``--parse-timeout``.

        Raises:
            ParseTimeout: it ran past the limit.
        """
        limit = self.settings.parse_timeout
        try:
            with trio.fail_after(limit):
                await work
        except trio.TooSlowError:
            raise ParseTimeout(f"ran past --parse-timeout ({limit:g} s)") from None

    def _last_try(self, held: Held) -> bool:
        return is_last_attempt(held.entry, self.settings.max_attempts)

    async def failed(
        self, held: Held, outcome: Outcome, error: BaseException, origin: Origin | None = None
    ) -> Outcome:
        """``outcome`` of a page that failed for good (or whose status its callback does
        not take), with what the request's errback gives added; unchanged without one,
        or if it was to be tried again. An errback's own error is logged, and what it
        gave before is kept."""
        errback = self.spider.errback(held.entry) if self.spider is not None else None
        if errback is None or (outcome.kind is Kind.RETRY and not self._last_try(held)):
            return outcome
        response = getattr(error, "response", None)
        sent = response.request if response is not None else Request.from_entry(held.entry)
        failure = Failure(error, sent)
        produced = _Produced()
        try:
            await self._timed(self._run(errback, failure, held, produced, held.entry.url))
        except Exception:
            log.exception("the errback of %s failed", held.entry.url)
        kept = self._allowed(produced.follows, held, origin or Origin(""))
        return attrs.evolve(
            outcome, items=[*outcome.items, *produced.items], follows=[*outcome.follows, *kept]
        )

    async def _produce(
        self, held: Held, response: Response, origin: Origin, produced: _Produced
    ) -> None:
        """Add the page's items and follows to ``produced``, one by one as they come.

        A callback's requests past ``max_links`` are counted as dropped, not kept.

        Raises:
            Exception: whatever the callback raised, or ``TypeError``/``ConfigError`` for
                a thing it produced that is not an item, a Request, a URL or None. What
                was produced before stays in ``produced``.
        """
        parse = self._callback_for(held)
        if parse is None:
            self._default(held, response, origin, produced)
            return
        await self._run(parse, response, held, produced, response.url)

    @staticmethod
    def _default(held: Held, response: Response, origin: Origin, produced: _Produced) -> None:
        """What the default parse produces: the page's item, and an entry per link this
        worker has not queued already (most links of a page are: navigation, and the
        pages its neighbours link too)."""
        links = response.links() if 200 <= response.status < 300 else []
        produced.items.append(page_item(held, response, origin.worker))
        depth = held.entry.depth + 1
        seen = origin.seen
        if seen is None:
            produced.follows += [Entry(url=u, depth=depth) for u in links]
            return
        follows, known = produced.follows, produced.known
        for url in links:
            canonical, host = canonical_parts(url)  # links() gives only URLs that have one
            if seen.queued(canonical):
                known.append((url, host))
            else:
                follows.append(Entry(url=url, depth=depth))

    async def _run(
        self, call: Callable[[Any], Any], arg: Any, held: Held, produced: _Produced, base: str
    ) -> None:
        """Add what ``call(arg)`` (a callback or an errback) produces to ``produced``."""
        most = self.settings.max_links
        follows = produced.follows
        steps = Steps(call, arg, self.blocking)
        async with contextlib.aclosing(steps.each()) as things:
            async for thing in things:
                if isinstance(thing, Request | str) and len(follows) >= most:
                    produced.dropped += 1  # past --max-links: not even read
                elif isinstance(thing, Request | str):
                    if isinstance(thing, Request) and (why := self._unknown(thing)) is not None:
                        raise ConfigError(f"Request names an unknown {why.removeprefix('no ')}")
                    request = thing if isinstance(thing, Request) else Request(thing)
                    follow = request.to_entry(base, held.entry.depth + 1)
                    if follow is not None:
                        follows.append(follow)
                elif thing is not None:
                    item = thing if self.spider is None else await self._piped(thing)
                    if item is not None:
                        produced.items.append(as_dict(item))
        if steps.held_loop > LOOP_HOLD_WARNING:
            log.warning(
                "the parse callback held the event loop %.1f s on %s: set blocking = True "
                "on the spider to run it in a thread",
                steps.held_loop,
                held.entry.url,
            )

    async def _piped(self, item: Any) -> Any:
        """``item`` through the spider's pipelines (None if one dropped it)."""
        assert self.spider is not None
        if not self.spider.pipelines:
            return item
        return await self.spider.process_item(item, self._step)

    async def _step(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``: in a thread for a blocking spider, else here."""
        if self.blocking:
            return await trio.to_thread.run_sync(call, *args)
        return call(*args)

    def refusal(self, entry: Entry) -> str | None:
        """Why this handler cannot take an entry read from Redis (a callback, errback or
        rule its spider lacks, unusable cb_kwargs), or None."""
        if self.spider is not None:
            return self.spider.refusal(entry)
        why = self._unknown(entry)
        return None if why is None else f"spider {self.name} has {why}"

    def _unknown(self, request: Request | Entry) -> str | None:
        if self.spider is not None:
            return self.spider.unknown(request)
        if request.callback is not None:
            return f"no callback {request.callback!r:.80}"
        if request.errback is not None:
            return f"no errback {request.errback!r:.80}"
        return None if request.rule is None else f"no rule {request.rule}"

    def _name_of(self, held: Held) -> str:
        """The callback ``held``'s page went to, as its author knows it."""
        parse = self._callback_for(held)
        return str(getattr(parse, "__qualname__", None) or held.entry.callback or "parse")

    def _callback_for(self, held: Held) -> Parse | None:
        if self.spider is not None:
            return self.spider.callback(held.entry)
        return self.parse

    @staticmethod
    def _redirect(held: Held, response: Response) -> list[Entry]:
        """A redirect's target, one hop and one level deeper; it never inherits
        ``dont_filter``, so a loop of redirects ends at the seen filter.

        As browsers do, a 301, 302 or 303 turns a request other than GET or HEAD into a
        GET without a body (307 and 308 keep both), and a request's headers do not
        follow it to another host."""
        location = response.headers.get("location")
        if not (300 <= response.status < 400 and location):
            return []
        target = request_url(response.url, location)
        if target is None:
            return []
        entry = held.entry
        method, body, headers = entry.method, entry.body, entry.headers
        if response.status in (301, 302, 303) and method not in ("GET", "HEAD"):
            method, body = "GET", b""
            headers = tuple(h for h in headers if h[0].lower() != "content-type")
        try:
            same_host = canonical_parts(target)[1] == held.host
        except ValueError:
            same_host = False
        return [
            attrs.evolve(
                entry,
                url=target,
                attempts=0,
                suspect=False,
                dont_filter=False,
                depth=entry.depth + 1,
                hops=entry.hops + 1,
                method=method,
                body=body,
                headers=headers if same_host else (),
            )
        ]

    def _allowed(self, follows: list[Entry], held: Held, origin: Origin) -> Follows:
        # A link to this page's own host that its robots.txt forbids goes no further:
        # this worker owns the host and would refuse the entry anyway, after an XADD, a
        # read and an acknowledgement. Other hosts' rules are their owners' to apply.
        deep = self.settings.max_depth
        kept = Follows()
        for e in follows:
            if deep is not None and e.depth > deep:
                continue
            if _keeps(e.url, e.host, held, origin):
                kept.append(e)
            elif not origin.host_full and self.denied.first(e.key):
                kept.denied += 1  # counted in robots_denied once, as a refused entry is
        return kept


class Follows(list[Entry]):
    """The follows a page's host's rules kept, and how many new links its robots.txt
    kept out (``denied``)."""

    denied: int = 0


@attrs.define
class Denied:
    """The URLs a worker's robots.txt rules kept out at extraction, so that a link found
    on many pages is counted once (as its entry would be, refused once after the seen
    filter). Bounded: past ``MAX_DENIED`` it forgets them all and starts again."""

    urls: set[str] = attrs.Factory(set)

    def first(self, url: str) -> bool:
        if url in self.urls:
            return False
        if len(self.urls) >= MAX_DENIED:
            self.urls.clear()
        self.urls.add(url)
        return True


def _keeps(url: str, host: str, held: Held, origin: Origin) -> bool:
    """Whether a link found on ``held``'s page, to ``host``, passes the page's host's
    rules (depth is the caller's: every link of a default parse has the same)."""
    if host != held.host:
        return True
    robots = origin.robots
    if robots is not None and robots.heavy:
        robots = None  # checking each link would stall the loop; the owner checks later
    return not (origin.host_full or (robots is not None and not robots.allowed(url)))


def _known_kept(deep: int | None, known: list[tuple[str, str]], held: Held, origin: Origin) -> int:
    """How many of a default parse's ``known`` links ``_allowed`` would keep."""
    if deep is not None and held.entry.depth + 1 > deep:
        return 0
    return sum(_keeps(url, host, held, origin) for url, host in known)
