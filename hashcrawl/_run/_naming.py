"""A named worker's claim on its name at join: take the place of the member holding it
once that member has provably stopped, or refuse (``_core._names`` decides)."""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from hashcrawl._core._faults import NO_FAULTS, Faults
from hashcrawl._core._names import Holder, Verdict, first_look, fresh_window_ms, next_look, refusal
from hashcrawl._exceptions import NameTaken
from hashcrawl._store._base import WorkerStore

log = logging.getLogger("hashcrawl")
LOOK_EVERY = 0.25  # seconds between two looks at a name's holder while it is watched


@functools.cache
def machine() -> str:
    """This machine as a process id means something on it: its host name, its boot (a
    reboot reuses pids) and its pid namespace (a container has pids of its own). Empty
    where the last two cannot be read: then no pid is judged from here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{socket.gethostname()}/{boot}/{space}"


@attrs.frozen
class Place:
    """Where a worker runs, as a successor on the same machine judges it: the machine
    (:func:`machine`) and the process id. The simulations give their workers places of
    their own, since they all run in one process."""

    machine: str
    pid: int

    @classmethod
    def here(cls) -> Place:
        return cls(machine(), os.getpid())


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie is not: it has ended
    and waits only to be reaped)."""
    if pid <= 0:
        return True  # not known: judge by the heartbeat instead
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    state = stat.rpartition(")")[2].split()[:1]
    return state != ["Z"] and state != ["X"]


async def claim(
    store: WorkerStore,
    persist: Callable[..., Awaitable[Any]],
    name: str,
    lease: float,
    called: str,
    faults: Faults = NO_FAULTS,
    place: Place | None = None,
) -> Holder | None:
    """The member whose place the worker named ``name`` takes, as last seen (None: the
    name is free), once that member has stopped; raises NameTaken if it is running.

    ``persist`` runs a store call as the membership does (retried for a lease);
    ``place`` is where this worker runs (default: here).
    """
    place = place if place is not None else Place.here()
    window, lease_ms = fresh_window_ms(lease), int(lease * 1000)
    first: Holder | None = await persist(store.holder, name)
    if first is None:
        return None
    seen = first
    verdict = first_look(
        first,
        machine=place.machine,
        pid=place.pid,
        window_ms=window,
        lease_ms=lease_ms,
        alive=alive,
    )
    if verdict is Verdict.WATCH and "take_running" in faults:  # a deliberate bug to catch
        verdict = Verdict.TAKE
    if verdict is Verdict.WATCH:
        log.info(
            "a worker named %s was a member %.1f s ago: watching it",
            name,
            first.silent_for() / 1000,
        )
    while verdict is Verdict.WATCH:
        await trio.sleep(LOOK_EVERY)
        now: Holder | None = await persist(store.holder, name)
        verdict = next_look(first, now, window_ms=window, lease_ms=lease_ms)
        if now is None:
            return None
        seen = now
    if verdict is Verdict.REFUSE:
        raise NameTaken(refusal(name, seen, called=called))
    log.warning(
        "taking the place of %s (pid %d on %s), silent for %.1f s",
        seen.member,
        seen.pid,
        seen.host or "?",
        seen.silent_for() / 1000,
    )
    return seen
