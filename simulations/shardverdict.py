"""Judging a sharded crawl (``simulations.shards.ShardWorld``): the invariants after each
step and at the end, from the web's log, the sinks and every shard's raw keys
(``simulations.observe``), through the pure checks of :mod:`simulations.checks`.

The world calls these judges, so they see it as :class:`ShardWorld`, the protocol of
what they read, not as the class (which imports this module).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, Protocol

from simulations import checks
from simulations.observe import Observer
from simulations.shardcrew import ShardWorker
from simulations.web import Fetch, Web


class ShardWorld(Protocol):
    """What the judges read of a sharded world."""

    observers: list[Observer]
    workers: dict[str, ShardWorker]
    web: Web
    settings: dict[str, Any]
    fetches: list[Fetch]
    done: list[tuple[str, str]]
    submitted: set[str]
    excused: Counter[str]
    problems: list[str]

    def live(self) -> list[ShardWorker]: ...


def violations(world: ShardWorld) -> list[str]:
    """Every invariant broken now (empty when all hold)."""
    queued: dict[str, list[str]] = {}
    dead: dict[str, str] = {}
    for observer in world.observers:
        snap = observer.snapshot()
        for url, keys in snap.queued.items():
            queued.setdefault(url, []).extend(keys)
        dead.update(snap.dead)
    done = {url for url, _ in world.done}
    accepted = set(world.submitted)
    # A page done whose entry is gone had its commit go through, unless the entry went
    # to the dead letters instead (its holders died fetching it: its item may be
    # written, its links never committed).
    for url in done - queued.keys() - dead.keys():
        accepted.update(world.web.links_of(url))
    return (
        world.problems
        + epochs(world)
        + checks.lost(accepted, queued, done, dead)
        + checks.duplicates(world.fetches, world.excused)
        + checks.politeness(world.fetches, functools.partial(delay_of, world))
    )


def epochs(world: ShardWorld) -> list[str]:
    """Fencing: no running worker holds a shard's current epoch as other members than
    the shard's (its commits would pass the fencing check with another ring)."""
    problems = []
    for i, observer in enumerate(world.observers):
        epoch = observer.r.get(observer.prefix + "epoch")
        if epoch is None:
            continue
        members = tuple(sorted(observer.members()))
        for w in world.live():
            ring = w.drivers[i].session.epochs.latest
            if ring.epoch == int(epoch) and tuple(sorted(ring.members)) != members:
                problems.append(
                    f"{w.name} holds shard {i}'s epoch {ring.epoch} as {sorted(ring.members)}, "
                    f"but the shard's epoch {ring.epoch} is {list(members)}: a stale ring "
                    "passes the fencing check"
                )
    return problems


def delay_of(world: ShardWorld, host: str, at: float) -> float:
    crawl_delay = min(world.web.crawl_delay(host), float(world.settings["lease"]) / 2)
    return max(float(world.settings["delay"]), crawl_delay)


def judge_end(world: ShardWorld) -> list[str]:
    problems = []
    for i, observer in enumerate(world.observers):
        snap = observer.snapshot()
        gone = {
            w.name for w in world.workers.values() if w.state in ("crashed", "gave up", "fenced")
        }
        if not snap.empty or set(snap.members) - gone:
            problems.append(
                f"every worker saw the crawl over, yet shard {i} has {snap.entries} entries "
                f"queued ({sorted(snap.queued)[:3]}) and members {list(snap.members)}"
            )
    dead: dict[str, str] = {}
    for observer in world.observers:
        dead.update(observer.snapshot().dead)
    done = {url for url, _ in world.done}
    accepted = set(world.submitted)
    for url in done - dead.keys():
        accepted.update(world.web.links_of(url))
    return problems + checks.unfinished(accepted, done, dead, functools.partial(failed, world))


def failed(world: ShardWorld, url: str) -> bool:
    robots = "/".join(url.split("/")[:3]) + "/robots.txt"
    return any(f.url in (url, robots) and not f.final for f in world.fetches)
