"""A host's pacing as one owner hands it to the next: the pace record, and the part of a
session that reads records in once the fleet has settled. No IO.

The record is text in the crawl's ``pace`` hash (see ``_store``):
``last_ms,backoff_ms,crawl_delay[,taken]``, then ``;`` and the host's cookies if it has
any (see ``_web._cookies``: JSON, so never a control character), then, when a host
with work queued is handed over with fresh robots.txt rules, ``\x1e``, the server ms
until which they are fresh, ``\x1e`` and the robots.txt text (at most
:data:`MAX_HANDED_ROBOTS` characters: a longer one is fetched again by the next owner).
Times are the server's clock, in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from hashcrawl._core._frontier import Frontier, Host
from hashcrawl._core._parts import Clock

#: The longest robots.txt text handed over with a host (most are under 2 KiB; Google
#: reads 500 KiB): one record a host at most, in Redis until the next owner reads it.
MAX_HANDED_ROBOTS = 16 * 1024
_ROBOTS = "\x1e"  # sets the robots.txt text apart; never in the cookies' JSON

#: Whether a host gained at an epoch may be fetched now (``_epochs.Release``).
Released = Callable[[str, int], bool]


@attrs.frozen
class Paces:
    """What Redis holds to pace hosts that come to a new owner: their records, and the
    floors a member replaced by name left under them (server ms before which it may have
    requested a host, or a request of it may still run: ``lua/join.lua``)."""

    records: dict[str, str] = attrs.Factory(dict)
    floors: dict[str, int] = attrs.Factory(dict)

    def add(self, hosts: Sequence[str], reply: Sequence[Any]) -> None:
        """Add what ``lua/pace.lua`` replied for ``hosts``: each one's record (None for
        none), then each one's floor (0 for none)."""
        for host, record, floor in zip(hosts, reply, reply[len(hosts) :], strict=False):
            if record is not None:
                self.records[host] = str(record)
            if int(floor):
                self.floors[host] = int(floor)


@attrs.frozen(kw_only=True)
class PaceRecord:
    """What the next owner of a host needs to keep pacing it.

    Args:
        last_ms: when the host's last request ended (server ms; 0: unknown).
        backoff_ms: until when the host is backed off (server ms; 0: not).
        crawl_delay: its robots.txt's Crawl-delay, seconds.
        taken: page requests made to it (counted with --max-pages-per-host).
        cookies: its cookie jar, as text (empty: none).
        robots: its robots.txt text, handed over while fresh (see ``robots_until_ms``).
        robots_until_ms: until when ``robots`` is fresh (server ms; 0: none handed).
        readable: False for a record whose numbers could not be read: only its cookies
            count (a record is input from Redis, and never raises).
    """

    last_ms: int = 0
    backoff_ms: int = 0
    crawl_delay: float = 0.0
    taken: int = 0
    cookies: str = ""
    robots: str = ""
    robots_until_ms: int = 0
    readable: bool = True

    @classmethod
    def from_text(cls, text: str) -> PaceRecord:
        """The record ``text`` holds; unreadable numbers give ``readable=False``, and
        robots.txt rules that are unreadable or too long are left out."""
        text, _, handed = text.partition(_ROBOTS)
        pace, _, cookies = text.partition(";")
        robots, robots_until_ms = _handed_robots(handed)
        try:
            last_ms, backoff_ms, crawl_delay, *more = (float(x) for x in pace.split(","))
            taken = int(more[0]) if more else 0
            return cls(
                last_ms=int(last_ms),
                backoff_ms=int(backoff_ms),
                crawl_delay=crawl_delay,
                taken=taken,
                cookies=cookies,
                robots=robots,
                robots_until_ms=robots_until_ms,
            )
        except (ValueError, OverflowError):
            return cls(
                cookies=cookies, readable=False, robots=robots, robots_until_ms=robots_until_ms
            )

    @classmethod
    def of(
        cls, host: Host | None, delay: float, now: float, clock: Clock, *, taken: int, cookies: str
    ) -> PaceRecord | None:
        """The record of ``host`` handed over at ``now``, with its page count and
        cookies; None when there is nothing its next owner needs.

        ``host`` is None for a host forgotten while idle: only its count and cookies are
        left. Pacing is carried while the host is not free yet (its delay or a backoff
        runs past ``now``) or has a count.
        """
        if host is None:
            return cls(taken=taken, cookies=cookies) if taken or cookies else None
        gap = max(delay, host.crawl_delay)
        if max(host.last_end + gap, host.backoff_until) > now or taken:
            # This worker's clock offset is right to within half its last round trip:
            # the record errs late by that, as the reader's margin errs on its side.
            late = clock.rtt / 2
            last = clock.server_ms(host.last_end + late) if host.last_end > 0 else 0
            backoff = clock.server_ms(host.backoff_until + late) if host.backoff_until > 0 else 0
            return cls(
                last_ms=last,
                backoff_ms=backoff,
                crawl_delay=host.crawl_delay,
                taken=taken,
                cookies=cookies,
            )
        return cls(crawl_delay=host.crawl_delay, cookies=cookies) if cookies else None

    def pace(self, host: Host, clock: Clock) -> None:
        """Hold ``host`` back as its previous owner would have: never sooner, with a
        margin for the two clocks, which agree to within a round trip."""
        if not self.readable:
            return
        margin = clock.rtt + 0.005
        host.last_end = max(host.last_end, clock.local_time(self.last_ms) + margin)
        host.last_start = max(host.last_start, host.last_end)
        host.backoff_until = max(host.backoff_until, clock.local_time(self.backoff_ms) + margin)
        host.crawl_delay = max(host.crawl_delay, self.crawl_delay)

    def to_text(self) -> str:
        """The record as stored; ``taken`` and the cookies only when there are some."""
        count = f",{self.taken}" if self.taken else ""
        tail = ";" + self.cookies if self.cookies else ""
        if self.robots_until_ms:
            tail += f"{_ROBOTS}{self.robots_until_ms}{_ROBOTS}{self.robots}"
        return f"{self.last_ms},{self.backoff_ms},{self.crawl_delay}{count}{tail}"


def _handed_robots(handed: str) -> tuple[str, int]:
    """The robots.txt text of a record's last part and until when it is fresh (server
    ms), or ``("", 0)`` if it has none usable."""
    until, _, robots = handed.partition(_ROBOTS)
    if not until.isdigit() or len(until) > 15 or len(robots) > MAX_HANDED_ROBOTS:
        return "", 0
    return robots, int(until)


@attrs.define
class Carry:
    """Which hosts new to this owner still have a previous owner's record to read.

    The previous owner writes a host's record when it applies the epoch that moves the
    host, so the record is read only once every member that may have held the host has
    applied the epoch this owner has it from (``released``: see ``Release``); before, it
    may be missing.
    """

    unpaced: set[str] = attrs.Factory(set)  # hosts whose record is not to be read yet
    due: list[str] = attrs.Factory(list)  # hosts whose record is to be read now
    read: dict[str, str] = attrs.Factory(dict)  # records read: the next commit deletes them

    def want(self, names: Iterable[str], frontier: Frontier, released: Released) -> None:
        """Have the records of ``names`` read, each once the fleet has released it."""
        self.unpaced.update(names)
        hosts = frontier.hosts
        due = sorted(n for n in self.unpaced if n in hosts and released(n, hosts[n].since))
        self.unpaced = {n for n in self.unpaced if n in hosts} - set(due)
        self.due += due

    def take_due(self) -> list[str]:
        due, self.due = self.due, []
        return due

    def loaded(
        self,
        hosts: list[str],
        paces: Paces,
        released: Released,
        frontier: Frontier,
        adopt: Callable[[Host, PaceRecord], None],
    ) -> list[str]:
        """The records of ``hosts`` came, asked when the fleet had ``released`` what it
        had: each is adopted, and its floor as a request that ended then, and its host may
        be fetched. Returns the hosts that changed hands again meanwhile, whose records are
        to be read again."""
        later = []
        for name in hosts:
            host = frontier.hosts.get(name)
            if host is None:
                continue
            if not released(name, host.since):
                later.append(name)
                continue
            record = paces.records.get(name)
            if record is not None:
                adopt(host, PaceRecord.from_text(record))
                self.read[name] = record
            floor = paces.floors.get(name, 0)
            if floor:
                adopt(host, PaceRecord(last_ms=floor))
            host.paced = True
            frontier.reschedule(name)
        return later

    def committed(self, unpace: list[str]) -> None:
        """A commit deleted the records it names (``Batch.unpace``: host, record, ...)."""
        for name in unpace[::2]:
            self.read.pop(name, None)
