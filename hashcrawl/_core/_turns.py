"""Shared hosts: the hosts a render may fetch from beside its page's own, and the turns
every request to them takes from Redis. No IO: the driver asks Redis (``lua/turn.lua``)
and hands the reply in.

A shared host is paced by one clock of record, the Redis server's: each request to it,
by any worker (a render's sub-request, or its owner's own page), first reserves a turn,
a slot ``gap + margin`` after the one before. Its reply reaches the worker a round trip
after Redis granted it, so the worker sends only within :class:`Turn`'s window, on its
own monotonic clock: no sooner than the slot measured from when the reply came, no later
than ``margin`` past the slot measured from when it asked. Any two starts to the host
are then at least ``gap`` apart in real time, whatever the round trip took (see
docs/design.md, "Shared hosts").
"""

from __future__ import annotations

import functools
import re

import attrs

from hashcrawl._core._entry import Entry
from hashcrawl._exceptions import ConfigError, InvalidURL

#: The most hosts --render-fetch-hosts may name (each is a key in Redis while in use).
MAX_SHARED_HOSTS = 100
#: The furthest ahead a turn is reserved, seconds: bounds what clock drift can take.
AHEAD = 10.0
#: How far two clocks' rates may differ (the kernel slews one at most 500 ppm; twice
#: that for the worker's and the server's): a wait is stretched and shrunk by it.
DRIFT = 1e-3
#: Replies later than the margin in a row before a request gives up its turns.
MAX_MISSED = 3
_HOST = re.compile(r"[a-z0-9.\-\[\]:]{1,260}")


@functools.lru_cache(maxsize=16)  # read for every request: the text seldom changes
@functools.lru_cache(maxsize=64)
def shared_hosts(text: str | None) -> frozenset[str]:
    """The host keys of ``--render-fetch-hosts`` (comma-separated, ``cdn.test`` or
    ``cdn.test:8080``), as the crawl routes them.

    Raises:
        ConfigError: a name that is not a host (a pattern, a URL), or more than
            ``MAX_SHARED_HOSTS``.
    """
    if text is None or not text.strip():
        return frozenset()
    names = [part.strip().lower() for part in text.split(",")]
    if len(names) > MAX_SHARED_HOSTS:
        raise ConfigError(f"--render-fetch-hosts names at most {MAX_SHARED_HOSTS} hosts")
    return frozenset(_host_key(name) for name in names)


def _host_key(name: str) -> str:
    problem = "" if _HOST.fullmatch(name) else "not a host name"
    if not problem:
        try:
            return Entry(url=f"http://{name}/").host
        except InvalidURL:
            problem = "not a host name"
    raise ConfigError(
        "--render-fetch-hosts must be comma-separated hosts such as 'cdn.test' or "
        f"'cdn.test:8080' (no patterns), got {name[:80]!r}: {problem}"
    )


def host_of(url: str) -> str | None:
    """The host key of ``url``, or None if it is not one to fetch."""
    try:
        return Entry(url=url).host
    except InvalidURL:
        return None


@attrs.frozen
class Turn:
    """A turn Redis reserved: the request may start from ``opens`` until ``closes``, on
    the worker's own monotonic clock (seconds)."""

    opens: float
    closes: float

    @classmethod
    def granted(cls, *, asked: float, answered: float, wait: float, margin: float) -> Turn:
        """The window of a turn ``wait`` seconds off, asked for at ``asked`` and
        answered at ``answered``: Redis granted it between the two, so its slot is no
        sooner than ``answered + wait`` and no later than ``asked + wait``; the next
        slot is ``margin`` (and the gap) after it. ``DRIFT`` stretches the wait."""
        return cls(opens=answered + wait * (1 + DRIFT), closes=asked + wait * (1 - DRIFT) + margin)

    @property
    def usable(self) -> bool:
        """Whether the window is open at all (the reply came within the margin)."""
        return self.opens <= self.closes

    def open_at(self, now: float) -> bool:
        """Whether a request may start at ``now``."""
        return self.opens <= now <= self.closes


class Start:
    """The check right before a request's bytes leave: its turn's window, once. A
    request whose first bytes left within it has started; its later writes pass. No
    turn taken yet: no bytes may leave."""

    def __init__(self, turn: Turn | None = None) -> None:
        self.turn = turn
        self.started = False
        self.missed = False

    def check(self, now: float) -> bool:
        if not self.started and self.turn is not None:
            self.started = self.turn.open_at(now)
            self.missed = not self.started
        return self.started
