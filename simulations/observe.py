"""Looking at a crawl's keys from outside, the way an auditor would, not the way a worker does.

The observer has its own connection and reads raw keys (XRANGE, XPENDING, ZRANGE,
HGETALL); it never calls hashcrawl's Store, so a bug there cannot hide from it. The key
names are the documented schema (``hashcrawl/_store/_store.py``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import attrs
import redis
import redis.client
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from simulations.loop import PATIENCE, EnvironmentFailure


class _Patient(redis.Redis):
    """redis-py's client, whose errors of real time (after its retries: a server gone,
    or slow past ``PATIENCE``) end the run as the environment's failure, never as a
    failing example."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise _failure(exc) from exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        return _PatientPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )


class _PatientPipeline(redis.client.Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return super().execute(raise_on_error)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise _failure(exc) from exc


def _failure(exc: redis.RedisError) -> EnvironmentFailure:
    return EnvironmentFailure(
        f"the simulation's Redis, read by the observer: {type(exc).__name__}: {exc}"
    )


@attrs.frozen
class Snapshot:
    """Where every entry of a crawl is: streams (waiting or held), overflow sets, dead letters."""

    queued: dict[str, list[str]]  # url -> keys of the streams and park sets holding it
    dead: dict[str, str]  # url -> dead-letter record
    members: tuple[str, ...]
    outstanding: int
    entries: int  # stream entries plus parked ones: what ``outstanding`` should count
    orphans: frozenset[str]

    @property
    def empty(self) -> bool:
        return not self.queued and self.entries == 0


class Observer:
    """Reads one crawl's keys on one server; survives server restarts."""

    def __init__(self, url: str, crawl: str) -> None:
        self.prefix = f"hc:{{{crawl}}}:"
        self.r = _Patient.from_url(
            url,
            decode_responses=True,
            encoding_errors="replace",  # entries written by hand need not be UTF-8
            socket_timeout=PATIENCE,
            retry=Retry(ExponentialBackoff(cap=0.5), 6),
            retry_on_error=[redis.ConnectionError],
        )
        # What this observer sent, by INFO commandstats name, to keep it out of figures.
        self.sent: Counter[str] = Counter()

    def close(self) -> None:
        self.r.close()

    def keys(self) -> list[str]:
        self.sent["scan"] += 1  # at least one; a large keyspace takes more
        return sorted(self.r.scan_iter(match=_escaped(self.prefix) + "*", count=1000))

    def snapshot(self) -> Snapshot:
        keys = self.keys()
        streams = [k for k in keys if k.startswith(self.prefix + "q:") or k == self.inbox]
        parks = [k for k in keys if k.startswith(self.prefix + "park:")]
        queued: dict[str, list[str]] = {}
        entries = 0
        with self.r.pipeline(transaction=True) as pipe:
            for key in streams:
                pipe.xrange(key)
            for key in parks:
                pipe.zrange(key, 0, -1)
            pipe.hgetall(self.prefix + "dead")
            pipe.zrange(self.prefix + "members", 0, -1)
            pipe.hget(self.prefix + "seenmeta", "outstanding")
            pipe.smembers(self.prefix + "orphans")
            replies = pipe.execute()
        self.sent.update(
            {"multi": 1, "exec": 1, "xrange": len(streams), "zrange": len(parks) + 1}
            | {"hgetall": 1, "hget": 1, "smembers": 1}
        )
        for key, reply in zip(streams, replies, strict=False):
            for _, fields in reply:
                _add(queued, _url(fields.get("r")), key)
                entries += 1
        for key, reply in zip(parks, replies[len(streams) :], strict=False):
            for member in reply:
                _add(queued, _url(member.partition(" ")[2]), key)
                entries += 1
        records, members, outstanding, orphans = replies[-4:]
        dead = {_dead_url(record): record for record in records.values()}
        return Snapshot(queued, dead, tuple(members), int(outstanding or 0), entries, orphans)

    @property
    def inbox(self) -> str:
        return self.prefix + "inbox"

    def stream_of(self, worker: str) -> str:
        return self.prefix + "q:" + worker

    def members(self) -> set[str]:
        self.sent["zrange"] += 1
        members: list[str] = self.r.zrange(self.prefix + "members", 0, -1)  # type: ignore[assignment]
        return set(members)

    def held_by(self, worker: str) -> set[str]:
        """URLs of the entries pending for ``worker`` in its own stream: its leases."""
        stream = self.stream_of(worker)
        try:
            pending = self.r.xpending_range(stream, "g", "-", "+", 100_000, consumername=worker)
        except redis.ResponseError:  # no stream or no group: nothing held
            return set()
        ids = {p["message_id"] for p in pending}
        self.sent.update(("xpending", "xrange"))
        entries: list[tuple[str, dict[str, str]]] = self.r.xrange(stream)  # type: ignore[assignment]
        return {_url(f.get("r")) for eid, f in entries if eid in ids} - {""}

    def undelivered(self, stream: str) -> bool:
        """Whether ``stream`` has entries its group has not delivered yet.

        ``XREADGROUP ... BLOCK 1`` on an empty stream costs a server tick (100 ms at
        hz 10); asking first keeps idle reads free. Ids only grow, so the newest entry
        is undelivered exactly when it is newer than the group's last delivered id.
        The comparison runs in Redis (``_UNDELIVERED``): every read turn of every worker
        asks, and parsing ``XINFO GROUPS``' reply here was a fifth of the quick profile's
        Python time.
        """
        self.sent.update(("eval", "xrevrange", "xinfo|groups"))
        return bool(self.r.eval(_UNDELIVERED, 1, stream))

    def pace(self, host: str) -> str | None:
        self.sent["hget"] += 1
        value = self.r.hget(self.prefix + "pace", host)
        return None if value is None else str(value)

    def used_memory(self) -> int:
        self.sent["info"] += 1
        return int(self.r.info("memory")["used_memory"])

    def command_calls(self) -> dict[str, int]:
        self.sent["info"] += 1
        stats = self.r.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}

    def clear(self) -> None:
        keys = self.keys()
        for start in range(0, len(keys), 500):
            self.r.unlink(*keys[start : start + 500])


# 1 when the newest entry of KEYS[1] is newer than its first group's last delivered id;
# 0 with no stream, no group or no entry. Both commands always run, so ``sent`` counts
# them exactly (the fleet takes them out of its figures).
_UNDELIVERED = """
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if groups.err or #groups == 0 or #newest == 0 then return 0 end
local group, last = groups[1], nil
for i = 1, #group, 2 do
  if group[i] == 'last-delivered-id' then last = group[i + 1] end
end
local function parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local nms, nseq = parts(newest[1][1])
local lms, lseq = parts(last)
if nms ~= lms then return nms > lms and 1 or 0 end
return nseq > lseq and 1 or 0
"""


def _escaped(prefix: str) -> str:
    return "".join("\\" + c if c in "{}[]*?\\" else c for c in prefix)


def _add(queued: dict[str, list[str]], url: str, key: str) -> None:
    queued.setdefault(url, []).append(key)


def _url(payload: str | None) -> str:
    try:
        return str(json.loads(payload or "")["u"])
    except (ValueError, KeyError, TypeError):
        return ""


def _dead_url(record: str) -> str:
    """The URL of a dead letter (they are keyed by fingerprint; the entry names the URL)."""
    try:
        return _url(json.loads(record)["entry"])
    except (ValueError, KeyError, TypeError):
        return ""
