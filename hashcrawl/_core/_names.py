"""Static membership: a worker's ``--name``, and whether a worker starting under a name
takes the place of the member that holds it or is refused. No IO.

A named worker's member id is ``NAME~TOKEN``, a new token for every incarnation; the ring
goes by names (``_ring``), so an incarnation that takes its predecessor's place moves no
host. Its predecessor is fenced by id, as a dead member is.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable

import attrs

from hashcrawl._core._ring import INCARNATION
from hashcrawl._exceptions import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: Seconds past the fresh window (lease/4) before a silent holder counts as stopped: the
#: two clocks' rates, and a heartbeat's reply in flight.
WINDOW_MARGIN = 1.0


def check_name(name: str, *, called: str = "--name") -> str:
    """Return ``name`` if it can name a worker, else raise ConfigError naming ``called``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{called} must be 1-64 letters, digits, '.', '_' or '-' starting with a letter "
            f"or digit, got {name!r}"
        )
    return name


def incarnation(name: str, token: str) -> str:
    """The member id of one incarnation of the worker named ``name``."""
    return f"{name}{INCARNATION}{token}"


def fresh_window_ms(lease: float) -> int:
    """How long after its last heartbeat a member may still start a request (lease/4,
    ``Epochs.fresh``), with a margin: past this, a silent holder has provably stopped."""
    return int((lease / 4 + WINDOW_MARGIN) * 1000)


@attrs.frozen(kw_only=True)
class Holder:
    """The member holding a name, as one read of Redis saw it.

    Args:
        member: its id.
        beat_ms: its last heartbeat (server ms).
        now_ms: the server's time at the read.
        machine: the machine it registered (host name, boot id, pid namespace; '' unknown).
        pid: its process id there.
        host: its host name, for messages.
        behind: it has not applied the crawl's newest epoch: it may still hold hosts
            that epoch moved to others, whose pace records it never wrote.
    """

    member: str
    beat_ms: int
    now_ms: int
    machine: str = ""
    pid: int = 0
    host: str = ""
    behind: bool = False

    def silent_for(self) -> int:
        return self.now_ms - self.beat_ms


class Verdict(enum.Enum):
    TAKE = "take"  # the holder has stopped: take its place now
    WATCH = "watch"  # it may be running: look again, until its heartbeat moves or ages
    REFUSE = "refuse"  # it is running: this worker may not have its name


class HolderBehind(Exception):
    """The join found the holder behind the newest epoch after all: look again."""


def first_look(
    holder: Holder,
    *,
    machine: str,
    pid: int,
    window_ms: int,
    lease_ms: int,
    alive: Callable[[int], bool],
) -> Verdict:
    """What a worker on ``machine`` (as process ``pid``) makes of the holder of its name.

    The holder is dead when it registered this machine and its process is gone there
    (or is this very process: a pid reused across containers, or this worker's own
    fenced membership); stopped when its last heartbeat is older than the window, since
    it starts no request then. Otherwise it is watched.

    A holder behind the newest epoch is taken over only once its lease has run out, as
    its expiry would: hosts that epoch moved from it to other members wait for it, and
    the lease (at least twice the delay) paces them.
    """
    if holder.behind:
        return Verdict.TAKE if holder.silent_for() > lease_ms else Verdict.WATCH
    if (
        holder.machine
        and holder.machine == machine
        and (holder.pid == pid or not alive(holder.pid))
    ):
        return Verdict.TAKE
    if holder.silent_for() > window_ms:
        return Verdict.TAKE
    return Verdict.WATCH


def next_look(first: Holder, now: Holder | None, *, window_ms: int, lease_ms: int) -> Verdict:
    """What a later look at the name shows, ``first`` being the holder watched.

    No holder any more (it left or expired): take the name. The same holder with the
    same heartbeat, aged past the window: take its place. Its heartbeat moved, or another
    member holds the name now: a worker of that name is running, so refuse.
    """
    if now is None:
        return Verdict.TAKE
    if now.member != first.member or now.beat_ms != first.beat_ms:
        return Verdict.REFUSE
    wait = lease_ms if now.behind else window_ms
    return Verdict.TAKE if now.silent_for() > wait else Verdict.WATCH


def refusal(name: str, holder: Holder, *, called: str = "--name") -> str:
    """The one line a worker refused its name stops with."""
    where = f"pid {holder.pid} on {holder.host}" if holder.host else f"member {holder.member}"
    return f"a worker named {name} is running ({where}); pick another {called}"
