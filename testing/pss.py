"""The memory (PSS) of the processes a run started, counted the same way for hashcrawl's
renderer and for a peer's (scripts/render_memory, scripts/crawlee_render).

A run's processes are its descendants (by parent pid) and any process whose
environment carries the run's mark. Both are needed: Chromium rewrites the environment
block of the helpers it forks from its zygote (their ``/proc/PID/environ`` no longer
shows the mark: renderers, the GPU process, utilities), while its crash handler is
re-parented to init (outside the tree, mark intact). Standard library only: the peer's
virtualenv has no hashcrawl dependencies.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Executables counted as the browser (the rest, a driver such as Playwright's node).
BROWSER_NAMES = ("chromium", "chrome")


def run_processes(root: int, mark: str) -> set[int]:
    """The pids descended from ``root`` (``root`` left out) or carrying ``mark``
    (``NAME=VALUE``) in their environment."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    needle = b"\0" + mark.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
            if needle in b"\0" + (entry / "environ").read_bytes():
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    for pid in parents:
        ancestor, seen = parents.get(pid), 0
        while ancestor is not None and ancestor > 1 and seen < 64:
            if ancestor == root:
                found.add(pid)
                break
            ancestor, seen = parents.get(ancestor), seen + 1
    found.discard(root)
    return found


def pss_kib(pid: int) -> int:
    """A process's proportional set size (0 once it has ended)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def is_browser(pid: int) -> bool:
    """Whether ``pid`` runs Chromium (the browser, a helper, its crash handler)."""
    try:
        name = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return name.startswith(BROWSER_NAMES)


def run_pss_mib(root: int, mark: str) -> tuple[float, float]:
    """(the browser's PSS, every other process's PSS) in MiB, for the run of ``root``."""
    browser = other = 0
    for pid in run_processes(root, mark):
        if is_browser(pid):
            browser += pss_kib(pid)
        else:
            other += pss_kib(pid)
    return browser / 1024, other / 1024
