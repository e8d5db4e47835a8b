"""Tests for hashcrawl._core._batch: how a big commit is split into script calls."""

from __future__ import annotations

from hashcrawl._core._batch import SPLIT_AT, Batch


def big_batch(filtered: int, unfiltered: int, acks: int) -> Batch:
    batch = Batch(worker="w1", epoch=3, src="q", ack=[f"{i}-0" for i in range(acks)])
    batch.add = [["q", f"f{i}", i, 1, 1] for i in range(filtered)]
    batch.add += [["q", f"u{i}", i, 1, 0] for i in range(unfiltered)]
    batch.pace = ["h.example", "1,0,0"]
    batch.applied = 3
    return batch


def test_an_ordinary_commit_goes_as_one_call():
    """A commit of a couple of hundred pages and their links is not split."""
    batch = big_batch(filtered=300, unfiltered=50, acks=200)
    assert batch.parts() == [batch]


def test_a_big_commit_splits_with_everything_not_idempotent_in_the_last_part():
    """Filtered adds go first, in parts within the limit; entries added past the seen
    filter, acknowledgements and the applied epoch go last, after the pace records."""
    batch = big_batch(filtered=2 * SPLIT_AT + 1, unfiltered=700, acks=200)
    parts = batch.parts()
    assert all(part.weight() <= SPLIT_AT for part in parts)
    assert [len(part.add) for part in parts[:3]] == [SPLIT_AT, SPLIT_AT, 1]
    assert parts[3].pace == batch.pace
    last = parts[-1]
    assert {rec[1][0] for rec in last.add} == {"u"} and len(last.add) == 700
    assert (last.ack, last.applied) == (batch.ack, 3)
    assert sum(len(part.add) for part in parts) == len(batch.add)
