"""``python -m simulations.teeth``: how often the quick profile catches each deliberate bug.

    python -m simulations.teeth --fault wide_fresh_window --seeds 10

Runs the quick profile (no shrinking, no example database) once per seed with the bug
on, and prints for each seed whether an invariant broke, after how many examples, and
in how many seconds of real time; then the share of seeds that caught it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hashcrawl._core._faults import Faults
from simulations import profiles


def run_with(fault: str, profile: profiles.Profile, **run: Any) -> profiles.Report:
    """``profile`` run with ``fault`` on, unshrunk and without the example database.

    Raises:
        AssertionError: an invariant broke (the fault was caught).
    """
    return profiles.run(
        profile, faults=Faults.of([fault]), shrink=False, database=None, print_blob=False, **run
    )


def catch(fault: str, seed: int, examples: int) -> tuple[str, int, float]:
    """One quick run with ``fault`` on: (the violation, or "" if none; examples started;
    seconds)."""
    profile = profiles.Profile("teeth", examples=examples, steps=profiles.QUICK.steps)
    report = profiles.Report()
    started = time.monotonic()
    try:
        report = run_with(fault, profile, seed_value=seed)
    except AssertionError as exc:
        return str(exc).splitlines()[0], profiles.LAST.examples, time.monotonic() - started
    return "", report.examples, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.teeth", description=__doc__)
    parser.add_argument("--fault", action="append", required=True, help="a deliberate bug")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    parser.add_argument("--examples", type=int, default=profiles.QUICK.examples)
    args = parser.parse_args(argv)
    for fault in args.fault:
        caught = 0
        for seed in range(1, args.seeds + 1):
            hit, examples, seconds = catch(fault, seed, args.examples)
            caught += bool(hit)
            verdict = f"caught ({hit[:100]})" if hit else "missed"
            print(f"{fault} seed {seed}: {verdict} after {examples} examples, {seconds:.0f} s")
            sys.stdout.flush()
        print(f"{fault}: caught in {caught} of {args.seeds} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
