"""Bugs the simulation found in hashcrawl: the open ones, and the fixed ones' replays.

While a bug is open (in ``OPEN``), the model steers around the fault that shows it, so
the quick profile keeps guarding everything else, and ``tests/test_simulation.py``
replays its script and expects an invariant to break: once the bug is fixed that test
fails, and the entry moves to ``FIXED``. A fixed bug's script is kept as a regression
test: replayed, it must keep every invariant.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

import attrs


@attrs.frozen
class Bug:
    """One bug: what went wrong, how it was fixed, and the shortest script that shows it."""

    summary: str
    replay: str
    fixed: str = ""


OPEN: dict[str, Bug] = {}

FIXED: dict[str, Bug] = {
    "drain_by_a_replaced_incarnation": Bug(
        summary=(
            "Seed 6: w1 was paused, a worker of its name waited to take its place, and w1 "
            "expired meanwhile; the newcomer joined. Woken, w1's drain turn found its own "
            "stream among the orphans and drained it under no member's name (as a leaving "
            "worker drains its own), so Redis accepted a write from an incarnation that had "
            "lost its membership. The entries went to their owners by the current ring, "
            "so nothing was lost, but a fenced incarnation must write nothing."
        ),
        fixed=(
            "Handover.orphans_batch drains under no member's name only when leaving "
            "(Driver.leave); any other drain is the member's and is fenced as its commits "
            "are: w1's drain is refused and its session ends."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    gap=0.2, faults=2, latency=0.6, workers=3, site=Site(seed=2242, hosts=2, pages=22),
    roots=[42, 99, 84], delay=1.0, revisit='6',
)
state.configure(delay=1.0)
state.pause(w=1)
state.cut_off(w=1)
state.advance(seconds=0.1)
state.join()
state.resume(w=2)
state.advance(seconds=5.0)
state.submit(pages=[12])
state.beat(w=0)
state.stop(w=3)
state.advance(seconds=5.0)
state.advance(seconds=0.5)
state.submit(pages=[67])
state.stop(w=1)
state.stop(w=1)
state.leave(w=0)
state.beat(w=0)
state.submit(pages=[20])
state.submit(pages=[60])
state.leave(w=1)
state.join()
state.stop(w=1)
state.beat(w=1)
state.apply(w=0)
state.apply(w=3)
state.submit(pages=[3])
state.advance(seconds=0.1)
state.beat(w=3)
state.configure(delay=1.0)
state.advance(seconds=0.1)
state.advance(seconds=0.1)
state.configure(delay=2.0)
state.configure(delay=3.0)
state.advance(seconds=2.0)
state.join()
state.by_name(how='pause', w=0)
state.holds()
state.teardown()
""",
    ),
    "takeover_floor_lost_to_a_joiner": Bug(
        summary=(
            "A worker killed with a request out to h0.test is restarted under its name; "
            "its successor paces the hosts of the pages its predecessor had in hand from "
            "the takeover plus --timeout (Carry.floors), but only in its own frontier. A "
            "worker that joins at once takes h0.test by the new ring and drains the old "
            "incarnation's stream: it gets the page without that floor, and its robots.txt "
            "request reaches h0.test 1.6 s after the old request ended, under a delay of "
            "3 s. Found by scripts/soak (seed 15); it replayed the same on bf5e273."
        ),
        fixed=(
            "The join that takes the place writes the floors to Redis in the same step "
            "(lua/join.lua: P..'floors', '*' -> now and each host in hand -> now + "
            "--timeout), and every new owner reads them with the hosts' pace records "
            "(lua/pace.lua): the successor and any other worker alike."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    delay=3.0, gap=1.0, latency=0.2, workers=1, faults=6,
    roots=[86, 20], site=Site(seed=2524, hosts=6, pages=9), revisit='6',
)
state.submit(pages=[20, 59, 87])
state.read(w=0)
state.advance(seconds=2.0)
state.fetch(w=0)
state.read(w=2)
state.restart_redis(kill=False)
state.fetch(w=3)
state.join_in_flight()
state.lose_reply(call='entries', w=2)
state.lost_join_then_pause()
state.configure(delay=3.0)
state.run(order=193, seconds=4.0)
state.pause_to_lease_end_long(early=0.05, slow=1.8, w=0)
state.crash_then_join()
state.submit(pages=[20, 59, 87])
state.by_name(how='restart', w=0)
state.join_in_flight()
state.holds()
state.teardown()
""",
    ),
    "lost_read_reply": Bug(
        summary=(
            "An XREADGROUP whose reply is lost (a socket timeout) leaves the entries it "
            "delivered pending for the reader, which never reads its own pending list: "
            "they are not fetched while it lives, 'outstanding' never reaches 0, and the "
            "crawl never ends."
        ),
        fixed=(
            "After a failed read the reader reads its own pending entries past the newest "
            "id it took in (XREADGROUP with that id), until none is left "
            "(Driver.read_once)."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=0, hosts=2, pages=4), workers=1, roots=[0], faults=1, delay=1.0)
state.lose_reply(w=0, call="read")
state.read(w=0)
state.teardown()
""",
    ),
    "lost_commit_reply_repeats_retries": Bug(
        summary=(
            "A commit whose reply is lost (Redis ran it) is sent again whole by persist(). "
            "Acknowledgements and moves are idempotent and links pass the seen filter, "
            "but a failed page's retry is added without the filter: it is queued twice "
            "and fetched twice, though no worker crashed or stalled."
        ),
        fixed=(
            "A retry (and a follow with dont_filter) goes in the batch's 'once' list: "
            "commit.lua adds it only if its parent entry's XDEL still deletes something."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=1, hosts=2, pages=12), workers=1, roots=[3], faults=1, delay=1.0)
state.beat(w=0)
state.read(w=0)
state.load_pace(w=0)
state.fetch(w=0)
state.advance(seconds=0.1)
state.complete(w=0)
state.advance(seconds=1.0)
state.fetch(w=0)
state.advance(seconds=0.5)
state.complete(w=0)
state.lose_reply(w=0, call="commit")
state.commit(w=0)
state.advance(seconds=1.0)
state.teardown()
""",
    ),
    "pace_read_too_early": Bug(
        summary=(
            "A worker that gains a host on a join reads the host's pace record when the "
            "host's first entry arrives (take_in starts load_pace). That can be before "
            "the previous owner has applied the epoch and written the record. Once the "
            "fleet settles it fetches at once: sooner than --delay after the previous "
            "owner's last request."
        ),
        fixed=(
            "A gained host's pace record is read only once every member has applied the "
            "epoch it came with (Pacing.want, on a heartbeat's 'settled')."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=1, hosts=2, pages=12), workers=1, roots=[6], faults=0, delay=1.0)
state.beat(w=0)
state.read(w=0)
state.load_pace(w=0)
state.fetch(w=0)
state.advance(seconds=0.5)
state.complete(w=0)
state.tick()
state.advance(seconds=1.0)
state.fetch(w=0)
state.advance(seconds=0.5)
state.complete(w=0)
state.join()
state.beat(w=0)
state.commit(w=0)
state.read(w=1)
state.apply(w=0)
state.beat(w=1)
state.load_pace(w=0)
state.fetch(w=0)
state.holds()
state.teardown()
""",
    ),
    "lost_join_reply": Bug(
        summary=(
            "A join whose reply is lost is retried, and join.lua deletes the worker's "
            "stream and recreates it: entries routed to the new member in between are "
            "destroyed (the seen filter keeps them from coming back), and 'outstanding' "
            "stays above zero, so the crawl never ends."
        ),
        fixed=(
            "join.lua changes nothing for a live member, and refuses an id that lost its "
            "membership (the worker is fenced and joins under a new id)."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=0, hosts=2, pages=4), workers=1, roots=[], faults=1, delay=1.0)
state.join_losing_reply()
state.submit(pages=[0])
state.teardown()
""",
    ),
    "join_retry_shortens_lease": Bug(
        summary=(
            "A join retried after its reply was lost found the worker a member already and "
            "changed nothing, so its heartbeat stayed at the first join. The worker counted "
            "its lease from the retry, and the fleet expired it up to a retry interval "
            "early: reclaimed while it was alive and within its lease."
        ),
        fixed=(
            "join.lua renews a live member's heartbeat when it joins again, so its lease "
            "runs from the join the worker saw answered."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=5, hosts=2, pages=11), faults=6, delay=2.0, workers=3, roots=[])
state.restart_redis(kill=False)
state.advance(seconds=2.0)
state.crash(w=0)
state.crash_after_ack(w=0)
state.submit(pages=[0])
state.submit(pages=[0])
state.pause_past_lease(w=0)
state.pause_past_lease(w=0)
state.join_losing_reply()
state.tick()
state.join()
state.read(w=0)
state.advance(seconds=0.1)
state.stop(w=0)
state.join()
state.tick()
state.advance(seconds=5.0)
state.advance(seconds=2.0)
state.beat(w=0)
state.teardown()
""",
    ),
    "left_then_gave_up": Bug(
        summary=(
            "Not in hashcrawl but in the model's judge: a worker that left the ring "
            "(leave.lua ran) and was then cut off while draining its own stream gives up "
            "after a lease. Once its state said 'gave up', the judge saw it missing from "
            "the members and called it reclaimed alive."
        ),
        fixed=(
            "A worker seen out of the ring while leaving is marked departed, and never "
            "judged for expiry afterwards (simulations/world.py)."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=1, hosts=5, pages=4), workers=3, roots=[], faults=2, delay=1.0)
state.join()
state.advance(seconds=0.1)
state.beat(w=0)
state.stop(w=0)
state.lose_reply(call='commit', w=0)
state.submit(pages=[1])
state.leave(w=0)
state.read(w=0)
state.cut_off(w=0)
state.advance(seconds=2.0)
state.advance(seconds=2.0)
state.run(order=0, seconds=4.0)
state.teardown()
""",
    ),
    "parked_forgotten_at_reread": Bug(
        summary=(
            "An owner with memory full parks a host's overflow in its ledger, and an epoch "
            "is applied before that commit runs: the handoff reads Redis's set of parked "
            "hosts, which does not hold the host yet, and put what it read in place of "
            "what the worker knew. The commit then wrote the overflow set, and no worker "
            "ever asked it back: the crawl stopped with those entries parked. Found with "
            "the planted catalogue on (2026-12-03), in a revisiting example of seed 2."
        ),
        fixed=(
            "Intake.parked_read adds the hosts read to those known; a host whose set is "
            "gone costs one unpark, which drops it."
        ),
        replay="""\
state = CrawlModel()
state.setup(site=Site(seed=3, hosts=1, pages=12), workers=2, roots=[0], faults=1, delay=1.0)
state.submit(pages=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
state.read(w=0)
state.stop(w=1)
state.leave(w=0)
state.beat(w=0)
state.read(w=0)
state.apply(w=0)
state.commit(w=0)
state.teardown()
""",
    ),
    "park_by_a_lost_owner": Bug(
        summary=(
            "A worker parked a host's overflow in a commit routed by a ring that gives "
            "the host to a worker that had just joined (its ring had moved between the "
            "read that parked and the commit). The new owner had read the set of parked "
            "hosts when it joined and never looked again: the crawl stopped short with "
            "those entries parked. Found by seed 3 of the quick "
            "profile (python -m simulations --seed 3), which the suite did not run."
        ),
        fixed=(
            "Router.add parks an entry only while the batch's ring gives this worker its "
            "host; otherwise the entry moves to the owner's stream (the deliberate bug "
            "park_unowned puts the old rule back)."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    site=Site(seed=10230, hosts=5, pages=29), faults=0, delay=1.0, roots=[48, 55, 29],
    gap=0.0, latency=0.0, revisit='6', workers=1,
)
state.advance(seconds=1.0)
state.run(order=0, seconds=0.5)
state.submit(pages=[59, 43])
state.take(w=0)
state.advance(seconds=1.0)
state.advance(seconds=0.1)
state.join_in_flight()
state.fetch(w=0)
state.advance(seconds=1.0)
state.fetch(w=0)
state.advance(seconds=0.1)
state.advance(seconds=1.0)
state.submit(pages=[51, 62])
state.run(order=400, seconds=4.0)
state.fetch(w=0)
state.take(w=1)
state.fetch(w=0)
state.submit(pages=[32])
state.join_in_flight()
state.join()
state.stop(w=0)
state.tick()
state.join()
state.tick()
state.tick()
state.tick()
state.tick()
state.teardown()
""",
    ),
    "stale_beat_lowers_applied": Bug(
        summary=(
            "A heartbeat sent before a handoff commit and run after it wrote the worker's "
            "older applied epoch back over the newer one. Once a host waits only for the "
            "members behind that own it in their ring, a newcomer read that older epoch's "
            "ring, where the host was a dead member's, and fetched the host while its "
            "owner still held it: two robots.txt requests 0.67 s apart on a 3 s delay. "
            "Found by scripts/soak (seed 2) on the commit that brought the rings in."
        ),
        fixed=(
            "heartbeat.lua writes a worker's applied epoch only when it is higher than "
            "the one Redis holds."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    site=Site(seed=115, hosts=2, pages=23), latency=0.2, faults=6, roots=[80, 16, 62],
    workers=2, revisit='', gap=0.2, delay=3.0,
)
state.pause_past_lease(w=2)
state.join_in_flight()
state.cut_off(w=2)
state.crash_later(at='before leave', w=0)
state.crash_later(at='after heartbeat', w=0)
state.crash(w=3)
state.crash_after_ack(w=1)
state.tick()
state.advance(seconds=5.0)
state.beat(w=1)
state.advance(seconds=0.1)
state.tick()
state.submit(pages=[80, 16, 62])
state.read(w=0)
state.advance(seconds=0.1)
state.beat(w=1)
state.run(order=170, seconds=1.0)
state.join()
state.tick()
state.advance(seconds=2.0)
state.tick()
state.join_in_flight()
state.teardown()
""",
    ),
    "dead_lettered_done_page_judged_lost": Bug(
        summary=(
            "Not in hashcrawl but in the judge: a worker wrote a page's item and died "
            "before committing it; that death was the page's third, and the drain "
            "dead-lettered it, as designed for a page that kills its readers. The judge "
            "took the links of every page done and no longer queued as accepted, so it "
            "called them lost, though no commit had ever added them. Found by "
            "scripts/soak (seed 14) once crash_then_join added a death."
        ),
        fixed="verdict.accepted takes no links from a page in the dead letters.",
        replay="""\
state = CrawlModel()
state.setup(
    faults=6, latency=0.2, site=Site(seed=218, hosts=6, pages=28), roots=[51], workers=3,
    gap=0.0, delay=3.0, revisit='6',
)
state.lost_join_then_pause()
state.plant_entries(w=3)
state.pause_to_lease_end(early=0.3, slow=2.5, w=1)
state.crash_after_ack(w=1)
state.stop(w=0)
state.pause_to_lease_end_long(early=0.05, slow=1.8, w=0)
state.join()
state.crash_then_join()
state.pause_to_lease_end(early=0.05, slow=1.8, w=0)
state.crash_at_revisit(at='before revisit_put', w=2)
state.advance(seconds=1.0)
state.run(order=172, seconds=4.0)
state.join()
state.join()
state.tick()
state.join()
state.join()
state.teardown()
""",
    ),
    "cap_of_an_expired_worker_judged_kept": Bug(
        summary=(
            "Not in hashcrawl but in the judge: with --max-pages-per-host 2, a worker that "
            "had sent a host's 2 page requests was paused past its lease, expired and "
            "drained; it wrote no pace record, so its count went with it (as a dying "
            "worker's does, docs/operations.md) and the host's new owner sent a third. "
            "The judge allowed a cap more only for workers that ended crashed, fenced or "
            "gave up, and this one ran on under a new id. Found by scripts/soak (seed 4) "
            "once the page cap was drawn again."
        ),
        fixed=(
            "reach.within_cap allows a cap more for every membership lost without a "
            "handover: a worker excused because the fleet expired it or a successor took "
            "its name, as well as one that ended so."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    delay=1.0, revisit='', faults=0, gap=0.2, site=Site(seed=2285, hosts=2, pages=5),
    workers=3, latency=0.2, roots=[52, 70, 84],
)
state.tick()
state.fetch(w=3)
state.tick()
state.configure(delay=2.0)
state.read(w=2)
state.tick()
state.configure(delay=3.0)
state.join()
state.tick()
state.run(order=528, seconds=2.0)
state.read(w=3)
state.read(w=0)
state.tick()
state.advance(seconds=0.1)
state.read(w=3)
state.fetch(w=2)
state.advance(seconds=1.0)
state.run(order=703, seconds=2.0)
state.run(order=8, seconds=4.0)
state.read(w=0)
state.lose_beat_after_expiry(w=2)
state.tick()
state.holds()
state.teardown()
""",
    ),
    "fenced_after_the_end_judged_over": Bug(
        summary=(
            "Not in hashcrawl but in the judge: a fleet saw a revisiting crawl finished and "
            "left; workers joined later took its due revisits, then all were silent past "
            "their lease at once and fenced, a revisit in one's stream. The judge's end "
            "took the crawl for over because a worker had seen it finished after the last "
            "submission, so it neither replaced the fenced sessions (Worker.run rejoins) "
            "nor started one, and called the revisit stranded. Found by scripts/soak "
            "(seed 8)."
        ),
        fixed=(
            "verdict._crawl_over: not over while a session was fenced or gave up after the "
            "last worker saw the crawl finished."
        ),
        replay="""\
state = CrawlModel()
state.setup(
    workers=3, revisit='adaptive', roots=[86],
    site=Site(seed=209, hosts=5, pages=7), delay=3.0, latency=0.0, faults=0, gap=0.2,
)
state.configure(delay=3.0)
state.tick()
state.tick()
state.pause_to_lease_end_long(early=0.3, slow=2.5, w=3)
state.configure(delay=3.0)
state.tick()
state.advance(seconds=2.0)
state.join()
state.configure(delay=2.0)
state.configure(delay=1.0)
state.join()
state.tick()
state.advance(seconds=1.0)
state.advance(seconds=5.0)
state.advance(seconds=0.5)
state.tick()
state.tick()
state.tick()
state.tick()
state.tick()
state.advance(seconds=0.1)
state.tick()
state.join()
state.advance(seconds=0.5)
state.advance(seconds=5.0)
state.tick()
state.join()
state.join()
state.advance(seconds=0.5)
state.join()
state.advance(seconds=0.5)
state.advance(seconds=1.0)
state.join()
state.advance(seconds=1.0)
state.advance(seconds=0.1)
state.advance(seconds=2.0)
state.tick()
state.join()
state.tick()
state.advance(seconds=1.0)
state.load_pace(w=3)
state.join()
state.tick()
state.advance(seconds=1.0)
state.join()
state.tick()
state.join()
state.advance(seconds=5.0)
state.advance(seconds=5.0)
state.teardown()
""",
    ),
}


_strict = False


def avoided(name: str) -> bool:
    """Whether the model should steer around open bug ``name``."""
    return name in OPEN and not _strict


@contextlib.contextmanager
def strict() -> Iterator[None]:
    """Steer around nothing: for replaying the open bugs themselves."""
    global _strict
    _strict = True
    try:
        yield
    finally:
        _strict = False


def replay(name: str, *, quiet: bool = True) -> None:
    """Run bug ``name``'s script with nothing steered around; raises if it shows."""
    from simulations.model import CrawlModel
    from simulations.web import Site

    bug = OPEN.get(name) or FIXED[name]
    shown = contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()
    with strict(), shown:
        exec(bug.replay, {"CrawlModel": CrawlModel, "Site": Site})
