"""Tests for how ``hashcrawl crawl`` and ``join`` end: on signals, and by themselves.

A SIGTERM is a request to stop gracefully, however many copies of it arrive (``timeout``
and service managers send it to the whole process group, so each worker of ``crawl``
gets it from there and again from ``crawl``); only a second Ctrl-C stops at once.
Every ending says one line, unless ``-q`` asked for none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from testing.fleet import DEADLINE
from testing.testsite import SITE_FLAGS, SiteServer, generate_site
from tests.test_cli import COMMAND_TIMEOUT, _ctrl_c_acts, assert_ok, at, hashcrawl


def _crawl_in_its_own_group(root: str, state: Path, *flags: str) -> subprocess.Popen[bytes]:
    """``hashcrawl crawl`` as ``timeout`` runs it: the leader of a process group."""
    args = [sys.executable, "-m", "hashcrawl", "crawl", root, "--state-dir", str(state)]
    args += ["-o", str(state.parent / "items.jsonl"), *SITE_FLAGS, *flags]
    return subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_ctrl_c_acts,
    )


def _stopped_by_sigterm_twice(tmp_path: Path, *flags: str) -> tuple[int, list[str]]:
    """A crawl given SIGTERM as GNU timeout gives it: to the command, then to its group."""
    site = generate_site(pages=30, hosts=3, seed=7, port=0)
    with SiteServer(site, latency=0.2) as server:
        process = _crawl_in_its_own_group(
            server.site.root, tmp_path / "state", "--workers", "3", "--delay", "0.3", *flags
        )
        assert server.wait_for_requests(4, timeout=DEADLINE)
        os.kill(process.pid, signal.SIGTERM)
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=COMMAND_TIMEOUT)
    return process.returncode, err.decode().splitlines()


def test_sigterm_to_the_whole_process_group_twice_is_one_graceful_stop(tmp_path: Path) -> None:
    """crawl and every worker get the SIGTERM twice, and it is still one graceful stop:
    one "stopping" line, no "stopped at once", exit 0."""
    code, lines = _stopped_by_sigterm_twice(tmp_path)
    assert code == 0, lines
    assert [line for line in lines if line.startswith("hashcrawl: stop")] == [
        "hashcrawl: stopping: finishing requests in flight, then saving the crawl "
        "(press Ctrl-C again to quit at once)"
    ]


def test_a_quiet_crawl_says_nothing_when_stopped(tmp_path: Path) -> None:
    """-q: no stop line either, exit 0."""
    assert _stopped_by_sigterm_twice(tmp_path, "-q") == (0, [])


def test_a_join_that_ends_after_idle_says_so_in_one_closing_line(
    redis_url: str, crawl_name: str
) -> None:
    """A join whose crawl went idle ends with one line: why, and what it did; -q: none."""
    site = generate_site(pages=3, hosts=1, seed=2, port=0)
    with SiteServer(site) as server:
        root = server.site.root
        assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", *SITE_FLAGS, root))
        flags = [*at(redis_url, crawl_name), "--idle", "0.5", "--delay", "0", *SITE_FLAGS]
        ended = hashcrawl("join", *flags, "-o", os.devnull)
        assert_ok(
            hashcrawl("submit", *at(redis_url, crawl_name), "--dont-filter", *SITE_FLAGS, root)
        )
        quiet = hashcrawl("join", *flags, "-o", os.devnull, "-q")
    assert ended.code == 0, ended
    last = ended.err.splitlines()[-1]
    assert "idle for 0.5 s (--idle)" in last, ended.err
    assert f"{len(site.expected())} pages" in last
    assert quiet.code == 0, quiet
    # The shared test Redis runs without appendonly: that warning stays, -q or not.
    assert [line for line in quiet.err.splitlines() if "appendonly" not in line] == []


def test_dead_with_nothing_dead_says_so(redis_url: str, crawl_name: str) -> None:
    """``dead`` of a crawl with no dead letters says so on stderr; stdout stays empty."""
    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", "http://a.example/"))
    result = hashcrawl("dead", *at(redis_url, crawl_name))
    assert (result.code, result.out) == (0, "")
    assert result.err == f"hashcrawl: crawl {crawl_name} has no dead letters\n"
