"""The simulation's named workers (``simulations/names.py``), each scenario run once on a
small crawl: it holds with the code as it is, and each deliberate bug of static
membership breaks the invariant it is there for."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from hashcrawl._core._faults import NO_FAULTS, Faults
from simulations import names, verdict
from simulations.web import Site
from simulations.world import World


@pytest.fixture
def crawl() -> Iterator[Callable[..., World]]:
    """Builds a small crawl two workers have begun (with ``faults``); closed after the test."""
    made: list[World] = []

    def build(faults: Faults = NO_FAULTS) -> World:
        world = World(Site(seed=5, hosts=3, pages=12), faults=faults)
        made.append(world)
        world.do(world.join)
        world.do(world.join)
        world.submit([world.web.url(0)])
        for _ in range(3):
            world.do(world.tick)
        return world

    yield build
    for world in made:
        world.close()


def test_a_restart_under_a_dead_members_name_takes_its_place_at_once(
    crawl: Callable[..., World],
) -> None:
    """A worker started under a dead member's name on its machine is a member at once,
    its predecessor out of the ring and its hosts its own within a few heartbeats."""
    world = crawl()
    victim = world.workers["w1"]
    world.do(names.restart, world, victim)
    assert [w.state for w in world.workers.values() if w.name.startswith("w1~")] == ["member"]
    assert "w1" not in world.observer.members()
    assert "may fetch" in world.trace[-1]
    assert verdict.violations(world) == []


def test_a_twin_of_a_running_member_is_refused(crawl: Callable[..., World]) -> None:
    """A second process under a running member's name watches its heartbeat move and is
    refused; the member keeps its place."""
    world = crawl()
    running = world.workers["w2"]
    world.do(names.twin, world, running)
    assert [w.state for w in world.workers.values() if w.name.startswith("w2~")] == ["refused"]
    assert "w2" in world.observer.members()
    assert verdict.violations(world) == []


def test_take_running_is_caught_as_two_workers_of_one_name(crawl: Callable[..., World]) -> None:
    """With take_running, the twin takes the running member's place: the invariant says so."""
    world = crawl(Faults.of(["take_running"]))
    world.do(names.twin, world, world.workers["w2"])
    assert any("two workers of one name" in p for p in world.problems), world.problems


def test_a_paused_members_successor_fences_it(crawl: Callable[..., World]) -> None:
    """A member paused past the fresh window is replaced by a worker of its name from
    another machine; once it wakes, Redis accepts none of its writes."""
    world = crawl()
    victim = world.workers["w1"]
    world.do(names.pause, world, victim)
    assert victim.name in world.replaced
    assert victim.state in ("fenced", "gave up")
    assert verdict.violations(world) == []


def test_takeover_unfenced_is_caught_as_an_old_incarnations_write(
    crawl: Callable[..., World],
) -> None:
    """With takeover_unfenced, the woken old incarnation's heartbeat is accepted."""
    world = crawl(Faults.of(["takeover_unfenced"]))
    world.do(names.pause, world, world.workers["w1"])
    assert any("yet Redis accepted its" in p for p in world.problems), world.problems
