"""``python -m simulations``: run the crash simulation, or replay a failure it printed.

    python -m simulations                      the quick profile, about two minutes
    python -m simulations --profile long       hours: thousands of longer examples
    python -m simulations --examples 2000 --steps 80 --seed 7
    python -m simulations --fault drop_pace    show that it catches a deliberate bug
    python -m simulations --replay failure.py  replay a printed failing example
    python -m simulations --known              replay every bug it has found, open or fixed

Exit status: 0 when every invariant held, 1 when one broke (the shrunk example is
printed above the error) or Hypothesis called the run flaky (the failures before it are
printed), 2 for bad arguments, 3 when the machine failed the run rather than hashcrawl
(see ``simulations.loop.EnvironmentFailure``: no invariant was judged broken).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

import attrs
from hypothesis.errors import Flaky

from hashcrawl._core._faults import Faults
from simulations import known, profiles
from simulations.loop import EnvironmentFailure


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM ends the run like Ctrl-C: the Redis servers it started stop with it.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args = _parser().parse_args(argv)
    if args.replay is not None:
        return _replay(Path(args.replay))
    if args.known:
        return _known()
    profile = profiles.PROFILES[args.profile]
    profile = attrs.evolve(
        profile, examples=args.examples or profile.examples, steps=args.steps or profile.steps
    )
    faults = Faults.of(args.fault)
    print(f"profile {profile.name}: up to {profile.examples} examples of {profile.steps} steps")
    try:
        # One failure, shrunk: shrinking a second distinct one too would double the wait.
        report = profiles.run(
            profile,
            seed_value=args.seed,
            shrink=not args.no_shrink,
            progress=args.progress,
            report_multiple_bugs=False,
            faults=faults,
            **_database(args.no_database),
        )
    except EnvironmentFailure as exc:
        print(f"\nTHE ENVIRONMENT FAILED THE RUN (no invariant broke):\n{exc}\n", file=sys.stderr)
        return 3
    except Flaky as exc:
        # A FlakyFailure groups the failures it saw; a FlakyStrategyDefinition has none,
        # and the failures before it are in its notes (profiles.run).
        inner = exc.exceptions if isinstance(exc, BaseExceptionGroup) else ()
        shown = [f"{type(e).__name__}: {e}" for e in inner] + _notes(exc)
        print(f"\nHYPOTHESIS CALLED THE RUN FLAKY:\n{exc}\n", file=sys.stderr)
        print("\n\n".join(shown), file=sys.stderr)
        return 1
    except (AssertionError, ExceptionGroup) as exc:
        for failure in _failures(exc):
            # Hypothesis hands each shrunk example over as its error's notes: the script.
            print("\n".join(n for n in _notes(failure) if not n.startswith("Failing test")))
            print(f"\nAN INVARIANT BROKE:\n{failure}\n", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    print("every invariant held")
    return 0


def _database(off: bool) -> dict[str, Any]:
    """Hypothesis's ``database`` setting: None with ``--no-database``, else its own."""
    return {"database": None} if off else {}


def _notes(exc: BaseException) -> list[str]:
    return list(exc.__notes__) if hasattr(exc, "__notes__") else []


def _failures(exc: BaseException) -> list[BaseException]:
    """Each failure Hypothesis found: one, or several in an ExceptionGroup.

    Raises:
        BaseException: ``exc`` itself, if a failure in it is no broken invariant.
    """
    if not isinstance(exc, BaseExceptionGroup):
        return [exc]
    leaves = [leaf for group in exc.exceptions for leaf in _failures(group)]
    if not all(isinstance(leaf, AssertionError) for leaf in leaves):
        raise exc
    return leaves


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulations", description=__doc__)
    parser.add_argument("--profile", choices=sorted(profiles.PROFILES), default="quick")
    parser.add_argument("--examples", type=int, help="how many examples (sequences of steps)")
    parser.add_argument("--steps", type=int, help="most steps in one example")
    parser.add_argument("--seed", type=int, help="Hypothesis seed, to repeat a run")
    parser.add_argument("--fault", action="append", default=[], help="turn on a deliberate bug")
    parser.add_argument("--no-shrink", action="store_true", help="report the first failure")
    parser.add_argument(
        "--no-database",
        action="store_true",
        help="neither replay nor keep failing examples in .hypothesis/ (each seed alone)",
    )
    parser.add_argument(
        "--progress", type=int, default=100, metavar="N", help="a line every N examples (0: none)"
    )
    parser.add_argument("--replay", metavar="FILE", help="run a printed failing example")
    parser.add_argument("--known", action="store_true", help="replay the bugs it found")
    return parser


def _replay(path: Path) -> int:
    from simulations.model import CrawlModel
    from simulations.web import Site

    script = path.read_text()
    try:
        exec(compile(script, str(path), "exec"), {"CrawlModel": CrawlModel, "Site": Site})
    except AssertionError as exc:
        print(f"\nthe example fails again:\n{exc}", file=sys.stderr)
        return 1
    print("the example passes")
    return 0


def _known() -> int:
    status = 0
    for name in {**known.OPEN, **known.FIXED}:
        is_open = name in known.OPEN
        try:
            known.replay(name)
        except AssertionError as exc:
            print(f"{name}: shows: {str(exc).splitlines()[0]}")
            status = status or int(not is_open)
            continue
        print(f"{name}: keeps every invariant{'; move it to FIXED' if is_open else ''}")
        status = status or int(is_open)
    return status


if __name__ == "__main__":
    sys.exit(main())
