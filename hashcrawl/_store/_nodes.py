"""Where a crawl's keys are served: one Redis server, the Redis Cluster primary that
holds the crawl's hash slot, or the primary that Redis Sentinel names; and the clients
that reach it.

Every key of a crawl shares one hash tag, so in a cluster one node serves all of them. The
``--redis`` URL may name any node: the first use asks it ``INFO cluster``; with
``cluster_enabled:1``, redis-py's ``RedisCluster`` learns the slot map and the clients here
talk to the primary of the crawl's slot directly. A direct client keeps what the store
relies on: a pipeline runs on one connection (so ``WAIT`` covers the write before it),
``MULTI`` works, and a script's ``NOSCRIPT`` is answered by loading it on that node.

After an error that may mean the slot has moved (a dead or hung primary, ``MOVED``,
``ASK``, ``CLUSTERDOWN``, ``TRYAGAIN``, a write refused by a demoted node), the slot map is
read again; the store learns from ``moved`` that another node now serves the slot.

A ``redis+sentinel://`` URL names sentinels and a service instead: redis-py's
``Sentinel`` asks them, one after another until one answers, for the service's primary
and its replicas, and the clients here talk to that primary directly, as to a cluster's.
After the same errors (and ``MasterNotFoundError``: no sentinel names a primary while
one is being promoted) the sentinels are asked again, and a new primary is a move. Not
``Sentinel.master_for``: its pool reconnects to a new primary by itself, so a write could
reach a promoted replica before the store has raised the epoch there (``_connection``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from hashcrawl._exceptions import InvalidURL
from hashcrawl._store._redisurl import RedisURL

log = logging.getLogger(__name__)
# How long a write waits at most for the crawl's primary's replicas to confirm it
# (``WAIT``); one not confirmed in time is a failed call, which its caller retries (see
# docs/design.md). Never more than half the answer timeout, so the reply comes in time.
REPLICA_WAIT_MS = 2000


class Unconfirmed(redis.RedisError):
    """A write that the crawl's primary made but its replicas did not confirm in time."""


# Errors after which the crawl's slot may be served elsewhere, or its replicas have
# changed: read the slot map again.
MAP_MAY_CHANGE = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.MovedError,  # ASK too (AskError is its parent)
    redis.exceptions.ClusterDownError,  # MASTERDOWN too
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,
    RedisClusterException,
    Unconfirmed,
)
# What a primary answers a blocking read when Sentinel demotes it to a replica.
DEMOTED = "UNBLOCKED force unblock"
# A script's access to a key of a slot the node does not serve.
NOT_LOCAL = "non local key"
TOPOLOGY_TIMEOUT = 5.0  # seconds a slot-map read may wait on one node (a hung one, say)
# Seconds between reads of the slot map when nothing fails: a replica added (or still
# syncing, so not yet listed) when the map was read is waited for from the next read on.
TOPOLOGY_REFRESH_S = 30.0


class Nodes:
    """The server that holds one crawl's keys, found at first use and again after errors."""

    def __init__(
        self, url: RedisURL, slot_key: str, options: dict[str, Any], *, timeout: float
    ) -> None:
        """Args:
        slot_key: a key of the crawl: its slot is the crawl's.
        options: keyword arguments for every client (retries, protocol, ...).
        timeout: the seconds a client waits for an answer (see ``REPLICA_WAIT_MS``).
        """
        self.wait_ms = max(1, min(REPLICA_WAIT_MS, int(timeout * 500)))
        self._timeout = timeout
        self.url = url
        self.slot_key = slot_key
        self._options = options
        self._lock = threading.Lock()
        self._cluster: RedisCluster | None = None
        self._sentinel: Sentinel | None = None
        self._found = False
        self._owner: tuple[str, int] | None = None  # a cluster's or Sentinel's primary
        self._replicas = 0
        self._map_read_at = 0.0  # time.monotonic() of the last slot-map read
        self._moved = False
        self._migrating = False  # a migration of the slot was seen and logged
        self._clients: dict[tuple[Any, ...], redis.Redis] = {}

    @property
    def cluster(self) -> bool:
        """Whether the URL names a node of a Redis Cluster (discovered at first use)."""
        self._discover()
        return self._cluster is not None

    @property
    def replicated(self) -> bool:
        """Whether a failover may move the crawl's keys to another server: a cluster, or
        a primary that Sentinel watches (discovered at first use)."""
        self._discover()
        return self._cluster is not None or self._sentinel is not None

    @property
    def replicas(self) -> int:
        """How many replicas the slot map lists for the crawl's primary, or Sentinel could
        promote (0: one server)."""
        self._discover()
        stale = time.monotonic() - self._map_read_at > TOPOLOGY_REFRESH_S
        if (self._cluster is not None or self._sentinel is not None) and stale:
            self._reread()
        return self._replicas

    @property
    def owner(self) -> str:
        """``host:port`` of the cluster node serving the crawl's slot, or of the primary
        Sentinel names ("" for one server)."""
        self._discover()
        return "" if self._owner is None else f"{self._owner[0]}:{self._owner[1]}"

    def client(self, kind: str, timeout: float, *, decode: bool = True) -> redis.Redis:
        """A client of the server holding the crawl's keys, made once per ``kind`` and
        server (with the first ``timeout`` asked for)."""
        self._discover()
        with self._lock:
            key = (self._owner, kind)
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = self._new_client(self._owner, timeout, decode)
            return found

    def confirmed(self, client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Run write ``commands`` in one pipeline on ``client``; with replicas, ``WAIT``
        for all of them in the same round trip, on the connection that wrote.

        Returns the replies, errors in place: a reply that is an error is the caller's to
        raise or answer (a ``NOSCRIPT``), and the confirmation is then not checked.

        Raises:
            Unconfirmed: fewer replicas than the slot map lists had the writes in time.
        """
        replicas = self.replicas
        with client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            if replicas:
                pipe.execute_command("WAIT", replicas, self.wait_ms)
            replies = list(pipe.execute(raise_on_error=False))
        if not replicas:
            return replies
        acked = replies.pop()
        # The writes' own errors first: a primary demoted since (still up, a replica
        # now) refuses them with READONLY, which says to look for the new primary, and
        # refuses the WAIT with an error that says less.
        if any(isinstance(reply, Exception) for reply in replies):
            return replies
        if isinstance(acked, redis.ResponseError) and "replica" in str(acked):
            raise redis.exceptions.ReadOnlyError(str(acked))
        if isinstance(acked, Exception):
            raise acked
        if int(acked) < replicas:
            raise Unconfirmed(
                f"node {self.owner} made a write that {replicas - int(acked)} of its "
                f"{replicas} replicas did not confirm within {self.wait_ms} ms"
            )
        return replies

    def primaries(self, timeout: float) -> list[redis.Redis]:
        """A new client of every primary (one server: just it), for scans over all keys;
        the caller closes them."""
        self._discover()
        if self._cluster is None:
            return [self._new_client(self._owner, timeout, True)]
        nodes = [(n.host, int(n.port)) for n in self._cluster.get_primaries()]  # type: ignore[no-untyped-call]
        return [self._new_client(node, timeout, True) for node in sorted(nodes)]

    def primary_count(self) -> int:
        """How many primaries serve the store: a cluster's (from its slot map), else 1."""
        self._discover()
        if self._cluster is None:
            return 1
        return max(1, len(self._cluster.get_primaries()))  # type: ignore[no-untyped-call]

    def primary_of_slot(self, slot: int) -> str:
        """``host:port`` of the primary serving ``slot`` ("" for one server, or a slot
        the map does not list)."""
        self._discover()
        if self._cluster is None:
            return ""
        serving = self._cluster.nodes_manager.slots_cache.get(slot) or []
        return f"{serving[0].host}:{serving[0].port}" if serving else ""

    def moved(self, settle: Callable[[redis.Redis], object], timeout: float) -> None:
        """If the crawl's slot changed nodes since the last call, call ``settle`` with a
        client of the new node first; the change counts as settled once it returns."""
        with self._lock:
            if not self._moved:
                return
        settle(self.client("main", timeout))
        with self._lock:
            self._moved = False

    def expect_move(self) -> None:
        """Settle as after a move before the next call: for a store that has never seen
        the slot's node, which may be a replica promoted after losing writes."""
        with self._lock:
            self._moved = True

    def failed(self, exc: BaseException) -> None:
        """Note an error: after one that may mean the slot moved, read the slot map again
        (or ask the sentinels again)."""
        if self._sentinel is not None:
            if isinstance(exc, MAP_MAY_CHANGE) or str(exc).startswith(DEMOTED):
                self._reread()
            return
        if self._cluster is None:
            return
        migrating = isinstance(exc, redis.exceptions.TryAgainError) or (
            isinstance(exc, redis.exceptions.AskError)
            and not isinstance(exc, redis.exceptions.MovedError)
        )
        if migrating and not self._migrating:
            self._migrating = True  # one line per migration, not one per call refused
            log.warning(
                "the crawl's slot on %s is being migrated (a reshard): its calls are "
                "refused whole and tried again until the slot has moved",
                self.owner,
            )
        if not isinstance(exc, MAP_MAY_CHANGE) and NOT_LOCAL not in str(exc):
            return
        self._reread()

    def _reread(self) -> None:
        self._map_read_at = time.monotonic()  # a failed read waits its turn too
        try:
            with self._lock:
                if self._sentinel is not None:
                    self._take_sentinels_view()
                    return
                assert self._cluster is not None
                self._cluster.nodes_manager.initialize()
                self._take_slot_map()
        except (redis.RedisError, RedisClusterException) as again:
            # The store's caller retries; the next failure reads the map again.
            log.debug("Redis Cluster slot map (or Sentinel's primary) not read: %s", again)

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
            if self._cluster is not None:
                self._cluster.close()
            if self._sentinel is not None:
                self._sentinel.close()

    # -- discovery ------------------------------------------------------------------------

    def _discover(self) -> None:
        with self._lock:
            if self._found:
                return
            if self.url.scheme == "redis+sentinel":
                self._sentinel = self._sentinel or self._new_sentinel()
                self._take_sentinels_view()
                self._found = True
                return
            # One server keeps the probe as its main client: no extra connection.
            probe = self._new_client(None, self._timeout, True)
            try:
                enabled = _cluster_enabled(probe)
            except BaseException:
                probe.close()
                raise
            if enabled:
                probe.close()
                self._cluster = self._new_cluster()
                self._take_slot_map()
            else:
                self._clients[None, "main"] = probe
            self._found = True

    def _new_cluster(self) -> RedisCluster:
        url = self.url
        if url.scheme == "redis+unix":
            raise InvalidURL(
                f"--redis {url.redacted()} is a Redis Cluster node: name a node by "
                "redis:// or rediss:// host and port, as the cluster's nodes announce them"
            )
        if url.db != 0:
            raise InvalidURL(
                f"--redis names database {url.db}, but {url.redacted()} is a Redis Cluster "
                "node, which has database 0 only"
            )
        kwargs = {k: v for k, v in url.client_kwargs().items() if k != "db"}
        options = self._options | {
            "socket_timeout": TOPOLOGY_TIMEOUT,
            "socket_connect_timeout": TOPOLOGY_TIMEOUT,
        }
        options.pop("health_check_interval", None)
        return RedisCluster(**kwargs, **options, require_full_coverage=False)

    def _new_sentinel(self) -> Sentinel:
        # The sentinels are asked with the same short patience as a cluster's slot map,
        # and without the URL's password: it is the primary's, not theirs.
        options = {"socket_timeout": TOPOLOGY_TIMEOUT, "socket_connect_timeout": TOPOLOGY_TIMEOUT}
        options |= {"protocol": 2, "decode_responses": True}
        return Sentinel(list(self.url.sentinels), sentinel_kwargs=options)

    def _take_sentinels_view(self) -> None:
        """Learn the primary and its live replicas from the first sentinel that names one.

        Raises:
            MasterNotFoundError: no sentinel answers, or none names a primary that is up.
        """
        assert self._sentinel is not None and self.url.service is not None
        owner = self._sentinel.discover_master(self.url.service)
        self._map_read_at = time.monotonic()
        self._take_owner(
            (str(owner[0]), int(owner[1])), _promotable_replicas(self._sentinel, self.url.service)
        )

    def _take_slot_map(self) -> None:
        """Learn the crawl's primary and its replicas from the cluster client's map."""
        assert self._cluster is not None
        manager = self._cluster.nodes_manager
        slot = self._cluster.keyslot(self.slot_key)  # type: ignore[no-untyped-call]
        self._map_read_at = time.monotonic()
        serving = manager.slots_cache.get(slot) or []
        if not serving:
            return
        self._take_owner((serving[0].host, int(serving[0].port)), len(serving) - 1)

    def _take_owner(self, owner: tuple[str, int], replicas: int) -> None:
        """The crawl's keys are on ``owner`` now, with ``replicas`` to confirm writes; a
        different owner from before is a move."""
        self._replicas = replicas
        if self._owner is not None and owner != self._owner:
            if self._sentinel is not None:
                said = "the crawl's primary moved from %s:%d to %s:%d (a Sentinel failover)"
            else:
                said = "the crawl's slot moved from %s:%d to %s:%d (a failover or a reshard)"
            log.warning(said, *self._owner, *owner)
            self._moved = True
            self._migrating = False
            for key in [k for k in self._clients if k[0] == self._owner]:
                self._clients.pop(key).close()
        self._owner = owner

    def _new_client(
        self, node: tuple[str, int] | None, timeout: float, decode: bool
    ) -> redis.Redis:
        kwargs = self.url.client_kwargs()
        if node is not None:
            if self._cluster is not None:
                kwargs.pop("db")  # a cluster node has database 0 only
            kwargs.update(host=node[0], port=node[1])
        options = self._options | {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "decode_responses": decode,
        }
        return redis.Redis(**kwargs, **options)


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        info = client.info("cluster")
    except redis.ResponseError as exc:
        # A URL naming a database makes the client SELECT it first, which a cluster
        # refuses; otherwise INFO is renamed away or refused (managed services).
        return "not allowed in cluster mode" in str(exc)
    return bool(int(info.get("cluster_enabled", 0)))


def _promotable_replicas(sentinel: Sentinel, service: str) -> int:
    """How many replicas of ``service``'s primary the first sentinel that answers could
    promote, by Sentinel's own rules (not down, reached, priority above 0, replication
    link down for at most ten ``down-after-milliseconds``): the replicas a write waits
    for, as a cluster's waits for every replica its slot map lists. A replica Sentinel
    could not promote is not waited for: the dead primary that a failover has just
    listed as a replica of the new one (disconnected) would only make every ``WAIT``
    time out until Sentinel calls it down.

    Raises:
        redis.ConnectionError: no sentinel answered (never taken for "no replica", which
            would let writes go unconfirmed).
    """
    for client in sentinel.sentinels:
        try:
            replicas = client.sentinel_slaves(service)
        except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
            continue
        return sum(_promotable(replica) for replica in replicas)
    raise redis.ConnectionError(f"no sentinel listed the replicas of {service!r}")


def _promotable(replica: dict[str, Any]) -> bool:
    if replica["is_sdown"] or replica["is_odown"] or replica.get("is_disconnected"):
        return False
    if int(replica.get("slave-priority", 100)) == 0:
        return False
    # The primary's down-after-milliseconds, which its replicas are given too.
    longest_link_down = 10 * int(replica.get("down-after-milliseconds", 30_000))
    return int(replica.get("master-link-down-time", 0)) <= longest_link_down
