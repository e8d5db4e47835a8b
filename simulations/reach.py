"""Mechanisms the simulated sites are too small to reach, brought within their reach.

Three things a crawl of at most 40 pages never does by itself, the first two drawn per
site from their own ``Random`` (``world.Reach``: the world sets them up, as it sets up
the web, so that this module, above the world, only acts on it and judges it), so every
other draw of every site, its pages and killer page, stays as it was:

- **parking**: a worker parks a host's overflow in Redis once its memory is full and the
  host has 16 entries queued. Half the sites run their workers with the
  park threshold at ``world.PARK_AT`` here (the ``Intake`` fields, today's defaults
  elsewhere), so hosts park and unpark; "nothing lost", "no page fetched twice" and
  "the end" judge it.
- **seen-filter rollover**: a layer holds a million URLs. Half the sites start their
  crawl with the filter's first layer at ``world.SEEN_LAYER`` (``c0`` in ``seenmeta``,
  the stored shape an operator could set the same way), so layers fill and roll over.
  A Bloom filter may refuse a URL it never saw (a false positive, about one URL in 300
  with layers this small); :func:`filtered` excuses exactly those, by reading the
  filter's own bits in Redis, so every other URL it drops is a URL lost.
- **entries written by hand** (:func:`plant`, a hostile store fault): unreadable entries
  appear in a member's stream, outside ``outstanding``, as entries written by hand or by
  a broken tool would. Each must be counted once as bad (``stats``'s ``queue_bad``, at
  most the number planted at any time, exactly that at the end), the crawl must still
  end, and ``outstanding`` may fall short of the entries by at most the number planted
  (the idle recount sets it right), never exceed them.
  With parking, ``parked`` lists exactly the hosts with an overflow set
  (:func:`parked_listed`).

And crawl-wide settings changed mid-crawl (:func:`configure`, as ``hashcrawl configure
--delay`` does, through the settings script): every change is made once (the record's
version is one more per change), and the delay the web sees follows the new one within
``world.FOLLOW_WITHIN`` (a request starting later keeps it; before, the smaller of the two).

And two timing windows. :func:`lost_join_then_pause`: a worker whose join reply is lost
joins again a heartbeat interval later, and its lease runs from that second join, as it
believes; paused until just before that lease ends, it must not have been expired.
:func:`crash_then_join`: a member dies and a worker joins inside its lease; a host the
join moves from a live member is fetched again within :func:`unowned_within`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter

from hashcrawl._core._urls import canonicalize, fingerprint
from hashcrawl._store import _crawlconfig
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from simulations import planted
from simulations.crew import SimWorker
from simulations.loop import PATIENCE
from simulations.world import BEAT, World

UNREADABLE = ("not an entry", '{"u": 5}', None)  # what a revisiting example plants


def filtered(world: World, missing: set[str]) -> set[str]:
    """Of the ``missing`` URLs, those whose every bit is set in some layer of the seen
    filter in Redis: a false positive may refuse them (only with small layers)."""
    if world.reach.seen_layer is None or not missing:
        return set()
    r, prefix = world.observer.r, world.observer.prefix
    meta = r.hgetall(prefix + "seenmeta")
    layers, c0, p = int(meta.get("L", 0)), float(meta["c0"]), float(meta.get("p", 1e-6))
    refused = set()
    for url in missing:
        h1, h2 = fingerprint(canonicalize(url))
        for i in range(layers):
            k = math.ceil(math.log(2 ** (i + 1) / p) / math.log(2))
            m = math.ceil(c0 * 2 ** min(i, 6) * k / math.log(2))
            with r.pipeline(transaction=False) as pipe:
                for j in range(k):
                    pipe.getbit(f"{prefix}seen:{i}", (h1 + j * h2) % m)
                if all(pipe.execute()):
                    refused.add(url)
                    break
    return refused


def plant(world: World, index: int) -> str:
    """Unreadable entries appear in a member's stream, as if written by hand."""
    observer = world.observer
    members = sorted(observer.members())
    if not members:
        return "no member's stream to write to"
    # Half the time into a member that crashed and is not yet expired, if there is one:
    # nobody reads its stream until the fleet expires it, so the idle recount finds them.
    crashed = [w.name for w in world.workers.values() if w.state == "crashed"]
    dead = [name for name in members if name in crashed]
    member = (
        dead[index // 2 % len(dead)] if dead and index % 2 == 0 else members[index % len(members)]
    )
    stream = observer.stream_of(member)
    n = len(world.planted_good)
    urls = [f"http://h0.test/planted{n + i}" for i in range(3)]
    bad = planted.bad("http://h0.test/planted-bad")
    good = planted.good(urls)
    if world.revisit is not None:
        # A revisiting example plants what it planted before the catalogue: its deliberate
        # bugs' seeds (tests/test_simulation_revisits.py) were chosen on those examples.
        bad, good, urls = list(UNREADABLE), [], []
    with observer.r.pipeline(transaction=False) as pipe:
        for payload in bad:
            pipe.xadd(stream, {"r": payload} if payload is not None else {"x": "1"})
        for payload in good:
            pipe.xadd(stream, {"r": payload})
        pipe.execute()
    world.planted += len(bad)
    world.planted_good += urls
    return (
        f"{len(bad)} unreadable entries and {len(urls)} at the limits of every field "
        f"written by hand into {member}'s stream"
    )


def parked_listed(world: World) -> list[str]:
    """The hosts in ``parked`` are exactly those with an overflow set (Redis deletes an
    empty one): a host left out is never unparked by a new owner, one left in costs
    every new owner a call and the set grows without bound."""
    if not world.reach.park:
        return []
    observer = world.observer
    listed = {str(h) for h in observer.r.smembers(observer.prefix + "parked")}
    park = observer.prefix + "park:"
    keys = observer.keys()  # the observer's SCAN of the crawl's keys, not a dict
    sets = {k.removeprefix(park) for k in keys if k.startswith(park)}
    if listed == sets:
        return []
    return [f"hosts with an overflow set {sorted(sets)}, but 'parked' lists {sorted(listed)}"]


def bad_counted(world: World, *, end: bool = False) -> list[str]:
    """Planted entries are counted as bad once each: never more, and all by the end."""
    counted = int(world.observer.r.hget(world.observer.prefix + "stats", "queue_bad") or 0)
    if counted > world.planted or (end and counted != world.planted):
        return [
            f"{world.planted} unreadable entries were written by hand, but the crawl counts "
            f"{counted} as bad" + (" at its end" if end else "")
        ]
    return []


def page_requests(world: World) -> Counter[str]:
    """Page requests each host received (robots.txt not counted), from the web's log."""
    return Counter(f.host for f in world.fetches if not f.robots)


def within_cap(world: World) -> list[str]:
    """With ``--max-pages-per-host N``, a host receives at most N page requests, and N more
    for each membership that ended without handing its hosts over (docs/operations.md,
    "Pages per host": a worker that dies takes its counts with it). That is a worker that
    crashed, was fenced or gave up, and one the fleet expired or whose name a successor
    took (``excused``: its held pages are excused too) even if it ran on under a new id: a
    paused worker, expired, wrote no pace record, so the host's new owner counts from
    the last one (seed 4 of the quick profile: 3 requests against a cap of 2)."""
    cap = world.settings.get("max_pages_per_host")
    if cap is None:
        return []
    ended = ("crashed", "fenced", "gave up")
    lost = sum(w.excused or w.state in ended for w in world.workers.values())
    allowed = cap * (1 + lost)
    return [
        f"{host} received {n} page requests, over --max-pages-per-host {cap}"
        + (f" and {cap} more for each of the {lost} memberships lost" if lost else "")
        for host, n in sorted(page_requests(world).items())
        if n > allowed
    ]


def capped_out(world: World, urls: set[str]) -> set[str]:
    """Of ``urls``, those of hosts that have had their ``--max-pages-per-host``: their owner
    may drop them unfetched (counted in ``host_capped``), so they need not end done."""
    cap = world.settings.get("max_pages_per_host")
    if cap is None:
        return set()
    full = {host for host, n in page_requests(world).items() if n >= cap}
    return {url for url in urls if url.split("/")[2] in full}


def good_ended(world: World, done: set[str], dead: dict[str, str]) -> list[str]:
    """Entries written by hand that are good, every field at a limit, end done or dead
    like any other (``planted.good``): counted bad, they were refused by a check that
    is too tight; never ending, they were lost. One of a host at its
    ``--max-pages-per-host`` may be acknowledged unfetched (``capped_out``)."""
    ended = done | dead.keys() | capped_out(world, set(world.planted_good))
    return [
        f"{url} was written by hand with every field at a limit, and is neither done nor dead"
        for url in world.planted_good
        if url not in ended
    ]


def configure(world: World, delay: float) -> str:
    """The operator changes the crawl's ``--delay`` while it runs."""
    if delay == float(world.settings["delay"]):
        return f"configure --delay {delay:g}: the delay already"
    store = Store(RedisURL.parse(world.url), world.crawl, timeout=PATIENCE)
    try:
        _, lines = _crawlconfig.change(store, {"delay": delay})
    finally:
        store.close()
    world.settings["delay"] = delay  # workers started from now on are given it
    world.delays.append((world.now(), delay))
    world.changes += 1
    return f"configure --delay {delay:g}: {'; '.join(lines) or 'nothing changed'}"


def versions(world: World) -> list[str]:
    """Each change made once: the settings record's version is 1 + the changes made, and
    the record holds the settings' fields and its version, nothing else."""
    record = {
        str(k): str(v)
        for k, v in world.observer.r.hgetall(world.observer.prefix + "settings").items()
    }
    version = record.get("version")
    problems = []
    if version is not None and version != str(1 + world.changes):
        problems.append(
            f"the crawl's settings are at version {version} after {world.changes} changes "
            f"(version 1 is the first worker's record): a change was lost or made twice"
        )
    strays = sorted(set(record) - {"version", *_crawlconfig.RECORDED})
    if strays:
        problems.append(f"the crawl's settings record holds fields no setting has: {strays}")
    return problems


async def lost_join_then_pause(world: World, early: float = 0.05) -> str:
    """A worker joins, the reply is lost, and it joins again (a heartbeat interval
    later); it is paused until ``early`` s before the lease it believes it has, which
    runs from the join that answered; then it runs again and the fleet runs on."""
    name = world.next_name()
    await world.join("join")
    w = world.workers[name]
    for _ in range(4):  # its retry waits a heartbeat interval
        if w.state != "joining":
            break
        await world.tick(skip=w)
    if w.state != "member":
        return world.say(name, f"is {w.state}, not a member")
    w.paused = True
    world.say(name, "paused (SIGSTOP) right after its join")
    until = w.confirmed + float(world.settings["lease"]) - early
    while world.now() < until - 1e-9:
        await world.tick(skip=w, seconds=min(BEAT, until - world.now()))
    w.paused = False
    world.say(name, f"runs again, {early:g} s before the lease from its join runs out")
    await world.turn(w, woken=True)
    for _ in range(2):
        await world.tick()
    return ""


async def crash_then_join(world: World, victim: SimWorker, owner: SimWorker, host: str) -> str:
    """``victim`` dies right after a heartbeat and, inside its lease, a worker joins that
    takes ``host`` from ``owner``, a live member: the newcomer may fetch ``host`` within
    :func:`unowned_within`, for the dead member never owned it (docs/design.md, "The epoch,
    and handing a host over").

    Judged only where the rule promises it: Redis shows every member at the fleet's
    epoch when the victim dies (a member behind, dead or alive, may own the host in its
    older ring, and then waiting for it is right), the owner and the newcomer stay members
    with a sound link to Redis (no cut, lost reply or pause), and the victim is still
    listed (once it has expired, nothing tells the rules apart).
    """
    await world.step(victim, "beat")
    await world.crash(victim, "killed, and a worker joins inside its lease")
    settled = _settled(world)
    name = world.next_name()
    await world.join()
    world.say("submitter", world.submit([f"http://{host}/unseen-after-crash"]))
    start = world.now()
    while world.now() < start + unowned_within(world):
        newcomer = world.workers[name]
        if not (settled and _sound(owner) and _sound(newcomer)):
            return world.say("model", f"{victim.name}, {owner.name} or {name}: nothing to judge")
        if _may_fetch(newcomer, host):
            return world.say("model", f"{name} may fetch {host} {world.now() - start:.3f} s on")
        await world.tick(seconds=BEAT / 4, quiet=True)
    if victim.name in world.observer.members():
        world.problems.append(
            f"{host} moved from {owner.name}, a live member, to {name} at t={start:.3f}, "
            f"yet {name} may not fetch it {unowned_within(world):.3f} s later: it waits for "
            f"{victim.name}, dead and still a member, which never owned it"
        )
    return ""


def unowned_within(world: World) -> float:
    """How long a host of a live member may go unowned after a join moves it: the owner's
    next heartbeat, its handoff (a second's wait for requests out), the newcomer's next
    heartbeat and its read of the pace record, each way as slow as the latency, and a
    heartbeat interval of slack."""
    return float(4 * BEAT + 1.0 + 6 * world.latency)


def _settled(world: World) -> bool:
    """Whether Redis shows every member as having applied the crawl's newest epoch."""
    r, prefix = world.observer.r, world.observer.prefix
    members = [str(m) for m in r.zrange(prefix + "members", 0, -1)]
    applied = r.hmget(prefix + "applied", members) if members else []
    return all(a == r.get(prefix + "epoch") for a in applied)


def _sound(w: SimWorker) -> bool:
    """A member whose link to Redis no fault touches."""
    link = w.link
    faulty = link.cut or link.lose_reply or link.crash_at or link.slow_beat or w.paused
    return w.state == "member" and not faulty


def _may_fetch(w: SimWorker, host: str) -> bool:
    held = w.session.frontier.hosts.get(host)
    return held is not None and held.paced and w.session.epochs.release(host, held.since)


def _not_ours(record: logging.LogRecord) -> bool:
    """The warnings of what this module does on purpose (entries planted, settings
    changed) would drown a run's output."""
    text = record.getMessage()
    return not (text.startswith("dropping a bad entry") or "settings are at version" in text)


logging.getLogger("hashcrawl").addFilter(_not_ours)
