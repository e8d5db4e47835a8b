"""The simulation's outcome depends on the simulated clock alone: a hung step is found
by the loop's state, not by a timeout; what real time still bounds ends the run as the
environment's failure; and a run Hypothesis calls flaky prints the failure before it
(docs/simulation.md, "Real time")."""

from __future__ import annotations

import socket

import pytest
import trio
from hypothesis.errors import Flaky
from hypothesis.stateful import rule

from hashcrawl._exceptions import QueueError
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from simulations import loop, model, profiles
from simulations.crew import FaultyStore, Link
from simulations.loop import EnvironmentFailure, Hung, Loop, environment_failure


def test_a_step_that_waits_for_nothing_is_hung_at_once() -> None:
    """A step blocked on an event nobody sets is Hung as soon as every task blocks, long
    before the real-time bound: how loaded the machine is cannot change that."""
    simulated = Loop()
    try:
        with pytest.raises(Hung, match="never comes"):
            simulated.run(trio.Event().wait)
        simulated.run(simulated.advance, 5.0)  # a step that moves the clock is not hung
        assert simulated.now() == 5.0
    finally:
        simulated.close()
    assert loop.REAL_TIMEOUT > loop.PATIENCE


def test_redis_errors_of_real_time_are_the_environments_and_others_are_not() -> None:
    """No answer in time and a refused connection are the machine's; a connection the
    server closed (after a restart the model made) and a fenced call are the model's."""
    refused = QueueError("Redis at redis://x: Error 111 connecting to x:1. Connection refused.")
    late = QueueError("Redis at redis://x: no answer in time (Timeout reading from socket)")
    closed = QueueError("Redis at redis://x: Connection closed by server.")
    assert isinstance(environment_failure(refused), EnvironmentFailure)
    assert isinstance(environment_failure(late), EnvironmentFailure)
    assert environment_failure(closed) is None
    assert environment_failure(AssertionError("an invariant")) is None
    assert issubclass(EnvironmentFailure, BaseException)
    assert not issubclass(EnvironmentFailure, Exception)  # Hypothesis lets it through


def test_a_worker_store_whose_redis_is_gone_fails_the_environment_not_the_worker() -> None:
    """A store call that finds no server (a real refused connection) raises
    EnvironmentFailure through the worker's link, not the QueueError a worker handles."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # closed again before the call: refused
    store = Store(RedisURL.parse(f"redis://127.0.0.1:{port}"), "gone", timeout=2.0)
    try:
        with pytest.raises(EnvironmentFailure, match="Connection refused"):
            FaultyStore(store, Link()).members()
    finally:
        store.close()


class FailsOnce(model.CrawlModel):
    """A model whose one extra rule fails the first time it runs in the process only:
    Hypothesis then sees the failure vanish on replay."""

    fired = False

    @rule()
    def fail_the_first_time(self) -> None:
        if not FailsOnce.fired:
            FailsOnce.fired = True
            raise AssertionError("the first failure, seen once")


def test_a_run_hypothesis_calls_flaky_carries_the_failure_before_it() -> None:
    """Hypothesis prints no failure when it calls a run flaky; profiles.run adds the
    failures it saw before, with their last steps, to the error's notes."""
    quick = profiles.Profile("flaky", examples=20, steps=5)
    with pytest.raises(Flaky) as caught:
        profiles.run(quick, seed_value=1, shrink=False, database=None, model_class=FailsOnce)
    notes = "\n".join(caught.value.__notes__)
    assert "the first failure, seen once" in notes
    assert "-- last steps --" in notes


class MachineFails(model.CrawlModel):
    """A model whose one extra rule meets the machine's failure."""

    @rule()
    def redis_stops_answering(self) -> None:
        raise EnvironmentFailure("the simulation's Redis: no answer in time")


def test_an_environment_failure_ends_the_run_as_itself() -> None:
    """Hypothesis neither counts the machine's failure as a failing example nor replays
    it: the run ends at once with it, and it is remembered like any failure."""
    quick = profiles.Profile("machine", examples=20, steps=5)
    with pytest.raises(EnvironmentFailure, match="no answer in time"):
        profiles.run(quick, seed_value=1, shrink=False, database=None, model_class=MachineFails)
    assert "EnvironmentFailure: the simulation's Redis" in model.FAILURES[-1]
