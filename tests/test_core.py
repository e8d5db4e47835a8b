"""Tests for hashcrawl._core._session: a worker's decisions, by hand. No Redis, no network."""

from __future__ import annotations

from typing import Any

import pytest

from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Release
from hashcrawl._core._exchanges import Done, Join, Read, ReadStream, WidenScope
from hashcrawl._core._frontier import Held
from hashcrawl._core._intake import Reading
from hashcrawl._core._outcome import Kind, Outcome
from hashcrawl._core._pace import Paces
from hashcrawl._core._page import Page, Send
from hashcrawl._core._ring import Ring
from hashcrawl._core._session import COMMIT_MAX, Session
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import Fenced, QueueError
from hashcrawl._run._metrics import Tally
from hashcrawl._store._store import Beat, Committed
from hashcrawl._web._cookies import Jars

LEASE = 8.0


def session_of(
    worker: str = "w1", members: tuple[str, ...] = ("w1",), epoch: int = 1, **settings: Any
) -> Session:
    """A session that has joined at ``epoch`` with ``members``, at time 0."""
    given = {"delay": 1.0, "lease": LEASE, "obey_robots": False, "idle": 2.0, **settings}
    session = Session(
        worker=worker,
        settings=Settings.of(given),
        stream_of=lambda w: f"q:{w}",
        inbox="inbox",
        refuses=lambda entry: None,
        tally=Tally(),
        jars=Jars(),
        now=0.0,
    )
    joining = session.start(Join(0.0, 0.0, now_ms=0))
    widen = joining.next_step(0.0)
    assert isinstance(widen, WidenScope)
    joining.answered(None, 0.0)
    joining.answered(widen.members, 0.0)  # the scope, as if Redis stored it and gave it back
    joining.answered((epoch, members), 0.0)
    joining.answered(set(), 0.0)  # no host parked
    assert joining.next_step(0.0) == Done()
    return session


def beat(epoch: int = 1, settled: int = 1, **fields: Any) -> Beat:
    return Beat(alive=True, now_ms=fields.pop("now_ms", 0), epoch=epoch, settled=settled, **fields)


def ready(session: Session, *urls: str, at: float = 0.0) -> None:
    """Read ``urls`` into ``session`` and let it fetch their hosts (settled, paced)."""
    session.take_in([(f"{n}-0", Entry(url=u).encode().encode()) for n, u in enumerate(urls, 1)])
    session.heartbeat.answered(beat(epoch=session.epochs.latest.epoch), sent=at, received=at)
    session.pacing.loaded(*session.pacing.take_due()[:1], Paces(), session.epochs.release)


def host_owned_by(ring: Ring, worker: str) -> str:
    return next(h for h in (f"h{i}.test" for i in range(1000)) if ring.owner_of(h) == worker)


def test_a_joined_worker_fetches_only_once_the_fleet_settles_and_pace_is_read() -> None:
    """Before every member has applied the join's epoch, a gained host waits."""
    session = session_of()
    session.take_in([("1-0", Entry(url="http://a.test/").encode().encode())])
    assert not isinstance(session.gate.next_fetch(0.0), Held)
    session.heartbeat.answered(beat(settled=1), sent=0.0, received=0.0)
    assert session.pacing.take_due()[0] == ["a.test"]
    assert not isinstance(session.gate.next_fetch(0.0), Held)  # its pace record is not read yet
    session.pacing.loaded(["a.test"], Paces(), Release(settled=1))
    got = session.gate.next_fetch(0.0)
    assert isinstance(got, Held) and got.host == "a.test"
    assert session.flight.in_flight == 1


def test_a_stale_worker_starts_nothing_and_looks_again_within_a_beat() -> None:
    """A quarter lease after its last answered heartbeat, nothing is dispatched."""
    session = session_of()
    ready(session, "http://a.test/")
    stale = LEASE / 4 + 0.1
    wake = session.gate.next_fetch(stale)
    assert wake == stale + session.settings.beat_interval


def test_may_send_says_no_once_the_worker_is_stale_or_the_host_moved() -> None:
    """The check right before a request leaves looks at freshness and ownership now."""
    session = session_of()
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert session.gate.may_send(held, LEASE / 4 - 0.1)
    assert not session.gate.may_send(held, LEASE / 4 + 0.1)
    session.epochs.members_read(2, ("w2",))
    assert not session.gate.may_send(held, 0.0)


def test_requests_to_one_host_are_the_delay_apart() -> None:
    """The second page of a host is not dispatched before --delay after the first ends."""
    session = session_of(delay=1.0)
    ready(session, "http://a.test/1", "http://a.test/2")
    first = session.gate.next_fetch(0.0)
    assert isinstance(first, Held)
    assert session.fetches.ended(first, Outcome.done(first, [], []), 0.5) is False
    assert session.gate.next_fetch(0.6) == 1.5
    assert isinstance(session.gate.next_fetch(1.5), Held)


def test_a_commit_is_due_when_half_the_slots_wait_not_at_every_page() -> None:
    """Every slot is taken nearly always (a freed one is refilled at once), so a commit
    is called when half of --concurrency waits for one not yet under way: a commit of
    one or two pages would cost as many Redis commands as one of thirty."""
    session = session_of(concurrency=4, delay=0.0)
    ready(session, *(f"http://h{i}.test/" for i in range(8)))
    held = [session.gate.next_fetch(0.0) for _ in range(4)]
    assert all(isinstance(h, Held) for h in held)
    assert session.gate.saturated()
    assert session.fetches.ended(held[0], Outcome.done(held[0], [], []), 0.1) is False
    assert session.fetches.ended(held[1], Outcome.done(held[1], [], []), 0.1) is True  # half
    commit = session.ledger.next_commit()
    session.ledger.commit_begun(commit)
    assert session.fetches.ended(held[2], Outcome.done(held[2], [], []), 0.1) is False
    assert session.fetches.ended(held[3], Outcome.done(held[3], [], []), 0.1) is True
    batch = session.commits.batch(commit, 0.1)
    assert session.commits.committed(commit, batch, Committed(status="ok"), 0.01) == "ok"
    assert len(session.ledger.outcomes) == 2 and isinstance(session.gate.next_fetch(0.2), Held)


def test_a_lone_page_waits_for_the_timer_unless_nothing_else_can_move() -> None:
    """Fewer than half waiting: the commit timer takes them. But a sharded worker whose
    pool of slots is full (the other shards' pages) and this shard with nothing in
    flight to end and call a commit: at once, however few wait."""
    from hashcrawl._core._gate import Pool

    session = session_of(concurrency=4, delay=0.0)
    ready(session, "http://a.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert session.fetches.ended(held, Outcome.done(held, [], []), 0.1) is False  # 1 of 4
    other = session_of(concurrency=4)
    pool = Pool(4, lambda: [session, other])
    session.gate.pool = other.gate.pool = pool
    other.ledger.uncommitted = 3  # with this shard's one page, the pool is full
    assert session.gate.commit_due()
    other.ledger.uncommitted = 2
    assert not session.gate.commit_due()


def test_uncommitted_pages_count_against_concurrency() -> None:
    """A page fetched but not committed holds its slot: a killed worker refetches few."""
    session = session_of(concurrency=1, delay=0.0)
    ready(session, "http://a.test/", "http://b.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert session.fetches.ended(held, Outcome.done(held, [{"x": 1}], []), 0.1) is True
    assert session.gate.next_fetch(0.1) == float("inf")
    commit = session.ledger.next_commit()
    batch = session.commits.batch(commit, 0.0)
    assert session.commits.committed(commit, batch, Committed(status="ok"), 0.01) == "ok"
    assert isinstance(session.gate.next_fetch(0.1), Held)


def test_an_entry_of_a_host_another_member_owns_is_forwarded_to_it() -> None:
    """What the reader takes for a host it does not own goes to the owner's stream."""
    session = session_of(members=("w1", "w2"))
    other = host_owned_by(session.epochs.latest, "w2")
    session.take_in([("1-0", Entry(url=f"http://{other}/").encode().encode())])
    assert [o.kind for o in session.ledger.outcomes] == [Kind.FORWARD]
    batch = session.commits.batch(session.ledger.next_commit(), 0.0)
    assert batch.mv == [["1-0", "q:w2", Entry(url=f"http://{other}/").encode()]]


def test_an_unreadable_entry_is_acknowledged_as_bad() -> None:
    """A payload that is no entry becomes a bad outcome, nothing else."""
    session = session_of()
    session.take_in([("1-0", b"not json")])
    batch = session.commits.batch(session.ledger.next_commit(), 0.0)
    assert batch.bad and batch.bad[0][0] == "1-0" and not batch.ack


def test_committed_follows_skip_the_seen_filter_next_time() -> None:
    """A follow this worker committed once is not sent to the filter again."""
    session = session_of(span_hosts=True)
    ready(session, "http://a.test/1", "http://a.test/2")
    follow = Entry(url="http://b.test/x")
    for at in (0.0, 1.5):
        held = session.gate.next_fetch(at)
        assert isinstance(held, Held)
        session.fetches.ended(held, Outcome.done(held, [], [follow]), at)
        commit = session.ledger.next_commit()
        batch = session.commits.batch(commit, 0.0)
        assert session.commits.committed(commit, batch, Committed(status="ok"), 0.0) == "ok"
        assert len(batch.add) == (1 if at == 0.0 else 0)


def test_a_commit_takes_at_most_commit_max_outcomes() -> None:
    """The oldest COMMIT_MAX outcomes go first; the rest wait for the next commit."""
    session = session_of()
    session.take_in([(f"{n}-0", b"bad") for n in range(COMMIT_MAX + 5)])
    commit = session.ledger.next_commit()
    assert len(commit.outcomes) == COMMIT_MAX
    session.commits.committed(
        commit, session.commits.batch(commit, 0.0), Committed(status="ok"), 0.0
    )
    assert len(session.ledger.outcomes) == 5


def test_a_refused_commit_keeps_its_outcomes() -> None:
    """A stale or rescoped commit leaves every outcome in place; a fenced one raises."""
    session = session_of()
    session.take_in([("1-0", b"bad")])
    commit = session.ledger.next_commit()
    batch = session.commits.batch(commit, 0.0)
    assert (
        session.commits.committed(commit, batch, Committed(status="stale", epoch=2), 0.0) == "stale"
    )
    assert session.ledger.outcomes == commit.outcomes
    with pytest.raises(Fenced):
        session.commits.committed(commit, batch, Committed(status="fenced"), 0.0)


def test_a_retry_backs_its_host_off() -> None:
    """A failed page's outcome holds its host back by the retry wait."""
    session = session_of(delay=0.0)
    ready(session, "http://a.test/1", "http://a.test/2")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    outcome = session.fetches.failed(held, "reset", kind="reset", now=0.0)
    session.fetches.ended(held, outcome, 0.0)
    assert session.gate.next_fetch(0.0) == 1.0  # 2 ** 0 seconds
    assert session.tally.failed == 1


def test_a_new_epoch_hands_the_lost_hosts_entries_and_pacing_over() -> None:
    """Applying an epoch that gives a host away moves its queue and writes its pace record."""
    session = session_of(members=("w1",))
    grown = Ring.of(2, ("w1", "w2"))
    lost = host_owned_by(grown, "w2")
    ready(session, f"http://{lost}/1", f"http://{lost}/2")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.fetches.ended(held, None, 0.5)
    session.epochs.members_read(2, ("w1", "w2"))
    ring = session.epochs.take()
    assert ring is not None and session.epochs.take() is None
    handoff = session.handover.begin(ring)
    assert handoff.lost == [lost] and not session.handover.busy(handoff)
    assert not isinstance(session.gate.next_fetch(0.5), Held)  # revoked: nothing starts
    batch = session.handover.batch(handoff, 0.6)
    assert batch.mv == [["2-0", "q:w2", Entry(url=f"http://{lost}/2").encode()]]
    assert batch.pace[0] == lost and batch.pace[1].startswith("500,")
    assert session.handover.committed(handoff, Committed(status="ok"))
    session.handover.done(handoff)
    assert session.epochs.applied == 2 and lost not in session.frontier.hosts


def test_only_a_leaving_worker_drains_under_no_members_name() -> None:
    """Leaving, a worker drains its own stream as no member (it is out of the ring);
    finding its own stream among the orphans, it drains as itself, so that Redis fences
    it: a worker expired or replaced while paused writes nothing when it wakes."""
    session = session_of(members=("w1", "w2"))
    got = [("1-0", Entry(url="http://a.example/").encode().encode())]
    ring = Ring.of(1, ("w1", "w2"))
    handover = session.handover
    assert handover.orphans_batch("q:w1", got, ring, None, 0.0, leaving=True).worker == ""
    assert handover.orphans_batch("q:w1", got, ring, None, 0.0).worker == "w1"
    assert handover.orphans_batch("q:w9", got, ring, set(), 0.0).worker == "w1"
    with pytest.raises(Fenced):
        handover.drained(Committed(status="fenced"))


def test_a_stale_handoff_waits_for_the_newer_epoch() -> None:
    """A handoff overtaken by another epoch is not applied; the newer one waits instead."""
    session = session_of(members=("w1",))
    session.epochs.members_read(2, ("w1", "w2"))
    handoff = session.handover.begin(session.epochs.take())  # type: ignore[arg-type]
    assert not session.handover.committed(handoff, Committed(status="stale", epoch=3))
    assert session.epochs.waiting and session.epochs.applied == 1


def test_an_epoch_without_this_worker_fences_it() -> None:
    """A ring this worker is not in means it lost its membership."""
    session = session_of()
    with pytest.raises(Fenced):
        session.handover.begin(Ring.of(2, ("w2",)))


def test_a_pace_record_carries_the_last_request_to_the_next_owner() -> None:
    """The new owner waits the delay after the old owner's last request, across clocks."""
    old = session_of(members=("w1", "w2"), delay=1.0)
    name = host_owned_by(old.epochs.latest, "w1")
    ready(old, f"http://{name}/")
    held = old.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    old.fetches.ended(held, None, 10.0)
    record = old.pacing.records([name], now=10.0)[name]
    new = session_of(worker="w2", members=("w1", "w2"), delay=1.0)
    new.epochs.members_read(3, ("w2",))
    new.handover.begin(new.epochs.take())  # type: ignore[arg-type]
    new.take_in([("2-0", Entry(url=f"http://{name}/2").encode().encode())])
    new.heartbeat.answered(beat(epoch=3, settled=3, now_ms=10_000), sent=15.0, received=15.0)
    # Its clock runs 5 s ahead of the server's (the heartbeat sent at 15 s came back at 10 s).
    new.pacing.loaded(new.pacing.take_due()[0], Paces({name: record}), Release(settled=3))
    assert new.gate.next_fetch(15.0) == pytest.approx(16.005, abs=0.01)


def test_a_pace_record_counts_only_the_pages_the_host_was_sent() -> None:
    """A host handed over before any of its pages went out carries no page count: the
    next owner's --max-pages-per-host starts where this worker's did, at 0."""
    from hashcrawl._core._pace import PaceRecord

    old = session_of(members=("w1", "w2"), delay=1.0)
    name = host_owned_by(old.epochs.latest, "w1")
    ready(old, f"http://{name}/")
    held = old.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    old.fetches.ended(held, None, 10.0)  # put back unsent
    record = PaceRecord.from_text(old.pacing.records([name], now=10.0)[name])
    assert record.readable and record.taken == 0
    assert old.pacing.records([f"never-{name}"], now=10.0) == {}  # nothing known: no record


def test_heartbeat_failures_give_up_after_a_lease() -> None:
    """A failed heartbeat is tolerated until a lease has passed since the last answered."""
    session = session_of()
    session.heartbeat.failed(LEASE - 0.1, QueueError("down"))
    with pytest.raises(QueueError, match="without a heartbeat"):
        session.heartbeat.failed(LEASE + 0.1, QueueError("down"))


def test_a_heartbeat_saying_not_alive_fences_the_worker() -> None:
    """Expired by the fleet: the membership is over."""
    session = session_of()
    with pytest.raises(Fenced):
        session.heartbeat.answered(Beat(alive=False, now_ms=0), sent=0.0, received=0.0)


def test_the_crawl_is_finished_only_when_idle_long_enough_and_nothing_is_held() -> None:
    """--idle seconds of a quiet fleet end the crawl, unless this worker still holds pages."""
    session = session_of(idle=2.0)
    assert not session.heartbeat.finished(beat(idle_since=0, now_ms=1999))
    assert session.heartbeat.finished(beat(idle_since=0, now_ms=2000))
    session.take_in([("1-0", Entry(url="http://a.test/").encode().encode())])
    assert not session.heartbeat.finished(beat(idle_since=0, now_ms=5000))


def test_max_pages_stops_this_worker_once() -> None:
    """Reaching --max-pages asks the worker to stop, and says so once."""
    session = session_of(max_pages=1)
    assert not session.check_limits(0.0, 0.0)
    session.tally.fetched = 1
    assert session.check_limits(0.0, 0.0) and session.flight.stopping
    assert not session.check_limits(0.0, 0.0)


def test_heartbeat_reports_this_memberships_counts_only() -> None:
    """Counts from an earlier membership of the same worker are not reported again."""
    tally = Tally(fetched=7)
    session = Session(
        worker="w1",
        settings=Settings(),
        stream_of=lambda w: f"q:{w}",
        inbox="inbox",
        refuses=lambda entry: None,
        tally=tally,
        jars=Jars(),
        now=0.0,
    )
    tally.fetched += 2
    assert session.heartbeat.request(0.0, resident_kib=0)["stats"]["fetched"] == 2


def reading_of(session: Session, block_ms: int) -> Reading:
    """The session's next read, as the driver starts it."""
    reading = session.start(Read(block_ms))
    assert isinstance(reading, Reading)
    return reading


def test_a_read_that_failed_is_followed_by_rereading_pending_entries() -> None:
    """After a failed read (which raises on), the next one asks for this reader's
    pending entries, and once none is left, for new ones."""
    session = session_of()
    reading = reading_of(session, 500)
    assert reading.next_step(0.0) == ReadStream(200, None, 500)
    reading.answered([("5-0", b"bad")], 0.0)
    assert reading.next_step(0.0) == Done() and reading.result == [("5-0", b"bad")]
    with pytest.raises(QueueError):
        reading_of(session, 500).failed(QueueError("timed out"), 0.0)
    reading = reading_of(session, 500)
    assert reading.next_step(0.0) == ReadStream(200, "5-0", 500)
    reading.answered([], 0.0)
    assert reading_of(session, 500).next_step(0.0) == ReadStream(200, None, 500)


def test_a_read_asks_for_no_more_than_the_buffer_has_room_for() -> None:
    """Memory stays bounded: a read asks for what --max-buffer leaves room for; with the
    buffer full it reads on only to park."""
    session = session_of(max_buffer=50)
    assert (reading_of(session, 1).read.count, reading_of(session, 1).read.parking) == (50, False)
    session.take_in(
        [(f"{n}-0", Entry(url=f"http://a.test/{n}").encode().encode()) for n in range(10)]
    )
    assert reading_of(session, 1).read.count == 40
    session.take_in(
        [(f"{n}-1", Entry(url=f"http://a.test/x{n}").encode().encode()) for n in range(40)]
    )
    assert reading_of(session, 1).read.parking


def test_a_suspect_blamed_before_is_fetched_alone_until_it_ends() -> None:
    """A suspect with an attempt used (its last worker died fetching it) isolates: no
    other suspect starts until it ends; a fresh suspect ending does not end that."""
    session = session_of()
    blamed = Held("1-0", Entry(url="http://a.test/1", suspect=True, attempts=1), "a.test")
    fresh = Held("2-0", Entry(url="http://b.test/2", suspect=True), "b.test")
    assert session.suspects.started(fresh) is not None and not session.suspects.isolating
    session.flight.in_flight += 2
    assert session.suspects.started(blamed) is not None and session.suspects.isolating
    session.fetches.ended(fresh, None, 1.0)
    assert session.suspects.isolating
    session.fetches.ended(blamed, None, 2.0)
    assert not session.suspects.isolating


def test_max_pages_per_host_counts_every_request_sent() -> None:
    """A host is full after exactly --max-pages-per-host requests left for it."""
    session = session_of(max_pages_per_host=2)
    held = Held("1-0", Entry(url="http://a.test/"), "a.test")
    assert isinstance(Page(session.fetches, held, 0.0).next_step(0.0), Send)  # counted
    assert isinstance(Page(session.fetches, held, 0.0).next_step(0.0), Send)
    assert isinstance(Page(session.fetches, held, 0.0).next_step(0.0), Done)  # full: unsent
    other = Held("2-0", Entry(url="http://b.test/"), "b.test")
    assert isinstance(Page(session.fetches, other, 0.0).next_step(0.0), Send)


def test_a_request_put_back_unsent_leaves_its_hosts_pacing_as_it_was() -> None:
    """A request the check before sending held back was never made: its host's next
    start is still the delay after the last one that was, and a host handed over
    meanwhile sends it to its new owner."""
    session = session_of()
    ready(session, "http://a.test/1")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert session.fetches.put_back(held, 0.5) is None
    assert session.gate.next_fetch(0.5) == 1.0
    assert session.gate.next_fetch(1.0) == held
    session.frontier.drop("a.test")  # handed over while the request waited
    outcome = session.fetches.put_back(held, 1.5)
    assert outcome is not None and outcome.kind is Kind.FORWARD


def test_changed_cookies_are_made_durable_by_the_next_commit_and_only_once() -> None:
    """A host's jar that a response changed goes into the next commit's pace records
    (its new owner after a kill reads them); once stored, a commit writes it no more,
    and a Set-Cookie that changes nothing writes nothing."""
    from hashcrawl._core._pace import PaceRecord

    session = session_of()
    ready(session, "http://a.test/", "http://b.test/")
    held = session.gate.next_fetch(0.0)
    assert isinstance(held, Held)
    session.jars.take(held.host, "GET", held.entry.url, ["session=abc; Path=/"])
    session.fetches.ended(held, Outcome.done(held, [], []), 0.1)
    commit = session.ledger.next_commit()
    batch = session.commits.batch(commit, 0.1)
    assert batch.pace[::2] == [held.host]
    assert "session" in PaceRecord.from_text(batch.pace[1]).cookies
    assert session.commits.committed(commit, batch, Committed(status="ok"), 0.0) == "ok"
    session.jars.take(held.host, "GET", held.entry.url, ["session=abc; Path=/"])
    other = session.gate.next_fetch(1.0)
    assert isinstance(other, Held)
    session.fetches.ended(other, Outcome.done(other, [], []), 1.1)
    assert session.commits.batch(session.ledger.next_commit(), 1.1).pace == []


def test_cookies_of_a_host_whose_last_owners_record_is_unread_wait() -> None:
    """Writing before the previous owner's record is read would lose its cookies."""
    session = session_of()
    session.take_in([("1-0", Entry(url="http://a.test/").encode().encode())])
    session.jars.take("a.test", "GET", "http://a.test/", ["s=1"])
    assert session.commits.durable_cookies(0.0) == []
    session.heartbeat.answered(beat(settled=1), sent=0.0, received=0.0)
    session.pacing.loaded(*session.pacing.take_due()[:1], Paces(), session.epochs.release)
    assert session.commits.durable_cookies(0.0)[::2] == ["a.test"]
