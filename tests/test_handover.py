"""Tests for the core's processes of exchanges (``_exchanges``), step by step as the
driver sees them, without trio: applying an epoch, draining a stream, leaving
(``_handover``); reading pace records (``_pacing``); unparking (``_intake``)."""

from __future__ import annotations

import math

import pytest

from hashcrawl._core._batch import Committed
from hashcrawl._core._entry import Entry
from hashcrawl._core._exchanges import (
    AwaitChange,
    CommitBatch,
    CutShort,
    Done,
    Flush,
    Join,
    LeaveRing,
    NextOrphan,
    ReadEntries,
    ReadInFlight,
    ReadMembers,
    ReadPaces,
    ReadParked,
    ReadScope,
    Release,
    Unpark,
    Unparks,
    WidenScope,
)
from hashcrawl._core._frontier import Held
from hashcrawl._core._pace import Paces
from hashcrawl._core._ring import Ring
from hashcrawl._exceptions import Fenced
from tests.test_core import beat, host_owned_by, ready, session_of

OK = Committed(status="ok")


def payload(url: str) -> bytes:
    return Entry(url=url).encode().encode()


def test_applying_waits_a_little_for_requests_out_then_cuts_them_short() -> None:
    """A request out to a host given away: the process waits until HANDOFF_WAIT (or
    --grace), then has it end by --grace (or --timeout), commits, reads the parked."""
    session = session_of(members=("w1",), grace=5.0, timeout=3.0)
    grown = Ring.of(2, ("w1", "w2"))
    lost = host_owned_by(grown, "w2")
    ready(session, f"http://{lost}/1", f"http://{lost}/2")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.epochs.members_read(2, ("w1", "w2"))
    applying = session.handover.apply(0.0)
    assert applying is not None and applying.result == grown
    assert applying.next_step(0.5) == AwaitChange(1.0)  # busy, and not a second yet
    cut = applying.next_step(1.0)
    assert cut == CutShort([held.eid], 4.0)  # 1.0 + min(grace, timeout)
    assert session.frontier.hosts[lost].last_end == 4.0  # the new owner waits for it
    applying.answered(None, 1.0)
    commit = applying.next_step(1.0)
    assert isinstance(commit, CommitBatch) and commit.batch.applied == 2
    applying.answered(OK, 1.1)
    assert applying.next_step(1.1) == ReadParked()
    applying.answered({lost, "other.test"}, 1.2)
    assert applying.next_step(1.2) == Done()
    assert session.epochs.applied == 2
    assert session.intake.parked == {h for h in ("other.test",) if grown.owner_of(h) == "w1"}


def test_applying_with_nothing_out_goes_straight_to_the_commit() -> None:
    """No request to a lost host: no wait at all."""
    session = session_of(members=("w1",))
    session.epochs.members_read(2, ("w1", "w2"))
    applying = session.handover.apply(0.0)
    assert applying is not None
    assert applying.next_step(0.0) == CutShort([], 0.0 + min(30.0, 30.0))
    assert session.handover.apply(0.0) is None  # taken: nothing else waits


def test_a_stale_handoff_reads_the_members_and_leaves_the_newer_epoch_waiting() -> None:
    """Overtaken by a newer epoch: the members are read, that epoch waits to be applied."""
    session = session_of(members=("w1",))
    session.epochs.members_read(2, ("w1", "w2"))
    applying = session.handover.apply(0.0)
    assert applying is not None
    applying.next_step(0.0)
    applying.answered(None, 0.0)
    applying.answered(Committed(status="stale", epoch=3), 0.0)
    assert applying.next_step(0.0) == ReadMembers()
    applying.answered((3, ("w1", "w3")), 0.0)
    assert applying.next_step(0.0) == Done()
    assert session.epochs.waiting and session.epochs.applied == 1


def test_draining_another_workers_stream_reads_its_last_words_then_moves_batches() -> None:
    """A departed worker's stream: its in-flight record first (those entries become
    suspects), then each batch routed by the members read just before it, until the
    stream is empty and released (a refused release reads again)."""
    session = session_of(members=("w1",))
    draining = session.handover.drain("q:w9")
    assert draining.next_step(0.0) == ReadInFlight("q:w9")
    draining.answered({"1-0"}, 0.0)
    assert draining.next_step(0.0) == ReadEntries("q:w9", 500)
    draining.answered([("1-0", payload("http://a.test/"))], 0.0)
    assert draining.next_step(0.0) == ReadMembers()
    draining.answered((1, ("w1",)), 0.0)
    commit = draining.next_step(0.0)
    assert isinstance(commit, CommitBatch) and commit.batch.worker == "w1"
    assert commit.batch.src == "q:w9" and len(commit.batch.mv) == 1
    draining.answered(OK, 0.0)
    assert draining.next_step(0.0) == ReadEntries("q:w9", 500)
    draining.answered([], 0.0)
    assert draining.next_step(0.0) == Release("q:w9")
    draining.answered(False, 0.0)  # an entry came meanwhile
    assert draining.next_step(0.0) == ReadEntries("q:w9", 500)
    draining.answered([], 0.0)
    draining.answered(True, 0.0)
    assert draining.next_step(0.0) == Done()


def test_a_leaving_worker_drains_its_own_stream_under_no_members_name() -> None:
    """Its own stream: no in-flight record to read, and the batch names no member."""
    session = session_of(members=("w1", "w2"))
    draining = session.handover.drain("q:w1", leaving=True)
    assert draining.next_step(0.0) == ReadEntries("q:w1", 500)
    draining.answered([("1-0", payload("http://a.test/"))], 0.0)
    draining.answered((2, ("w2",)), 0.0)
    commit = draining.next_step(0.0)
    assert isinstance(commit, CommitBatch) and commit.batch.worker == ""
    with pytest.raises(Fenced):
        draining.answered(Committed(status="fenced"), 0.0)


def test_orphans_are_drained_one_after_another_until_none_is_left() -> None:
    """Only when the heartbeat said orphans wait; each stream drained in turn."""
    session = session_of(members=("w1",))
    assert session.handover.orphans() is None
    session.epochs.orphans_waiting = True
    orphans = session.handover.orphans()
    assert orphans is not None and session.handover.orphans() is None
    assert orphans.next_step(0.0) == NextOrphan()
    orphans.answered("q:w9", 0.0)
    assert orphans.next_step(0.0) == ReadInFlight("q:w9")
    orphans.answered(set(), 0.0)
    orphans.answered([], 0.0)
    orphans.answered(True, 0.0)  # released
    assert orphans.next_step(0.0) == NextOrphan()
    orphans.answered(None, 0.0)
    assert orphans.next_step(0.0) == Done()
    assert orphans.result == ["q:w9"]


def test_leaving_commits_everything_leaves_with_every_hosts_record_then_drains() -> None:
    """Nothing more starts; what is held is committed; the ring is left with a pace
    record of each host; the worker's own stream drains under no member's name."""
    session = session_of(members=("w1", "w2"))
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.fetches.ended(held, None, 0.5)  # requested: its pace goes to its next owner
    leaving = session.handover.leave()
    assert session.flight.stopping and session.gate.next_fetch(0.0) == math.inf
    assert leaving.next_step(0.0) == Flush()
    leaving.answered(None, 1.0)
    step = leaving.next_step(1.0)
    assert isinstance(step, LeaveRing) and list(step.pace) == ["a.test"]
    leaving.answered(None, 1.0)
    assert leaving.next_step(1.0) == ReadEntries("q:w1", 500)
    leaving.answered([("9-0", payload("http://b.test/"))], 1.0)
    leaving.answered((2, ("w2",)), 1.0)
    commit = leaving.next_step(1.0)
    assert isinstance(commit, CommitBatch) and commit.batch.worker == ""  # out of the ring
    leaving.answered(OK, 1.0)
    leaving.answered([], 1.0)
    leaving.answered(True, 1.0)
    assert leaving.next_step(1.0) == Done()


def test_pace_records_due_are_read_in_one_step_and_adopted() -> None:
    """The hosts due are asked for together; none due, no process at all."""
    session = session_of()
    session.take_in([("1-0", payload("http://a.test/"))])
    session.heartbeat.answered(beat(epoch=1), sent=0.0, received=0.0)
    reading = session.pacing.read_due()
    assert reading is not None and reading.next_step(0.0) == ReadPaces(["a.test"])
    assert session.pacing.read_due() is None  # taken
    reading.answered(Paces(), 0.0)
    assert reading.next_step(0.0) == Done()
    assert session.frontier.hosts["a.test"].paced


def test_unparks_are_decided_one_at_a_time_as_each_is_answered() -> None:
    """Each parked host that runs short asks its entries back; the answer "none left"
    drops the host; the hosts that took entries back are named."""
    session = session_of()
    session.intake.parked_read({"a.test", "b.test"}, session.epochs.latest, "w1")
    unparking = session.start(Unparks())
    count = session.intake.unpark_count
    assert unparking.next_step(0.0) == Unpark("a.test", 1, count, 0)
    unparking.answered(("ok", 3, 0), 0.0)
    assert unparking.next_step(0.0) == Unpark("b.test", 1, count, 0)
    unparking.answered(("ok", 0, 5), 0.0)
    assert unparking.next_step(0.0) == Done()
    assert unparking.result == ["a.test"] and session.intake.parked == {"b.test"}


def test_joining_learns_the_scope_its_settings_widen_the_members_and_the_parked() -> None:
    """As it joins, a worker adds its --allow-domains to the crawl's scope, reads the
    scope, applies the members read at once (not settled yet), then reads its parked
    hosts; the epoch and members joined at are its result."""
    session = session_of(allow_domains=("example.org",))
    joining = session.start(Join(0.0, 0.0, now_ms=5000))
    step = joining.next_step(0.0)
    assert isinstance(step, WidenScope) and any("example.org" in m for m in step.members)
    joining.answered(None, 0.0)
    assert joining.next_step(0.0) == ReadScope()
    joining.answered(set(), 0.0)
    assert joining.next_step(0.0) == ReadMembers()
    joining.answered((4, ("w1", "w2")), 0.0)
    assert session.epochs.latest.epoch == 4 and joining.result == (4, ("w1", "w2"))
    assert joining.next_step(0.0) == ReadParked()
    mine = host_owned_by(session.epochs.latest, "w1")
    joining.answered({mine}, 0.0)
    assert joining.next_step(0.0) == Done() and session.intake.parked == {mine}


def test_an_epoch_applied_after_skipping_some_paces_kept_hosts_from_their_records() -> None:
    """Applying epoch 2 from 1, a host kept stays paced; applying 3 from 1, someone may
    have owned it at epoch 2: it waits for that owner's pace record, read as any gained
    host's. (A host given away comes first in the frontier: each kept one is seen to.)"""
    for epoch, skipped in ((2, False), (3, True)):
        session = session_of(members=("w1",))
        ring = Ring.of(epoch, ("w1", "w2"))
        lost, kept = host_owned_by(ring, "w2"), host_owned_by(ring, "w1")
        ready(session, f"http://{lost}/", f"http://{kept}/")
        session.epochs.members_read(epoch, ("w1", "w2"))
        applying = session.handover.apply(0.0)
        assert applying is not None
        host = session.frontier.hosts[kept]
        assert (host.paced, kept in session.pacing.carry.unpaced) == (not skipped, skipped)


def test_a_host_revoked_by_an_overtaken_handoff_and_kept_by_the_newer_epoch_comes_back() -> None:
    """A handoff revoked a host, then a newer epoch gives it back to this worker: it is
    no longer revoked, and waits for the pace record of whoever held it meanwhile."""
    session = session_of(members=("w1",))
    grown = Ring.of(2, ("w1", "w2"))
    lost = host_owned_by(grown, "w2")
    ready(session, f"http://{lost}/")
    session.epochs.members_read(2, ("w1", "w2"))
    first = session.handover.apply(0.0)
    assert first is not None and session.frontier.hosts[lost].revoked
    first.next_step(0.0)
    first.answered(None, 0.0)
    first.answered(Committed(status="stale", epoch=3), 0.0)  # overtaken
    session.epochs.members_read(3, ("w1",))
    assert session.handover.apply(0.0) is not None
    host = session.frontier.hosts[lost]
    assert not host.revoked and not host.paced and lost in session.pacing.carry.unpaced


def test_a_handoff_carries_the_page_counts_and_cookies_of_hosts_with_nothing_queued() -> None:
    """A host given away with no page queued still hands over its --max-pages-per-host
    count and its cookies, in its pace record; a host kept hands over nothing."""
    session = session_of(members=("w1",), max_pages_per_host=5)
    grown = Ring.of(2, ("w1", "w2"))
    counted = host_owned_by(grown, "w2")
    kept = host_owned_by(grown, "w1")
    session.taken.update({counted: 2, kept: 1})
    session.jars.take(kept, "GET", f"http://{kept}/", ["sid=1"])
    session.epochs.members_read(2, ("w1", "w2"))
    applying = session.handover.apply(0.0)
    assert applying is not None
    applying.next_step(0.0)
    applying.answered(None, 0.0)
    commit = applying.next_step(0.0)
    assert isinstance(commit, CommitBatch) and commit.batch.pace[::2] == [counted]
    applying.answered(OK, 0.0)
    assert counted not in session.taken and session.taken[kept] == 1
