"""From a response to an outcome: the items to write and the requests to follow.

An :class:`Outcome` is everything one held entry leads to, and knows how to put itself
into a commit :class:`~hashcrawl._store.Batch`. A :class:`Handler` turns responses into
outcomes; with no parse callback it writes one item per page and follows every link.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._entry import MAX_ENTRY_BYTES, Entry
from ._exceptions import ConfigError
from ._faults import FAULTS
from ._frontier import Held
from ._links import request_url
from ._models import Request, Response
from ._robots import parse_retry_after
from ._sinks import as_dict
from ._sitemaps import sitemap_entries
from ._store import Batch, dead_key
from ._urls import canonicalize, fingerprint, host_key

if TYPE_CHECKING:
    from ._ring import Ring
    from ._worker import _Session

Parse = Callable[[Response], Any]
MAX_REDIRECTS = 5  # hops in one chain, as RFC 9309 asks of robots.txt and browsers allow
RETRY_AFTER_CAP = 600.0  # a server's Retry-After is honoured up to ten minutes
LOOP_HOLD_WARNING = 1.0  # seconds a callback may hold the event loop before it is reported


def is_overloaded(status: int) -> bool:
    """A status that asks to come back later: 429 and every 5xx, retried, never done."""
    return status == 429 or 500 <= status <= 599


def retry_wait(attempts: int, retry_after: str | None) -> float:
    """Seconds a host waits after a failure: its Retry-After (capped) or 1, 2, 4... to 60."""
    asked = parse_retry_after(retry_after, _unix_now())
    if asked is not None:
        return min(asked, RETRY_AFTER_CAP)
    return min(60.0, 2.0**attempts)


log = logging.getLogger("hashcrawl")


@attrs.frozen(kw_only=True)
class Outcome:
    """What one held entry came to; ``kind`` is done, retry, bad, dead, forward or park."""

    kind: str
    eid: str
    held: Held | None = None
    items: list[Any] = attrs.Factory(list)
    follows: list[Entry] = attrs.Factory(list)
    widen: list[str] = attrs.Factory(list)  # hosts to add to the crawl's scope
    error: str = ""
    payload: str = ""

    @classmethod
    def done(
        cls, held: Held, items: list[Any], follows: list[Entry], widen: list[str] | None = None
    ) -> Outcome:
        return cls(
            kind="done", eid=held.eid, held=held, items=items, follows=follows, widen=widen or []
        )

    @classmethod
    def retry(
        cls, held: Held, error: str, items: Iterable[Any] = (), follows: Iterable[Entry] = ()
    ) -> Outcome:
        """A failed try; ``items`` and ``follows`` are what it produced that is kept."""
        return cls(
            kind="retry", eid=held.eid, held=held, error=error, items=[*items], follows=[*follows]
        )

    @classmethod
    def bad(cls, eid: str, error: str = "") -> Outcome:
        """An entry nobody can read: acknowledged, counted, ``error`` kept as a sample."""
        return cls(kind="bad", eid=eid, error=error)

    @classmethod
    def dead(cls, held: Held, error: str) -> Outcome:
        """An entry this owner cannot handle at all: dead-lettered at once with why."""
        return cls(kind="dead", eid=held.eid, held=held, error=error)

    @classmethod
    def forward(cls, held: Held, payload: str) -> Outcome:
        return cls(kind="forward", eid=held.eid, held=held, payload=payload)

    @classmethod
    def park(cls, held: Held, payload: str) -> Outcome:
        return cls(kind="park", eid=held.eid, held=held, payload=payload)

    def add_to(self, batch: Batch, session: _Session, ring: Ring) -> None:
        if self.kind == "forward":
            assert self.held is not None
            batch.mv.append([self.eid, session.target_of(ring, self.held.host), self.payload])
            return
        if self.kind == "park":
            assert self.held is not None
            batch.park.append([self.eid, self.held.host, park_score(self.held), self.payload])
            return
        # What the seen filter would not stop twice goes with the acknowledgement, once.
        once: list[str] = []
        if self.kind == "bad":
            batch.bad.append([self.eid, f"{self.eid}: {self.error}"[:300]])
            return
        if self.kind == "dead":
            assert self.held is not None
            batch.dead += dead_letter(self.held.entry, self.error)
        elif self.kind == "retry":
            once += self._retry(batch, session, ring)
        for entry in self.follows:
            once += self._add_follow(batch, session, ring, entry)
        if once:
            batch.once.append([self.eid, *once])
        else:
            batch.ack.append(self.eid)

    def _retry(self, batch: Batch, session: _Session, ring: Ring) -> list[str]:
        assert self.held is not None
        entry = attrs.evolve(self.held.entry, attempts=self.held.entry.attempts + 1)
        if is_last_attempt(self.held.entry, session.s.max_attempts):
            batch.dead += dead_letter(entry, self.error)
            return []
        return [session.target_of(ring, self.held.host), entry.encode()]

    @staticmethod
    def _add_follow(batch: Batch, session: _Session, ring: Ring, entry: Entry) -> list[str]:
        """Add a follow that passes the scope and the seen filter; return one that skips
        the filter. The scope is applied here, as the batch is made, because the commit
        checks that it is still the fleet's (see ``_scope``)."""
        if not session.in_scope(entry):
            return []
        if entry.dont_filter:
            return [session.target_of(ring, host_key(entry.canonical)), entry.encode()]
        h1, h2 = fingerprint(entry.key)
        skip_filter = "skip_seen_filter" in FAULTS  # a deliberate bug to catch: duplicates
        if skip_filter or not session.is_cached((h1, h2)):
            target = session.target_of(ring, host_key(entry.canonical))
            batch.add.append([target, entry.encode(), h1, h2, 0 if skip_filter else 1])
        return []


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
        callbacks: Callable[[str], Parse] | None = None,
        blocking: bool = False,
    ):
        self.parse = parse
        self.callbacks = callbacks
        self.blocking = blocking  # run synchronous callbacks in a thread

    async def handle(self, session: _Session, held: Held, response: Response) -> Outcome:
        """The outcome of a response: retried if the server is overloaded, dead-lettered
        if it redirects once too often, else the items and follows it gives."""
        if is_overloaded(response.status):
            wait = retry_wait(held.entry.attempts, response.headers.get("retry-after"))
            session.frontier.back_off(held.host, session.now() + wait)
            return Outcome.retry(held, f"HTTP {response.status}")
        redirect = self._redirect(held, response)
        most = MAX_REDIRECTS if held.entry.max_redirects is None else held.entry.max_redirects
        if redirect and held.entry.hops >= most:
            reason = f"more than {most} redirects (next: {redirect[0].url})"
            return Outcome.dead(held, reason)
        if held.entry.sitemap:  # hashcrawl's own request: no item, no parse callback
            # Up to 50,000 URLs to read and escape: a thread's work, not the event loop's.
            found = await trio.to_thread.run_sync(
                sitemap_entries, held.entry, response.body, response.url
            )
            follows = found if 200 <= response.status < 300 else []
            follows += redirect
            return Outcome.done(held, [], self._allowed(follows, session, held))
        capped = attrs.evolve(response, max_links=session.s.max_links)
        items: list[Any] = []
        follows = []
        try:
            limit = session.s.parse_timeout
            try:
                with trio.fail_after(limit):
                    await self._produce(held, capped, session, items, follows)
            except trio.TooSlowError:
                error = f"the parse callback ran past --parse-timeout ({limit:g} s)"
                raise ParseTimeout(error) from None
        except Exception as exc:  # a callback's bug fails its page, not the worker
            log.exception("parsing %s failed", held.entry.url)
            error = f"{type(exc).__name__}: {exc}"
            wait = retry_wait(held.entry.attempts, None)
            session.frontier.back_off(held.host, session.now() + wait)
            if not is_last_attempt(held.entry, session.s.max_attempts):
                return Outcome.retry(held, error)  # the retry produces them again
            # The page goes to the dead letters: what came before the exception is kept.
            return Outcome.retry(held, error, items, self._allowed(follows, session, held))
        session.counters.links_dropped += _unread_links(capped)
        # A submitted URL that redirects (http to https, a bare domain to www.) brings
        # its target's host into the scope, as wget takes the start URL's redirect.
        widen = [host_key(e.canonical) for e in redirect if held.entry.depth == 0]
        follows += redirect
        kept = self._allowed(follows, session, held)
        session.w.tally.links(len(follows), len(kept))
        return Outcome.done(held, items, kept, widen)

    async def _produce(
        self,
        held: Held,
        response: Response,
        session: _Session,
        items: list[Any],
        follows: list[Entry],
    ) -> None:
        """Add the page's items and follows to the lists, one by one as they come.

        A callback's requests past ``max_links`` are counted as dropped, not kept.

        Raises:
            Exception: whatever the callback raised, or ``TypeError``/``ConfigError`` for
                a thing it produced that is not an item, a Request, a URL or None. What
                was produced before stays in the lists.
        """
        parse = self._callback_for(held)
        if parse is None:
            links = response.links() if 200 <= response.status < 300 else []
            items.append(page_item(held, response, session.id))
            follows += [Entry(url=u, depth=held.entry.depth + 1) for u in links]
            return
        most = session.s.max_links
        steps = _Steps(parse, response, self.blocking)
        async with contextlib.aclosing(steps.each()) as produced:
            async for thing in produced:
                if isinstance(thing, Request | str) and len(follows) >= most:
                    session.counters.links_dropped += 1  # past --max-links: not even read
                elif isinstance(thing, Request | str):
                    if isinstance(thing, Request) and not self._knows(thing.callback):
                        raise ConfigError(f"Request names an unknown callback {thing.callback!r}")
                    follow = _as_entry(thing, response, held.entry.depth + 1)
                    if follow is not None:
                        follows.append(follow)
                elif thing is not None:
                    items.append(as_dict(thing))
        if steps.held_loop > LOOP_HOLD_WARNING:
            log.warning(
                "the parse callback held the event loop %.1f s on %s: set blocking = True "
                "on the spider to run it in a thread",
                steps.held_loop,
                held.entry.url,
            )

    def accepts(self, entry: Entry) -> bool:
        """Whether an entry's callback (if any) names a method this handler may call."""
        return self._knows(entry.callback)

    def _knows(self, name: str | None) -> bool:
        if name is None:
            return True
        if self.callbacks is None:
            return False
        try:
            self.callbacks(name)
        except ConfigError:
            return False
        return True

    def _callback_for(self, held: Held) -> Parse | None:
        if held.entry.callback and self.callbacks is not None:
            return self.callbacks(held.entry.callback)
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
            same_host = host_key(canonicalize(target)) == held.host
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

    @staticmethod
    def _allowed(follows: list[Entry], session: _Session, held: Held) -> list[Entry]:
        s = session.s
        # A link to this page's own host that its robots.txt forbids goes no further:
        # this worker owns the host and would refuse the entry anyway, after an XADD, a
        # read and an acknowledgement. Other hosts' rules are their owners' to apply.
        robots = session.robots.get(held.host) if s.obey_robots else None
        if robots is not None and robots.heavy:
            robots = None  # checking each link would stall the loop; the owner checks later
        full = session.host_is_full(held.host)
        kept = []
        for e in follows:
            host = host_key(e.canonical)
            if s.max_depth is not None and e.depth > s.max_depth:
                continue
            if host == held.host and (full or (robots is not None and not robots.allowed(e.url))):
                continue
            kept.append(e)
        return kept


def is_last_attempt(entry: Entry, max_attempts: int) -> bool:
    """Whether a failure of this try sends the entry to the dead letters."""
    return entry.attempts + 1 >= max_attempts


def dead_letter(entry: Entry, error: str) -> list[str]:
    """The dead-letter record of an entry out of attempts: its key (the fingerprint of
    its URL), last error and entry (with the URL)."""
    record = {
        "error": error[:500],
        "attempts": entry.attempts,
        "entry": entry.encode(),
        "at": int(_unix_now()),  # so status can show the most recent
    }
    return [dead_key(entry.key), json.dumps(record, ensure_ascii=False)]


def park_score(held: Held) -> float:
    """Order in a host's overflow set: higher priority first, then oldest first."""
    ms = int(held.eid.split("-", 1)[0]) if held.eid[:1].isdigit() else 0
    return -max(-500, min(500, held.entry.priority)) * 1e13 + ms


def page_item(held: Held, response: Response, worker: str) -> dict[str, Any]:
    """The item hashcrawl writes for a page when no parse callback is given."""
    return {
        "url": held.entry.url,
        "final_url": response.url,
        "status": response.status,
        "content_type": response.headers.get("content-type"),
        "length": len(response.body),
        "title": response.title(),
        "canonical": response.canonical(),
        "depth": held.entry.depth,
        "fetched_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        "worker": worker,
    }


class ParseTimeout(Exception):
    """A parse callback ran past ``--parse-timeout`` and was cancelled."""


_DONE = object()


class _Steps:
    """A callback's run, one produced thing at a time, its synchronous steps timed.

    A blocking spider's synchronous steps (the call, each ``next``) run in a thread,
    abandoned if ``--parse-timeout`` cancels them; otherwise they run on the event loop
    and ``held_loop`` adds up how long they held it.
    """

    def __init__(self, parse: Parse, response: Response, blocking: bool) -> None:
        self.parse = parse
        self.response = response
        self.blocking = blocking
        self.held_loop = 0.0

    async def step(self, call: Callable[..., Any], *args: Any) -> Any:
        if self.blocking:
            return await trio.to_thread.run_sync(call, *args, abandon_on_cancel=True)
        start = time.monotonic()
        try:
            return call(*args)
        finally:
            self.held_loop += time.monotonic() - start

    async def each(self) -> AsyncGenerator[Any, None]:
        produced = await self.step(self.parse, self.response)
        if isinstance(produced, Iterator) and not isinstance(produced, str):
            try:
                while (thing := await self.step(next, produced, _DONE)) is not _DONE:
                    yield thing
            finally:
                close = getattr(produced, "close", None)
                if close is not None:
                    with contextlib.suppress(ValueError):  # still running in an abandoned thread
                        close()
            return
        async with contextlib.aclosing(_each(produced)) as things:
            async for thing in things:
                yield thing


async def _each(produced: Any) -> AsyncGenerator[Any, None]:
    """What a callback produced, one thing at a time, so an exception keeps what came before."""
    if inspect.isawaitable(produced):
        produced = await produced
    if inspect.isasyncgen(produced):
        async with contextlib.aclosing(produced):
            async for thing in produced:
                yield thing
    elif produced is None:
        return
    elif isinstance(produced, dict | str) or attrs.has(type(produced)):
        yield produced
    elif isinstance(produced, Iterable):
        for thing in produced:
            yield thing
    else:
        yield produced


def _as_entry(thing: Request | str, response: Response, depth: int) -> Entry | None:
    request = thing if isinstance(thing, Request) else Request(thing)
    url = request_url(response.url, request.url)
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


def _unread_links(response: Response) -> int:
    """Links a capped parse of the page left unread (0 if links() was never asked for)."""
    page = response._parsed[0] if response._parsed else None
    return page.dropped if page is not None else 0


def _unix_now() -> float:
    return time.time()
