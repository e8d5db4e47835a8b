"""A crawl's shards as stored: their tags (key ``shards`` of shard 0), fixed when the
crawl starts, and one store per shard (see ``_core._shards`` for what a shard is).

A crawl of one shard (the default) has no ``shards`` key: its keys are exactly what
they always were. A crawl of S > 1 shards records the tags of shards 1..S-1 there, once
and only while the crawl has not begun (``lua/shards.lua``, confirmed like every write),
before its first entry is queued; a worker of one shard reads the key again right after
its join (``still_one_shard``), so that of two workers starting a crawl at once with
different layouts one always finds out.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.crc import key_slot

from hashcrawl._core._shards import MAX_SHARDS, choose_tags, shard_name, shard_of
from hashcrawl._exceptions import ConfigError, ShardsChanged
from hashcrawl._store._connection import _translated
from hashcrawl._store._store import Store

KEY = "shards"  # in shard 0: the other shards' tags, space-separated


@_translated
def stored_tags(store: Store) -> list[str] | None:
    """The tags recorded in ``store`` (shard 0), or None if the crawl has none."""
    text = store._redis.get(store.key(KEY))
    return None if text is None else str(text).split()


@_translated
def _record(store: Store, tags: Sequence[str]) -> list[str] | None:
    """Record ``tags`` unless some are already, and only while the crawl has not begun
    (``lua/shards.lua``, confirmed like every write); returns those recorded, or None:
    the crawl has begun on one shard."""
    recorded = store._run("shards", [store.prefix, " ".join(tags)])
    return None if recorded is None else str(recorded).split()


@_translated
def _primary_of(store: Store, slot: int) -> str:
    return store._nodes.primary_of_slot(slot)


@_translated
def _begun(store: Store) -> bool:
    return store._redis.get(store.key("instance")) is not None


@_translated
def queued_any(store: Store) -> bool:
    """Whether anything was ever queued in ``store``'s shard (its heartbeat says idle
    only once something was)."""
    return int(store._redis.hget(store.key("seenmeta"), "queued") or 0) > 0


def slot_of(name: str) -> int:
    """The hash slot of the keys ``hc:{name}:...``."""
    return int(key_slot(name.encode()))


def shard_tags(store: Store, given: int | None) -> list[str]:
    """The tags of the crawl's shards 1..S-1 (none: one shard), recording them if this
    starts a crawl of ``given`` shards.

    Without ``given``, a crawl that starts on a Redis Cluster takes a shard a primary
    (:func:`default_shards`), and one that has begun keeps what it has.

    Raises:
        ConfigError: ``given`` differs from the crawl's, or the crawl has begun on one
            shard (S is fixed when a crawl starts).
        QueueError: Redis could not be reached.
    """
    if given is not None and not 1 <= given <= MAX_SHARDS:
        raise ConfigError(f"--shards must be 1 to {MAX_SHARDS}, got {given}")
    tags = stored_tags(store)
    if tags is None and given is None:
        count = default_shards(store)
        if count > 1:
            chosen = choose_tags(store.crawl, count, slot_of, lambda s: _primary_of(store, s))
            return _record(store, chosen) or []  # None: begun on one shard meanwhile
        return []
    if tags is None and given is not None and given > 1:
        if _begun(store):
            raise ConfigError(_fixed(store.crawl, 1, given))
        wanted = choose_tags(store.crawl, given, slot_of, lambda slot: _primary_of(store, slot))
        tags = _record(store, wanted)
        if tags is None:  # a worker of one shard joined meanwhile
            raise ConfigError(_fixed(store.crawl, 1, given))
    tags = tags or []
    if given is not None and given != len(tags) + 1:
        raise ConfigError(_fixed(store.crawl, len(tags) + 1, given))
    return tags


@_translated
def default_shards(store: Store) -> int:
    """The shards a new crawl takes without ``--shards``: one a primary of a Redis
    Cluster, so that every primary carries its part; 1 on one server (or under Sentinel),
    and for a crawl that has begun (its layout was fixed then)."""
    if not store._nodes.cluster or _begun(store):
        return 1
    return min(MAX_SHARDS, store._nodes.primary_count())


def still_one_shard(store: Store) -> None:
    """Check, right after a worker of one shard joined, that no layout was recorded
    before its join (a worker starting the crawl with --shards at the same moment: its
    record and this join are ordered by the server, ``lua/shards.lua``).

    Raises:
        ShardsChanged: the crawl has shards after all.
        QueueError: Redis could not be reached.
    """
    tags = stored_tags(store)
    if tags:
        raise ShardsChanged(
            f"crawl {store.crawl!r} was given {len(tags) + 1} shards (another worker's "
            "--shards) as this worker joined it as one shard"
        )


def _fixed(crawl: str, shards: int, given: int) -> str:
    return (
        f"crawl {crawl!r} runs on {shards} shard{'s' if shards > 1 else ''}, not --shards "
        f"{given}: the shards are fixed when a crawl starts ('hashcrawl reset' starts it anew)"
    )


class Shards:
    """One store per shard of a crawl (shard 0 first: the crawl's own prefix)."""

    def __init__(self, first: Store, tags: Sequence[str], *, timeout: float) -> None:
        self.tags = list(tags)
        others = [Store(first.url, shard_name(first.crawl, t), timeout=timeout) for t in tags]
        self.stores = [first, *others]

    def __len__(self) -> int:
        return len(self.stores)

    def shard_of(self, host: str) -> int:
        return shard_of(host, len(self.stores))

    def close(self) -> None:
        """Close the stores of shards 1..S-1 (shard 0's is its opener's)."""
        for store in self.stores[1:]:
            store.close()
