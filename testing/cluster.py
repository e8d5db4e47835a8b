"""A real Redis Cluster on loopback: 3 primaries with a replica each, for tests and scripts.

Six `RedisServer` processes (cluster-enabled, a short ``cluster-node-timeout``, no
persistence unless asked), joined by ``redis-cli --cluster create --cluster-replicas 1``.
Every wait polls the cluster's own state (``CLUSTER INFO``, ``CLUSTER SHARDS``, each
primary's replication link) with a deadline; none sleeps for a fixed time.

    with Cluster(tmp_path) as cluster:
        url = cluster.url               # any node: hashcrawl finds the rest
        dead = cluster.kill_primary_of("hc:{crawl}:epoch")  # returns once promoted
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from hashcrawl._exceptions import QueueError
from hashcrawl._store._server import HOST, RedisServer, _free_port

NODE_TIMEOUT_MS = 1000  # a dead primary is failed over in a few of these
READY_TIMEOUT = 60.0  # seconds the whole cluster may take to form or to fail over
POLL = 0.05
SLOTS = 16384


class Cluster:
    """Six redis-server processes formed into one cluster; ``nodes`` in start order."""

    def __init__(
        self,
        directory: Path,
        *,
        primaries: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
        appendonly: bool = False,
        password: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.size = primaries * (1 + replicas)
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.appendonly = appendonly
        self.password = password
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        """The first live node's URL: any node will do, hashcrawl discovers the others."""
        return next(n.url for n in self.nodes if n.pid is not None)

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start the servers, form the cluster and wait until it serves every slot."""
        try:
            for n in range(self.size):
                self.nodes.append(self._node(self.directory / f"node{n}"))
                self.nodes[-1].start()
            self._create()
            self.wait_ready()
        except BaseException:
            self.close()
            raise

    def _node(self, directory: Path) -> RedisServer:
        # The bus port is chosen here: port + 10000 (the default) may be past 65535.
        extra = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": str(self.node_timeout_ms),
            "cluster-port": str(_free_port()),
            "cluster-replica-validity-factor": "0",  # any replica may be promoted
            "repl-diskless-sync": "yes",
            "repl-diskless-sync-delay": "0",
            # A node lists a replica in CLUSTER SLOTS once the replica's offset is not 0,
            # and an idle primary's offset first moves with its ping to its replicas:
            # every 10 s by default, which made forming a cluster take 12 s, not 2.
            "repl-ping-replica-period": "1",
        }
        if self.password is not None:
            extra["masterauth"] = self.password  # replicas log in to their primaries
        return RedisServer(
            directory=directory, appendonly=self.appendonly, password=self.password, extra=extra
        )

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise QueueError("redis-cli is not on PATH: it forms the test cluster")
        addresses = [f"{HOST}:{n.port}" for n in self.nodes]
        command = [cli, "--cluster", "create", *addresses]
        command += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        env = None if self.password is None else {**os.environ, "REDISCLI_AUTH": self.password}
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=READY_TIMEOUT, env=env
        )
        if done.returncode != 0:
            raise QueueError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")

    def close(self) -> None:
        for node in self.nodes:
            node.kill()  # no persistence to flush, and SHUTDOWN on six nodes is slow
        self.nodes.clear()

    # -- what the cluster looks like now ------------------------------------------------

    def client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis(
            host=HOST,
            port=node.port or 0,
            password=self.password,
            decode_responses=True,
            socket_timeout=5.0,
        )

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.pid is not None]

    def shards(self, seen_by: RedisServer | None = None) -> list[dict[str, Any]]:
        """Per primary: its node, its slot ranges and its replicas, as ``seen_by`` (by
        default the first live node) sees it."""
        with self.client(seen_by or self.live()[0]) as client:
            reply = client.execute_command("CLUSTER", "SLOTS")
        by_port = {n.port: n for n in self.nodes}
        return [
            {
                "slots": (int(start), int(end)),
                "primary": by_port[int(primary[1])],
                "replicas": [by_port[int(r[1])] for r in rest],
            }
            for start, end, primary, *rest in reply
        ]

    def primary_of(self, key: str) -> RedisServer:
        """The primary serving ``key``'s slot now."""
        with self.client(self.live()[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
        for shard in self.shards():
            start, end = shard["slots"]
            if start <= slot <= end:
                node: RedisServer = shard["primary"]
                return node
        raise AssertionError(f"no primary serves slot {slot} of {key!r}")

    def primaries(self) -> list[RedisServer]:
        return list(dict.fromkeys(shard["primary"] for shard in self.shards()))

    # -- waits ---------------------------------------------------------------------

    def wait_ready(self) -> None:
        """Until every live node says cluster_state:ok with all slots, and every primary's
        replicas are online (a replica still syncing could not be promoted)."""
        _wait(self._ready, "the cluster to serve every slot with its replicas online")

    def _ready(self) -> bool:
        try:
            for node in self.live():
                with self.client(node) as client:
                    info = _cluster_info(client)
                    if info.get("cluster_state") != "ok":
                        return False
                    if int(info.get("cluster_slots_ok", 0)) != SLOTS:
                        return False
            # Every node's slot map lists every replica: a client's map comes from any.
            for node in self.live():
                if any(len(s["replicas"]) < self.replicas for s in self.shards(node)):
                    return False
            for shard in self.shards():
                with self.client(shard["primary"]) as client:
                    replication = client.info("replication")
                online = [k for k, v in replication.items() if k.startswith("slave")]
                online = [k for k in online if replication[k].get("state") == "online"]
                if len(online) < len(shard["replicas"]) or len(shard["replicas"]) < self.replicas:
                    return False
        except redis.RedisError:
            return False
        return True

    def kill_primary_of(self, key: str) -> RedisServer:
        """SIGKILL the primary serving ``key`` and return once its replica serves the slot
        (cluster_state:ok on every live node). Returns the killed node."""
        victim = self.primary_of(key)
        victim.kill()
        _wait(
            lambda: self._promoted(key, victim),
            f"a replica of {HOST}:{victim.port} to take over {key!r}",
        )
        return victim

    def _promoted(self, key: str, victim: RedisServer) -> bool:
        try:
            if self.primary_of(key) is victim:
                return False
            for node in self.live():
                with self.client(node) as client:
                    if _cluster_info(client).get("cluster_state") != "ok":
                        return False
        except redis.RedisError:
            return False
        return True

    def move_slot_of(self, key: str, to: RedisServer, *, batch: int = 100) -> int:
        """Migrate ``key``'s slot, keys and all, to the primary ``to`` (what
        ``redis-cli --cluster reshard`` does for each slot, ``batch`` keys a MIGRATE as
        its ``--cluster-pipeline``), and wait until every live node agrees. Returns the
        keys moved."""
        move = self.open_move(key, to)
        moved = 0
        while keys := move.keys(batch):
            moved += move.migrate(keys)
        move.close()
        return moved

    def open_move(self, key: str, to: RedisServer) -> SlotMove:
        """Start migrating ``key``'s slot to the primary ``to`` (IMPORTING on ``to``,
        then MIGRATING on its primary); the keys are the caller's to move."""
        source = self.primary_of(key)
        with self.client(source) as src, self.client(to) as dst:
            slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
            ids = {n: self.node_id(n) for n in (source, to)}
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source])
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to])
        return SlotMove(self, key, slot, source, to, ids[to])

    def node_id(self, node: RedisServer) -> str:
        with self.client(node) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def restart(self, node: RedisServer) -> None:
        """Start a killed node again; it rejoins as a replica of whoever took its slots."""
        node.start()
        self.wait_ready_nodes()

    def wait_ready_nodes(self) -> None:
        _wait(lambda: self._all_ok(), "every live node to see cluster_state:ok")

    def _all_ok(self) -> bool:
        try:
            for node in self.live():
                with self.client(node) as client:
                    if _cluster_info(client).get("cluster_state") != "ok":
                        return False
        except redis.RedisError:
            return False
        return True


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    text = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise QueueError(f"timed out after {READY_TIMEOUT:g} s waiting for {what}")
        time.sleep(POLL)


def started(directory: Path, **options: Any) -> Iterator[Cluster]:
    """A cluster for a ``with`` block or a fixture: ``yield from started(path)``."""
    with Cluster(directory, **options) as cluster:
        yield cluster


class SlotMove:
    """One slot's migration under way (``Cluster.open_move``): move its keys, then close."""

    def __init__(
        self,
        cluster: Cluster,
        key: str,
        slot: int,
        source: RedisServer,
        to: RedisServer,
        to_id: str,
    ) -> None:
        self.cluster, self.key, self.slot = cluster, key, slot
        self.source, self.to, self.to_id = source, to, to_id

    def keys(self, count: int) -> list[str]:
        """Up to ``count`` keys of the slot still on the source."""
        with self.cluster.client(self.source) as src:
            return list(src.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, count))

    def migrate(self, keys: list[str]) -> int:
        """MIGRATE ``keys`` to the target; returns how many."""
        password = self.cluster.password
        auth = [] if password is None else ["AUTH", password]
        with self.cluster.client(self.source) as src:
            src.execute_command("MIGRATE", HOST, self.to.port, "", 0, 5000, *auth, "KEYS", *keys)
        return len(keys)

    def close(self) -> None:
        """Give the slot to the target on every primary, and wait until every live node
        agrees."""
        cluster = self.cluster
        for node in [self.to, *(n for n in cluster.primaries() if n is not self.to)]:
            with cluster.client(node) as client:
                client.execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", self.to_id)
        _wait(
            lambda: cluster.primary_of(self.key) is self.to,
            f"the slot to be served by {self.to.port}",
        )
        cluster.wait_ready_nodes()
