"""The operator's half of the store: status, watching, dead letters, settings, clearing.

:class:`Views` reads a crawl's keys for ``hashcrawl status`` (``--watch``, ``--json``),
``/metrics`` and ``dead``, and clears them; it implements ``_base.StatusStore``. None of
it is on a page's path: a worker calls only ``members`` and ``fleet_counters`` of it,
through ``_store.Store``, which adds the worker's half. The keys are listed in
``_store``'s docstring.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

import redis

from hashcrawl._core._batch import chunks
from hashcrawl._core._due import DueFigures
from hashcrawl._exceptions import ConfigError
from hashcrawl._store._connection import GROUP, Connection, _flat, _translated
from hashcrawl._store._redisurl import check_crawl_name

DEFAULT_LEASE_MS = 60_000  # for members that joined before they recorded their lease
_NOT_COUNTERS = frozenset({"pid", "started", "lease_ms"})  # in w:ID, but not summed
# Keys of which a crawl that ever took a URL or a worker has at least one.
_ANY_CRAWL_HAS = ("instance", "epoch", "seenmeta", "workers", "stats", "inbox", "dead")
RETIRED = "(pruned workers)"  # worker_records' entry for the pruned workers' counters


class Views(Connection):
    """What an operator reads of a crawl's keys, and clearing them."""

    @_translated
    def members(self) -> tuple[int, tuple[str, ...]]:
        """The current epoch and the sorted member ids, read together."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(self.key("epoch"))
            pipe.zrange(self.key("members"), 0, -1)
            epoch, members = pipe.execute()
        return int(epoch or 0), tuple(sorted(members))

    @_translated
    def read_settings(self, fields: Sequence[str], *, max_text: int) -> list[Any]:
        """The crawl's settings record as ``start_settings`` replies, writing nothing."""
        args = [self.prefix, "read", max_text, len(fields), *_flat(dict.fromkeys(fields, ""))]
        return list(self._run("settings", args, read_only=True))

    @_translated
    def scope_domains(self, *, scan_at_most: int = 100_000) -> tuple[list[str], bool]:
        """The domains and the span switch in the crawl's scope (a bounded SSCAN)."""
        domains: set[str] = set()
        cursor, scanned = 0, 0
        while True:
            cursor, found = self._redis.sscan(
                self.key("scope"), cursor, match="domain:*", count=1000
            )
            domains.update(member.removeprefix("domain:") for member in found)
            scanned += 1000
            if cursor == 0 or scanned >= scan_at_most:
                break
        return sorted(domains), bool(self._redis.sismember(self.key("scope"), "span"))

    @_translated
    def status(self) -> dict[str, Any]:
        """The fleet as ``hashcrawl status`` shows it (docs/operations.md lists each field)."""
        r = self._redis
        epoch, members = self.members()
        beats = dict(r.zrange(self.key("members"), 0, -1, withscores=True))
        seconds, micros = r.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        streams = [self.stream_of(m) for m in members] + list(r.smembers(self.key("orphans")))
        streams.append(self.inbox)
        held = sum(_pending(r, s) for s in streams)
        parked = sum(r.zcard(self.key("park:" + h)) for h in r.smembers(self.key("parked")))
        queued_now = sum(r.xlen(s) for s in streams) + parked
        stats = r.hgetall(self.key("stats"))
        counts = r.hgetall(self.key("seenmeta"))
        workers = [self._worker_view(m, beats.get(m), now_ms) for m in members]
        alive = sum(not w["stale"] for w in workers)
        totals = self._totals(r.smembers(self.key("workers")))
        exists = bool(r.exists(*(self.key(k) for k in _ANY_CRAWL_HAS)))
        spiders = sorted({w["spider"] for w in workers})
        return {
            "crawl": self.crawl,
            "exists": exists,
            "waiting": queued_now - held,
            "held": held,
            "workers": alive,
            "stale": len(workers) - alive,
            "members": workers,
            "seen": int(counts.get("seen", 0)),
            "queued": int(counts.get("queued", 0)),
            "fetched": totals.get("fetched", 0),
            "failed": totals.get("failed", 0),
            "robots_denied": totals.get("robots_denied", 0),
            "pattern_refused": totals.get("pattern_refused", 0),
            "links_dropped": totals.get("links_dropped", 0),
            "host_capped": totals.get("host_capped", 0),
            "sub_refused": totals.get("sub_refused", 0),
            "dead": r.hlen(self.key("dead")),
            "leases_reclaimed": int(stats.get("leases_reclaimed", 0)),
            "queue_bad": int(stats.get("queue_bad", 0)),
            "pages_taken": int(stats.get("pages_taken", 0)),
            "bad_samples": r.lrange(self.key("bad"), 0, -1),
            "spiders": spiders,
            "mixed_spiders": len(spiders) > 1,
            "epoch": epoch,
            "ended": exists and queued_now == 0 and alive == 0,
            "revisits": _revisit_view(
                r.hgetall(self.key("rvhist")),
                int(seconds),
                stats,
                r.hgetall(self.key(f"rvs:{int(seconds) // 60}")),
            ),
        }

    def _worker_view(self, worker: str, beat: float | None, now_ms: int) -> dict[str, Any]:
        info = self._redis.hgetall(self.key("w:" + worker))
        lease_ms = _whole(info.get("lease_ms")) or DEFAULT_LEASE_MS
        return {
            "id": worker,
            "hosts": _whole(info.get("hosts")),
            "fetched": _whole(info.get("fetched")),
            "host": info.get("host"),
            "pid": _whole(info.get("pid")),
            "spider": info.get("spider", ""),
            "last_heartbeat_ms": int(beat or 0),
            "stale": now_ms - int(beat or 0) > lease_ms,
        }

    @_translated
    def other_crawls(self, *, scan_at_most: int = 10_000) -> list[str]:
        """Names of the crawls with keys on this server, from one bounded SCAN."""
        names: set[str] = set()
        clients: list[Any] = self._nodes.primaries(self._timeout)
        for client in clients:  # a cluster's keys are spread over its primaries
            with client:
                cursor, scanned = 0, 0
                while True:
                    cursor, keys = client.scan(cursor, match="hc:{*}:*", count=1000)
                    scanned += 1000
                    names.update(_crawl_of(key) for key in keys)
                    if cursor == 0 or scanned >= scan_at_most:
                        break
        return sorted(names - {self.crawl, ""})

    def _totals(self, workers: set[str]) -> dict[str, int]:
        """Counters summed over every worker, pruned ones (``retired``) included."""
        totals: dict[str, int] = {}
        records = [self.key("w:" + worker) for worker in workers] + [self.key("retired")]
        for record in records:
            for field, value in self._redis.hgetall(record).items():
                if value.lstrip("-").isdigit() and field not in _NOT_COUNTERS:
                    totals[field] = totals.get(field, 0) + int(value)
        return totals

    @_translated
    def clear(self) -> int:
        """Delete every key of the crawl; returns how many."""
        deleted = 0
        for chunk in chunks(self._redis.scan_iter(match=self._pattern(), count=1000), 500):
            deleted += self._redis.unlink(*chunk)
        return deleted

    def _pattern(self) -> str:
        # Braces and other glob characters in the prefix must match themselves.
        return "".join("\\" + c if c in "{}[]*?\\" else c for c in self.prefix) + "*"

    @_translated
    def dead(self) -> dict[str, str]:
        """Dead letters: key (``dead_key``; a URL in records of older versions) -> JSON
        record with error, attempts and entry."""
        return dict(self._redis.hgetall(self.key("dead")))

    @_translated
    def forget_dead(self, keys: Sequence[str]) -> None:
        if keys:
            self._redis.hdel(self.key("dead"), *keys)

    # -- watching (status --watch, /metrics; never on the page path) ------------------

    @_translated
    def fleet_counters(self) -> dict[str, int]:
        """leases_reclaimed, queue_bad, dead, outstanding and the revisit figures
        (``revisit_due_now`` ...), fleet-wide, in one round trip."""
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.key("stats"))
            pipe.hlen(self.key("dead"))
            pipe.hget(self.key("seenmeta"), "outstanding")
            pipe.hgetall(self.key("rvhist"))
            pipe.time()
            stats, dead, outstanding, due, (seconds, _) = pipe.execute()
        within = self._redis.hgetall(self.key(f"rvs:{int(seconds) // 60}"))
        return {
            "leases_reclaimed": _whole(stats.get("leases_reclaimed")),
            "queue_bad": _whole(stats.get("queue_bad")),
            "dead": int(dead),
            "outstanding": _whole(outstanding),
            **{
                f"revisit_{k}": v
                for k, v in _revisit_view(due, int(seconds), stats, within).items()
            },
        }

    @_translated
    def idle_since_ms(self) -> int | None:
        """Server ms since which nothing was outstanding fleet-wide, or None (busy, or
        never begun): what ``--idle`` counts from."""
        value = self._redis.get(self.key("idle_since"))
        return int(value) if value is not None and value.lstrip("-").isdigit() else None

    @_translated
    def worker_records(self) -> dict[str, dict[str, str]]:
        """The ``w:ID`` hash of every worker that ever joined, as its heartbeat last wrote it;
        the counters of pruned workers (``retired``) under the id ``RETIRED``."""
        workers = sorted(self._redis.smembers(self.key("workers")))
        with self._redis.pipeline(transaction=False) as pipe:
            for worker in workers:
                pipe.hgetall(self.key("w:" + worker))
            pipe.hgetall(self.key("retired"))
            return dict(zip([*workers, RETIRED], pipe.execute(), strict=True))

    @_translated
    def some_dead(self, scan: int) -> dict[str, str]:
        """Up to about ``scan`` dead letters, URL -> record (one HSCAN, not the whole hash)."""
        _, found = self._redis.hscan(self.key("dead"), 0, count=scan)
        return {dead_url(key, text): text for key, text in found.items()}

    @_translated
    def server_info(self) -> dict[str, Any]:
        """Redis memory and persistence, as far as the server lets a client see them."""
        seconds, micros = self._redis.time()
        info: dict[str, Any] = {"now_ms": seconds * 1000 + micros // 1000}
        with contextlib.suppress(redis.RedisError):
            info.update(self._redis.info("memory"))
            info.update(self._redis.info("persistence"))
        for name in ("appendfsync", "save", "maxmemory-policy"):
            with contextlib.suppress(redis.RedisError):  # CONFIG may be renamed away
                info.update(self._redis.config_get(name))
        return info


def _whole(value: str | None) -> int:
    """A counter a worker wrote; 0 for one that is missing or not a whole number."""
    return int(value) if value is not None and value.lstrip("-").isdigit() else 0


def _crawl_of(key: str) -> str:
    """The crawl a key belongs to; "" for a key no crawl of hashcrawl could have."""
    name = key[4 : key.find("}")] if "}" in key else ""
    try:
        return check_crawl_name(name)
    except ConfigError:
        return ""


def dead_url(key: str, record: str) -> str:
    """The URL of a dead letter: its entry's (older records were keyed by the URL)."""
    try:
        url = json.loads(json.loads(record)["entry"])["u"]
    except (ValueError, KeyError, TypeError):
        return key
    return url if isinstance(url, str) else key


def _pending(r: Any, stream: str) -> int:
    try:
        return int(r.xpending(stream, GROUP)["pending"])
    except redis.ResponseError:  # no such stream or group: nothing held there
        return 0


def _revisit_view(
    due: dict[str, str], now_s: int, stats: dict[str, str], within: dict[str, str]
) -> dict[str, int]:
    """Revisited pages and when they are due (``rvhist``, and ``within`` the current
    minute: its ``rvs:M``), and what revisits found."""
    figures = DueFigures.from_histogram(due, now_s, within)
    return {
        "pages": figures.records,
        "due_now": figures.due_now,
        "overdue": figures.overdue,
        "due_next_hour": figures.next_hour,
        "changed": _whole(stats.get("revisit_changed")),
        "unchanged": _whole(stats.get("revisit_unchanged")),
        "bad": _whole(stats.get("revisit_bad")),
    }
