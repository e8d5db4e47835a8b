"""An owner's in-memory frontier: per-host queues and pacing. Pure: time is passed in.

Every entry here is pending in the owner's stream (a lease), so memory is bounded by
how much the reader takes (``Frontier.size``), never by the stream's length. Hosts are
scheduled by when they may next be fetched, so a slow or heavily paced host never
holds back the others.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator

import attrs

from hashcrawl._core._entry import Entry

TOP_HOSTS = 5  # hosts a heartbeat names as the busiest, and as the longest backed off


@attrs.frozen
class Held:
    """An entry this owner holds: its stream id, decoded entry and host."""

    eid: str
    entry: Entry
    host: str


@attrs.define
class Host:
    """What the owner knows of one host: its queue, pacing and permission state.

    ``since`` is the membership epoch from which this owner owns the host: it fetches
    only once every member has applied that epoch, so the previous owner has stopped.
    ``paced`` is False until the previous owner's pacing state has been read.
    """

    name: str
    since: int
    queue: list[tuple[int, int, Held]] = attrs.Factory(list)
    in_flight: int = 0
    last_start: float = float("-inf")
    last_end: float = float("-inf")
    backoff_until: float = float("-inf")
    crawl_delay: float = 0.0
    paced: bool = False
    revoked: bool = False

    def first(self) -> Held | None:
        """The entry this host's next request is for, if any is queued."""
        return self.queue[0][2] if self.queue else None

    def queued(self) -> Iterator[Held]:
        """The entries queued for this host, in no particular order."""
        for _, _, held in self.queue:
            yield held

    def next_start(self, delay: float, per_host: int) -> float:
        """The earliest moment the next request to this host may start."""
        gap = max(delay, self.crawl_delay)
        after = self.last_end if per_host == 1 else self.last_start
        return max(self.last_start + gap, after + gap, self.backoff_until)


class Frontier:
    """Per-host queues with politeness: at most ``per_host`` in flight, ``delay`` apart."""

    def __init__(self, *, delay: float, per_host: int) -> None:
        self.delay = delay
        self.per_host = per_host
        self.hosts: dict[str, Host] = {}
        self.size = 0
        self._seq = itertools.count()
        self._timeline: list[tuple[float, str]] = []

    def add(self, held: Held, *, epoch: int) -> Host:
        host = self.hosts.get(held.host)
        if host is None:
            host = self.hosts[held.host] = Host(held.host, since=epoch)
        heapq.heappush(host.queue, (-held.entry.priority, next(self._seq), held))
        self.size += 1
        self._schedule(host)
        return host

    def _schedule(self, host: Host) -> None:
        if host.queue and host.in_flight < self.per_host and not host.revoked:
            heapq.heappush(self._timeline, (host.next_start(self.delay, self.per_host), host.name))

    def take(
        self, now: float, may_fetch: Callable[[Host], bool] | None = None
    ) -> Held | float | None:
        """The next entry whose host may be fetched at ``now``.

        Returns the entry (its host is then counted in flight), or the time at which
        something may become ready, or None when nothing is queued or every queued host
        is waiting for permission (``may_fetch`` names hosts allowed; None allows all).
        """
        deferred: list[tuple[float, str]] = []
        try:
            while self._timeline:
                at, name = self._timeline[0]
                host = self.hosts.get(name)
                if host is None or not self._eligible(host):
                    heapq.heappop(self._timeline)
                    continue
                start = host.next_start(self.delay, self.per_host)
                if start > at:  # pacing moved since this slot was scheduled
                    heapq.heapreplace(self._timeline, (start, name))
                    continue
                if at > now:
                    return at
                heapq.heappop(self._timeline)
                if may_fetch is not None and not may_fetch(host):
                    deferred.append((at, name))
                    continue
                return self._start(host, now)
            return None
        finally:
            for item in deferred:
                heapq.heappush(self._timeline, item)

    def _eligible(self, host: Host) -> bool:
        return bool(host.queue) and host.in_flight < self.per_host and not host.revoked

    def _start(self, host: Host, now: float) -> Held:
        _, _, held = heapq.heappop(host.queue)
        self.size -= 1
        host.in_flight += 1
        host.last_start = now
        self._schedule(host)
        return held

    def done(self, name: str, now: float) -> None:
        """A request to ``name`` finished (answered or failed) at ``now``.

        A host handed over while its request was out is no longer here: nothing to do.
        """
        host = self.hosts.get(name)
        if host is None or host.in_flight == 0:
            return
        host.in_flight -= 1
        host.last_end = max(host.last_end, now)
        self._schedule(host)

    def sub_request_turn(self, name: str, now: float) -> float | None:
        """When a request made by a page in flight to ``name`` may start: a rendered
        page's sub-request, which uses its page's slot, so only the pace applies. The
        turn is counted as the host's last start at once (a later take waits for it);
        None when ``name`` is no longer this owner's host.
        """
        host = self.hosts.get(name)
        if host is None or host.revoked:
            return None
        turn = max(now, host.next_start(self.delay, self.per_host))
        host.last_start = turn
        return turn

    def sub_request_ended(self, name: str, now: float) -> None:
        """A request made by a page in flight to ``name`` (or its document) ended."""
        host = self.hosts.get(name)
        if host is not None:
            host.last_end = max(host.last_end, now)

    def top(self, now: float, *, busiest: bool) -> str:
        """``host=figure`` pairs, comma-separated, for status: the TOP_HOSTS hosts with
        most queued, or (not ``busiest``) longest backed off, in seconds from ``now``."""
        hosts = list(self.hosts.values())
        if busiest:
            ranked = heapq.nlargest(TOP_HOSTS, hosts, key=lambda h: len(h.queue))
            return ",".join(f"{h.name}={len(h.queue)}" for h in ranked if h.queue)
        ranked = heapq.nlargest(TOP_HOSTS, hosts, key=lambda h: h.backoff_until)
        return ",".join(
            f"{h.name}={math.ceil(h.backoff_until - now)}" for h in ranked if h.backoff_until > now
        )

    def back_off(self, name: str, until: float) -> None:
        host = self.hosts.get(name)
        if host is None:  # handed over meanwhile: its pace record went with it
            return
        host.backoff_until = max(host.backoff_until, until)
        self._schedule(host)

    def reschedule(self, name: str) -> None:
        """Look at a host again after its permission or pacing changed."""
        host = self.hosts.get(name)
        if host is not None:
            self._schedule(host)

    def revoke(self, name: str) -> Host:
        """Stop scheduling ``name``: another owner takes it over."""
        host = self.hosts[name]
        host.revoked = True
        return host

    def drop(self, name: str) -> list[Held]:
        """Forget a host (after its handoff); returns the entries it still had queued."""
        host = self.hosts.pop(name)
        self.size -= len(host.queue)
        return list(host.queued())

    def evict_idle(self, now: float, *, idle_for: float, keep: int) -> list[str]:
        """Forget hosts with nothing to do whose pacing has run out; return their names.

        A host goes once it has been idle ``idle_for`` seconds, and beyond ``keep`` idle
        hosts the least recently used go at once. Only a host whose next request may
        start now is forgotten, so one made afresh (never fetched: no wait) paces
        exactly as the forgotten one would have.
        """
        idle = [h for h in self.hosts.values() if self._forgettable(h, now)]
        idle.sort(key=lambda h: max(h.last_start, h.last_end))
        excess = len(idle) - keep
        gone = [
            h.name
            for n, h in enumerate(idle)
            if n < excess or max(h.last_start, h.last_end) + idle_for <= now
        ]
        for name in gone:
            del self.hosts[name]
        return gone

    def _forgettable(self, host: Host, now: float) -> bool:
        return (
            not host.queue
            and not host.in_flight
            and host.paced
            and not host.revoked
            and host.next_start(self.delay, self.per_host) <= now
        )
