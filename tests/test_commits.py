"""Tests for hashcrawl._core._commits: a batch goes at the newest epoch and deletes the
pace records read since the last commit; only an answered OK takes the outcomes off."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from hashcrawl._core._batch import Committed, Status
from hashcrawl._core._entry import Entry
from hashcrawl._core._exchanges import (
    CommitBatch,
    CommitOutcomes,
    Done,
    PutRevisits,
    ReadMembers,
    ReadScope,
    WriteItems,
)
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Outcome
from hashcrawl._core._pace import PaceRecord
from hashcrawl._core._robotsrules import Robots
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._session import Session
from hashcrawl._exceptions import Fenced
from tests.test_core import ready, session_of


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


def fetched_page(session: Session, items: list[Any], revisit: Any = None) -> None:
    """One page of a.test fetched, with ``items``, waiting to be committed."""
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    outcome = attrs.evolve(Outcome.done(held, items, []), revisit=revisit)
    session.fetches.ended(held, outcome, 0.1)


def test_a_commit_writes_the_items_and_the_revisits_before_the_batch() -> None:
    """Items written and flushed, revisit records put, then the batch: a page acknowledged
    has its items kept and its next revisit recorded."""
    session = session_of()
    fetched_page(session, [{"a": 1}], revisit="record")
    committing = session.commits.start(CommitOutcomes(200, revisits=True))
    assert committing is not None
    assert committing.next_step(0.2) == WriteItems([{"a": 1}])
    committing.answered(None, 0.3)
    assert session.ledger.items_pending == 0 and session.tally.items == 1
    assert committing.next_step(0.3) == PutRevisits(["record"])
    committing.answered(None, 0.4)
    step = committing.next_step(0.4)
    assert isinstance(step, CommitBatch) and step.batch.ack == ["1-0"]
    committing.answered(Committed(status="ok"), 0.5)
    assert committing.next_step(0.5) == Done()
    assert session.ledger.outcomes == []
    assert session.tally.commit_latency.total == pytest.approx(0.1)  # from 0.4 to 0.5


def test_a_commit_with_no_items_and_no_archive_goes_straight_to_the_batch() -> None:
    """Nothing to write: no step for it; with an archive, the flush is still a step."""
    session = session_of()
    fetched_page(session, [])
    committing = session.commits.start(CommitOutcomes(200))
    assert committing is not None
    assert isinstance(committing.next_step(0.2), CommitBatch)
    session = session_of()
    fetched_page(session, [])
    committing = session.commits.start(CommitOutcomes(200, archive=True))
    assert committing is not None and committing.next_step(0.2) == WriteItems([])


def test_a_commit_refused_for_its_scope_or_epoch_reads_again_and_sends_a_new_batch() -> None:
    """RESCOPE: the scope is read, then a batch built anew; STALE: the members are read
    (the newer epoch routes the next batch)."""
    session = session_of(members=("w1",))
    fetched_page(session, [])
    committing = session.commits.start(CommitOutcomes(200))
    assert committing is not None
    committing.next_step(0.2)
    committing.answered(Committed(status="rescope"), 0.3)
    assert committing.next_step(0.3) == ReadScope()
    committing.answered(scope_members(hosts=["a.test", "b.test"]), 0.3)  # grown: taken on
    assert session.commits.scope.allows("b.test")
    committing.next_step(0.3)
    committing.answered(Committed(status="stale", epoch=2), 0.4)
    assert committing.next_step(0.4) == ReadMembers()
    committing.answered((2, ("w1", "w2")), 0.4)
    step = committing.next_step(0.4)
    assert isinstance(step, CommitBatch) and step.batch.epoch == 2
    assert session.epochs.waiting  # the new epoch waits to be applied


def test_the_deliberate_bugs_write_the_items_or_revisits_after_the_batch() -> None:
    """ack_before_write and revisit_put_after_ack: the order the end-to-end tests catch."""
    session = session_of()
    session.commits.faults = Faults.of(["ack_before_write", "revisit_put_after_ack"])
    fetched_page(session, [{"a": 1}], revisit="record")
    committing = session.commits.start(CommitOutcomes(200, revisits=True))
    assert committing is not None
    assert isinstance(committing.next_step(0.2), CommitBatch)
    committing.answered(Committed(status="ok"), 0.3)
    assert committing.next_step(0.3) == WriteItems([{"a": 1}])
    committing.answered(None, 0.3)
    assert committing.next_step(0.3) == PutRevisits(["record"])
    committing.answered(None, 0.3)
    assert committing.next_step(0.3) == Done()


def test_links_carried_alone_are_committed_and_a_commit_of_nothing_ends_at_once() -> None:
    """No outcome, links of other shards' pages: a batch of them; carried again (seen
    now), nothing is sent and the process ends with nothing committed."""
    session = session_of(worker="w1", members=("w1",))
    session.commits.scope = session.commits.scope.widened({"b.test"})
    link = Entry(url="http://b.test/x")
    assert session.commits.start(CommitOutcomes(200)) is None  # nothing at all
    committing = session.commits.start(CommitOutcomes(200, [link]))
    assert committing is not None
    step = committing.next_step(0.0)
    assert isinstance(step, CommitBatch) and [a[0] for a in step.batch.add] == ["q:w1"]
    committing.answered(Committed(status="ok"), 0.1)
    assert committing.next_step(0.1) == Done() and committing.result == 0
    again = session.commits.start(CommitOutcomes(200, [link]))
    assert again is not None and again.next_step(0.2) == Done() and again.result == 0


def test_a_crawl_that_keeps_no_revisits_puts_none() -> None:
    """An outcome with a revisit record, in a crawl without --revisit's store: no step."""
    session = session_of()
    fetched_page(session, [], revisit="record")
    committing = session.commits.start(CommitOutcomes(200, revisits=False))
    assert committing is not None and isinstance(committing.next_step(0.0), CommitBatch)


def test_a_dead_letter_is_dated_by_the_servers_clock_in_seconds() -> None:
    """The record's ``at`` is the server's UNIX second at the commit, whatever this
    worker's clock says (status lists the most recent dead letters by it)."""
    session = session_of()
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    session.clock.sample(0.0, 0.0, 1_700_000_000_500)  # the server is far ahead
    assert isinstance(held, Held)
    session.fetches.ended(held, Outcome.dead(held, "refused"), 0.1)
    batch = session.commits.batch(session.ledger.next_commit(), 2.0)
    assert json.loads(batch.dead[1])["at"] == 1_700_000_002


def test_a_commit_marks_each_hosts_cookies_stored_by_the_record_it_wrote() -> None:
    """Two hosts' cookies changed: the commit writes both records, and once it went
    through neither is changed any more."""
    session = session_of()
    for host in ("a.test", "b.test"):
        session.jars.take(host, "GET", f"http://{host}/", [f"sid={host}"])
    commit = session.ledger.next_commit()
    batch = session.commits.batch(commit, 0.0)
    assert batch.pace[::2] == ["a.test", "b.test"]
    session.commits.committed(commit, batch, Committed(status="ok"), 0.0)
    assert session.jars.changed() == []


def test_a_carried_link_that_skips_the_filter_is_added_as_it_is() -> None:
    """A link of another shard's page with dont_filter goes into the batch unfiltered
    (its filter flag 0: commit.lua does not gate it), to its host's owner, every time
    it is carried."""
    session = session_of(worker="w1", members=("w1",))
    session.commits.scope = session.commits.scope.widened({"b.test"})
    link = Entry(url="http://b.test/x", dont_filter=True)
    for _ in range(2):
        batch = session.commits.batch(session.ledger.next_commit(), 0.0, [link])
        assert [(a[0], a[1], a[4]) for a in batch.add] == [("q:w1", link.encode(), 0)]


def test_a_commits_cookie_record_leaves_the_hosts_robots_rules_out() -> None:
    """Each commit writes the records of hosts whose cookies changed: cookies only, not
    the robots.txt rules a handoff's record carries (tens of KiB a commit otherwise)."""
    session = session_of(obey_robots=True)
    ready(session, "http://a.test/1", "http://a.test/2")
    session.robots.rules["a.test"] = Robots.parse("User-agent: *\nDisallow: /x\n", "hc")
    session.robots.rules["a.test"] = session.robots.rules["a.test"].kept_until(3600.0)
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.jars.take("a.test", "GET", held.entry.url, ["sid=1"])
    handed = session.pacing.records(["a.test"], 0.1)["a.test"]
    assert PaceRecord.from_text(handed).robots  # a handoff's record carries the rules
    batch = session.commits.batch(session.ledger.next_commit(), 0.1)
    record = PaceRecord.from_text(batch.pace[1])
    assert record.cookies and not record.robots
