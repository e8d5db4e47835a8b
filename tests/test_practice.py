"""A small practice run: three workers crawl a 300-page site, one is killed and replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "hashcrawl._cli._commands", reason="the hashcrawl command line is not written yet"
)

from testing.practice import practice_failures, run_practice


@pytest.mark.slow
def test_killed_worker_does_not_cost_pages_or_politeness(tmp_path: Path) -> None:
    """After a SIGKILL and a replacement, every page is fetched, written and politely spaced."""
    verdict, exits = run_practice(
        pages=300,
        hosts=10,
        workers=3,
        delay=0.1,
        lease=10,
        idle=5,
        replace_after=3,
        workdir=tmp_path,
        timeout=300,
        progress=lambda line: None,
    )
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert verdict.unexpected == ()
    assert [exit.killed for exit in exits] == [True, False, False, False]
