"""The store's connection to Redis: the client, the scripts, the keys' names, and the
translation of redis-py's errors.

:class:`Connection` is what both halves of the store stand on (``_views.Views``, what an
operator reads or clears, and ``_store.Store``, what a worker asks): it finds the server
holding the crawl's keys (``_nodes``: one server, a cluster's primary for the crawl's
slot, or the primary Sentinel names), runs a Lua script from ``lua/`` or plain writes,
each confirmed by the primary's replicas, and raises the epoch after the keys moved.
``_translated`` wraps every method that talks to Redis, so that redis-py's errors leave
as ``QueueError`` naming the server without its password.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, ParamSpec, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._exceptions import InvalidURL, QueueError
from hashcrawl._store._nodes import Nodes
from hashcrawl._store._redisurl import RedisURL

# Under the name it has always had, which a logging configuration may name.
log = logging.getLogger("hashcrawl._store._store")
P = ParamSpec("P")
T = TypeVar("T")
GROUP = "g"
ABSENT = "absent"  # a key of the crawl's slot that is never written (see ``_run``)


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
            assert isinstance(store, Connection)
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
    if isinstance(exc, MasterNotFoundError):
        return f"no sentinel names a primary that is up (a failover under way?): {text}"
    if isinstance(exc, redis.TimeoutError):
        return f"no answer in time ({text})"
    if isinstance(exc, redis.exceptions.MovedError):
        where = f"{exc.host}:{exc.port}"
        return f"the crawl's slot is served by {where} now (a failover or reshard): {text}"
    if isinstance(exc, redis.exceptions.AskError):  # not followed: see ``_run``
        where = f"{exc.host}:{exc.port}"
        return f"the crawl's slot is being migrated to {where} (a reshard): {text}"
    if isinstance(exc, redis.exceptions.ClusterDownError):
        return f"the cluster cannot serve the crawl's slot now (a failover under way?): {text}"
    if isinstance(exc, redis.exceptions.TryAgainError):
        return f"the crawl's slot is being migrated (a reshard): {text}"
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return f"the node is a replica now (a failover): {text}"
    return text


class Connection:
    """A crawl's keys on one Redis server (a cluster's primary for its slot)."""

    def __init__(
        self,
        url: RedisURL,
        crawl: str,
        *,
        timeout: float = 20.0,
        clock: Callable[[], int] | None = None,
        faults: Faults = NO_FAULTS,
    ) -> None:
        """Args:
        clock: milliseconds to use as "now" in lease and liveness decisions instead of
            the server's TIME; for simulations, which drive time themselves.
        faults: deliberate bugs, for the simulations (``_core._faults``).
        """
        self.url = url
        self.faults = faults
        self.clock = clock
        self.crawl = crawl
        self.prefix = f"hc:{{{crawl}}}:"
        self._timeout = timeout
        self.marker = secrets.token_hex(8)  # the instance marker if this store sets it
        # Whether this store's first join raises the epoch as after a failover (None: on
        # a cluster or under Sentinel, found at first use). The simulations set it for
        # their stand-ins.
        self.settle_first_join: bool | None = None
        self._joined = False
        self._first_settle = False  # the settle under way is a first join's, not a move's
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
        names = ["heartbeat", "join", "leave", "commit", "release", "unpark", "inflight"]
        names += ["revisit", "settings", "shards", "holder", "pages", "parents", "turn"]
        names += ["pace"]
        return {name: client.register_script(_script(name)) for name in names}

    def _after_failover(self, client: Any) -> None:
        """Raise the epoch past any the old primary of the slot may have issued and lost
        (see ``lua/failover.lua``), before this store writes anything to the new one."""
        if "skip_failover_ratchet" in self.faults:  # a deliberate bug to catch
            return
        ratchet = client.register_script(_script("failover"))
        keys = [self.key("epoch"), self.key(ABSENT)]
        epoch = ratchet(keys=keys, args=[self.prefix, self._now()])
        first, self._first_settle = self._first_settle, False
        if int(epoch) and not first:
            moved = (
                "its primary changed" if self.url.scheme == "redis+sentinel" else "its slot moved"
            )
            log.warning("crawl %s: %s, epoch raised to %s", self.crawl, moved, epoch)

    def _before_join(self) -> None:
        """A store's first join on a cluster or under Sentinel settles as after a
        failover. Its primary may have failed over before this store first looked: the
        promoted replica may lack
        epochs the old primary issued to other members, and a plain join would issue one
        of those numbers again (a stale ring would then pass fencing). The stores that
        saw the move raise the epoch only at their next call; this one must not wait."""
        if self._joined:
            return
        self._joined = True
        settle = self.settle_first_join
        if settle if settle is not None else self._nodes.replicated:
            self._first_settle = True
            self._nodes.expect_move()

    def _run(
        self, name: str, args: Sequence[Any], keys: Sequence[str] = (), *, read_only: bool = False
    ) -> Any:
        """Run a script; one that writes, on a primary with replicas (a cluster's, or
        Sentinel's), returns only once they confirm it (``Nodes.confirmed``)."""
        script = self._scripts[name]
        # Declared keys make a node that does not hold the crawl's slot answer MOVED
        # before the script runs; the scripts themselves read only ARGV. ABSENT is never
        # written, so while the slot is being migrated (a reshard) every call is refused
        # whole (TRYAGAIN or ASK, never followed: no ASKING) instead of running halfway
        # over keys some of which have left.
        keys = [*(keys or [self.key("epoch")]), self.key(ABSENT)]
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


def _flat(mapping: Mapping[str, Any]) -> list[Any]:
    return [item for pair in mapping.items() for item in pair]
