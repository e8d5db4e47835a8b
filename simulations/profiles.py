"""How much to run: the quick and long profiles, and what a run reports.

A profile is a number of examples (sequences of steps, each ending with the fault-free
run to the end of the crawl) and the most steps one example may take. Hypothesis picks
each example's length up to that bound.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from hashcrawl._core._faults import NO_FAULTS, Faults
from simulations import model
from simulations.model import CrawlModel


@attrs.frozen
class Profile:
    """``examples`` examples of at most ``steps`` steps each."""

    name: str
    examples: int
    steps: int


QUICK = Profile("quick", examples=220, steps=50)  # about 3.5 minutes here; the suite runs 160
LONG = Profile("long", examples=5000, steps=100)  # an hour or more; for a release, or a night
PROFILES = {p.name: p for p in (QUICK, LONG)}


@attrs.define
class Report:
    """What a run covered: every figure counts all the examples Hypothesis ran."""

    examples: int = 0
    steps: int = 0
    requests: int = 0
    pages: int = 0
    faults: collections.Counter[str] = attrs.Factory(collections.Counter)
    aimed: collections.Counter[str] = attrs.Factory(collections.Counter)  # aimed joins
    revisits: collections.Counter[str] = attrs.Factory(collections.Counter)  # revisiting ones
    # With --max-pages-per-host: examples, and hosts that received their cap (or more).
    capped: collections.Counter[str] = attrs.Factory(collections.Counter)
    simulated: float = 0.0
    seconds: float = 0.0
    progress: int = 0  # print a line every this many examples (0: never)
    began: float = attrs.Factory(time.monotonic)

    def started(self) -> None:
        """One more example has begun."""
        self.examples += 1
        if self.progress and self.examples % self.progress == 0:
            elapsed = time.monotonic() - self.began
            print(f"  {self.examples} examples, {self.steps} steps, {elapsed:.0f} s", flush=True)

    def lines(self) -> list[str]:
        faults = ", ".join(f"{n} {k}" for k, n in sorted(self.faults.items())) or "none"
        return [
            f"{self.examples} examples, {self.steps} steps, {self.simulated:.0f} simulated s, "
            f"{self.seconds:.0f} s of real time",
            f"{self.requests} requests, {self.pages} pages written",
            f"faults injected: {faults}",
            f"aimed joins: {sum(self.aimed.values())}",
            "revisiting examples: "
            + (", ".join(f"{n} {k}" for k, n in sorted(self.revisits.items())) or "none"),
            f"--max-pages-per-host: {self.capped['examples']} examples, "
            f"{self.capped['hosts at the cap']} hosts at their cap",
        ]


LAST = Report()  # the figures of the latest run, also when it raised


def hypothesis_settings(profile: Profile, *, shrink: bool = True, **more: Any) -> settings:
    phases = list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(
        max_examples=profile.examples,
        stateful_step_count=profile.steps,
        deadline=None,
        phases=[p for p in phases if p is not Phase.explain],
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        **more,
    )


def run(
    profile: Profile,
    *,
    seed_value: int | None = None,
    shrink: bool = True,
    progress: int = 0,
    faults: Faults = NO_FAULTS,
    model_class: type[CrawlModel] = CrawlModel,
    **more: Any,
) -> Report:
    """Run the state machine under ``profile``; raises the first violation it finds.

    With ``progress``, a line is printed every that many examples; ``faults`` are the
    deliberate bugs every worker of every example runs with; ``model_class`` the state
    machine (a test's subclass).

    Raises:
        AssertionError: an invariant broke (the shrunk example in its notes).
        hypothesis.errors.Flaky: Hypothesis saw an example go two ways; the failures
            that came before are in its notes (``model.FAILURES``).
        simulations.loop.EnvironmentFailure: the machine, not hashcrawl, failed.
    """
    global LAST
    report = LAST = Report(progress=progress)
    machine = type("CrawlModel", (model_class,), {"report": report, "bugs": faults})
    if seed_value is not None:
        machine = seed(seed_value)(machine)
    started = time.monotonic()
    model.FAILURES.clear()
    try:
        run_state_machine_as_test(
            machine, settings=hypothesis_settings(profile, shrink=shrink, **more)
        )
    except Flaky as exc:
        for failure in model.FAILURES:
            exc.add_note(f"\nA failure before Hypothesis called the run flaky:\n{failure}")
        raise
    finally:
        report.seconds = time.monotonic() - started
    return report
