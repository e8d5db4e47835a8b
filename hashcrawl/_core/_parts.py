"""Small parts of a session, each with one job and its own state: the server clock,
the fetches under way, suspects in flight, the --max-* limits, and the robots.txt and
sitemap cache. No IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import attrs

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Frontier, Held, Host
from hashcrawl._core._outcome import Outcome
from hashcrawl._core._ring import Ring
from hashcrawl._core._robotsrules import RULES_TTL, Robots, Unreachable, first_sitemaps
from hashcrawl._core._scope import Scope
from hashcrawl._core._seams import Tally
from hashcrawl._core._settings import Settings


@attrs.define
class Clock:
    """The server's clock as this worker sees it: an offset, right to within a round trip."""

    offset_ms: float = 0.0
    rtt: float = 0.0  # the last exchange's round trip, seconds

    def sample(self, sent: float, received: float, server_ms: int) -> None:
        """Learn the offset from one exchange's times and the server's answer."""
        self.rtt = received - sent
        self.offset_ms = server_ms - (sent + received) / 2 * 1000

    def local_time(self, server_ms: float) -> float:
        return (server_ms - self.offset_ms) / 1000

    def server_ms(self, local: float) -> int:
        return int(local * 1000 + self.offset_ms)

    def server_s_by(self, local: float) -> float:
        """The server's clock at ``local``, at the latest: the offset is right to within
        half a round trip, so this adds that half (a revisit's due time stamped from it
        is never earlier than its interval by the server's clock)."""
        return (local + self.rtt / 2) + self.offset_ms / 1000


@attrs.define
class Flight:
    """A membership's fetches: how many are out (from dispatch until their outcome is
    recorded), which requests are under way (entry id -> host, until each is over), and
    whether it starts no more (stopping: asked to, or a limit reached)."""

    in_flight: int = 0
    fetching: dict[str, str] = attrs.Factory(dict)
    stopping: bool = False


@attrs.define
class Suspects:
    """Entries of departed workers in flight here, so that a page that kills every worker
    that fetches it is named, alone, in the in-flight record of the worker it kills."""

    out: set[str] = attrs.Factory(set)  # suspects in flight now
    noted: int = 0  # records of them made, so a late one loses to a newer
    isolating: bool = False  # a suspect already blamed for a death is out

    def started(self, held: Held) -> tuple[int, list[str]] | None:
        """Note a suspect going out; returns the in-flight record to write first, if any."""
        if not held.entry.suspect:
            return None
        self.out.add(held.eid)
        self.isolating = self.isolating or held.entry.attempts > 0
        self.noted += 1
        return self.noted, sorted(self.out)

    def ended(self, held: Held) -> None:
        self.out.discard(held.eid)
        if held.entry.suspect and held.entry.attempts > 0:
            self.isolating = False

    def may_start(self, host: Host) -> bool:
        """A suspect already blamed for a death is fetched alone among suspects.

        Then if it kills this worker too, the in-flight record names it and no other.
        """
        first = host.first()
        if first is None:
            return True
        entry = first.entry
        if not entry.suspect:
            return True
        return not self.isolating and not (entry.attempts and self.out)


@attrs.frozen
class Figures:
    """What one membership holds now, as its metrics read it."""

    in_flight: int  # requests out now
    held: int  # entries read and not yet committed: queued, in flight, or to commit
    hosts: int  # hosts this worker owns and knows of
    queued: int  # entries waiting in the frontier
    members: int  # live members of the crawl, as this worker knows


class Due(NamedTuple):
    """The session's state as its driver's loops read it: which turns it asks for now,
    and what they wait on. (A named tuple: read a few times a page, it is built in a
    fifth of a frozen class's time.)"""

    apply: bool  # a new epoch waits to be applied
    drain: bool  # departed workers' streams wait to be drained
    pace: bool  # previous owners' pace records wait to be read
    stopping: bool  # no more requests start (asked to stop, or a limit reached)
    in_flight: int  # requests out now
    pending: int  # outcomes waiting to be committed
    backlogged: bool  # so many that reading waits for a commit
    busy: bool  # work held: queued, in flight or to commit
    flushed: bool  # stopping, with nothing in flight or to commit: ready to leave
    finished: bool  # the newest heartbeat says the crawl is over (``Heartbeat.finished``)
    saturated: bool  # every slot taken (``Gate.saturated``)
    ring: Ring  # the newest epoch's ring this worker knows
    scope: Scope  # the crawl's scope, as this worker knows it
    outcomes: Sequence[Outcome]  # those to commit, oldest first: the ledger's own, read only


def limits(
    settings: Settings, counts: Tally, took: float, items_pending: int, resident_mib: float
) -> tuple[tuple[str, float | None, float], ...]:
    """Each --max-* limit as ``(flag, limit, value)``: by ``counts``, ``took`` seconds
    since the membership began, items not yet written, and the resident memory."""
    return (
        ("--max-pages", settings.max_pages, counts.fetched),
        ("--max-items", settings.max_items, counts.items + items_pending),
        ("--max-errors", settings.max_errors, counts.failed),
        ("--max-time", settings.max_time, took),
        ("--max-memory", settings.max_memory, resident_mib),
    )


def limit_reached(checks: tuple[tuple[str, float | None, float], ...]) -> tuple[str, float] | None:
    """The first ``(flag, limit, value)`` whose value reached its limit, as (flag, limit)."""
    for flag, limit, value in checks:
        if limit is not None and value >= limit:
            return flag, limit
    return None


def _web_url(entry: Entry) -> bool:
    return entry.url.startswith(("http://", "https://"))


@attrs.define
class RobotsCache:
    """The robots.txt rules of the hosts this worker owns, and which hosts have had their
    sitemaps queued by this session."""

    rules: dict[str, Robots] = attrs.Factory(dict)
    sitemapped: set[str] = attrs.Factory(set)

    def wanted(self, held: Held, now: float) -> bool:
        """Whether ``held``'s host's robots.txt must be fetched before the page."""
        if not _web_url(held.entry):
            return False
        robots = self.rules.get(held.host)
        return robots is None or robots.expired(now)

    def of(self, held: Held) -> Robots | None:
        """The rules ``held``'s page is checked against (None: none kept, or not a web URL)."""
        return self.rules.get(held.host) if _web_url(held.entry) else None

    def read(
        self, held: Held, got: Robots | Unreachable, now: float, frontier: Frontier, lease: float
    ) -> str | None:
        """Keep what fetching a host's robots.txt gave, per RFC 9309 (see ``_web._robots``).

        Returns None once rules are kept, or why robots.txt is unreachable: then the
        host is backed off, and its pages wait (or keep the rules they had, if any).
        """
        stale = self.rules.get(held.host)
        if isinstance(got, Unreachable):
            wait = got.wait(held.entry.attempts)
            frontier.back_off(held.host, now + wait)
            if stale is None:
                return got.reason
            # RFC 9309 2.4: a cached copy may serve while unreachable
            self.rules[held.host] = stale.kept_until(now + wait)
            return None
        self.rules[held.host] = got.kept_until(now + RULES_TTL)
        host = frontier.hosts.get(held.host)  # gone if handed over meanwhile
        if got.crawl_delay and host is not None:
            host.crawl_delay = min(got.crawl_delay, lease / 2)
        return None

    def sitemaps_of(self, held: Held) -> list[Entry]:
        """The sitemaps of ``held``'s host, once per session (not from a sitemap)."""
        if held.host in self.sitemapped or held.entry.sitemap:
            return []
        self.sitemapped.add(held.host)
        robots = self.rules.get(held.host)
        return first_sitemaps(held.entry, robots.sitemaps if robots is not None else ())

    def forget(self, name: str) -> None:
        """``name`` is gone from this worker: its rules are read again if it comes back,
        and its sitemaps queued again (the seen filter drops them)."""
        self.rules.pop(name, None)
        self.sitemapped.discard(name)
