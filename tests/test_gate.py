"""Tests for hashcrawl._core._gate: a request starts only while the worker is fresh, a
slot is free, and the host is settled, paced and this worker's."""

from __future__ import annotations

import math

from hashcrawl._core._frontier import Held
from hashcrawl._core._gate import Pool
from tests.test_core import LEASE, ready, session_of


def test_a_stopping_worker_starts_nothing_until_something_changes() -> None:
    """Stopping: no request starts, and the dispatcher sleeps until woken."""
    session = session_of()
    ready(session, "http://a.test/")
    session.flight.stopping = True
    assert session.gate.next_fetch(0.0) == math.inf


def test_a_fresh_worker_with_a_free_slot_starts_the_due_request() -> None:
    """The request taken is counted in flight and under way."""
    session = session_of()
    ready(session, "http://a.test/")
    got = session.gate.next_fetch(0.0)
    assert isinstance(got, Held)
    assert (session.flight.in_flight, session.flight.fetching) == (1, {got.eid: "a.test"})


def test_freshness_ends_a_quarter_lease_after_the_last_answered_heartbeat() -> None:
    """Past --fresh-for (a quarter of the lease by default) nothing starts or leaves."""
    session = session_of()
    ready(session, "http://a.test/")
    gate = session.gate
    held = gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert gate.fresh(LEASE / 4 - 0.01) and gate.may_send(held, LEASE / 4 - 0.01)
    assert not gate.fresh(LEASE / 4) and not gate.may_send(held, LEASE / 4)


def test_a_slot_is_held_from_dispatch_until_the_page_is_committed() -> None:
    """One shard: in flight plus fetched-and-uncommitted stays within --concurrency."""
    session = session_of(concurrency=2, delay=0.0)
    ready(session, "http://a.test/", "http://b.test/", "http://c.test/")
    gate = session.gate
    assert isinstance(gate.next_fetch(0.0), Held)
    session.ledger.uncommitted = 1  # the first page fetched, not yet committed
    session.flight.in_flight = 1
    assert gate.saturated() and not isinstance(gate.next_fetch(0.0), Held)


def test_a_sharded_workers_shards_share_twice_the_concurrency_of_unacknowledged_pages() -> None:
    """Each shard keeps its share in flight; its pages held past their fetch (waiting on
    their links' delivery) count against the worker's pool, not the share."""
    shards = [session_of(concurrency=2) for _ in range(3)]
    pool = Pool(8, lambda: shards)
    for session in shards:
        session.gate.pool = pool
    one, other = shards[0], shards[1]
    one.flight.in_flight = 2
    assert one.gate.saturated() and not other.gate.saturated()  # the share, in flight
    one.flight.in_flight, one.ledger.uncommitted = 0, 5  # more than its share, held
    assert not one.gate.saturated()
    other.ledger.uncommitted = 3  # 8 held over the worker: every shard waits
    assert all(s.gate.saturated() for s in shards)
    assert not pool.released()  # still full
    other.ledger.uncommitted = 2  # a commit freed one
    assert pool.released() and not pool.released()  # once, to wake the others' dispatchers
    assert not any(s.gate.saturated() for s in shards)


def test_a_robots_txt_redirects_hop_waits_its_hosts_turn_when_the_host_is_this_workers() -> None:
    """The hop to this worker's host is paced by the frontier and counted as a start;
    to another owner's host, or to no URL, it waits --delay from now."""
    session = session_of(delay=2.0)
    ready(session, "http://a.test/page")
    gate = session.gate
    held = gate.next_fetch(0.0)  # the page, whose robots.txt is fetched first
    assert isinstance(held, Held)
    assert gate.sub_request("http://a.test/robots.txt", 0.5, hop=True) == 2.0  # last start + delay
    assert gate.sub_request("http://a.test/robots2.txt", 2.1, hop=True) == 4.0  # the hop counted
    assert gate.sub_request("http://elsewhere.test/robots.txt", 3.0, hop=True) == 5.0
    assert gate.sub_request("not a url", 3.0, hop=True) == 5.0


def test_a_sub_request_is_refused_with_a_reason_not_raised() -> None:
    """A URL that is none, a host not this worker's: a reason, not an exception."""
    session = session_of()
    ready(session, "http://a.test/page")
    assert "not a URL" in str(session.gate.sub_request("::nonsense::", 0.0))
    assert "no longer this worker's host" in str(session.gate.sub_request("http://b.test/", 0.0))
    assert session.gate.sub_request("http://a.test/x.js", 0.0) == 0.0


def test_a_sub_request_to_a_shared_host_not_this_workers_may_start_now() -> None:
    """Its turn in Redis paces it; a shared host this worker owns keeps its frontier's
    turn too, and a host not shared is still refused."""
    session = session_of(delay=2.0)
    ready(session, "http://a.test/page")
    gate = session.gate
    assert gate.sub_request("http://cdn.test/x.js", 5.0, shared=True) == 5.0
    assert "no longer this worker's host" in str(gate.sub_request("http://cdn.test/x.js", 5.0))
    assert gate.sub_request("http://a.test/x.js", 5.0, shared=True) == 5.0
    assert gate.sub_request("http://a.test/y.js", 5.5, shared=True) == 7.0  # a start counted
