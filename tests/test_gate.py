"""Tests for hashcrawl._core._gate: a request starts only while the worker is fresh, a
slot is free, and the host is settled, paced and this worker's."""

from __future__ import annotations

import math

from hashcrawl._core._frontier import Held
from hashcrawl._core._gate import Gate
from tests.test_core import LEASE, ready, session_of


def test_a_stopping_worker_starts_nothing_until_something_changes() -> None:
    """Stopping: no request starts, and the dispatcher sleeps until woken."""
    session = session_of()
    ready(session, "http://a.test/")
    session.stopping = True
    assert Gate(session).next_fetch(0.0) == math.inf


def test_a_fresh_worker_with_a_free_slot_starts_the_due_request() -> None:
    """The request taken is counted in flight and under way."""
    session = session_of()
    ready(session, "http://a.test/")
    got = Gate(session).next_fetch(0.0)
    assert isinstance(got, Held)
    assert (session.in_flight, session.fetching) == (1, {got.eid: "a.test"})


def test_freshness_ends_a_quarter_lease_after_the_last_answered_heartbeat() -> None:
    """Past --fresh-for (a quarter of the lease by default) nothing starts or leaves."""
    session = session_of()
    ready(session, "http://a.test/")
    gate = Gate(session)
    held = gate.next_fetch(0.0)
    assert isinstance(held, Held)
    assert gate.fresh(LEASE / 4 - 0.01) and gate.may_send(held, LEASE / 4 - 0.01)
    assert not gate.fresh(LEASE / 4) and not gate.may_send(held, LEASE / 4)
