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
from tests.test_cli import COMMAND_TIMEOUT, _ctrl_c_acts


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


def test_sigterm_to_the_whole_process_group_twice_is_one_graceful_stop(tmp_path: Path) -> None:
    """GNU timeout sends SIGTERM to the command and then to its group: crawl and every
    worker get it twice, and it is still one graceful stop: one line, exit 0."""
    site = generate_site(pages=30, hosts=3, seed=7, port=0)
    with SiteServer(site, latency=0.2) as server:
        process = _crawl_in_its_own_group(
            server.site.root, tmp_path / "state", "-q", "--workers", "3", "--delay", "0.3"
        )
        assert server.wait_for_requests(4, timeout=DEADLINE)
        os.kill(process.pid, signal.SIGTERM)
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=COMMAND_TIMEOUT)
    lines = err.decode().splitlines()
    assert process.returncode == 0, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("hashcrawl: stopping")
