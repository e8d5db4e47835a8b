"""What a held entry came to, and how outcomes become one commit. Pure: no IO.

An :class:`Outcome` is everything one held entry leads to: items to write, entries to
follow, or where the entry itself goes (retried, dead-lettered, forwarded, parked). A
:class:`Router` knows where each host's entries go (the ring and the stream names), the
crawl's scope and the seen cache, and puts outcomes into a commit
:class:`~hashcrawl._store._store.Batch`; it also routes a departed worker's entries.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from hashcrawl._core._batch import Batch, dead_key
from hashcrawl._core._due import Fetch
from hashcrawl._core._entry import MAX_ENTRY_BYTES, BadEntry, Entry, too_long
from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._ring import Ring
from hashcrawl._core._robotsrules import Robots
from hashcrawl._core._scope import Scope
from hashcrawl._core._urls import canonical_parts, fingerprint
from hashcrawl._exceptions import InvalidURL

SEEN_CACHE = 200_000  # fingerprints of follows a worker remembers having queued
MAX_DENIED = 100_000  # robots.txt-denied link URLs a worker remembers, to count each once
PARSE_FAULT = "parse"  # an outcome's fault, and the error kind, of a callback that raised


class Kind(enum.Enum):
    """What becomes of the held entry an outcome is about."""

    DONE = "done"  # fetched (or skipped for good): acknowledged with its follows
    RETRY = "retry"  # failed: queued again, or dead-lettered once out of attempts
    BAD = "bad"  # unreadable: acknowledged and counted
    DEAD = "dead"  # this owner cannot handle it: dead-lettered at once
    FORWARD = "forward"  # another worker owns its host: moved to that worker's stream
    PARK = "park"  # its host has enough queued: moved to the host's overflow set


@attrs.frozen(kw_only=True)
class Outcome:
    """What one held entry came to.

    ``backoff`` is how long (seconds) the entry's host should wait before its next
    request; ``found`` and ``dropped`` count the page's links, for the metrics, and
    ``known`` those kept but left out of ``follows`` because this worker queued them
    already (the commit would drop them: see ``Origin.seen``); ``denied`` the links to
    the page's own host that its robots.txt disallows, left out of ``follows``;
    ``fault`` is ``"parse"`` when the parse callback failed: the page was fetched, and
    the error is the spider's, not the site's. ``revisit`` is written by the commit's
    revisit put, before the entry is acknowledged.
    """

    kind: Kind
    eid: str
    held: Held | None = None
    items: list[Any] = attrs.Factory(list)
    follows: list[Entry] = attrs.Factory(list)
    widen: list[str] = attrs.Factory(list)  # hosts to add to the crawl's scope
    error: str = ""
    payload: str = ""
    backoff: float | None = None
    found: int = 0
    dropped: int = 0
    known: int = 0
    denied: int = 0
    refused: int = 0  # links the crawl's --accept-regex/--reject-regex kept out
    fault: str = ""
    revisit: Fetch | None = None  # the page's next revisit record, with --revisit

    @classmethod
    def done(
        cls,
        held: Held,
        items: list[Any],
        follows: list[Entry],
        widen: list[str] | None = None,
        *,
        found: int = 0,
        dropped: int = 0,
        known: int = 0,
    ) -> Outcome:
        """A page done; ``follows`` kept by ``Origin.kept`` say how many links the
        rules kept out (``Follows.denied``, ``Follows.refused``)."""
        return cls(
            kind=Kind.DONE,
            eid=held.eid,
            held=held,
            items=items,
            follows=follows,
            widen=widen or [],
            found=found,
            dropped=dropped,
            known=known,
            denied=getattr(follows, "denied", 0),
            refused=getattr(follows, "refused", 0),
        )

    @classmethod
    def retry(
        cls,
        held: Held,
        error: str,
        items: Iterable[Any] = (),
        follows: Iterable[Entry] = (),
        *,
        backoff: float | None = None,
        fault: str = "",
    ) -> Outcome:
        """A failed try; ``items`` and ``follows`` are what it produced that is kept."""
        return cls(
            kind=Kind.RETRY,
            eid=held.eid,
            held=held,
            error=error,
            items=[*items],
            follows=[*follows],
            backoff=backoff,
            fault=fault,
        )

    @classmethod
    def bad(cls, eid: str, error: str = "") -> Outcome:
        """An entry nobody can read: acknowledged, counted, ``error`` kept as a sample."""
        return cls(kind=Kind.BAD, eid=eid, error=error)

    @classmethod
    def dead(cls, held: Held, error: str) -> Outcome:
        """An entry this owner cannot handle at all: dead-lettered at once with why."""
        return cls(kind=Kind.DEAD, eid=held.eid, held=held, error=error)

    @classmethod
    def forward(cls, held: Held) -> Outcome:
        """An entry of a host another worker owns now: it goes to that worker's stream."""
        return cls(kind=Kind.FORWARD, eid=held.eid, held=held, payload=held.entry.encode())

    @classmethod
    def park(cls, held: Held) -> Outcome:
        return cls(kind=Kind.PARK, eid=held.eid, held=held, payload=held.entry.encode())


class SeenCache:
    """Fingerprints of follows this worker queued: a follow seen here skips the filter.

    The commit script's seen filter would stop them anyway; the cache saves sending
    them. The oldest are forgotten beyond ``size``.
    """

    def __init__(self, size: int = SEEN_CACHE) -> None:
        self.size = size
        self._seen: dict[tuple[int, int], None] = {}

    def __contains__(self, fp: object) -> bool:
        return fp in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def queued(self, canonical: str) -> bool:
        """Whether this worker queued a plain GET of ``canonical`` (a canonical URL)."""
        return fingerprint(canonical) in self._seen

    def remember(self, added: Iterable[Sequence[Any]]) -> None:
        """Note the links a commit added through the seen filter: the rows of its batch's
        ``add`` (``[stream, payload, h1, h2, filter]``) with the filter flag set. Their
        fingerprints are the ones the batch was made with, so none is computed twice;
        dont_filter and out-of-scope follows have no such row (the filter never saw
        them)."""
        seen = self._seen
        for row in added:
            if row[4]:
                seen[(row[2], row[3])] = None
        while len(seen) > self.size:
            del seen[next(iter(seen))]


@attrs.frozen
class Router:
    """Where entries go at one epoch: each host's owner's stream (or the inbox)."""

    ring: Ring
    stream_of: Callable[[str], str]
    inbox: str
    scope: Scope = attrs.Factory(Scope)
    seen: SeenCache = attrs.Factory(SeenCache)
    max_attempts: int = 3
    #: The UNIX time written into dead letters (so status can show the most recent).
    at: int = 0
    faults: Faults = NO_FAULTS
    #: In a sharded crawl, whether a host is another shard's: its links are delivered
    #: there before this commit (``_run._sharding``), so the commit leaves them out.
    foreign: Callable[[str], bool] | None = None
    #: The crawl's --no-parent: a follow must be at or below a start directory.
    no_parent: bool = False

    def target_of(self, host: str) -> str:
        """The stream of ``host``'s owner, or the inbox while nobody is alive."""
        owner = self.ring.owner_of(host)
        return self.stream_of(owner) if owner else self.inbox

    def add(self, batch: Batch, outcome: Outcome) -> None:
        """Put ``outcome`` into ``batch``: its entry's fate, and its follows."""
        kind, eid, held = outcome.kind, outcome.eid, outcome.held
        if kind is Kind.BAD:
            batch.bad.append([eid, f"{eid}: {outcome.error}"[:300]])
            return
        assert held is not None
        if kind is Kind.FORWARD:
            batch.mv.append([eid, self.target_of(held.host), outcome.payload])
            return
        if kind is Kind.PARK:
            self._park(batch, outcome)
            return
        # What the seen filter would not stop twice goes with the acknowledgement, once.
        once: list[str] = []
        if kind is Kind.DEAD:
            batch.dead += dead_letter(held.entry, outcome.error, self.at)
        elif kind is Kind.RETRY:
            once += self._retry(batch, held, outcome.error, outcome.fault)
        for entry in outcome.follows:
            once += self.follow(batch, entry)
        if once:
            batch.once.append([eid, *once])
        else:
            batch.ack.append(eid)

    def _park(self, batch: Batch, outcome: Outcome) -> None:
        """Park an entry in its host's overflow set, or, when this batch's ring gives the
        host to another worker, move it to that owner's stream instead: the new owner read
        ``parked`` when it took the host, so a set filled after that would wait unseen."""
        held = outcome.held
        assert held is not None
        target = self.target_of(held.host)
        if target != batch.src and "park_unowned" not in self.faults:
            batch.mv.append([outcome.eid, target, outcome.payload])
        else:
            batch.park.append([outcome.eid, held.host, park_score(held), outcome.payload])

    def _retry(self, batch: Batch, held: Held, error: str, fault: str = "") -> list[str]:
        entry = attrs.evolve(held.entry, attempts=held.entry.attempts + 1)
        if is_last_attempt(held.entry, self.max_attempts):
            batch.dead += dead_letter(entry, error, self.at, fault)
            return []
        text = entry.encode()
        if too_long(text):  # written by hand at the limit: no reader would take it back
            batch.dead += dead_letter(entry, f"{error}; {_GROWN}", self.at, fault)
            return []
        return [self.target_of(held.host), text]

    def follow(self, batch: Batch, entry: Entry) -> list[str]:
        """Add a follow that passes the scope (--no-parent's directories too) and the
        seen filter; return one that skips the filter. The scope is applied here, as the
        batch is made, because the commit checks that it is still the fleet's (see
        ``_scope``): a directory submitted meanwhile is in it before the links it allows
        are judged."""
        host = entry.host
        if not self.scope.allows(host) or (self.foreign is not None and self.foreign(host)):
            return []
        if self.no_parent and not self.scope.under_parent(entry.canonical, host):
            batch.unparented.append(entry)
            return []
        if entry.dont_filter:
            return [self.target_of(host), entry.encode()]
        h1, h2 = fingerprint(entry.key)
        skip_filter = "skip_seen_filter" in self.faults  # a deliberate bug to catch: duplicates
        if skip_filter or (h1, h2) not in self.seen:
            batch.add.append(
                [self.target_of(host), entry.encode(), h1, h2, 0 if skip_filter else 1]
            )
        return []

    def add_orphans(
        self, batch: Batch, got: list[tuple[str, bytes | None]], dying: set[str] | None
    ) -> None:
        """Move a departed worker's entries to their hosts' owners.

        With ``dying`` (the entries the departed worker said it was fetching when it
        died), each entry becomes a suspect, and those it was fetching use up an attempt.
        """
        for eid, payload in got:
            try:
                entry = Entry.decode(payload)
                host = entry.host
            except (BadEntry, InvalidURL) as exc:
                batch.bad.append([eid, f"{eid}: {exc}"[:300]])
                continue
            if dying is not None:
                attempts = entry.attempts + (eid in dying)
                entry = attrs.evolve(entry, suspect=True, attempts=attempts)
                if attempts >= self.max_attempts:
                    batch.ack.append(eid)
                    batch.dead += dead_letter(entry, "its worker died while fetching it", self.at)
                    continue
            text = entry.encode()
            if too_long(text):
                batch.ack.append(eid)
                batch.dead += dead_letter(entry, f"its worker died; {_GROWN}", self.at)
                continue
            batch.mv.append([eid, self.target_of(host), text])


_GROWN = f"marked, its entry would be over the {MAX_ENTRY_BYTES} bytes a reader takes"


def failure_wait(attempts: int) -> float:
    """Seconds a host waits after a failure with no Retry-After: 1, 2, 4... at most 60.

    An entry written by hand may name up to 10,000 attempts: 2.0 ** 1024 overflows, so the
    exponent is capped first (2 ** 6 is past 60 already)."""
    return min(60.0, 2.0 ** min(attempts, 6))


class Follows(list[Entry]):
    """The follows a page's host's rules kept, and how many new links its robots.txt
    kept out (``denied``) and the crawl's patterns (``refused``)."""

    denied: int = 0
    refused: int = 0


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


@attrs.frozen
class Origin:
    """What a handler needs to know of where a page came from.

    ``robots`` are the page's host's rules when links back to that host are checked
    here (None: not checked); ``host_full`` says the host has had its
    --max-pages-per-host; ``worker`` is the id written into default items. ``seen``
    is the worker's cache of the follows it queued: a link found in it goes no further
    than the handler, since the commit would drop it (``Router.follow``), and the
    handler need not make it an entry (None: every link goes on).
    """

    worker: str
    robots: Robots | None = None
    host_full: bool = False
    seen: SeenCache | None = None

    def keeps(self, url: str, host: str, held: Held) -> bool:
        """Whether a link found on ``held``'s page, to ``host``, passes the page's host's
        rules (depth is the caller's: every link of a default parse has the same).

        A link to this page's own host that its robots.txt forbids goes no further: this
        worker owns the host and would refuse the entry anyway, after an XADD, a read and
        an acknowledgement. Other hosts' rules are their owners' to apply."""
        if host != held.host:
            return True
        robots = self.robots
        if robots is not None and robots.heavy:
            robots = None  # checking each link would stall the loop; the owner checks later
        return not (self.host_full or (robots is not None and not robots.allowed(url)))

    def kept(self, follows: list[Entry], held: Held, deep: int | None, denied: Denied) -> Follows:
        """The ``follows`` of ``held``'s page that go on: at most ``deep`` (--max-depth)
        levels deep, and passing its host's rules (``keeps``); those its robots.txt kept
        out are counted in ``denied``, each URL once."""
        kept = Follows()
        for e in follows:
            if deep is not None and e.depth > deep:
                continue
            if self.keeps(e.url, e.host, held):
                kept.append(e)
            elif not self.host_full and denied.first(e.key):
                kept.denied += 1  # counted in robots_denied once, as a refused entry is
        return kept

    def known_kept(self, known: list[tuple[str, str]], held: Held, deep: int | None) -> int:
        """How many of a default parse's ``known`` links (URL, host) ``kept`` would keep."""
        if deep is not None and held.entry.depth + 1 > deep:
            return 0
        return sum(self.keeps(url, host, held) for url, host in known)

    def unqueued(self, links: list[str], depth: int) -> tuple[list[Entry], list[tuple[str, str]]]:
        """A default parse's ``links`` as entries ``depth`` deep, but for those this
        worker queued already (most links of a page are: navigation, and the pages its
        neighbours link too): those come back apart, with their hosts."""
        seen = self.seen
        if seen is None:
            return [Entry(url=u, depth=depth) for u in links], []
        follows: list[Entry] = []
        known: list[tuple[str, str]] = []
        for url in links:
            canonical, host = canonical_parts(url)  # links() gives only URLs that have one
            if seen.queued(canonical):
                known.append((url, host))
            else:
                follows.append(Entry(url=url, depth=depth))
        return follows, known


def is_last_attempt(entry: Entry, max_attempts: int) -> bool:
    """Whether a failure of this try sends the entry to the dead letters."""
    return entry.attempts + 1 >= max_attempts


def dead_letter(entry: Entry, error: str, at: int, fault: str = "") -> list[str]:
    """The dead-letter record of an entry out of attempts: its key (the fingerprint of
    its URL), last error and entry (with the URL), ``at`` (the UNIX time), and ``fault``
    if it has one."""
    record: dict[str, Any] = {
        "error": error[:500],
        "attempts": entry.attempts,
        "entry": entry.encode(),
        "at": at,  # so status can show the most recent
    }
    if fault:  # "parse": fetched, but the spider failed on it, so a rerun alone cannot help
        record["fault"] = fault
    return [dead_key(entry.key), json.dumps(record, ensure_ascii=False)]


def park_score(held: Held) -> float:
    """Order in a host's overflow set: higher priority first, then oldest first."""
    ms = int(held.eid.split("-", 1)[0]) if held.eid[:1].isdigit() else 0
    return -max(-500, min(500, held.entry.priority)) * 1e13 + ms
