"""The suite's own scheduling: a module whose tests share a module-scoped fixture runs on
one xdist worker, so the fixture (often a crawl of minutes) is set up once per run.

pytest-xdist 3.8 groups tests by renaming them (``item._nodeid``), which pytest 9.2 no
longer reads: every worker then set such a fixture up for itself, and the suite took a
quarter longer. pyproject.toml pins pytest below 9.2; this test fails if the grouping
breaks again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = 6


@pytest.fixture(scope="module")
def setups(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A file in the run's shared directory with one line per set-up of this fixture."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("the grouping matters only under xdist")
    basetemp = Path(request.config.getoption("basetemp"))
    record = basetemp.parent / f"groups-{os.getppid()}.txt"
    with record.open("a") as out:
        out.write(f"{uuid.uuid4().hex}\n")
    yield record


@pytest.mark.parametrize("n", range(TESTS))
def test_a_module_fixture_is_set_up_once_in_the_whole_run(setups: Path, n: int) -> None:
    assert len(setups.read_text().splitlines()) == 1
