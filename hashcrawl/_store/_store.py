"""The one module that talks to Redis: the key schema, the scripts, every command.

Every key of a crawl starts with ``hc:{NAME}:`` (the braces make it a Redis Cluster hash
tag, so all of a crawl's keys share a slot). Under that prefix:

=================  ======  =============================================================
key                type    written by
=================  ======  =============================================================
``members``        ZSET    join, heartbeat, leave, expiry: worker id -> last heartbeat ms
``applied``        HASH    join, heartbeat, commit: worker -> epoch whose handoff it did
``epoch``          STRING  join, leave, expiry: +1 on every membership change
``workers``        SET     join: every worker id that ever joined (for fleet totals);
                           heartbeat prunes departed ones (see ``departed``)
``w:ID``           HASH    join, heartbeat: a worker's host, pid, lease, spider, own
                           counters and figures for status (_metrics.Tally.beat_fields)
                           inflight: the suspects it is fetching (newest record wins)
``departed``       ZSET    release: worker -> server ms its stream was drained; the
                           heartbeat folds such a worker's counters into ``retired`` and
                           deletes its ``w:ID`` and ``workers`` entry after FORGET_LEASES
``retired``        HASH    heartbeat: counters of pruned workers, for fleet totals
``instance``       STRING  join, commit (a submit): the crawl's marker, set once; a
                           worker that finds it missing or changed knows the state is gone
``q:ID``           STREAM  commit (XADD, XACK, XDEL), read (XREADGROUP): ID's frontier;
                           group ``g``, consumer ID; pending entries are its leases
``inbox``          STREAM  commit: submissions made while no worker is alive
``orphans``        SET     leave, expiry: streams of departed workers, drained by anyone
``seen:N``         STRING  commit: layer N of the Bloom seen filter (BITFIELD)
``seenmeta``       HASH    commit: the seen filter's shape and fill; URLs seen and queued
``outstanding``    STRING  commit: entries waiting or held anywhere, fleet-wide
``idle_since``     STRING  heartbeat, commit: server ms since nothing was outstanding
``pace``           HASH    commit, leave: host -> pacing state for its next owner;
                           deleted by the new owner's next commit, if still as read
``park:HOST``      ZSET    commit, unpark: a host's overflow, out of its owner's memory
``parked``         SET     commit, unpark: hosts that have an overflow set
``dead``           HASH    commit: fingerprint (``dead_key``) -> JSON record with the
                           error, attempts, entry (so its URL) and time, out of attempts
``bad``            LIST    commit: the newest samples of unreadable entries (bounded)
``stats``          HASH    commit, heartbeat: fleet counters
``scope``          SET     submit, join, commit, configure: the hosts links may lead
                           to (and ``domain:D``, ``span``); only grows, so its size is
                           its version, checked by commit
``settings``       HASH    join, crawl, configure (``_crawlconfig``): the crawl's
                           settings but the scope's, one field each as its flag's text,
                           and ``version`` (+1 on every change; the heartbeat returns it)
=================  ======  =============================================================

Time in every lease and liveness decision is the Redis server's (``TIME`` in scripts),
so clock skew between machines changes nothing. The Lua scripts live in ``lua/``, each
opening with the keys it touches.

On a Redis Cluster the keys live on the primary of the crawl's slot, found and followed
by ``_nodes``; there every write returns only once that primary's replicas confirm it,
and after the slot moves the epoch is raised (``lua/failover.lua``; docs/design.md, "On
a Redis Cluster", says why both are needed).

The methods here are blocking; the worker calls them from a thread (see ``_worker``).
redis-py errors never leave this module untranslated: they become ``QueueError``.
Stream payloads are read as bytes (a client without ``decode_responses``), so that an
entry that is not UTF-8 is a bad entry for ``Entry.decode`` to name, not an exception here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, ParamSpec, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from hashcrawl._core._batch import LOST as LOST
from hashcrawl._core._batch import Batch as Batch
from hashcrawl._core._batch import Beat as Beat
from hashcrawl._core._batch import Committed as Committed
from hashcrawl._core._batch import chunks
from hashcrawl._core._batch import dead_key as dead_key
from hashcrawl._exceptions import ConfigError, Fenced, InvalidURL, QueueError, StateLost
from hashcrawl._store._nodes import Nodes
from hashcrawl._store._redisurl import RedisURL, check_crawl_name

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
GROUP = "g"
DEFAULT_LEASE_MS = 60_000  # for members that joined before they recorded their lease
_NOT_COUNTERS = frozenset({"pid", "started", "lease_ms"})  # in w:ID, but not summed
# Keys of which a crawl that ever took a URL or a worker has at least one.
_ANY_CRAWL_HAS = ("instance", "epoch", "seenmeta", "workers", "stats", "inbox", "dead")
PACE_CHUNK = 1000  # hosts per HSET when a leaving worker writes its pace records
FORGET_LEASES = 10  # a departed worker's keys are pruned this many leases after it left
RETIRED = "(pruned workers)"  # worker_records' entry for the pruned workers' counters


def _script(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text()


def _translated(method: Callable[P, T]) -> Callable[P, T]:
    """Turn redis-py's errors into QueueError, naming the server without its password."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except (redis.RedisError, RedisClusterException) as exc:
            store = args[0]
            assert isinstance(store, Store)
            store._nodes.failed(exc)
            if "DB index is out of range" in str(exc):  # a flag's mistake, not an outage
                raise InvalidURL(
                    f"--redis names database {store.url.db}, which Redis at "
                    f"{store.url.redacted()} does not have (see its 'databases' setting)"
                ) from None
            raise QueueError(
                f"Redis at {store.url.redacted()}: {store.url.explained(_reason(exc))}"
            ) from None

    return call


def _reason(exc: redis.RedisError | RedisClusterException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, redis.TimeoutError):
        return f"no answer in time ({text})"
    if isinstance(exc, redis.exceptions.AskError):  # MOVED or ASK
        where = f"{exc.host}:{exc.port}"
        return f"the crawl's slot is served by {where} now (a failover or reshard): {text}"
    if isinstance(exc, redis.exceptions.ClusterDownError):
        return f"the cluster cannot serve the crawl's slot now (a failover under way?): {text}"
    if isinstance(exc, redis.exceptions.TryAgainError):
        return f"the crawl's slot is being migrated (a reshard): {text}"
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return f"the node is a replica now (a failover): {text}"
    return text


class Store:
    """A crawl's keys on one Redis server, and every operation on them."""

    def __init__(
        self,
        url: RedisURL,
        crawl: str,
        *,
        timeout: float = 20.0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Args:
        clock: milliseconds to use as "now" in lease and liveness decisions instead of
            the server's TIME; for simulations, which drive time themselves.
        """
        self.url = url
        self.clock = clock
        self.crawl = crawl
        self.prefix = f"hc:{{{crawl}}}:"
        self._timeout = timeout
        self.marker = secrets.token_hex(8)  # the instance marker if this store sets it
        options = {
            "retry": Retry(NoBackoff(), 0),  # hashcrawl retries itself, at most a second apart
            "protocol": 2,
            "health_check_interval": 0,
        }
        self._nodes = Nodes(url, self.key("epoch"), options, timeout=timeout)

    @property
    def _redis(self) -> Any:
        """The client of the server holding the crawl's keys (a cluster's primary for its
        slot, found at first use). redis-py's annotations cannot know that
        decode_responses=True makes every reply a str, so it is typed loosely here."""
        self._nodes.moved(self._after_failover, self._timeout)
        return self._nodes.client("main", self._timeout)

    @functools.cached_property
    def _scripts(self) -> dict[str, Any]:
        client = self._nodes.client("main", self._timeout)
        names = ("heartbeat", "join", "leave", "commit", "release", "unpark", "inflight")
        return {name: client.register_script(_script(name)) for name in (*names, "settings")}

    def _after_failover(self, client: Any) -> None:
        """Raise the epoch past any the old primary of the slot may have issued and lost
        (see ``lua/failover.lua``), before this store writes anything to the new one."""
        ratchet = client.register_script(_script("failover"))
        epoch = ratchet(keys=[self.key("epoch")], args=[self.prefix, self._now()])
        if int(epoch):
            log.warning("crawl %s: its slot moved, epoch raised to %s", self.crawl, epoch)

    def _run(
        self, name: str, args: Sequence[Any], keys: Sequence[str] = (), *, read_only: bool = False
    ) -> Any:
        """Run a script; one that writes, in a cluster whose primary has replicas, returns
        only once they confirm it (``Nodes.confirmed``)."""
        script = self._scripts[name]
        # A declared key makes a node that does not hold the crawl's slot answer MOVED,
        # ASK or TRYAGAIN before the script runs; the scripts themselves read only ARGV.
        keys = keys or [self.key("epoch")]
        client = self._redis
        if read_only or not self._nodes.replicas:
            return script(keys=list(keys), args=list(args), client=client)
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        [reply] = self._nodes.confirmed(client, [call])
        if isinstance(reply, redis.exceptions.NoScriptError):  # a promoted node's empty cache
            client.script_load(script.script)
            [reply] = self._nodes.confirmed(client, [call])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _write(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Run plain write commands in one pipeline, confirmed as ``_run``'s scripts."""
        replies = self._nodes.confirmed(self._redis, list(commands))
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _now(self) -> str | int:
        return "" if self.clock is None else self.clock()

    def key(self, suffix: str) -> str:
        return self.prefix + suffix

    def stream_of(self, worker: str) -> str:
        return self.prefix + "q:" + worker

    @property
    def inbox(self) -> str:
        return self.prefix + "inbox"

    def close(self) -> None:
        self._nodes.close()

    # -- membership ---------------------------------------------------------------

    @_translated
    def ping(self) -> None:
        self._redis.ping()

    @_translated
    def in_cluster(self) -> bool:
        """Whether the crawl's keys are on a Redis Cluster (found at first use)."""
        return self._nodes.cluster

    @_translated
    def join(
        self, worker: str, info: Mapping[str, str | int], *, instance: str = ""
    ) -> tuple[int, int, str]:
        """Add ``worker`` to the ring; returns (server ms, epoch, the crawl's instance
        marker). Joining again while a member (a retry after a lost reply) changes
        nothing. The first join or submit of a crawl sets its marker.

        Args:
            instance: the marker this worker knew before (it rejoins): joining is
                refused, and nothing written, unless it is still there.

        Raises:
            Fenced: ``worker`` was a member once and has lost its membership.
            StateLost: ``instance`` is no longer the crawl's marker.
        """
        args = [self.prefix, worker, self._now(), instance, self.marker, *_flat(info)]
        reply = self._run("join", args)
        if int(reply[1]) == -2:
            raise StateLost(f"{LOST}; worker {worker} stops")
        if int(reply[1]) < 0:
            raise Fenced(f"worker {worker} lost its membership before its join was confirmed")
        return int(reply[0]), int(reply[1]), str(reply[2])

    @_translated
    def instance(self) -> str | None:
        """The crawl's instance marker, or None if it has none (never started, or lost)."""
        value = self._redis.get(self.key("instance"))
        return None if value is None else str(value)

    @_translated
    def durability_warning(self) -> str | None:
        """One line if this Redis may lose the crawl's state: no AOF, or evicting keys."""
        try:
            aof = int(self._redis.info("persistence").get("aof_enabled", 0))
            policy = str(self._redis.info("memory").get("maxmemory_policy", "noeviction"))
        except redis.ResponseError:  # INFO disabled (some managed services): nothing to say
            return None
        problems = [] if aof else ["without appendonly (a restart loses the crawl)"]
        if policy != "noeviction":
            problems.append(f"with maxmemory-policy {policy} (it may evict the crawl's keys)")
        if not problems:
            return None
        return f"Redis at {self.url.redacted()} runs " + " and ".join(problems)

    @_translated
    def heartbeat(
        self,
        worker: str,
        *,
        lease_ms: int,
        applied: int,
        known_epoch: int,
        stats: Mapping[str, str | int] = {},
        expire_ms: int | None = None,
        instance: str = "",
        forget_ms: int | None = None,
    ) -> Beat:
        """Renew ``worker``'s membership; expire members silent for ``expire_ms``
        (the lease unless given); prune workers departed ``forget_ms`` ago
        (FORGET_LEASES leases unless given).

        With ``instance``, a crawl whose marker is not that one gives a beat with
        ``lost`` set: its state is gone.
        """
        expire = lease_ms if expire_ms is None else expire_ms
        forget = lease_ms * FORGET_LEASES if forget_ms is None else forget_ms
        args = [self.prefix, worker, lease_ms, applied, known_epoch, self._now(), expire]
        args += [instance, forget, *_flat(stats)]
        return Beat.from_reply(self._run("heartbeat", args))

    @_translated
    def leave(self, worker: str, pace: Mapping[str, str]) -> int:
        """Take ``worker`` out of the ring; returns the new epoch (0 if it had gone).

        The pace records go first, a thousand hosts per command, so that neither a
        script's argument list nor one command grows with the hosts a worker owned.
        """
        records = list(pace.items())
        for start in range(0, len(records), PACE_CHUNK):
            self._redis.hset(self.key("pace"), mapping=dict(records[start : start + PACE_CHUNK]))
        # The leave's confirmation covers the pace records too: a replica applies writes
        # in the order the primary made them.
        return int(self._run("leave", [self.prefix, worker]))

    @_translated
    def members(self) -> tuple[int, tuple[str, ...]]:
        """The current epoch and the sorted member ids, read together."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(self.key("epoch"))
            pipe.zrange(self.key("members"), 0, -1)
            epoch, members = pipe.execute()
        return int(epoch or 0), tuple(sorted(members))

    # -- the frontier ---------------------------------------------------------------

    @_translated
    def commit(self, batch: Batch) -> Committed:
        """Apply ``batch`` atomically, or a big one as parts in order (see ``_batch``).

        A part refused as stale or fenced stops the rest; the caller sends the whole
        batch again, routed anew, and what earlier parts did is not done twice.
        """
        if not batch.worker and not batch.instance:
            batch.instance = self.marker
        total = Committed(status="ok")
        for part in batch.parts():
            result = Committed.from_reply(self._run("commit", [self.prefix, part.to_json()]))
            total += result
            if result.status != "ok":
                break
        return total

    @_translated
    def read(
        self, worker: str, *, count: int, block_ms: int, after: str | None = None
    ) -> list[tuple[str, bytes | None]]:
        """Entries never delivered before, now pending for ``worker``: (id, payload).

        With ``after``, ``worker``'s own pending entries with greater ids instead (at
        once: Redis does not block such a read).
        """
        # Its own connection, whose socket timeout outlasts the block.
        blocking: Any = self._nodes.client(
            "blocking", self._timeout + block_ms / 1000, decode=False
        )
        reply = blocking.xreadgroup(
            GROUP, worker, {self.stream_of(worker): after or ">"}, count=count, block=block_ms
        )
        return [_payload(eid, fields) for _, entries in reply or () for eid, fields in entries]

    @_translated
    def orphan(self) -> str | None:
        """One stream left by a departed worker, if any (submissions without owner too)."""
        stream = self._redis.srandmember(self.key("orphans"))
        if stream is None and self._redis.xlen(self.inbox):
            return self.inbox
        return str(stream) if stream is not None else None

    @_translated
    def entries(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]:
        """The first ``count`` entries still in ``stream``, pending or not."""
        raw: Any = self._nodes.client("bytes", self._timeout, decode=False)
        return [_payload(eid, fields) for eid, fields in raw.xrange(stream, count=count)]

    @_translated
    def release(self, stream: str) -> bool:
        """Delete a drained orphan stream; False if entries arrived meanwhile."""
        return bool(self._run("release", [self.prefix, self._now()], keys=[stream]))

    @_translated
    def unpark(self, worker: str, epoch: int, host: str, count: int) -> tuple[str, int, int]:
        """Move up to ``count`` of a host's parked entries into ``worker``'s stream.

        Returns (status, moved, left); status is ok, stale or fenced.
        """
        args = [self.prefix, worker, epoch, host, count]
        reply = self._run("unpark", args, keys=[self.stream_of(worker)])
        if reply[0] != "ok":
            return reply[0], 0, 0
        return "ok", int(reply[1]), int(reply[2])

    @_translated
    def note_in_flight(self, worker: str, seq: int, eids: Sequence[str]) -> bool:
        """Record which suspect entries ``worker`` is fetching, in case it dies of one.

        ``seq`` must rise with every record: one that lands after a newer record (its
        call was held up) is dropped, and False returned.
        """
        args = [self.prefix, worker, seq, ",".join(eids)]
        return bool(self._run("inflight", args))

    @_translated
    def in_flight_of(self, stream: str) -> set[str]:
        """The suspect entries the owner of ``stream`` last said it was fetching."""
        worker = stream.removeprefix(self.prefix + "q:")
        text = self._redis.hget(self.key("w:" + worker), "inflight") or ""
        return set(text.split(",")) - {""}

    @_translated
    def widen_scope(self, members: set[str]) -> None:
        """Add members (``_scope.members``) to the crawl's scope."""
        if members:
            self._write(("SADD", self.key("scope"), *members))

    @_translated
    def scope(self) -> set[str]:
        """The members of the crawl's scope (``_scope.Scope.from_members`` reads them)."""
        return set(self._redis.smembers(self.key("scope")))

    # -- the crawl's settings (``_crawlconfig`` reads and checks them) -------------------

    @_translated
    def start_settings(
        self, texts: Mapping[str, str], scope: Sequence[str], *, max_text: int
    ) -> list[Any]:
        """Record ``texts`` for each setting the crawl has none for; the scope members
        too if this starts the crawl's settings. The reply of ``lua/settings.lua``."""
        args = [self.prefix, "start", max_text, len(texts), *_flat(texts), *scope]
        return list(self._run("settings", args))

    @_translated
    def read_settings(self, fields: Sequence[str], *, max_text: int) -> list[Any]:
        """The crawl's settings record as ``start_settings`` replies, writing nothing."""
        args = [self.prefix, "read", max_text, len(fields), *_flat(dict.fromkeys(fields, ""))]
        return list(self._run("settings", args, read_only=True))

    @_translated
    def change_settings(
        self,
        texts: Mapping[str, str],
        scope: Sequence[str],
        *,
        expected: str,
        needs_empty: bool,
    ) -> list[Any]:
        """Change the settings to ``texts`` if still at version ``expected``, and widen
        the scope. The reply of ``lua/settings.lua``."""
        args = [self.prefix, "change", 0, len(texts), *_flat(texts), expected]
        args += [int(needs_empty), *scope]
        return list(self._run("settings", args))

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
    def parked_hosts(self) -> set[str]:
        return set(self._redis.smembers(self.key("parked")))

    @_translated
    def pace(self, hosts: Sequence[str]) -> dict[str, str]:
        if not hosts:
            return {}
        values = self._redis.hmget(self.key("pace"), list(hosts))
        return {h: v for h, v in zip(hosts, values, strict=True) if v is not None}

    # -- operators' views -------------------------------------------------------------

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
            "links_dropped": totals.get("links_dropped", 0),
            "host_capped": totals.get("host_capped", 0),
            "dead": r.hlen(self.key("dead")),
            "leases_reclaimed": int(stats.get("leases_reclaimed", 0)),
            "queue_bad": int(stats.get("queue_bad", 0)),
            "bad_samples": r.lrange(self.key("bad"), 0, -1),
            "spiders": spiders,
            "mixed_spiders": len(spiders) > 1,
            "epoch": epoch,
            "ended": exists and queued_now == 0 and alive == 0,
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
        """leases_reclaimed, queue_bad, dead and outstanding, fleet-wide, in one round trip."""
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.hmget(self.key("stats"), ["leases_reclaimed", "queue_bad"])
            pipe.hlen(self.key("dead"))
            pipe.get(self.key("outstanding"))
            (reclaimed, bad), dead, outstanding = pipe.execute()
        return {
            "leases_reclaimed": int(reclaimed or 0),
            "queue_bad": int(bad or 0),
            "dead": int(dead),
            "outstanding": int(outstanding or 0),
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


def _payload(eid: bytes | str, fields: Mapping[bytes, bytes] | None) -> tuple[str, bytes | None]:
    """An entry id and its ``r`` field's raw bytes (None: no such field, or none at all)."""
    text = eid.decode("ascii") if isinstance(eid, bytes) else eid
    return text, (fields or {}).get(b"r")


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


def _flat(mapping: Mapping[str, Any]) -> list[Any]:
    return [item for pair in mapping.items() for item in pair]
