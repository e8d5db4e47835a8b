"""Tests for hashcrawl._core._beats: what a heartbeat tells Redis, and what its answer
means (a new epoch, the settled one, the state lost, the membership lost)."""

from __future__ import annotations

import pytest

from hashcrawl._core._batch import Beat
from hashcrawl._core._exchanges import Done, SendHeartbeat
from hashcrawl._core._faults import Faults
from hashcrawl._exceptions import Fenced, QueueError, StateLost
from tests.test_core import LEASE, beat, session_of


def test_a_heartbeat_asks_for_a_lease_and_expires_no_live_member() -> None:
    """The lease in ms, the epochs applied and known; expire_ms only with the bug on."""
    session = session_of(epoch=3)
    asked = session.heartbeat.request(0.0, resident_kib=0)
    assert (asked["lease_ms"], asked["applied"], asked["known_epoch"]) == (LEASE * 1000, 3, 3)
    assert asked["expire_ms"] is None
    session.heartbeat.faults = Faults.of(["reclaim_live"])
    assert session.heartbeat.request(0.0, resident_kib=0)["expire_ms"] == 0


def test_an_answer_with_new_members_makes_the_new_epoch_wait() -> None:
    """A beat naming epoch 2's members: routed by at once, applied by the driver later."""
    session = session_of()
    session.heartbeat.answered(beat(epoch=2, members=("w1", "w2")), 1.0, 1.2)
    assert (session.epochs.latest.epoch, session.epochs.waiting) == (2, True)
    assert session.epochs.confirmed_at == 1.0


def test_an_answer_saying_the_state_is_lost_or_the_member_gone_stops_the_worker() -> None:
    """Lost state raises StateLost; a beat not alive raises Fenced."""
    heartbeat = session_of().heartbeat
    with pytest.raises(StateLost):
        heartbeat.answered(Beat(alive=False, now_ms=0, lost=True), 0.0, 0.0)
    with pytest.raises(Fenced, match="silent longer than its lease"):
        heartbeat.answered(Beat(alive=False, now_ms=0), 0.0, 0.0)


def test_a_beat_redis_ran_before_this_workers_own_take_does_not_end_the_crawl() -> None:
    """Idle when Redis ran the beat, but this worker's taker queued revisits since (at
    server second 9, the beat at 9.5 s): the membership goes on, to see them through; a
    beat a second or more after the take may end it."""
    session = session_of(idle=2.0)
    session.heartbeat.took(9)
    assert not session.heartbeat.finished(beat(idle_since=0, now_ms=9500))
    assert not session.heartbeat.finished(beat(idle_since=0, now_ms=10_000))
    assert session.heartbeat.finished(beat(idle_since=0, now_ms=10_001))
    session.heartbeat.took(5)  # an older take reported late moves nothing back
    assert session.heartbeat.finished(beat(idle_since=0, now_ms=10_001))


def test_a_heartbeat_is_one_step_and_a_failed_one_is_let_go_within_a_lease() -> None:
    """Answered: its beat is taken; failed: the process ends with no answer (the next
    heartbeat is the retry) until none got through for a lease, then it raises."""
    session = session_of()
    beating = session.heartbeat.beat(1.0, resident_kib=0)
    step = beating.next_step(1.0)
    assert isinstance(step, SendHeartbeat) and step.fields["lease_ms"] == LEASE * 1000
    beating.answered(beat(epoch=2, members=("w1", "w2")), 1.1)
    assert beating.next_step(1.1) == Done() and beating.result is not None
    assert session.epochs.latest.epoch == 2
    beating = session.heartbeat.beat(2.0, resident_kib=0)
    beating.failed(QueueError("timed out"), 2.1)
    assert beating.next_step(2.1) == Done() and beating.result is None
    late = session.heartbeat.beat(1.0 + LEASE + 0.1, resident_kib=0)
    with pytest.raises(QueueError, match="gave up after a lease"):
        late.failed(QueueError("timed out"), 1.0 + LEASE + 0.2)
