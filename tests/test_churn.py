"""A small churn run: workers join, leave, stall past their lease, and Redis restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.churn import (
    PAUSED,
    STOPPED,
    churn_failures,
    lost_state_failures,
    run_churn,
    run_lost_state,
)


@pytest.mark.slow
def test_churn_costs_no_pages_politeness_or_exit_status(tmp_path: Path) -> None:
    """Through joins, SIGTERMs, an expelled-and-resumed worker and a Redis restart, every
    page is fetched and written once (but what the paused worker held), politely spaced,
    and every worker exits 0 by itself."""
    churn = run_churn(
        pages=1500,
        hosts=20,
        delay=0.1,
        lease=4,
        idle=2,
        grace=5,
        concurrency=16,
        latency=0.05,
        workdir=tmp_path,
        timeout=120,
        progress=lambda line: None,
    )
    assert churn_failures(churn) == [], "\n".join(churn.lines() + churn.verdict.lines())
    assert churn.verdict.fetched == churn.verdict.expected
    assert churn.verdict.unexpected == ()
    assert {churn.roles[label] for label in STOPPED} == {"stopped with SIGTERM"}
    assert [exit.code for exit in churn.exits if exit.label == PAUSED] == [0]


@pytest.mark.slow
def test_every_worker_exits_1_saying_so_when_redis_comes_back_empty(tmp_path: Path) -> None:
    """Redis restarted without persistence mid-crawl: each worker exits 1 with one line
    saying the crawl's state was lost; none rejoins the empty crawl and exits 0."""
    lost = run_lost_state(
        pages=300,
        hosts=6,
        workers=3,
        delay=0.05,
        # A worker gives up on a Redis that refuses it for a whole lease; on a busy
        # machine the restart (an AOF flushed, a process started) can take seconds.
        lease=10,
        latency=0.02,
        workdir=tmp_path,
        timeout=90,
        progress=lambda line: None,
    )
    assert lost_state_failures(lost) == [], lost
    assert [exit.code for exit in lost.exits] == [1, 1, 1]
