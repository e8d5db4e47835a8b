"""Tests for hashcrawl._core._outcome: where outcomes put their entries in a commit batch."""

from __future__ import annotations

import json

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Outcome, Router, SeenCache
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import Scope
from hashcrawl._core._urls import fingerprint
from hashcrawl._store._store import Batch

RING = Ring.of(4, ("w1", "w2"))


def router(**given: object) -> Router:
    return Router(RING, lambda w: f"q:{w}", "inbox", **given)  # type: ignore[arg-type]


def held(attempts: int = 0) -> Held:
    return Held("7-0", Entry(url="http://a.test/", attempts=attempts), "a.test")


def batch() -> Batch:
    return Batch(worker="w1", epoch=4, src="q:w1")


def test_a_page_done_without_links_counts_none_found() -> None:
    """A page done with nothing found (a 304, a page without links) adds no link to the
    tally's count of links found: ``found`` is 0 unless given (2ef231cf)."""
    assert Outcome.done(held(), [], []).found == 0
    assert Outcome.done(held(), [], [], found=3).found == 3


def test_a_forwarded_entry_moves_to_its_hosts_owner() -> None:
    """A forward moves the entry to the owner's stream, as read."""
    into = batch()
    router().add(into, Outcome.forward(held()))
    assert into.mv == [["7-0", f"q:{RING.owner_of('a.test')}", held().entry.encode()]]


def test_a_park_of_a_host_the_batchs_ring_gives_another_goes_to_that_owner() -> None:
    """A park is an overflow set only while the ring the batch is routed by gives this
    worker the host; otherwise the entry moves to the host's owner, who read ``parked``
    when it took the host and would never look again (seed 3's crawl that stopped short)."""
    owner = RING.owner_of("a.test")
    mine = Batch(worker=owner, epoch=4, src=f"q:{owner}")
    router().add(mine, Outcome.park(held()))
    assert [row[:2] for row in mine.park] == [["7-0", "a.test"]] and mine.mv == []
    other = "w1" if owner == "w2" else "w2"
    theirs = Batch(worker=other, epoch=4, src=f"q:{other}")
    router().add(theirs, Outcome.park(held()))
    assert theirs.park == [] and theirs.mv == [["7-0", f"q:{owner}", held().entry.encode()]]


def test_nobody_alive_routes_to_the_inbox() -> None:
    """With an empty ring, entries wait in the inbox."""
    assert Router(Ring.of(5, ()), lambda w: f"q:{w}", "inbox").target_of("a.test") == "inbox"


def test_a_retry_goes_back_with_one_more_attempt_and_is_acknowledged_once() -> None:
    """A retry is acknowledged together with its next try (added past the filter)."""
    into = batch()
    router(max_attempts=3).add(into, Outcome.retry(held(attempts=0), "reset"))
    (row,) = into.once
    assert row[0] == "7-0" and Entry.decode(row[2]).attempts == 1
    assert not into.ack and not into.dead


def test_the_last_failed_attempt_is_dead_lettered_with_its_error() -> None:
    """Out of attempts, the entry goes to the dead letters and is acknowledged."""
    into = batch()
    router(max_attempts=3).add(into, Outcome.retry(held(attempts=2), "HTTP 503"))
    assert into.ack == ["7-0"]
    assert json.loads(into.dead[1])["error"] == "HTTP 503"


def test_follows_outside_the_scope_are_dropped_and_seen_ones_skipped() -> None:
    """Only in-scope follows not in the seen cache go to the seen filter."""
    seen = SeenCache()
    known = Entry(url="http://a.test/known")
    scope = Scope(hosts=frozenset({"a.test"}))
    first = batch()
    router(scope=scope, seen=seen).add(first, Outcome.done(held(), [], [known]))
    seen.remember(first.add)  # as a commit of ``first`` does
    assert fingerprint(known.key) in seen
    new, away = Entry(url="http://a.test/new"), Entry(url="http://b.test/")
    into = batch()
    router(scope=scope, seen=seen).add(into, Outcome.done(held(), [], [known, new, away]))
    assert [row[1] for row in into.add] == [new.encode()]
    assert into.ack == ["7-0"]


def test_a_follow_that_skips_the_filter_goes_with_the_acknowledgement() -> None:
    """dont_filter follows are added once, atomically with the page's acknowledgement."""
    follow = Entry(url="http://a.test/again", dont_filter=True)
    into = batch()
    router(scope=Scope(span=True)).add(into, Outcome.done(held(), [], [follow]))
    assert into.once[0][0] == "7-0" and into.once[0][2] == follow.encode()


def test_a_dead_workers_entries_become_suspects_and_its_last_fetch_uses_an_attempt() -> None:
    """Orphans move to their owners as suspects; one that was in flight pays an attempt."""
    payloads = [("1-0", Entry(url="http://a.test/1").encode().encode())]
    payloads += [("2-0", Entry(url="http://a.test/2", attempts=2).encode().encode())]
    payloads += [("3-0", b"{")]
    into = batch()
    router(max_attempts=3).add_orphans(into, payloads, dying={"2-0"})
    (moved,) = into.mv
    assert moved[0] == "1-0" and Entry.decode(moved[2]).suspect
    assert into.ack == ["2-0"] and into.dead
    assert into.bad[0][0] == "3-0"


def test_the_overflow_set_orders_by_priority_then_age_within_bounds() -> None:
    """Higher priority first; equal priorities oldest first; priorities past 500 rank as
    500, so no score outgrows a double's exact integers."""
    from hashcrawl._core._outcome import park_score

    def at(eid: str, priority: int = 0) -> float:
        return park_score(Held(eid, Entry(url="http://a.test/", priority=priority), "a.test"))

    assert at("9-0", priority=1) < at("1-0") < at("2-0") < at("1-0", priority=-1)
    assert at("5-0", priority=10_000) == at("5-0", priority=500) < at("4-0", priority=499)
    assert at("5-0", priority=-10_000) == at("5-0", priority=-500)


def test_the_seen_cache_forgets_its_oldest_beyond_its_size_and_never_notes_unfiltered() -> None:
    """A bounded cache: the oldest fingerprint goes first; dont_filter and out-of-scope
    follows are never noted (the filter never saw them)."""
    seen = SeenCache(size=2)
    scope = Scope(hosts=frozenset({"a.test"}))

    def commit(*follows: Entry) -> None:
        into = batch()
        router(scope=scope, seen=seen).add(into, Outcome.done(held(), [], list(follows)))
        seen.remember(into.add)

    entries = [Entry(url=f"http://a.test/{n}") for n in range(3)]
    for e in entries:
        commit(e)
    assert len(seen) == 2
    assert fingerprint(entries[0].key) not in seen and fingerprint(entries[2].key) in seen
    skipped = [Entry(url="http://a.test/x", dont_filter=True), Entry(url="http://b.test/")]
    commit(*skipped)
    assert all(fingerprint(e.key) not in seen for e in skipped)
    unfiltered = [["q:w1", "{}", 5, 7, 0]]  # a row added without the filter (a deliberate bug)
    seen.remember(unfiltered)
    assert (5, 7) not in seen


def test_an_unreadable_entry_is_acknowledged_as_bad_with_a_bounded_sample() -> None:
    """A bad entry's sample names its id and is cut at 300 characters."""
    into = batch()
    router().add(into, Outcome.bad("5-0", "x" * 1000))
    assert into.bad[0][0] == "5-0" and len(into.bad[0][1]) == 300
    assert into.bad[0][1].startswith("5-0: x")
    assert not into.ack and not into.mv


def test_an_orphan_is_dead_lettered_only_when_its_death_used_up_its_last_attempt() -> None:
    """With max_attempts 3: a suspect at 1 attempt that was in flight moves on at 2; at
    2 it is dead; one not in flight keeps its count."""
    payloads = [
        ("1-0", Entry(url="http://a.test/1", attempts=1).encode().encode()),
        ("2-0", Entry(url="http://a.test/2", attempts=2).encode().encode()),
    ]
    into = batch()
    router(max_attempts=3).add_orphans(into, payloads, dying={"1-0"})
    assert [Entry.decode(m[2]).attempts for m in into.mv] == [2, 2]
    assert not into.ack and not into.dead
    dead = batch()
    router(max_attempts=3).add_orphans(dead, payloads[1:], dying={"2-0"})
    assert dead.ack == ["2-0"] and json.loads(dead.dead[1])["attempts"] == 3


def test_a_dead_letters_error_is_cut_at_500_characters() -> None:
    """A hostile page's error text cannot grow a dead letter without bound."""
    into = batch()
    router(max_attempts=1).add(into, Outcome.retry(held(), "e" * 2000))
    assert json.loads(into.dead[1])["error"] == "e" * 500


def test_the_wait_after_a_failure_doubles_to_a_minute_even_for_a_hand_written_attempts_count() -> (
    None
):
    """1, 2, 4 ... 60 s; an entry naming the most attempts an entry may (10,000) waits 60 s
    instead of overflowing a float (the edges of the simulation found it)."""
    from hashcrawl._core._entry import RANGES
    from hashcrawl._core._outcome import failure_wait

    assert [failure_wait(a) for a in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert failure_wait(RANGES["a"][1]) == 60.0


def _at_the_limit(**fields: object) -> Entry:
    """An entry whose encoding is exactly MAX_ENTRY_BYTES, as one written by hand can be."""
    from hashcrawl._core._entry import MAX_ENTRY_BYTES

    bare = len(Entry(url="http://a.test/", meta="", **fields).encode().encode())  # type: ignore[arg-type]
    entry = Entry(url="http://a.test/", meta="m" * (MAX_ENTRY_BYTES - bare), **fields)  # type: ignore[arg-type]
    assert len(entry.encode().encode()) == MAX_ENTRY_BYTES
    return Entry.decode(entry.encode())


def test_an_entry_at_the_limit_that_a_retry_would_push_past_it_is_dead_lettered() -> None:
    """One more attempt makes the entry 6 bytes longer: written back, no reader would
    take it (a bad entry, lost). It is dead-lettered with the reason instead (found by the
    simulation's hand-written entries, simulations/planted.py)."""
    into = batch()
    entry = _at_the_limit()
    router(max_attempts=3).add(into, Outcome.retry(Held("7-0", entry, "a.test"), "HTTP 503"))
    assert not into.once and into.ack == ["7-0"]
    record = json.loads(into.dead[1])
    assert record["error"].startswith("HTTP 503; marked") and "65536" in record["error"]


def test_an_orphan_at_the_limit_that_its_suspect_mark_would_push_past_it_is_dead_lettered() -> None:
    """Marked a suspect, the entry grows by ``,"s":1``: dead-lettered, not moved."""
    into = batch()
    payload = _at_the_limit().encode().encode()
    router(max_attempts=3).add_orphans(into, [("1-0", payload)], dying=set())
    assert not into.mv and into.ack == ["1-0"]
    assert "its worker died; marked" in json.loads(into.dead[1])["error"]
    # Without the mark (a worker that left in order) it moves as it is.
    into = batch()
    router(max_attempts=3).add_orphans(into, [("1-0", payload)], dying=None)
    assert into.mv == [["1-0", f"q:{RING.owner_of('a.test')}", payload.decode()]]
