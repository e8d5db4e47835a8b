"""The store: the key schema, and the worker's half of the commands on it.

Every key of a crawl starts with ``hc:{NAME}:`` (the braces make it a Redis Cluster hash
tag, so all of a crawl's keys share a slot). Under that prefix:

=================  ======  =============================================================
key                type    written by
=================  ======  =============================================================
``members``        ZSET    join, heartbeat, leave, expiry: worker id -> last heartbeat ms
                           (an id is NAME~TOKEN for a worker given --name: no two
                           members share a name, join.lua checks)
``applied``        HASH    join, heartbeat, commit: worker -> epoch whose handoff it did
``epoch``          STRING  join, leave, expiry: +1 on every membership change
``rings``          HASH    join, leave, expiry: epoch -> its members (JSON); heartbeat
                           prunes those below the settled epoch
``workers``        SET     join: every worker id that ever joined (for fleet totals);
                           heartbeat prunes departed ones (see ``departed``)
``w:ID``           HASH    join, heartbeat: a worker's host, machine, pid, lease, spider, own
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
``seenmeta``       HASH    commit: the seen filter's shape and fill; URLs seen and queued;
                           ``outstanding``: entries waiting or held anywhere, fleet-wide
``idle_since``     STRING  heartbeat, commit: server ms since nothing was outstanding
``pace``           HASH    commit, leave: host -> pacing state for its next owner;
                           deleted by the new owner's next commit, if still as read
``floors``         HASH    join (taking a place by name): ``*`` -> server ms the last
                           replaced member may have requested any host until; host ->
                           until when a request it had out may run; pruned after an hour
``park:HOST``      ZSET    commit, unpark: a host's overflow, out of its owner's memory
``parked``         SET     commit, unpark: hosts that have an overflow set
``dead``           HASH    commit: fingerprint (``dead_key``) -> JSON record with the
                           error, attempts, entry (so its URL) and time, out of attempts
``bad``            LIST    commit: the newest samples of unreadable entries (bounded)
``stats``          HASH    commit, heartbeat, join: fleet counters (join: taken_over);
                           pages: ``pages_taken``, counted against --max-pages-total;
                           parents: ``parents``, the ``dir:`` members of ``scope``
``turn:HOST``      HASH    turn: a shared host's latest turn (server ms), its gap and
                           margin; expires a minute after a turn at once is due again
``notices``        HASH    a worker's first refusal of a page for a reason (HSETNX):
                           reason -> unix seconds; whoever sets it says the line
``scope``          SET     submit, join, commit, configure: the hosts links may lead
                           to (and ``domain:D``, ``span``), and the start URLs'
                           directories (``dir:HOST/PATH/``, parents: at most
                           ``_parents.MAX_PARENTS``); only grows, so its size is its
                           version, checked by commit
``settings``       HASH    join, crawl, configure (``_crawlconfig``): the crawl's
                           settings but the scope's, one field each as its flag's text,
                           and ``version`` (+1 on every change; the heartbeat returns it)
``rv:B``           HASH    revisit (``_revisits``, with --revisit): 8-byte URL
                           fingerprint -> the page's revisit record, bucket B
``rvu:B``          HASH    revisit: fingerprint -> the page's entry, for its revisits
``rvdue``          ZSET    revisit: bucket -> its earliest due time, server seconds
``rvhist``         HASH    revisit: minute -> records due in it, for status
``rvs:M``          HASH    revisit: second of minute M -> records due in it (status's
                           due_now, to the second)
``absent``         (none)  never written: every script call declares it, so that on a
                           cluster a call during the slot's migration is refused whole
                           (TRYAGAIN or ASK) instead of running over keys that have left
=================  ======  =============================================================

Time in every lease and liveness decision is the Redis server's (``TIME`` in scripts),
so clock skew between machines changes nothing. The Lua scripts live in ``lua/``, each
opening with the keys it touches.

On a Redis Cluster the keys live on the primary of the crawl's slot (under Sentinel, on
the primary the sentinels name), found and followed by ``_nodes``; there every write
returns only once that primary's replicas confirm it, and after the primary moves the
epoch is raised (``lua/failover.lua``; docs/design.md, "On
a Redis Cluster", says why both are needed).

The store is three modules: ``_connection`` (the client, the scripts, errors
translated), ``_views`` (what an operator reads or clears: ``Views``, the
``StatusStore``) and this one, whose ``Store`` adds what a worker asks (the
``WorkerStore``): membership, its stream, commits, parking, pacing, settings written.

The methods are blocking; the worker calls them from a thread (see ``_worker``).
redis-py errors never leave these modules untranslated: they become ``QueueError``.
Stream payloads are read as bytes (a client without ``decode_responses``), so that an
entry that is not UTF-8 is a bad entry for ``Entry.decode`` to name, not an exception here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from hashcrawl._core._batch import LOST as LOST
from hashcrawl._core._batch import Batch as Batch
from hashcrawl._core._batch import Beat as Beat
from hashcrawl._core._batch import Committed as Committed
from hashcrawl._core._batch import dead_key as dead_key
from hashcrawl._core._names import Holder, HolderBehind
from hashcrawl._core._pace import Paces
from hashcrawl._core._ring import name_of
from hashcrawl._exceptions import Fenced, NameTaken, StateLost
from hashcrawl._store._connection import GROUP, _flat, _translated
from hashcrawl._store._views import Views

PACE_CHUNK = 1000  # hosts per HSET when a leaving worker writes its pace records
FORGET_LEASES = 10  # a departed worker's keys are pruned this many leases after it left


class Store(Views):
    """A crawl's keys on one Redis server, and every operation on them: the operator's
    (``Views``) and the worker's (here)."""

    # -- membership ---------------------------------------------------------------

    @_translated
    def ping(self) -> None:
        self._redis.ping()

    @_translated
    def in_cluster(self) -> bool:
        """Whether the crawl's keys are on a Redis Cluster (found at first use)."""
        return self._nodes.cluster

    @_translated
    def may_fail_over(self) -> bool:
        """Whether a failover may move the crawl's keys to another server: they are on a
        Redis Cluster, or on a primary that Redis Sentinel watches."""
        return self._nodes.replicated

    @_translated
    def join(
        self,
        worker: str,
        info: Mapping[str, str | int],
        *,
        instance: str = "",
        replaces: Holder | None = None,
        lease_ms: int = 0,
        in_hand: Sequence[str] = (),
        timeout_ms: int = 0,
    ) -> tuple[int, int, str]:
        """Add ``worker`` to the ring; returns (server ms, epoch, the crawl's instance
        marker). Joining again while a member (a retry after a lost reply) changes
        nothing. The first join or submit of a crawl sets its marker.

        Args:
            instance: the marker this worker knew before (it rejoins): joining is
                refused, and nothing written, unless it is still there.
            replaces: the member of ``worker``'s name whose place it takes, as last
                seen (``holder``): it is fenced in the same step (``lua/join.lua``).
            lease_ms: the crawl's lease: a member ``replaces`` that is behind the newest
                epoch is replaced only once silent this long (else HolderBehind).
            in_hand: the hosts ``replaces`` had pages of in hand: their next owners wait
                ``timeout_ms`` from now, any other host's from now (``floors``).

        Raises:
            Fenced: ``worker`` was a member once and has lost its membership.
            StateLost: ``instance`` is no longer the crawl's marker.
            NameTaken: another member has ``worker``'s name (not ``replaces``, or it
                has heartbeat since it was seen): nothing was written.
        """
        old = ["", "", ""] if replaces is None else [replaces.member, replaces.beat_ms, lease_ms]
        floors = [timeout_ms, len(in_hand), *in_hand]
        args = [self.prefix, worker, self._now(), instance, self.marker, *old, *floors]
        args += _flat(info)
        self._before_join()
        reply = self._run("join", args)
        if int(reply[1]) == -4:
            raise HolderBehind(f"{replaces} is behind the newest epoch")
        if int(reply[1]) == -3:
            name = name_of(worker)
            raise NameTaken(f"a worker named {name} joined or beat meanwhile; pick another name")
        if int(reply[1]) == -2:
            raise StateLost(f"{LOST}; worker {worker} stops")
        if int(reply[1]) < 0:
            raise Fenced(f"worker {worker} lost its membership before its join was confirmed")
        if replaces is not None and "takeover_unfenced" in self.faults:  # a deliberate bug
            self._unfence(replaces, int(reply[1]))
        return int(reply[0]), int(reply[1]), str(reply[2])

    def _unfence(self, replaced: Holder, epoch: int) -> None:
        """The deliberate bug ``takeover_unfenced``: the member a join replaced stays one."""
        self._redis.zadd(self.key("members"), {replaced.member: replaced.beat_ms})
        self._redis.hset(self.key("applied"), replaced.member, epoch)
        self._redis.srem(self.key("orphans"), self.stream_of(replaced.member))

    @_translated
    def holder(self, name: str) -> Holder | None:
        """The member that has the name ``name`` now, with the server's time; None if none."""
        reply = self._run("holder", [self.prefix, name, self._now()], read_only=True)
        if len(reply) < 7:
            return None
        now_ms, member, beat, machine, pid, host, behind = reply
        return Holder(
            member=str(member),
            beat_ms=int(float(beat)),
            now_ms=int(now_ms),
            machine=str(machine),
            pid=int(pid) if str(pid).isdigit() else 0,
            host=str(host),
            behind=int(behind) == 1,
        )

    @_translated
    def claim_notice(self, reason: str) -> bool:
        """Whether this is the crawl's first notice of ``reason`` (whoever sets the field
        says the line: once per crawl, not once per worker)."""
        return bool(self._redis.hsetnx(self.key("notices"), reason, int(time.time())))

    @_translated
    def take_page(self, cap: int) -> bool:
        """Take one of the crawl's ``cap`` pages (``--max-pages-total``) for a request
        about to leave; False once the fleet has taken them all (``lua/pages.lua``)."""
        return bool(self._run("pages", [self.prefix, cap]))

    @_translated
    def take_turn(
        self, host: str, *, gap: float, margin: float, most_wait: float
    ) -> tuple[bool, float]:
        """Reserve the next turn of a shared host (``lua/turn.lua``): (True, seconds
        until it), or (False, seconds until the next free one) when that is further off
        than ``most_wait``, and nothing was reserved.

        Args:
            gap: the host's --delay, or its Crawl-delay if longer.
            margin: seconds after its slot within which the caller sends, or lets it go.
        """
        ms = [math.ceil(gap * 1000), math.ceil(margin * 1000), math.floor(most_wait * 1000)]
        granted, wait = self._run("turn", [self.prefix, host, *ms, self._now()])
        return bool(granted), int(wait) / 1000

    @_translated
    def give_back_page(self) -> None:
        """Give back a page :meth:`take_page` took for a request that never left."""
        self._redis.hincrby(self.key("stats"), "pages_taken", -1)

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
    def revisit_script(self, args: Sequence[Any], keys: Sequence[str]) -> Any:
        """Run ``lua/revisit.lua`` (for ``_revisits.Revisits``): confirmed and translated
        as every other script call of this store."""
        return self._run("revisit", args, keys)

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
    def held(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]:
        """Up to ``count`` of the entries ``stream``'s owner has read and not acknowledged
        (its requests in flight are among them), oldest first."""
        raw: Any = self._nodes.client("bytes", self._timeout, decode=False)
        summary = raw.xpending(stream, GROUP) if raw.exists(stream) else {"pending": 0}
        if not summary["pending"]:
            return []
        first, last = summary["min"], summary["max"]
        return [_payload(e, f) for e, f in raw.xrange(stream, first, last, count=count)]

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
    def add_parents(self, members: set[str], cap: int) -> tuple[bool, int]:
        """Add start directories (``_parents.member_of``) to the scope, at most ``cap``
        in all: ``(False, count)`` if they would pass it in a --no-parent crawl (nothing
        written), else ``(True, count)`` (``lua/parents.lua``)."""
        status, count = self._run("parents", [self.prefix, cap, *sorted(members)])
        return status == "ok", int(count)

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
    def parked_hosts(self) -> set[str]:
        return set(self._redis.smembers(self.key("parked")))

    @_translated
    def pace(self, hosts: Sequence[str]) -> Paces:
        """The pace records of ``hosts`` and the floors a member replaced by name left
        under them (``lua/pace.lua``), a thousand hosts per call."""
        paces = Paces()
        for start in range(0, len(hosts), PACE_CHUNK):
            chunk = hosts[start : start + PACE_CHUNK]
            paces.add(chunk, self._run("pace", [self.prefix, *chunk], read_only=True))
        return paces


def _payload(eid: bytes | str, fields: Mapping[bytes, bytes] | None) -> tuple[str, bytes | None]:
    """An entry id and its ``r`` field's raw bytes (None: no such field, or none at all)."""
    text = eid.decode("ascii") if isinstance(eid, bytes) else eid
    return text, (fields or {}).get(b"r")
