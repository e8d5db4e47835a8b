"""What a part of the session asks the driver to do, one step at a time: each an
exchange with Redis (or a wait) as a value. No IO.

A part that needs several exchanges in a row (applying an epoch, draining a stream,
a commit) is a *process*: the driver asks it for its next step, does it, and gives it
the reply (``answered``), until the step is :class:`Done`, as h11's caller does with
``next_event`` and ``send``. So the order of the exchanges, and what each reply
means, is the core's, tested without trio; the driver only knows how to do each kind
of step (``Membership.perform``). A step the driver cannot do raises out of it: the
process is abandoned with its session (Redis unreachable for a lease, or fenced).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from hashcrawl._core._batch import Batch


@attrs.frozen
class Done:
    """The process is over."""


@attrs.frozen
class Commit:
    """Run ``batch`` as one commit; answered with its ``Committed``."""

    batch: Batch


@attrs.frozen
class ReadMembers:
    """Read the crawl's epoch and members; answered with ``(epoch, members)``."""


@attrs.frozen
class ReadParked:
    """Read the hosts this owner has parked entries of; answered with the hosts."""


@attrs.frozen
class NextOrphan:
    """Take the next departed worker's stream to drain; answered with it, or None."""


@attrs.frozen
class ReadInFlight:
    """Read what ``stream``'s worker said it was fetching when it died; answered with
    the entry ids."""

    stream: str


@attrs.frozen
class ReadEntries:
    """Read up to ``count`` entries left in ``stream``; answered with ``(id, payload)``
    pairs (none: it is empty)."""

    stream: str
    count: int


@attrs.frozen
class Release:
    """Delete ``stream`` if it is still empty; answered with whether it was."""

    stream: str


@attrs.frozen
class AwaitChange:
    """Wait for the session's state to change (a request ending), until ``until`` at
    the latest; answered with None."""

    until: float


@attrs.frozen
class CutShort:
    """Have the requests of entries ``eids`` end by ``deadline`` (cancel them then);
    answered with None."""

    eids: list[str]
    deadline: float


Step = (
    Commit
    | ReadMembers
    | ReadParked
    | NextOrphan
    | ReadInFlight
    | ReadEntries
    | Release
    | AwaitChange
    | CutShort
    | Done
)


class Process(Protocol):
    """Exchanges in a row, decided by the core (see the module's docstring)."""

    def next_step(self, now: float) -> Step: ...

    def answered(self, reply: Any, now: float) -> None: ...
