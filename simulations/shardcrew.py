"""A sharded crawl's workers, stepped one turn at a time, and each shard's primary.

A crawl of S shards is S complete crawls, one slot each (``hashcrawl._core._shards``).
Here every shard is its own key prefix on the simulation's one Redis server, and its own
:class:`Primary`: the node serving that slot, which fails over on its own. A
:class:`ShardWorker` is one worker process: hashcrawl's ``Sharded`` (one
``ShardDriver`` per shard, the drivers a live worker runs), built with the same seams
as ``simulations.crew`` gives the one-shard driver (inline calls, fetches as tasks of
the simulated process), each shard's store seen through a :class:`ShardStore`.

**A failover that drops a suffix of one primary's writes.** Replication is asynchronous
and hashcrawl confirms a write (``WAIT``) before its call returns, so what a promoted
replica may lack is exactly the writes no caller saw confirmed: :class:`Primary` keeps
the replica's state as the shard's keys after the last write a caller saw answered
(``DUMP``), and a failover armed for ``k`` writes lets the next ``k`` writes into the
shard run but answers none of them (the primary died before its replica had them);
reads meanwhile run on the doomed primary and answer, seeing the suffix. Then the
replica's state replaces the shard's keys and every worker's store of that shard
learns that the slot moved, as ``_nodes`` learns it from the slot map.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import redis
import trio

from hashcrawl._core._shards import shard_name
from hashcrawl._exceptions import QueueError
from hashcrawl._run._sharding import ShardDriver
from hashcrawl._run._worker import Worker
from hashcrawl._store import _crawlconfig
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from simulations.crew import FaultyStore, Link, LostReply, SimSink, Task
from simulations.loop import PATIENCE, inline
from simulations.observe import _escaped
from simulations.web import SimFetcher

# The store calls hashcrawl confirms with the replicas (``Connection._run``, ``_write``):
# once one returns, everything before it is on the replica too.
CONFIRMED = frozenset(
    {"join", "heartbeat", "leave", "commit", "release", "unpark", "note_in_flight", "widen"}
)
LIVE = ("joining", "member", "stopping", "leaving")


class Primary:
    """One shard's primary, and the replica that trails it by the unconfirmed writes."""

    def __init__(self, shard: int, prefix: str, url: str) -> None:
        self.shard, self.prefix = shard, prefix
        self.r = redis.Redis.from_url(url)  # bytes: DUMP's payloads are binary
        self.replica: list[tuple[bytes, int, bytes]] = []
        self.tracking = True  # a failover may still come: keep the replica's state
        self.losing = 0  # writes still to run unanswered before the primary dies
        self.failovers = 0
        self.lost_writes: list[str] = []  # what the failovers dropped, for the trace
        self.stores: list[Store] = []  # every worker's store of this shard
        self.dying: Callable[[Primary], None] = lambda primary: None  # told before it dies
        # How the first settle on the promoted node fails, if it does (PromotedStore):
        # "refused" before the ratchet runs, "lost" its reply after; drawn per failover.
        self.settle_fault: str | None = None
        self.settle_faults: list[str] = []  # those struck, for the trace

    @property
    def _match(self) -> str:
        return _escaped(self.prefix) + "*"

    def close(self) -> None:
        self.r.close()

    def confirmed(self) -> None:
        """A write was answered: the replica has everything the primary has now."""
        if not self.tracking:
            return
        keys = sorted(self.r.scan_iter(match=self._match, count=1000))
        with self.r.pipeline(transaction=True) as pipe:
            for key in keys:
                pipe.pttl(key)
                pipe.dump(key)
            replies = pipe.execute()
        self.replica = [
            (key, int(ttl), dump)
            for key, ttl, dump in zip(keys, replies[::2], replies[1::2], strict=True)
            if dump is not None
        ]

    def fail_over(self) -> None:
        """The primary dies; its replica, without the unconfirmed suffix, serves the slot."""
        self.dying(self)
        keys = list(self.r.scan_iter(match=self._match, count=1000))
        with self.r.pipeline(transaction=True) as pipe:
            if keys:
                pipe.delete(*keys)
            for key, ttl, dump in self.replica:
                pipe.restore(key, max(ttl, 0), dump, replace=True)
            pipe.execute()
        self.r.script_flush()  # a promoted node has loaded none of the scripts: NOSCRIPT
        self.losing = 0
        self.failovers += 1
        for store in self.stores:
            store._nodes._moved = True  # what _nodes sets when the slot map names a new node


class PromotedStore(Store):
    """A shard's store whose first settle on a promoted node may fail inside the failover's
    own step (``Primary.settle_fault``): refused before the ratchet (``lua/failover.lua``)
    runs, or run with its reply lost. Either way nothing else may be written there before
    a ratchet has run, and the epoch only ever jumps up."""

    primary: Primary | None = None

    def _after_failover(self, client: Any) -> None:
        primary = self.primary
        fault = primary.settle_fault if primary is not None else None
        if primary is not None and fault is not None:
            primary.settle_fault = None
            primary.settle_faults.append(fault)
        if fault == "refused":
            raise redis.exceptions.ConnectionError("the promoted node refused the ratchet")
        super()._after_failover(client)
        if fault == "lost":
            raise redis.exceptions.ConnectionError("the reply to the ratchet was lost")


class ShardStore(FaultyStore):
    """One shard's store seen through a worker's :class:`Link` and the shard's
    :class:`Primary`: a write in a doomed primary's suffix runs, unanswered."""

    def __init__(self, store: Store, link: Link, primary: Primary, ran: Any = None) -> None:
        super().__init__(store, link, ran=ran)
        self.primary = primary
        primary.stores.append(store)
        if isinstance(store, PromotedStore):
            store.primary = primary

    @property
    def _redis(self) -> Any:
        """For ``queued_any`` (a read of the shard's counter), through the link's cut."""
        if self.link.cut:
            raise QueueError("cut off from Redis (reading seenmeta)")
        return self._store._redis

    def key(self, suffix: str) -> str:
        return self._store.key(suffix)

    def widen_scope(self, members: set[str]) -> None:
        self._through("widen", self._store.widen_scope, members)

    def add_parents(self, members: set[str], cap: int) -> tuple[bool, int]:
        added: tuple[bool, int] = self._through("widen", self._store.add_parents, members, cap)
        return added

    def _through(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        primary = self.primary
        if name in CONFIRMED and primary.losing:
            super()._through(name, method, *args, **kwargs)
            primary.losing -= 1
            primary.lost_writes.append(name)
            if not primary.losing:
                primary.fail_over()
            raise LostReply(f"shard {primary.shard}'s primary died before its replica had {name}")
        result = super()._through(name, method, *args, **kwargs)
        if name in CONFIRMED:
            primary.confirmed()
        return result


class ShardSet:
    """What ``Sharded`` reads of a crawl's shards (``_store._shards.Shards``): a store per
    shard, here each a :class:`ShardStore` (so typed loosely where it is given)."""

    def __init__(self, stores: list[ShardStore]) -> None:
        self.stores = stores

    def __len__(self) -> int:
        return len(self.stores)


class ShardWorker:
    """One worker process of a sharded crawl: its drivers, links and pending steps."""

    def __init__(self, name: str, env: Any) -> None:
        self.name, self.env = name, env
        shards = len(env.primaries)
        self.links = [Link() for _ in range(shards)]
        url = RedisURL.parse(env.url)
        self.stores = [
            PromotedStore(
                url,
                shard_name(env.crawl, t),
                timeout=PATIENCE,
                clock=env.clock_ms,
                faults=env.faults,
            )
            for t in ["", *env.tags]
        ]
        for store in self.stores:  # they stand for a cluster's stores
            store.settle_first_join = True
        self.fetcher = SimFetcher(env.web, name, env.fetches, timeout=env.settings["timeout"])
        worker = Worker(
            env.url,
            env.crawl,
            fetcher=self.fetcher,
            sink=SimSink(env.done, name),
            faults=env.faults,
            **env.settings,
        )
        worker.id = name
        taken, worker.crawl_settings = _crawlconfig.adopt(
            self.stores[0], worker.settings, worker.given_crawl
        )
        worker.take_settings(taken)
        faulty = [
            ShardStore(store, link, primary)
            for store, link, primary in zip(self.stores, self.links, env.primaries, strict=True)
        ]
        self.sharded = worker.sharded_membership(  # new settings and a stop reach it
            cast(Any, ShardSet(faulty)),
            self.fetcher,
            call=_call,
            spawn=self._spawn,
            offload=inline,
        )
        self.drivers: list[ShardDriver] = self.sharded.drivers
        self.tasks: dict[str, Task] = {}
        self.state = "joining"
        self.ended = [False] * shards  # each shard's membership over (the heartbeat ended it)
        self.last_beat = [float("-inf")] * shards
        self.paused = False
        self.excused = False
        self.flights = 0
        self.ended_at = -1

    def __repr__(self) -> str:
        return f"<{self.name} {self.state}>"

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def active(self) -> bool:
        return self.live and not self.paused

    def start(self, kind: str, fn: Callable[[], Awaitable[Any]]) -> None:
        task = self.tasks[kind] = Task(kind)
        task.run(fn, self.env.loop)

    def stop_tasks(self, *, shard: int | None = None) -> None:
        """Cancel every pending step (of one shard's driver: ``shard``)."""
        for kind, task in self.tasks.items():
            if shard is None or kind.endswith(f"@{shard}"):
                task.scope.cancel()

    def _spawn(self, fetch: Callable[..., Awaitable[None]], *args: Any) -> None:
        self.flights += 1
        self.start(f"fetch{self.flights}", lambda: fetch(*args))

    def arm(self, *, crash_at: str, after: bool, shard: int | None = None) -> None:
        """Die at the next call named ``crash_at`` of one shard (or of any)."""
        for i, link in enumerate(self.links):
            if shard is None or i == shard:
                link.crash_at, link.crash_after = crash_at, after

    def disarm(self) -> None:
        for link in self.links:
            link.disarm()

    # -- the turns ---------------------------------------------------------------------------

    async def join(self) -> str:
        async with trio.open_nursery() as nursery:  # every shard joins before any link moves
            for driver in self.drivers:
                nursery.start_soon(driver.begin)
        self.state = "member"
        epochs = [d.session.epochs.ring.epoch for d in self.drivers]
        return f"joined every shard at epochs {epochs}"

    async def beat(self, shard: int) -> str:
        """A turn of one shard's heartbeat loop: beat; end that membership as it would."""
        driver = self.drivers[shard]
        self.last_beat[shard] = driver.now()
        beat = await driver.beat_once()
        if beat is None:
            return "heartbeat failed"
        if await driver.ending(beat):
            stopped = driver.session.flight.stopping  # asked to (else: it saw the crawl over)
            ends = self.sharded.ends
            if not stopped and not any(self.ended) and ends.first:
                self.env.saw_over(self, max(r.received for r in ends.first.values()))
            self.stop_tasks(shard=shard)
            await driver.leave()
            self.ended[shard] = True
            if all(self.ended):
                self.state = "left" if stopped else "finished"
            return f"its membership of this shard ended, and it left ({self.state})"
        return f"epoch {beat.epoch}, settled {beat.settled}"

    async def read(self, shard: int) -> str:
        session = self.drivers[shard].session
        if session.flight.stopping:
            return "stopping: reads no more"
        if not session.intake.unsure and not self.env.observers[shard].undelivered(session.stream):
            return "nothing new in its stream"
        try:
            got = await self.drivers[shard].read_once(block_ms=1)
        except QueueError as exc:  # the reader loop tries again
            return f"read failed: {exc}"
        return f"read {got} entries"

    async def commit(self, shard: int) -> str:
        count = await self.drivers[shard].commit_turn()
        return f"committed {count} outcomes" if count else "nothing to commit"

    async def apply(self, shard: int) -> str:
        ring = await self.drivers[shard].apply_turn()
        return "no new epoch" if ring is None else f"applied epoch {ring.epoch}"

    async def drain(self, shard: int) -> str:
        drained = await self.drivers[shard].drain_turn()
        return f"drained {len(drained)} streams"

    async def load_pace(self, shard: int) -> str:
        hosts = await self.drivers[shard].pace_turn()
        return f"loaded pace of {', '.join(hosts)}" if hosts else "no pace to load"

    async def unpark(self, shard: int) -> str:
        took = await self.drivers[shard].unpark_turn()
        return f"unparked {', '.join(took) or 'nothing'}"

    def wants(self, kind: str, shard: int) -> bool:
        driver = self.drivers[shard]
        session = driver.session
        if f"{kind}@{shard}" in self.tasks or self.ended[shard]:
            return False
        return {
            "commit": bool(session.ledger.outcomes or driver.inbound),
            "apply": (due := session.due()).apply,
            "drain": due.drain,
            "load_pace": due.pace,
            "unpark": bool(session.intake.parked),
        }.get(kind, True)


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The drivers' ``call``: inline, so that a step is deterministic."""
    return fn(*args, **kwargs)
