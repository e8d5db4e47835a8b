"""Tests for hashcrawl._core._commits: a batch goes at the newest epoch and deletes the
pace records read since the last commit; only an answered OK takes the outcomes off."""

from __future__ import annotations

import pytest

from hashcrawl._core._batch import Committed, Status
from hashcrawl._core._entry import Entry
from hashcrawl._exceptions import Fenced
from tests.test_core import session_of


def test_a_batch_goes_at_the_newest_epoch_and_deletes_the_records_read() -> None:
    """The batch names the newest epoch and the pace records read; once it is
    committed those records are no longer waiting to be deleted, nor its outcomes."""
    session = session_of(epoch=3)
    session.pacing.carry.read["a.test"] = "1000,0,0"
    session.take_in([("1-0", b"bad")])
    commits = session.commits
    commit = session.ledger.next_commit()
    batch = commits.batch(commit, 0.0)
    assert (batch.epoch, batch.unpace) == (3, ["a.test", "1000,0,0"])
    assert commits.committed(commit, batch, Committed(status="ok"), 0.0) is Status.OK
    assert (session.pacing.carry.read, session.ledger.outcomes) == ({}, [])


def test_a_refused_commit_keeps_its_records_and_a_fenced_one_raises() -> None:
    """Stale: the outcomes and the records read stay for the next batch; fenced: the
    error names the worker."""
    session = session_of(worker="w7", members=("w7",))
    session.pacing.carry.read["a.test"] = "1000,0,0"
    session.take_in([("1-0", b"bad")])
    commits = session.commits
    commit = session.ledger.next_commit()
    batch = commits.batch(commit, 0.0)
    stale = Committed(status="stale", epoch=2)
    assert commits.committed(commit, batch, stale, 0.0) is Status.STALE
    assert (list(session.pacing.carry.read), session.ledger.outcomes) == (
        ["a.test"],
        commit.outcomes,
    )
    with pytest.raises(Fenced, match="worker w7 lost its membership"):
        commits.committed(commit, batch, Committed(status="fenced"), 0.0)


def test_a_commit_carries_other_shards_links_and_remembers_them_as_seen() -> None:
    """Links carried for other shards' pages go in the batch as seen-filtered adds, with
    no outcome of its own; once committed they are seen, and carried again add nothing."""
    session = session_of(worker="w1", members=("w1",))
    session.commits.scope = session.commits.scope.widened({"b.test"})
    commits = session.commits
    link = Entry(url="http://b.test/x")
    commit = session.ledger.next_commit()
    batch = commits.batch(commit, 0.0, [link])
    assert (commit.outcomes, [a[0] for a in batch.add], batch.ack) == ([], ["q:w1"], [])
    assert commits.committed(commit, batch, Committed(status="ok"), 0.0, [link]) is Status.OK
    assert commits.batch(session.ledger.next_commit(), 0.0, [link]).add == []
