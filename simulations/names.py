"""Static membership in the simulation: workers started under a member's name.

A simulated worker is named by its member id: ``w3`` is the worker named ``w3``, and
``w3~r5`` another incarnation of it (``_core._names``). Three aimed scenarios, one of
them drawn once in an example with faults (``model.by_name``):

- :func:`restart`: a member dies and, inside its lease, a worker of its name starts on
  the same machine (its process gone: an orchestrator's restart). It takes the place at
  once: the ring keeps its names, the dead incarnation is out of it, and a host of its
  is the newcomer's to fetch within ``reach.unowned_within``, not after the lease.
- :func:`twin`: a second process under a running member's name, on another machine.
  It watches the holder's heartbeat; the heartbeat moves, so it is refused (NameTaken)
  and changes nothing. ``take_running`` is caught here.
- :func:`pause`: a member is paused (a stopped VM) and a worker of its name on another
  machine sees its heartbeat age past the fresh window and takes its place; the paused
  incarnation wakes fenced: Redis accepts none of its heartbeats and commits
  (``SimWorker._ran`` judges every one). ``takeover_unfenced`` is caught here.

Every other invariant (nothing lost, politeness, the end) judges these runs as any other.
"""

from __future__ import annotations

from hashcrawl._core._names import fresh_window_ms, incarnation
from hashcrawl._core._ring import Ring, name_of
from hashcrawl._run._naming import Place
from simulations.crew import SimWorker
from simulations.reach import _may_fetch, _settled, _sound, unowned_within
from simulations.world import BEAT, World

KINDS = ("restart", "twin", "pause")
ELSEWHERE = Place("another machine", 4242)  # a successor there cannot see the pid


def successor(world: World, w: SimWorker) -> str:
    """A new incarnation's member id for the worker named as ``w`` is."""
    return incarnation(name_of(w.name), f"r{world._joined + 1}")


async def restart(world: World, victim: SimWorker) -> str:
    """``victim`` dies right after a heartbeat; a worker of its name on its machine
    joins inside the lease and may fetch the victim's hosts within ``unowned_within``.

    Judged where the rule promises it: every member at the fleet's epoch (a holder
    behind is replaced only once its lease has run out, on purpose), the successor's
    link sound, a host of the victim's in the ring.
    """
    await world.step(victim, "beat")
    names = _names(world)
    host = next(iter(_hosts_of(world, victim.name)), None)
    settled = _settled(world)
    await world.crash(victim, "killed, and restarted under its name")
    new = successor(world, victim)
    world.say("operator", f"starts {new} under {name_of(victim.name)}'s name, on its machine")
    await world.join(as_id=new)
    newcomer = world.workers[new]
    if newcomer.state != "member" or host is None or not settled:
        return world.say("model", f"{new} is {newcomer.state}: nothing to judge")
    _replaced(world, victim)
    if _names(world) != names:
        world.problems.append(
            f"{new} took {victim.name}'s place, yet the ring's names changed: {sorted(names)} "
            f"became {sorted(_names(world))} (hosts moved)"
        )
    world.say("submitter", world.submit([f"http://{host}/unseen-after-restart"]))
    start = world.now()
    while world.now() < start + unowned_within(world):
        if not _sound(newcomer):
            return world.say("model", f"{new}'s link is faulty: nothing to judge")
        if _may_fetch(newcomer, host):
            return world.say("model", f"{new} may fetch {host} {world.now() - start:.3f} s on")
        await world.tick(seconds=BEAT / 4, quiet=True)
    world.problems.append(
        f"{new} took the place of {victim.name} (dead) at t={start:.3f}, yet may not fetch "
        f"{victim.name}'s host {host} {unowned_within(world):.3f} s later"
    )
    return ""


async def twin(world: World, running: SimWorker) -> str:
    """A worker of ``running``'s name starts on another machine while ``running`` beats:
    it must be refused, and ``running`` keep its place.

    Judged only where ``running`` had a heartbeat run by Redis in the last two heartbeat
    intervals and beats soundly for the whole watch: a member whose last heartbeat is
    older than the fresh window (paused, cut off, its heartbeat late) has stopped starting
    requests, as far as anyone can tell, and may rightly be replaced.
    """
    new = successor(world, running)
    world.say("operator", f"starts {new} under {name_of(running.name)}'s name, elsewhere")
    judged = _sound(running) and world.now() - running.confirmed <= 2 * BEAT
    await world.join(as_id=new, place=ELSEWHERE)
    twin = world.workers[new]
    for _ in range(_watch_ticks(world)):
        if twin.state != "joining":
            break
        await world.tick()
        judged = judged and _sound(running)
    if twin.state == "member" and judged:
        world.problems.append(
            f"{new} was started under the name of {running.name}, a running member, and "
            f"was not refused: two workers of one name"
        )
    if twin.state == "member":
        _replaced(world, running)
    return world.say("model", f"{new} is {twin.state}")


async def pause(world: World, victim: SimWorker) -> str:
    """``victim`` is paused; a worker of its name on another machine takes its place
    once the victim's heartbeat is older than the fresh window; then the victim wakes."""
    victim.paused = True
    world.say(victim.name, "paused (SIGSTOP)")
    new = successor(world, victim)
    world.say("operator", f"starts {new} under {name_of(victim.name)}'s name, elsewhere")
    await world.join(as_id=new, place=ELSEWHERE)
    newcomer = world.workers[new]
    for _ in range(_watch_ticks(world)):
        if newcomer.state != "joining":
            break
        await world.tick(skip=victim)
    if newcomer.state == "member":
        _replaced(world, victim)
    victim.paused = False
    world.say(victim.name, f"runs again; {new} is {newcomer.state}")
    await world.turn(victim, woken=True)
    for _ in range(2):
        await world.tick()
    return ""


def _replaced(world: World, old: SimWorker) -> None:
    """``old`` lost its place to a successor: what it held is excused, and Redis must
    accept none of its writes from now on."""
    world.replaced.add(old.name)
    world._excuse(old)


def _watch_ticks(world: World) -> int:
    """Heartbeat intervals a successor may watch a holder: the fresh window, twice over
    (its reads of the holder wait for heartbeats' latency too)."""
    return int(2 * fresh_window_ms(float(world.settings["lease"])) / 1000 / BEAT) + 2


def _names(world: World) -> set[str]:
    return {name_of(m) for m in world.observer.members()}


def _hosts_of(world: World, member: str) -> list[str]:
    """The site's hosts ``member`` owns in the ring of the members Redis lists now."""
    ring = Ring.of(0, tuple(world.observer.members()))
    hosts = sorted({url.split("/")[2] for url in world.web.pages})
    return [h for h in hosts if ring.owner_of(h) == member]
