"""A real Redis Sentinel set-up on loopback: a primary, a replica and three sentinels.

The primary and its replica are `RedisServer` processes (the replica started with
``replicaof``); each sentinel is a ``redis-server sentinel.conf --sentinel`` process with
a config file of its own (a sentinel rewrites it), monitoring the primary under
``SERVICE`` with quorum 2 and a short ``down-after-milliseconds``. Every wait polls the
sentinels' and servers' own state with a deadline; none sleeps for a fixed time.

    with Sentinels(tmp_path) as sentinels:
        url = sentinels.url                 # redis+sentinel://...:P1,...:P3/hashcrawl
        dead = sentinels.kill_primary()     # returns once a sentinel names the replica
        old = sentinels.fail_over()         # the same, the old primary demoted, not dead
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis

from hashcrawl._exceptions import QueueError
from hashcrawl._store._binary import find_server_binary
from hashcrawl._store._server import HOST, RedisServer, _free_port

SERVICE = "hashcrawl"
DOWN_AFTER_MS = 2000  # a primary silent this long is down for a sentinel
FAILOVER_TIMEOUT_MS = 10_000
READY_TIMEOUT = 60.0  # seconds the set-up may take to form, or to fail over
POLL = 0.05


class SentinelProcess:
    """One ``redis-server --sentinel`` process with its own config file and port."""

    def __init__(self, directory: Path, primary_port: int, password: str | None) -> None:
        self.directory = Path(directory).absolute()
        self.primary_port = primary_port
        self.password = password
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "sentinel.conf"
        config.write_text(self._config())
        with open(self.directory / "stdout.log", "ab") as log:
            self._process = subprocess.Popen(
                [find_server_binary(), str(config), "--sentinel"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        _wait(self._answers, f"the sentinel on port {self.port} to answer")

    def _config(self) -> str:
        lines = [
            f"port {self.port}",
            f"bind {HOST}",
            f"dir {self.directory}",
            f"logfile {self.directory / 'sentinel.log'}",
            "protected-mode no",
            f"sentinel monitor {SERVICE} {HOST} {self.primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if self.password is not None:
            lines.append(f'sentinel auth-pass {SERVICE} "{self.password}"')
        return "\n".join(lines) + "\n"

    def _answers(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            log = (self.directory / "sentinel.log").read_text(errors="replace")[-2000:]
            raise QueueError(f"sentinel on port {self.port} exited: {log}")
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, decode_responses=True, socket_timeout=5.0)

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._process = None


class Sentinels:
    """A primary, a replica of it and three sentinels watching them, on loopback."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        self.directory = Path(directory)
        self.password = password
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL naming the three sentinels and the service."""
        auth = "" if self.password is None else f":{quote(self.password, safe='')}@"
        members = ",".join(f"{HOST}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{auth}{members}/{SERVICE}"

    def __enter__(self) -> Sentinels:
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
        """Start the primary and its replica, wait for the link, then the sentinels; return
        once every sentinel names the primary and knows the replica and the others."""
        try:
            primary = self._server("primary", None)
            self._server("replica", primary)
            _wait(self._linked, "the replica to sync with the primary")
            for n in range(3):
                assert primary.port is not None
                self.sentinels.append(
                    SentinelProcess(self.directory / f"sentinel{n}", primary.port, self.password)
                )
                self.sentinels[-1].start()
            _wait(self._ready, "the sentinels to know the primary, the replica and each other")
        except BaseException:
            self.close()
            raise

    def _server(self, name: str, primary: RedisServer | None) -> RedisServer:
        extra = {"repl-diskless-sync": "yes", "repl-diskless-sync-delay": "0"}
        if self.password is not None:
            extra["masterauth"] = self.password  # a replica logs in to its primary
        server = RedisServer(directory=self.directory / name, password=self.password, extra=extra)
        server.start()
        self.servers.append(server)
        if primary is not None:
            with self.client(server) as client:
                client.execute_command("REPLICAOF", HOST, primary.port)
        return server

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.kill()
        for server in self.servers:
            server.kill()  # no persistence to flush
        self.sentinels.clear()
        self.servers.clear()

    # -- what the set-up looks like now ------------------------------------------------

    def client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(
            host=HOST,
            port=server.port or 0,
            password=self.password,
            decode_responses=True,
            socket_timeout=5.0,
        )

    def live_sentinels(self) -> list[SentinelProcess]:
        return [s for s in self.sentinels if s.pid is not None]

    def primary(self) -> RedisServer:
        """The server the first live sentinel names as the primary now."""
        with self.live_sentinels()[0].client() as client:
            _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return next(s for s in self.servers if s.port == int(port))

    def replicas(self) -> list[RedisServer]:
        primary = self.primary()
        return [s for s in self.servers if s is not primary and s.pid is not None]

    def _linked(self) -> bool:
        try:
            primary, replica = self.servers
            with self.client(replica) as client:
                link = client.info("replication").get("master_link_status")
            with self.client(primary) as client:
                return link == "up" and bool(client.info("replication")["connected_slaves"])
        except redis.RedisError:
            return False

    def _ready(self) -> bool:
        try:
            for sentinel in self.sentinels:
                state = _master_state(sentinel)
                if int(state["num-other-sentinels"]) < len(self.sentinels) - 1:
                    return False
                if int(state["num-slaves"]) < 1 or "s_down" in state["flags"]:
                    return False
        except redis.RedisError:
            return False
        return True

    # -- failover ------------------------------------------------------------------

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary and return once every live sentinel names another server,
        and that server says it is a primary. Returns the killed server."""
        victim = self.primary()
        victim.kill()
        _wait(lambda: self._promoted(victim), f"a sentinel to promote a replica of {victim!r}")
        return victim

    def fail_over(self) -> RedisServer:
        """Have a sentinel promote the replica while the primary runs (``SENTINEL
        FAILOVER``), and return once every sentinel names the new primary and the old one
        is its replica. Returns the old primary.

        The sentinels demote the old primary themselves at their next look at it (up to
        10 s later); this does it at once, as they would (``REPLICAOF`` the new one)."""
        old = self.primary()
        with self.live_sentinels()[0].client() as client:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        _wait(lambda: self._promoted(old), f"a sentinel to promote a replica of {old!r}")
        with self.client(old) as client:
            client.execute_command("REPLICAOF", HOST, self.primary().port)
        _wait(lambda: self._demoted(old), f"{old!r} to be a replica")
        return old

    def _demoted(self, old: RedisServer) -> bool:
        with self.client(old) as client:
            return bool(client.info("replication")["role"] == "slave")

    def _promoted(self, victim: RedisServer) -> bool:
        try:
            for sentinel in self.live_sentinels():
                with sentinel.client() as client:
                    _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                if int(port) == victim.port:
                    return False
            with self.client(self.primary()) as client:
                return bool(client.info("replication")["role"] == "master")
        except redis.RedisError:
            return False


def _master_state(sentinel: SentinelProcess) -> dict[str, Any]:
    with sentinel.client() as client:
        reply = client.execute_command("SENTINEL", "MASTER", SERVICE)
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise QueueError(f"timed out after {READY_TIMEOUT:g} s waiting for {what}")
        time.sleep(POLL)


def started(directory: Path, **options: Any) -> Iterator[Sentinels]:
    """A Sentinel set-up for a ``with`` block or a fixture: ``yield from started(path)``."""
    with Sentinels(directory, **options) as sentinels:
        yield sentinels
