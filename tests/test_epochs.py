"""Tests for hashcrawl._core._epochs: the ring a worker fetches by, the newest it knows,
and when its last answered heartbeat was sent."""

from __future__ import annotations

from hashcrawl._core._epochs import Epochs


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
