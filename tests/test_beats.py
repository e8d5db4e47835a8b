"""Tests for hashcrawl._core._beats: what a heartbeat tells Redis, and what its answer
means (a new epoch, the settled one, the state lost, the membership lost)."""

from __future__ import annotations

import pytest

from hashcrawl._core._batch import Beat
from hashcrawl._core._faults import Faults
from hashcrawl._exceptions import Fenced, StateLost
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
