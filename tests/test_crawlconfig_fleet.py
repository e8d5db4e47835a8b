"""Fleets of ``hashcrawl join`` processes and the crawl's settings, judged from the server's
log: a worker started with another --delay is refused, and
a --delay changed by ``configure`` holds for every host from the moment it is applied."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

from testing.fleet import (
    DEADLINE,
    REPO,
    Processes,
    flags,
    page_requests,
    status_of,
    times_by_host,
    wait_until,
)
from testing.testsite import SITE_FLAGS, SiteServer, generate_site, judge

SLOW, FAST = 0.3, 0.05


def _configure(redis_url: str, crawl: str, *more: str) -> str:
    command = ["configure", "--redis", redis_url, "--crawl", crawl, *more]
    done = subprocess.run(
        [sys.executable, "-m", "hashcrawl", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    return done.stdout


def test_a_worker_started_with_another_delay_is_refused_and_the_fleet_stays_polite(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """--delay 0.3, then --delay 0.05 (refused, one line, exit 2), then no --delay (takes
    0.3): every host's requests in the server's log are at least 0.3 s apart."""
    site = generate_site(pages=24, hosts=3, seed=5, port=0)
    with SiteServer(site) as server, Processes(redis_url, crawl_name, tmp_path) as fleet:
        first = fleet.join(*flags(delay=SLOW, lease=10, idle=5))
        wait_until(
            lambda: status_of(redis_url, crawl_name)["workers"] == 1, what="the first worker joined"
        )
        odd = fleet.join(*flags(delay=FAST, lease=10, idle=5))
        assert odd.wait() == 2
        lines = odd.error_lines()
        assert len(lines) == 1, lines
        assert f"--delay {FAST} disagrees" in lines[0] and f"--delay {SLOW}" in lines[0]
        taker = fleet.join("--lease", "10", "--idle", "5", *SITE_FLAGS)  # no --delay
        wait_until(
            lambda: status_of(redis_url, crawl_name)["workers"] == 2, what="the taker joined"
        )
        _submit(redis_url, crawl_name, server.site.root)
        assert (first.wait(), taker.wait()) == (0, 0)
        verdict = judge(server.site, server.requests(), fleet.outputs, delay=SLOW)
    assert verdict.missing == () and verdict.duplicates == 0
    assert verdict.too_close == 0, verdict.min_gap


def test_a_delay_changed_by_configure_holds_for_every_host_once_applied(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Two workers at --delay 0.05; configure --delay 0.3 mid-crawl; from the moment both
    logged the change, each host's next request is 0.3 s after its previous one."""
    site = generate_site(pages=60, hosts=3, seed=7, port=0)
    with SiteServer(site) as server, Processes(redis_url, crawl_name, tmp_path) as fleet:
        workers = [fleet.join(*flags(delay=FAST, lease=10, idle=2)) for _ in range(2)]
        wait_until(
            lambda: status_of(redis_url, crawl_name)["workers"] == 2, what="both workers joined"
        )
        _submit(redis_url, crawl_name, server.site.root)
        wait_until(lambda: len(page_requests(server.requests())) >= 10, what="a fast start")
        # Each answer waits 2 s until both workers applied the change, so the crawl cannot
        # end before it however slow this machine is (at most a page a second per host).
        server.latency = 2.0
        out = _configure(redis_url, crawl_name, "--delay", str(SLOW))
        assert f"--delay: {SLOW} (was {FAST})" in out
        wait_until(lambda: all(_applied(w.stderr_lines()) for w in workers), what="both applied it")
        applied = time.time()
        server.latency = 0.0
        assert [w.wait() for w in workers] == [0, 0]
        records = server.requests()
    late = [
        later - earlier
        for times in times_by_host(records).values()
        for earlier, later in itertools.pairwise(times)
        if later > applied
    ]
    assert late, "the crawl ended before the change: nothing to judge"
    assert min(late) >= SLOW
    early = judge(server.site, records, fleet.outputs, delay=FAST)
    assert early.too_close == 0 and early.missing == () and early.duplicates == 0


def _applied(lines: list[str]) -> bool:
    return any("settings are at version 2" in line for line in lines)


def _submit(redis_url: str, crawl: str, url: str) -> None:
    command = ["submit", "--new", "--redis", redis_url, "--crawl", crawl, *SITE_FLAGS, url]
    subprocess.run(
        [sys.executable, "-m", "hashcrawl", *command], cwd=REPO, check=True, timeout=DEADLINE
    )
