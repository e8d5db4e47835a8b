"""Judging a :class:`~simulations.world.World`: the invariants after each step, and the
fault-free end of the crawl.

``violations(world)`` gathers what the pure checks in :mod:`simulations.checks` say
about the world's records and a snapshot of its keys. ``finish(world)`` stops the
faults, runs the fleet until every worker has left, and returns what went wrong.
"""

from __future__ import annotations

from collections.abc import Collection

from simulations import checks, reach, revisits
from simulations.observe import Snapshot
from simulations.world import World

FINISH_WITHIN = 900.0  # simulated seconds for the fault-free end of a crawl
ARMED_FOR = 10.0  # simulated seconds an armed crash may still strike once faults stop
JUDGE_EVERY = 5.0  # simulated seconds between checks while the fleet runs to the end
STALLED_AFTER = 60.0  # simulated seconds without a request, an item or a worker change


def violations(world: World) -> list[str]:
    """Every invariant broken now (empty when all hold)."""
    snap = world.observer.snapshot()
    done = world.done_urls()
    return (
        world.problems
        + checks.lost(accepted(world, snap), snap.queued, done, snap.dead)
        + repeats(world)
        + checks.politeness(world.fetches, world.delay_of)
        + checks.accounting(snap.outstanding, snap.entries, world.planted + len(world.planted_good))
        + checks.killer(world.killed_members, int(world.settings["max_attempts"]))
        + checks.fetched_counted(
            {n: w.session.tally.fetched for n, w in world.workers.items()},
            world.fetches,
            world.done,
        )
        + reach.bad_counted(world)
        + reach.versions(world)
        + reach.parked_listed(world)
        + reach.within_cap(world)
    )


def repeats(world: World) -> list[str]:
    """The fetched-once invariant, and in a revisiting example *never early* for the
    pages it watches (the rest are fetched once as ever)."""
    plan = world.revisit
    if plan is None:
        return checks.duplicates(world.fetches, world.excused)
    watched = revisits.revisited(world.web)
    others = [f for f in world.fetches if f.url not in watched]
    return checks.duplicates(others, world.excused) + revisits.early(
        world.fetches, watched, plan.low, world.excused
    )


def revisits_lost(world: World, dead: Collection[str]) -> list[str]:
    """The revisits' *never lost*, judged once every worker has left."""
    plan = world.revisit
    if plan is None:
        return []
    read: dict[str, float] = {}
    for w in world.workers.values():
        for url, at in w.fetcher.read.items():
            read[url] = max(at, read.get(url, at))
    last_take = max(plan.takes, default=None)
    watched = revisits.revisited(world.web)
    return revisits.lost(
        world.fetches,
        watched,
        read,
        dead,
        high=plan.high,
        latency=world.latency,
        last_take=last_take,
    )


def taken_at_the_end(world: World) -> bool:
    """Whether revisits wait in the inbox though the fleet saw the crawl finished: a take
    that raced the last heartbeats (a taker that then died, say). The records' entries
    are not lost: an operator's next ``join`` sees them through, as the simulation does."""
    if world.revisit is None:
        return False
    queued = world.observer.snapshot().queued
    return bool(queued) and all(
        key == world.observer.inbox for keys in queued.values() for key in keys
    )


def accepted(world: World, snap: Snapshot) -> set[str]:
    """Submitted URLs, and the links of every page done and no longer queued, but those a
    small seen filter's false positive may have refused (see ``reach.filtered``).

    A page done and then dead-lettered left no commit: its worker wrote the item and
    died before committing, and as that death counted against it (its attempts used
    up) the drain dead-lettered the entry. Its links were never accepted.
    """
    urls = set(world.submitted)
    done = world.done_urls()
    for url in done:
        if url not in snap.queued and url not in snap.dead:
            urls.update(world.web.links_of(url))
    missing = {u for u in urls if u not in snap.queued and u not in done and u not in snap.dead}
    return urls - reach.filtered(world, missing) - reach.capped_out(world, missing)


async def finish(world: World) -> list[str]:
    """Stop every fault, run the fleet until every worker has left, and judge the end.

    Workers run their loops in turn as a live worker would, time moving to the next
    thing anyone waits for. A fenced worker's place is taken by a new session, as in
    ``Worker.run``; a new worker starts if none is left while work remains. The crawl
    ends when every worker saw it idle and left.

    Cut-offs heal and paused workers resume at once; a crash or a lost reply that was
    armed earlier may still strike in the first ``ARMED_FOR`` seconds.
    """
    for w in world.workers.values():
        w.link.cut = False
        w.paused = False
        w.fetcher.let_go(world.now())  # nothing an aimed rule held back stays held
    world.say("model", "faults stop; the fleet runs to the end")
    if not world.submitted:
        # A crawl never fed has not begun: its workers wait for a first URL, as a fleet
        # started before its submit does. An operator feeds it the root, to an end.
        world.say("submitter", world.submit([world.web.url(0)]))
    world.finishing = True
    start = world.now()
    progress, since, judged = _progress(world), start, start
    while True:
        if not world.live() and not _crawl_over(world):
            await world.join()  # an operator starts a worker while work is left
        if not world.live():
            return _judge_end(world)
        for w in sorted(world.live(), key=lambda w: w.name):
            await world.turn(w)
        if _progress(world) != progress:
            progress, since = _progress(world), world.now()
        if problems := _overdue(world, start, since):
            return problems
        if world.now() >= start + ARMED_FOR:
            for w in world.workers.values():
                w.link.disarm()
        if world.now() - judged >= JUDGE_EVERY:
            judged = world.now()
            if problems := violations(world):
                return problems
        await world.wait()


def _progress(world: World) -> tuple[int, ...]:
    """What changes while a crawl moves: requests, items, workers."""
    return (len(world.fetches), len(world.done), len(world.workers), len(world.live()))


def _overdue(world: World, start: float, since: float) -> list[str]:
    if world.now() > start + FINISH_WITHIN:
        return [f"without faults the crawl did not end in {FINISH_WITHIN:g} s: " + _state(world)]
    if world.now() > since + STALLED_AFTER:
        return [
            "without faults the crawl stopped moving before its end (nothing fetched, "
            f"written or changed for {STALLED_AFTER:g} simulated seconds): " + _state(world)
        ]
    return []


def _crawl_over(world: World) -> bool:
    """Whether a worker saw the crawl finished after the last submission, and no session
    was fenced or gave up after that: workers that joined after the end (due revisits)
    and were then fenced rejoin in ``Worker.run``, and one that gave up is restarted by
    its operator, so their work is not over (seed 8 of the quick profile: a whole fleet
    silent past its lease at once, the last page in a fenced worker's stream)."""
    finished = [w.ended_at for w in world.workers.values() if w.state == "finished"]
    seen_over = max(finished, default=-1)
    if seen_over <= world.last_submission:
        return False
    cut = ("fenced", "gave up")
    if any(w.state in cut and w.ended_at > seen_over for w in world.workers.values()):
        return False
    return not taken_at_the_end(world)


def _state(world: World) -> str:
    snap = world.observer.snapshot()
    workers = ", ".join(
        f"{w.name} ({len(w.session.frontier.hosts)} hosts, {w.session.frontier.size} queued, "
        f"{w.session.flight.in_flight} in flight, tasks {sorted(w.tasks)})"
        for w in world.live()
    )
    return (
        f"{snap.entries} entries queued ({_sample(snap.queued)}), outstanding "
        f"{snap.outstanding}, members {list(snap.members)}; workers: {workers}"
    )


def _judge_end(world: World) -> list[str]:
    snap = world.observer.snapshot()
    problems = []
    # A crashed member that nobody outlived long enough to expire stays listed: only the
    # dead may be in that list.
    dead = {w.name for w in world.workers.values() if w.state in ("crashed", "gave up")}
    if not snap.empty or set(snap.members) - dead:
        problems.append(
            f"every worker left, yet {snap.entries} entries are queued "
            f"({_sample(snap.queued)}) and members {list(snap.members)} remain"
        )
    end = checks.unfinished(accepted(world, snap), world.done_urls(), snap.dead, world.failed)
    return (
        problems
        + end
        + reach.bad_counted(world, end=True)
        + reach.good_ended(world, world.done_urls(), snap.dead)
        + revisits_lost(world, snap.dead)
    )


def _sample(queued: dict[str, list[str]]) -> str:
    shown = [f"{url} in {keys[0].rsplit(':', 1)[-1]}" for url, keys in sorted(queued.items())]
    return ", ".join(shown[:4]) + (" ..." if len(shown) > 4 else "")
