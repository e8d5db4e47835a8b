"""The memory (PSS) of the processes a run started, counted the same way for hashcrawl's
renderer and for a peer's (scripts/render_memory, scripts/crawlee_render).

A run's processes are its descendants (by parent pid) and any process whose
environment carries the run's mark. Both are needed: Chromium rewrites the environment
block of the helpers it forks from its zygote (their ``/proc/PID/environ`` no longer
shows the mark: renderers, the GPU process, utilities), while its crash handler is
re-parented to init (outside the tree, mark intact). Standard library only: the peer's
virtualenv has no hashcrawl dependencies.

Two figures per process. PSS, the proportional set size, splits each shared page among
every process that maps it, on the whole machine: Chromium's executable and libraries
(``Pss_File``) are shared with any other Chromium running there, so the same browser
reads 255 or 360 MiB as other browsers start and end. "Own" memory is PSS without
those file pages (``Pss_Anon`` + ``Pss_Shmem``): what the browser allocated, shared
only within its own tree, and what a leak grows.
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Memory:
    """A run's memory in MiB: the browser's PSS and own memory, and the PSS of the rest
    (a driver such as Playwright's node)."""

    browser: float
    browser_own: float
    other: float


def memory_kib(pid: int) -> tuple[int, int]:
    """A process's (PSS, own memory) in KiB (zeros once it has ended)."""
    fields: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("Pss", "Pss_Anon", "Pss_Shmem"):
                fields[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return 0, 0
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0) + fields.get("Pss_Shmem", 0)


def is_browser(pid: int) -> bool:
    """Whether ``pid`` runs Chromium (the browser, a helper, its crash handler)."""
    try:
        name = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return name.startswith(BROWSER_NAMES)


def run_memory(root: int, mark: str) -> Memory:
    """The memory of the run of ``root`` (see :func:`run_processes`)."""
    browser = own = other = 0
    for pid in run_processes(root, mark):
        pss, private = memory_kib(pid)
        if is_browser(pid):
            browser, own = browser + pss, own + private
        else:
            other += pss
    return Memory(browser=browser / 1024, browser_own=own / 1024, other=other / 1024)
