"""From a response to an :class:`~hashcrawl._core._outcome.Outcome`: items, follows, backoff.

A :class:`Handler` does what the core's response policy (``_core._respond``) decides
for a response: it reads a sitemap, runs the parse callback or the errback, and collects
their items and follows into the outcome; with no callback it writes one item per page
and follows every link. It knows nothing of the worker: what it needs of the page's host
(its robots.txt rules, whether it has had its pages) comes in with the response, and how
long the host should wait goes out in the outcome.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from hashcrawl._core._due import Fetch, bucket_bits, judged
from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import (
    PARSE_FAULT,
    Denied,
    Follows,
    Kind,
    Outcome,
    is_last_attempt,
)
from hashcrawl._core._outcome import Origin as Origin
from hashcrawl._core._patterns import Patterns, Screen
from hashcrawl._core._respond import Act, Decision, Facts, Reader, parse_failed, respond
from hashcrawl._core._revisit import Policy, Verdict
from hashcrawl._core._settings import Settings, revisit_policy
from hashcrawl._core._steps import steps_refusal
from hashcrawl._exceptions import HttpError
from hashcrawl._run._callbacks import (
    Caller,
    Produced,
    failure,
    fetched,
    page_item,
    spider_frames,
    unix_now,
    unread_links,
)
from hashcrawl._spiders._parsing import Parser, least_away
from hashcrawl._spiders._sitemaps import sitemap_entries
from hashcrawl._spiders._spider import Calls, Failure
from hashcrawl._web._models import Request, Response

Parse = Callable[[Response], Any]

log = logging.getLogger("hashcrawl")


class Handler:
    """Turns a response into an outcome, through an optional parse callback.

    The callback takes a :class:`Response` and returns (or yields) items (dicts or attrs
    instances) and things to follow (:class:`Request` objects or URL strings): a function,
    a generator, or async. Without one, each page gives one item and every link is followed.
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
        reader = Reader.FUNCTION if parse is not None else Reader.DEFAULT
        self.reader = Reader.SPIDER if spider is not None else reader
        self.statuses = spider.statuses if spider is not None else frozenset[int]()
        self.settings = settings if settings is not None else Settings()
        self.denied = Denied()  # links robots.txt kept out, each counted once
        self.screen = Screen()  # links the crawl's patterns kept out
        self._policy_of: tuple[Settings, Policy | None] | None = None
        least = least_away() if parse is None and spider is None else None
        self.parser = None if least is None else Parser(least)  # large pages: _parsing

    async def handle(
        self, held: Held, response: Response, origin: Origin, *, server_s: float | None = None
    ) -> Outcome:
        """The outcome of a response (``_handled``) and, with ``--revisit``, the page's
        next revisit record, due ``server_s`` (the server's clock now, as the session
        knows it; this machine's clock without) plus its interval. A revisit that found
        the page unchanged (a 304, or the same content) writes no item and follows
        nothing: its callback saw it already."""
        fetch = self._revisit(held, response, server_s)
        if fetch is not None and fetch.verdict is Verdict.UNCHANGED:
            return attrs.evolve(Outcome.done(held, [], []), revisit=fetch)
        outcome = await self._handled(held, response, origin)
        if fetch is None or outcome.kind is not Kind.DONE:
            return outcome  # a retried page's record waits, its requeue lease running
        return attrs.evolve(outcome, revisit=fetch)

    def _revisit(self, held: Held, response: Response, server_s: float | None) -> Fetch | None:
        """With --revisit, the page's next revisit record (``revisit_policy`` parsed once
        for each settings value given); rounded up, so a revisit never comes before the
        interval has passed."""
        settings = self.settings
        if self._policy_of is None or self._policy_of[0] is not settings:
            self._policy_of = (settings, revisit_policy(settings))
        if (policy := self._policy_of[1]) is None:
            return None
        now_s = math.ceil(unix_now() if server_s is None else server_s)
        bits = bucket_bits(settings.revisit_pages)  # fixed with the crawl
        return judged(held.entry, fetched(response), policy, now_s, bits=bits)

    async def _handled(self, held: Held, response: Response, origin: Origin) -> Outcome:
        """The outcome of a response: what the response policy decides (``respond``),
        done; ``failed`` tells the errback of a page that failed for good."""
        decision = respond(self._facts(held, response))
        act, redirect = decision.act, decision.redirect
        follows = [] if redirect is None else [redirect]
        if act is Act.RETRY:
            return Outcome.retry(held, decision.reason, backoff=decision.wait)
        if act is Act.GIVE_UP or act is Act.TOO_MANY_REDIRECTS:  # the errback's turn
            retry = Outcome.retry(held, decision.reason, backoff=decision.wait)
            gone = retry if act is Act.GIVE_UP else Outcome.dead(held, decision.reason)
            return await self.failed(held, gone, HttpError(response))
        if act is Act.SITEMAP:  # hashcrawl's own request: no item, no parse callback
            if decision.read:  # up to 50,000 URLs to read and escape: a thread's work
                entry, body, url = held.entry, response.body, response.url
                follows[:0] = await trio.to_thread.run_sync(sitemap_entries, entry, body, url)
            kept = self._allowed(follows, held, origin)
            return Outcome.done(held, [], kept)
        if act is Act.FOLLOW:
            kept, widen = self._allowed(follows, held, origin), list(decision.widen)
            return Outcome.done(held, [], kept, widen, found=len(follows))
        if act is Act.ERRBACK:
            return await self.failed(held, Outcome.done(held, [], []), HttpError(response), origin)
        return await self._parsed(held, response, origin, decision)

    def _facts(self, held: Held, response: Response) -> Facts:
        """What the response policy is told of ``response`` to ``held``'s request."""
        page = (response.status, response.url, response.headers, held)
        return Facts(*page, unix_now(), self.settings.max_attempts, self.reader, self.statuses)

    async def _parsed(
        self, held: Held, response: Response, origin: Origin, decision: Decision
    ) -> Outcome:
        """The outcome of parsing ``response``: its callback's items and follows (and
        the ``decision``'s redirect target), or a retry if the callback raised."""
        settings = self.settings
        capped = attrs.evolve(response, max_links=settings.max_links)
        produced = Produced()
        if self.parser is not None:
            await self.parser.prepare(capped)
        try:
            if (parse := self._callback_for(held)) is None:  # no checkpoint: nothing to time
                self._default(held, capped, origin, produced)
            else:
                await self._caller().run(parse, capped, held, produced, capped.url)
        except Exception as exc:  # a callback's bug fails its page, not the worker
            error = f"the parse callback {self._name_of(held)} {failure(exc)}"
            log.error("parsing %s failed: %s\n%s", held.entry.url, error, spider_frames(exc))
            failed = parse_failed(held.entry, settings.max_attempts, error)
            if failed.act is Act.RETRY:  # the retry produces them again
                return Outcome.retry(held, error, backoff=failed.wait, fault=PARSE_FAULT)
            kept = self._allowed(produced.follows, held, origin)  # dead, with what came first
            items, wait = produced.items, failed.wait
            return Outcome.retry(held, error, items, kept, backoff=wait, fault=PARSE_FAULT)
        follows = produced.follows + ([] if decision.redirect is None else [decision.redirect])
        kept = self._allowed(follows, held, origin)
        return Outcome.done(
            held,
            produced.items,
            kept,
            list(decision.widen),
            found=len(follows) + len(produced.known),
            dropped=produced.dropped + unread_links(capped),
            known=origin.known_kept(produced.known, held, settings.max_depth),
        )

    def _caller(self) -> Caller:
        """What runs a callback or errback, with the crawl's limits as they are now."""
        s = self.settings
        return Caller(self.spider, self.blocking, s.max_links, s.parse_timeout, self._unknown)

    async def failed(
        self, held: Held, outcome: Outcome, error: BaseException, origin: Origin | None = None
    ) -> Outcome:
        """``outcome`` of a page that failed for good (or whose status its callback does
        not take), with what the request's errback gives added; unchanged without one,
        or if it was to be tried again. An errback's own error is logged, and what it
        gave before is kept."""
        errback = self.spider.errback(held.entry) if self.spider is not None else None
        last = is_last_attempt(held.entry, self.settings.max_attempts)
        if errback is None or (outcome.kind is Kind.RETRY and not last):
            return outcome
        response = getattr(error, "response", None)
        sent = response.request if response is not None else Request.from_entry(held.entry)
        failure = Failure(error, sent)
        produced = Produced()
        try:
            await self._caller().run(errback, failure, held, produced, held.entry.url)
        except Exception:
            log.exception("the errback of %s failed", held.entry.url)
        kept = self._allowed(produced.follows, held, origin or Origin(""))
        return attrs.evolve(
            outcome, items=[*outcome.items, *produced.items], follows=[*outcome.follows, *kept]
        )

    @staticmethod
    def _default(held: Held, response: Response, origin: Origin, produced: Produced) -> None:
        """What the default parse produces: the page's item, and an entry per link this
        worker has not queued already (``Origin.unqueued``)."""
        links = response.links() if 200 <= response.status < 300 else []
        produced.items.append(page_item(held, response, origin.worker))
        produced.follows, produced.known = origin.unqueued(links, held.entry.depth + 1)

    def refusal(self, entry: Entry) -> str | None:
        """Why this handler cannot take an entry read from Redis (a callback, errback or
        rule its spider lacks, unusable cb_kwargs, steps it may not do), or None."""
        steps = _steps_refusal(entry, self.spider, self.settings, self.name)
        if self.spider is not None:
            return self.spider.refusal(entry) or steps
        why = self._unknown(entry)
        return steps if why is None else f"spider {self.name} has {why}"

    def _unknown(self, request: Request | Entry) -> str | None:
        if self.spider is not None:
            return self.spider.unknown(request)
        for kind, name in (("callback", request.callback), ("errback", request.errback)):
            if name is not None:
                return f"no {kind} {name!r:.80}"
        return None if request.rule is None else f"no rule {request.rule}"

    def _name_of(self, held: Held) -> str:
        """The callback ``held``'s page went to, as its author knows it."""
        if self.spider is not None:
            return self.spider.callback_name(held.entry)
        return str(getattr(self.parse, "__qualname__", None) or "parse")

    def _callback_for(self, held: Held) -> Parse | None:
        if self.spider is not None:
            return self.spider.callback(held.entry)
        return self.parse

    def _allowed(self, follows: list[Entry], held: Held, origin: Origin) -> Follows:
        """The ``follows`` that go on: those the crawl's patterns let in (the others
        counted in ``refused``, each URL once), then the page's host's rules."""
        s = self.settings
        wanted, refused = self.screen.wanted(follows, Patterns(s.accept_regex, s.reject_regex))
        kept = origin.kept(wanted, held, s.max_depth, self.denied)
        kept.refused = refused
        return kept


def _steps_refusal(entry: Entry, spider: Calls | None, settings: Settings, name: str) -> str | None:
    """Why the entry's steps reach what this worker does not let them: a call of what is
    not the spider's own method, an upload with no upload directory."""
    why = steps_refusal(
        entry.steps,
        methods=lambda method: spider is not None and spider.step_method(method) is not None,
        uploads=settings.browser_upload_dir is not None,
    )
    return None if why is None else f"spider {name}: {why}"
