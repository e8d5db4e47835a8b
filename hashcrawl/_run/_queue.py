"""Feeding and inspecting a crawl from outside the fleet (blocking, for scripts and the CLI)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from hashcrawl._core._batch import Status, chunks
from hashcrawl._core._entry import Entry
from hashcrawl._core._links import sendable
from hashcrawl._core._parents import MAX_PARENTS, member_of
from hashcrawl._core._patterns import Patterns
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._urls import canonicalize, fingerprint
from hashcrawl._exceptions import ConfigError
from hashcrawl._spiders._spider import Calls
from hashcrawl._store._base import StatusStore, WorkerStore
from hashcrawl._store._redisurl import RedisURL, check_crawl_name
from hashcrawl._store._shards import Shards, queued_any, shard_tags, stored_tags
from hashcrawl._store._store import Batch, Store
from hashcrawl._web._addresses import PYTHON_ALLOW_HINT, AddressPolicy, SubmitCheck
from hashcrawl._web._models import Request

BATCH = 1000


NO_PATTERNS = Patterns(None, None)  # a crawl with no --accept-regex or --reject-regex


class Queue:
    """A crawl's shared queue: ``submit`` URLs into it, read its ``status``, ``clear`` it.

    Args:
        redis: the Redis URL (``redis://``, ``rediss://``, ``redis+unix://``,
            ``redis+sentinel://``).
        crawl: the crawl's name; its keys are namespaced by it.
    """

    def __init__(
        self,
        redis: str | RedisURL,
        crawl: str,
        *,
        timeout: float = 20.0,
        shards: int | None = None,
    ) -> None:
        """Args:
        shards: the crawl's shards (``--shards``): recorded by the first submit if the
            crawl has not begun; refused if it differs from the crawl's (None: the crawl's).
        """
        url = redis if isinstance(redis, RedisURL) else RedisURL.parse(redis, name="redis")
        self._store = Store(url, check_crawl_name(crawl, called="crawl"), timeout=timeout)
        self._given = shards
        self._timeout = timeout
        self._shards: Shards | None = None

    def _target(self, *, record: bool = False) -> Store | Shards:
        """The crawl's shards if it has several, else its one store; with ``record``, the
        shards given are recorded if the crawl has none yet."""
        if self._shards is None:
            tags = shard_tags(self._store, self._given) if record else self._stored()
            if tags:
                self._shards = Shards(self._store, tags, timeout=self._timeout)
        return self._shards if self._shards is not None else self._store

    def _stored(self) -> list[str]:
        tags = stored_tags(self._store) or []
        if self._given is not None and self._given != len(tags) + 1:
            shard_tags(self._store, self._given)  # raises the one-line error
        return tags

    def _stores(self) -> list[Store]:
        target = self._target()
        return target.stores if isinstance(target, Shards) else [target]

    def submit(
        self,
        urls: Iterable[str],
        *,
        priority: int = 0,
        dont_filter: bool = False,
        allow_domains: Iterable[str] = (),
        span_hosts: bool = False,
        allow_nets: Iterable[str] = (),
        allow_private: bool = False,
    ) -> int:
        """Add URLs to the crawl, a thousand at a time; returns how many were new.

        Each URL goes to its host owner's stream, or waits in the inbox until a worker
        joins. A URL seen before is left out unless ``dont_filter``. The URLs' hosts join
        the crawl's scope (the hosts its links may lead to), and so do the hosts in
        ``allow_domains``, or every host with ``span_hosts``.

        A URL the crawl's ``--accept-regex`` or ``--reject-regex`` keeps out is refused
        too, with the pattern named (see :meth:`patterns`).

        A URL at an address the workers refuse by default (loopback, private, link-local)
        is refused here too, as ``hashcrawl submit`` refuses it, unless ``allow_nets``
        holds its network or ``allow_private`` is true (give the workers the same). IP
        literals are judged always, host names for the first 64 distinct ones.

        Raises:
            InvalidURL: a URL is not an http(s) URL.
            ConfigError: a URL is at an address not allowed, or ``allow_nets`` holds
                something that is not a network. A list or tuple is checked whole before
                anything goes in; any other iterable a batch of a thousand at a time:
                earlier batches are in, this one and later ones are not.
            QueueError: Redis could not be reached.
        """
        check = SubmitCheck(AddressPolicy.of(allow_nets, allow_private), PYTHON_ALLOW_HINT)
        patterns = self.patterns()
        if isinstance(urls, list | tuple):
            urls = list(_allowed(urls, check, patterns))  # all, before anything is written
        else:
            urls = _allowed(urls, check, patterns)
        target = self._target(record=True)
        for store in self._stores():
            store.widen_scope(scope_members(domains=allow_domains, span=span_hosts))
        return submit_urls(target, urls, priority=priority, dont_filter=dont_filter)

    def patterns(self) -> Patterns:
        """The crawl's URL patterns as recorded in Redis (none before the first worker
        or ``configure`` records its settings)."""
        return stored_patterns(self._store)

    def other_crawls(self) -> list[str]:
        """Names of the crawls with keys on this Redis server (one bounded SCAN)."""
        return self._store.other_crawls()

    def status(self) -> dict[str, Any]:
        """Waiting, held, workers (with hosts owned and pages fetched), seen, fetched...,
        and the crawl's ``settings`` (see :meth:`settings`)."""
        stores = self._stores()
        spread = Counter(s._nodes.owner or "one server" for s in stores)
        status = merged([s.status() for s in stores])
        return {**status, "spread": dict(sorted(spread.items())), "settings": self.settings()}

    def idle_since_ms(self) -> int | None:
        """Server ms since which nothing was outstanding in any shard (see
        ``Views.idle_since_ms``); a shard nothing was ever queued in is idle."""
        values = [s.idle_since_ms() for s in self._stores()]
        if len(values) == 1:
            return values[0]
        begun = [v for s, v in zip(self._stores(), values, strict=True) if queued_any(s)]
        return None if not begun or None in begun else max(v for v in begun if v is not None)

    def settings(self) -> dict[str, Any]:
        """The crawl's settings by field name, and their ``version`` (None if none are
        recorded yet; then ``error`` says why if the record is unusable)."""
        from hashcrawl._store._crawlconfig import view

        return view(self._store)

    def clear(self) -> int:
        """Delete every key of the crawl (every shard's); returns how many were deleted."""
        return sum(store.clear() for store in reversed(self._stores()))

    def dead(self) -> dict[str, str]:
        """Pages that used up their attempts (URL -> their last error)."""
        dead = {k: t for store in self._stores() for k, t in store.dead().items()}
        records = (_dead_record(text, key) for key, text in dead.items())
        return {entry.url: error for entry, error in records}

    def retry_dead(self) -> int:
        """Put every dead-lettered page back in the crawl with fresh attempts."""
        retried = 0
        for store in self._stores():  # a dead letter is in its host's shard
            dead = store.dead()
            for chunk in chunks(iter(dead), BATCH):
                entries = [_dead_record(dead[key], key)[0] for key in chunk]
                _submit_entries(store, entries)  # their hosts are in the scope already
                store.forget_dead(chunk)
                retried += len(chunk)
        return retried

    def close(self) -> None:
        if self._shards is not None:
            self._shards.close()
        self._store.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Target = WorkerStore | Shards  # one store, or a sharded crawl's shards


def check_start_urls(
    urls: Iterable[str],
    policy: AddressPolicy,
    patterns: Patterns = NO_PATTERNS,
    hint: str = PYTHON_ALLOW_HINT,
) -> None:
    """Refuse, before anything goes in, a start URL no worker would fetch: one the
    address rule ``policy`` refuses to connect to (left to the fetcher, it would show only
    as a dead letter after a crawl of nothing) or the crawl's ``patterns`` keep out.

    Raises:
        ConfigError: the first such URL, naming the settings that would allow it
            (``hint``: Python's names by default, the flags' from the command line).
    """
    for _ in _allowed(urls, SubmitCheck(policy, hint), patterns):
        pass


def _allowed(urls: Iterable[str], check: SubmitCheck, patterns: Patterns) -> Iterator[str]:
    """``urls``, each checked against the address rule and the crawl's patterns as it
    is read (see :func:`check_start_urls`).

    Raises:
        ConfigError: the first URL refused.
    """
    for url in urls:
        canonical = canonicalize(url)
        refused = check.refusal(canonical)
        why = f"start URL {url:.200}: {refused}" if refused else None
        why = why or unwanted_start(url, canonical, patterns)
        if why is not None:
            raise ConfigError(why)
        yield url


def unwanted_start(url: str, canonical: str, patterns: Patterns) -> str | None:
    """Why a start URL is refused by the crawl's patterns (its canonical form is
    matched, as a link's is), or None."""
    refusal = patterns.refusal(canonical)
    if refusal is None:
        return None
    return (
        f"start URL {patterns.said(url, refusal)}: no worker would follow it, so it is not "
        f"submitted (hashcrawl configure {refusal.value} changes the crawl's pattern)"
    )


def stored_patterns(store: StatusStore) -> Patterns:
    """The URL patterns recorded with the crawl in ``store`` (none if none are)."""
    from hashcrawl._store._crawlconfig import view

    shown = view(store)
    return Patterns(shown.get("accept_regex"), shown.get("reject_regex"))


def submit_urls(
    store: Target, urls: Iterable[str], *, priority: int = 0, dont_filter: bool = False
) -> int:
    """Route URLs to their host owners' streams (or the inbox), a thousand per commit."""
    added = 0
    for chunk in chunks(urls, BATCH):
        entries = [
            Entry(url=_to_request(u), priority=priority, dont_filter=dont_filter) for u in chunk
        ]
        added += submit_entries(store, entries)
    return added


def submit_entries(store: Target, entries: list[Entry]) -> int:
    """Route start entries to their host owners' streams (or the inbox); their hosts and
    directories join the scope first (see ``_scope``, ``_parents``), every shard's in a
    sharded crawl, and each entry goes to its host's shard.

    Raises:
        ConfigError: the crawl has --no-parent and a chunk's new directories would pass
            ``MAX_PARENTS`` (that chunk and later ones are not submitted).
    """
    added = 0
    for chunk in chunks(entries, BATCH):
        _add_parents(store, {member_of(e.url) for e in chunk})
        members = scope_members(hosts={e.host for e in chunk})
        if not isinstance(store, Shards):
            store.widen_scope(members)
            added += _submit_entries(store, chunk)
            continue
        for each in store.stores:
            each.widen_scope(members)
        by_shard: dict[int, list[Entry]] = {}
        for entry in chunk:
            by_shard.setdefault(store.shard_of(entry.host), []).append(entry)
        for shard, group in sorted(by_shard.items()):
            added += _submit_entries(store.stores[shard], group)
    return added


def _add_parents(store: Target, members: set[str]) -> None:
    """Record start directories in the scope (every shard's), refused past the cap.

    Raises:
        ConfigError: the crawl has --no-parent and they would pass ``MAX_PARENTS``.
    """
    for each in store.stores if isinstance(store, Shards) else [store]:
        taken, count = each.add_parents(members, MAX_PARENTS)
        if not taken:
            raise ConfigError(
                f"--no-parent keeps at most {MAX_PARENTS:,} start directories and the crawl "
                f"has {count:,}: these URLs would add more, so they are not submitted "
                "(submit URLs under the directories it has, or hashcrawl configure --reset "
                "no-parent)"
            )


def submit_start_requests(store: Target, spider: Calls, starts: list[Request | str]) -> int:
    """The spider's first requests (``starts``, what ``Calls.first_requests`` gave) in
    the queue (those seen before left out).

    Raises:
        ConfigError: a start request names what the spider lacks, or is no http(s) URL.
    """
    entries = []
    for thing in starts:
        request = thing if isinstance(thing, Request) else Request(_to_request(thing))
        entry = request.to_entry(_to_request(request.url), 0)
        why = spider.refusal(entry) if entry is not None else "a URL that cannot be fetched"
        if entry is None or why is not None:
            raise ConfigError(f"start_requests gave {request.url!r:.100}: {why}")
        entries.append(entry)
    return submit_entries(store, entries)


def _submit_entries(store: WorkerStore, entries: list[Entry]) -> int:
    while True:
        ring = Ring.of(*store.members())
        batch = Batch(worker="", epoch=ring.epoch)
        for entry in entries:
            owner = ring.owner_of(entry.host)
            target = store.stream_of(owner) if owner else store.inbox
            h1, h2 = fingerprint(entry.key)
            batch.add.append([target, entry.encode(), h1, h2, 0 if entry.dont_filter else 1])
        result = store.commit(batch)
        if result.status is Status.OK:
            return result.added


SUMMED = ("waiting", "held", "seen", "queued", "dead", "leases_reclaimed", "queue_bad")


def merged(views: list[dict[str, Any]]) -> dict[str, Any]:
    """A sharded crawl's status: shard 0's (members and their counters, which every
    shard's heartbeat records alike), with the queue's figures summed over the shards."""
    first = dict(views[0])
    for view in views[1:]:
        for name in SUMMED:
            first[name] += view[name]
        first["bad_samples"] = first["bad_samples"] + view["bad_samples"]
        first["ended"] = first["ended"] and (view["ended"] or not view["exists"])
    first["shards"] = len(views)
    return first


def _to_request(url: str) -> str:
    """A submitted URL as it is requested: checked, then made fit to send as written.

    Raises:
        InvalidURL: not a crawlable http(s) URL.
    """
    canonicalize(url)
    return sendable(url)


def _dead_record(text: str, url: str = "") -> tuple[Entry, str]:
    """The entry to retry and the error of a dead letter (older records, keyed by ``url``,
    hold just the error)."""
    try:
        record = json.loads(text)
        entry = Entry.decode(record["entry"])
        error = str(record.get("error", ""))
    except (ValueError, KeyError, TypeError):
        return Entry(url=url, dont_filter=True), text
    return attrs.evolve(entry, attempts=0, suspect=False, dont_filter=True), error
