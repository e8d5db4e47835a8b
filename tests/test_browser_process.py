"""What a worker killed outright leaves behind, ended by the next start: its browser's
processes and profile, found by the worker's pid in the profile's name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hashcrawl._browser._process import PROFILE_PREFIX, group_pss_mib, sweep_leftovers

UP = "import time; print('up', flush=True); time.sleep(600)"


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_dead_workers_browser_is_ended_and_its_profile_removed(tmp_path: Path) -> None:
    """A profile whose worker is gone: the process using it (in its own group, as a
    browser is) is killed and the profile removed; a live worker's profile and any
    other directory are left alone."""
    left = tmp_path / f"{PROFILE_PREFIX}{dead_pid()}-abc123"
    left.mkdir()
    (left / "Cookies").write_text("x")
    live = tmp_path / f"{PROFILE_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    other = tmp_path / f"{PROFILE_PREFIX}not-a-pid"
    other.mkdir()
    stand_in = subprocess.Popen(
        [sys.executable, "-c", UP, f"--user-data-dir={left}"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    try:
        assert stand_in.stdout is not None and stand_in.stdout.readline() == b"up\n"
        assert sweep_leftovers(str(tmp_path)) == [str(left)]
        assert stand_in.wait(timeout=30) == -9
    finally:
        stand_in.kill()
        stand_in.wait()
        stand_in.stdout.close()
    assert not left.exists() and live.exists() and other.exists()


def test_a_sweep_of_a_missing_directory_finds_nothing(tmp_path: Path) -> None:
    """No temporary directory to read: nothing swept, nothing raised."""
    assert sweep_leftovers(str(tmp_path / "missing")) == []


def test_a_process_groups_memory_is_its_members_pss() -> None:
    """This test's own group has some memory; a group with no member has none."""
    assert group_pss_mib(os.getpgrp()) > 1
    assert group_pss_mib(dead_pid()) == 0
