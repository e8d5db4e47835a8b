"""The pace records of the hosts that change hands: read as a host comes to this owner,
written as it leaves. A part of a session that holds the parts it reads, not the
session (``Carry`` says which records to read and when; ``PaceRecord`` is one). No IO.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from hashcrawl._core._epochs import Epochs, Release
from hashcrawl._core._exchanges import Done, Process, ReadPaces
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier, Host
from hashcrawl._core._pace import MAX_HANDED_ROBOTS, Carry, PaceRecord, Paces
from hashcrawl._core._parts import Clock, RobotsCache
from hashcrawl._core._robotsrules import Robots
from hashcrawl._core._seams import CookieJars
from hashcrawl._core._settings import Current


class Pacing:
    """The pace records of one membership's hosts, in and out.

    Args:
        current: the membership's settings now (``cookies``, ``delay``).
        frontier: its hosts, paced by what is read.
        epochs: when the fleet has released a host gained (``Epochs.release``).
        clock: the server's clock the records' times are in.
        jars: the hosts' cookies, carried in the records.
        taken: page requests made to each host (with --max-pages-per-host).
        faults: the deliberate bugs (``drop_pace``).
        robots: the hosts' robots.txt rules, handed over with a host that has work
            queued while they are fresh, so that its next owner need not fetch them.
    """

    def __init__(
        self,
        *,
        current: Current,
        frontier: Frontier,
        epochs: Epochs,
        clock: Clock,
        jars: CookieJars,
        taken: dict[str, int],
        faults: Faults,
        robots: RobotsCache,
    ) -> None:
        self.current, self.frontier, self.epochs, self.clock = current, frontier, epochs, clock
        self.jars, self.taken, self.faults, self.robots = jars, taken, faults, robots
        self.carry = Carry()  # previous owners' pace records still to read

    def want(self, names: Iterable[str]) -> None:
        """Have the pacing state of hosts new to this owner read, once it is there to
        read (see ``Carry``); the hosts due go to ``carry.due``, for the driver to read."""
        self.carry.want(names, self.frontier, self.epochs.release)

    def read_due(self) -> PaceRead | None:
        """Read the records of the hosts due now, if any (see :class:`PaceRead`)."""
        hosts, released = self.take_due()
        return PaceRead(self, hosts, released) if hosts else None

    def take_due(self) -> tuple[list[str], Release]:
        """The hosts whose records are to be read now, and what the fleet had released
        when they were asked for (to give :meth:`loaded` with the records)."""
        return self.carry.take_due(), self.epochs.release

    def loaded(self, hosts: list[str], paces: Paces, released: Release) -> None:
        """The pace records of ``hosts`` came, asked when the fleet had ``released`` them."""
        later = self.carry.loaded(hosts, paces, released, self.frontier, self.adopt)
        self.want(later)  # at once if the fleet has settled while this read was out

    def adopt(self, host: Host, record: PaceRecord) -> None:
        """Adopt a previous owner's record of ``host``: its cookies, count and pacing."""
        if record.cookies and self.current.settings.cookies:
            self.jars.adopt(host.name, record.cookies)
        if record.readable and record.taken:
            self.taken[host.name] = max(self.taken.get(host.name, 0), record.taken)
        record.pace(host, self.clock)
        if record.robots_until_ms and host.name not in self.robots.rules:
            self._adopt_robots(host.name, record)

    def _adopt_robots(self, name: str, record: PaceRecord) -> None:
        """Keep the previous owner's robots.txt rules until they were to expire (a
        record is input from Redis: one that does not parse is fetched again)."""
        settings = self.current.settings
        if not settings.obey_robots:
            return
        try:
            rules = Robots.parse(record.robots, settings.user_agent)
        except Exception:  # hostile text from Redis: robots.txt is fetched instead
            return
        until = self.clock.local_time(record.robots_until_ms)
        self.robots.rules[name] = rules.kept_until(until)

    def records(self, names: list[str], now: float, *, robots: bool = True) -> dict[str, str]:
        """The pace records of hosts this worker hands over, as text (with their fresh
        robots.txt rules, unless not ``robots``: a record written only for cookies)."""
        records: dict[str, str] = {}
        if "drop_pace" in self.faults:  # a deliberate bug to catch: the pacing stays behind
            return records
        for name in names:
            record = self._record(name, now, robots)
            if record is not None:
                records[name] = record.to_text()
        return records

    def _record(self, name: str, now: float, robots: bool) -> PaceRecord | None:
        host, delay = self.frontier.hosts.get(name), self.current.settings.delay
        taken, cookies = self.taken.get(name, 0), self.jars.record(name)
        record = PaceRecord.of(host, delay, now, self.clock, taken=taken, cookies=cookies)
        rules = self.robots.rules.get(name) if robots else None
        if host is None or rules is None or not (host.queue or host.in_flight):
            return record  # a host with nothing to do: its next owner may never need them
        if rules.expired(now) or len(rules.text) > MAX_HANDED_ROBOTS:
            return record
        until_ms = self.clock.server_ms(rules.until)
        kept = record or PaceRecord(crawl_delay=host.crawl_delay)
        return attrs.evolve(kept, robots=rules.text, robots_until_ms=until_ms)

    def leaving(self) -> list[str]:
        """Every host a leaving worker writes a pace record for, if it has one."""
        return list({**self.frontier.hosts, **self.taken, **dict.fromkeys(self.jars.hosts())})


class PaceRead(Process):
    """Reading the pace records of ``hosts``, asked when the fleet had ``released`` them:
    one step, then they are adopted."""

    def __init__(self, pacing: Pacing, hosts: list[str], released: Release) -> None:
        self.pacing, self.hosts, self.released = pacing, hosts, released
        self.result = hosts
        self.step = ReadPaces(hosts)

    def answered(self, reply: Any, now: float) -> None:
        self.pacing.loaded(self.hosts, reply, self.released)
        self.step = Done()
