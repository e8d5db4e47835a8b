"""The revisit records of a crawl in Redis: writing them, taking the due ones, counting.

The keys (``rv:B``, ``rvu:B``, ``rvdue``, ``rvhist``) and what each holds are listed in
``lua/revisit.lua``; docs/design.md ("Revisits") says why they are shaped so. Only a
crawl run with ``--revisit`` writes any of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import attrs
import redis

from hashcrawl._core._due import (
    BUCKET_BITS,
    DueFigures,
    Fetch,
    bucket_of,
    stored_entry,
    url_fingerprint,
)
from hashcrawl._core._entry import Entry
from hashcrawl._core._revisit import Record, Verdict
from hashcrawl._exceptions import QueueError

if TYPE_CHECKING:
    from hashcrawl._store._store import Store

P = ParamSpec("P")
T = TypeVar("T")
#: How many due buckets one take visits: each holds about 61 records at 1M URLs, so a
#: call reads a few hundred fields at most and never stalls the server.
TAKE_BUCKETS = 8
TAKE_MOST = 200  # entries one take adds to the inbox
_VERDICTS = {Verdict.CHANGED: "c", Verdict.UNCHANGED: "u", Verdict.UNKNOWN: ""}


@attrs.frozen(kw_only=True)
class Taken:
    """What one take did."""

    entries: int
    buckets: int
    dropped: int  # records that could not be read, dropped with a sample in ``bad``
    now_s: int


def _translated(method: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise QueueError(f"Redis, revisit records: {text}") from None

    return call


class Revisits:
    """A crawl's revisit records on one Redis client (one that does not decode replies:
    fingerprints and records are bytes)."""

    def __init__(
        self,
        client: Callable[[], Any],
        prefix: str,
        *,
        run: Callable[[Sequence[Any], Sequence[str]], Any] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Args:
        client: gives the redis-py client (one that does not decode) at first use, so
            that making this object does no IO.
        run: runs revisit.lua with these args and keys (default: on ``client``); a
            store's own, so that on a cluster its replicas confirm each write.
        clock: milliseconds to take due records by instead of the server's TIME (a
            store's, for simulations, which drive time themselves).
        """
        self._client_of = client
        self.prefix = prefix
        self._run = run
        self._clock = clock

    @classmethod
    def of(cls, store: Store) -> Revisits:
        """The revisit records of ``store``'s crawl: written through its script runner
        (``WAIT`` for replicas, a failover's epoch jump), read on its bytes client."""
        return cls(
            lambda: store._nodes.client("bytes", store._timeout, decode=False),
            store.prefix,
            run=store.revisit_script,
            clock=store.clock,
        )

    def _script_call(self, args: Sequence[Any]) -> Any:
        keys = [self.prefix + "rvdue"]
        if self._run is not None:
            return self._run(args, keys)
        return self._script(keys=keys, args=args)

    @functools.cached_property
    def _client(self) -> Any:
        return self._client_of()

    @functools.cached_property
    def _script(self) -> Any:
        text = resources.files(__package__).joinpath("lua", "revisit.lua").read_text()
        return self._client.register_script(text)

    @_translated
    def put(self, fetches: Sequence[Fetch]) -> int:
        """Write each page's next record (and a first fetch's entry); count changes."""
        args: list[Any] = [self.prefix, "put", ""]
        for fetch in fetches:
            fp = url_fingerprint(fetch.entry.key)
            entry = stored_entry(fetch.entry) if fetch.first else ""
            verdict = _VERDICTS[fetch.verdict]
            args += [bucket_of(fp, fetch.bits), fp, fetch.record.to_bytes(), entry, verdict]
        return int(self._script_call(args))

    @_translated
    def take(self, *, requeue_s: int, now_s: int | None = None, most: int = TAKE_MOST) -> Taken:
        """Turn due records into inbox entries (see ``lua/revisit.lua``)."""
        if now_s is None and self._clock is not None:
            now_s = self._clock() // 1000
        now = "" if now_s is None else now_s
        args = [self.prefix, "take", now, most, TAKE_BUCKETS, requeue_s]
        got = self._script_call(args)
        return Taken(entries=got[0], buckets=got[1], dropped=got[2], now_s=got[3])

    @_translated
    def figures(self, now_s: int) -> DueFigures:
        """Pages due now, overdue and due in the next hour (one HGETALL of ``rvhist``,
        one of the current minute's ``rvs:M``: at most 60 fields)."""
        raw = self._client.hgetall(self.prefix + "rvhist")
        within = self._client.hgetall(f"{self.prefix}rvs:{now_s // 60}")
        seconds = dict(_texts(within.items()))
        return DueFigures.from_histogram(dict(_texts(raw.items())), now_s, seconds)

    @_translated
    def record_of(self, entry: Entry, *, bits: int = BUCKET_BITS) -> Record | None:
        """The stored record of ``entry``'s page, if any (for tests and inspection)."""
        fp = url_fingerprint(entry.key)
        raw = self._client.hget(f"{self.prefix}rv:{bucket_of(fp, bits)}", fp)
        return None if raw is None else Record.from_bytes(raw)


def _texts(items: Iterable[tuple[Any, Any]]) -> Iterable[tuple[str, str]]:
    for field, value in items:
        yield (
            field.decode("ascii", "replace") if isinstance(field, bytes) else str(field),
            value.decode("ascii", "replace") if isinstance(value, bytes) else str(value),
        )
