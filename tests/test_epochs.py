"""Tests for hashcrawl._core._epochs: the ring a worker fetches by, the newest it knows,
and when its last answered heartbeat was sent."""

from __future__ import annotations

from hashcrawl._core._epochs import Epochs, Release
from hashcrawl._core._ring import Ring


def test_the_first_read_is_applied_at_once_but_not_settled() -> None:
    """At join the ring is the fleet's, and no host gained by joining is settled yet."""
    epochs = Epochs()
    epochs.members_read(4, ["w1", "w2"], first=True)
    assert (epochs.ring.epoch, epochs.applied, epochs.settled, epochs.waiting) == (4, 4, 0, False)
    assert epochs.current()


def test_a_new_epoch_waits_to_be_applied_and_is_taken_once() -> None:
    """A newer epoch is routed by at once, fetched by once applied; take() hands it once."""
    epochs = Epochs()
    epochs.members_read(1, ["w1"], first=True)
    epochs.members_read(2, ["w1", "w2"])
    assert (epochs.latest.epoch, epochs.ring.epoch, epochs.current()) == (2, 1, False)
    taken = epochs.take()
    assert taken is not None and taken.epoch == 2
    assert epochs.take() is None


def test_the_same_epoch_read_again_changes_nothing() -> None:
    """Reading the members of the epoch known does not make it wait again."""
    epochs = Epochs()
    epochs.members_read(3, ["w1"], first=True)
    epochs.members_read(3, ["w1"])
    assert not epochs.waiting


def test_fetching_is_fresh_only_within_the_window_after_an_answered_heartbeat() -> None:
    """Never fresh before a heartbeat is answered; then for ``window`` seconds."""
    epochs = Epochs()
    assert not epochs.fresh(0.0, window=5.0)
    epochs.confirmed_at = 10.0
    assert epochs.fresh(14.9, window=5.0)
    assert not epochs.fresh(15.0, window=5.0)


def _owned_by(ring: Ring, member: str, others: str) -> str:
    """A host ``ring`` gives ``member`` and ``Ring.of(0, others)`` gives someone else."""
    return next(
        h
        for h in (f"h{i}.test" for i in range(1000))
        if ring.owner_of(h) == member and Ring.of(0, tuple(others)).owner_of(h) != member
    )


def test_a_host_waits_only_for_the_members_behind_that_own_it_in_their_ring() -> None:
    """A member behind the host's epoch holds up only the hosts its own ring gives it: a
    dead member's hosts wait for its lease, a live member's never do."""
    old = Ring.of(5, ("w1", "w2"))
    dead_held = _owned_by(old, "w2", "w1")
    live_held = _owned_by(old, "w1", "w2")
    release = Release(settled=5, epoch=6, behind={"w2": 5}, rings={5: old})
    assert release(live_held, since=6)
    assert not release(dead_held, since=6)
    assert release(dead_held, since=5)  # settled: nobody may still hold it


def test_a_member_behind_whose_ring_is_not_known_holds_up_every_host() -> None:
    """Without the ring a member fetches by (lost, or never written), every host waits for
    it, as for the settled epoch; so does a host of an epoch the heartbeat had not seen."""
    release = Release(settled=5, epoch=6, behind={"w2": 5}, rings={})
    assert not release("a.test", since=6)
    assert not Release(settled=5, epoch=6)("a.test", since=7)
    assert Release(settled=5, epoch=7)("a.test", since=7)


def test_a_heartbeat_that_changes_who_is_behind_says_so_and_reuses_known_rings() -> None:
    """``released`` reports a change of the settled epoch or of who is behind, and keeps
    the rings it built before."""
    epochs = Epochs()
    assert epochs.released(6, 5, {"w2": 5}, {5: ["w1", "w2"]})
    ring = epochs.release.rings[5]
    assert not epochs.released(6, 5, {"w2": 5}, {5: ["w1", "w2"]})
    assert epochs.release.rings[5] is ring
    assert epochs.released(6, 6, {}, {})
    assert epochs.settled == 6
