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

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from hashcrawl._core._batch import Batch


class Step:
    """A step a process hands the driver: a value naming what to do, and with what."""


@attrs.frozen
class Done(Step):
    """The process is over."""


@attrs.frozen
class CommitBatch(Step):
    """Run ``batch`` as one commit; answered with its ``Committed``."""

    batch: Batch


@attrs.frozen
class WriteItems(Step):
    """Write ``items`` to the sink (if any) and flush every sink; answered with None."""

    items: list[Any]


@attrs.frozen
class PutRevisits(Step):
    """Write the next revisit records of pages just fetched; answered with None."""

    fetches: list[Any]


@attrs.frozen
class ReadScope(Step):
    """Read the crawl's scope (it has grown); answered with its stored members."""


@attrs.frozen
class ReadPaces(Step):
    """Read the pace records (and floors) of ``hosts``; answered with their ``Paces``."""

    hosts: list[str]


@attrs.frozen
class Unpark(Step):
    """Move ``count`` of ``host``'s parked entries back into this owner's stream at
    ``epoch``; answered with ``(status, moved, left)``. (``guard``: what lets the
    answer drop the host, see ``Intake.unpark_guard``.)"""

    host: str
    epoch: int
    count: int
    guard: int | None


@attrs.frozen
class Flush(Step):
    """Commit every outcome this worker holds; answered with None."""


@attrs.frozen
class LeaveRing(Step):
    """Leave the ring, writing the pace records ``pace`` (host -> record) of every host
    this worker had; answered with None."""

    pace: dict[str, str]


@attrs.frozen
class SendHeartbeat(Step):
    """Renew this worker's membership and learn the fleet's state, once (no retry: the
    next heartbeat is the retry); answered with the ``Beat``. ``fields``: the store
    call's arguments (``Store.heartbeat``)."""

    fields: dict[str, Any]


@attrs.frozen
class ReadStream(Step):
    """Read up to ``count`` entries of this worker's stream (its own pending ones after
    ``after``, if not None), waiting up to ``block_ms`` for new ones, once; answered
    with ``(id, payload)`` pairs."""

    count: int
    after: str | None
    block_ms: int


@attrs.frozen
class WidenScope(Step):
    """Add ``members`` to the crawl's scope; answered with None."""

    members: set[str]


@attrs.frozen
class ReadMembers(Step):
    """Read the crawl's epoch and members; answered with ``(epoch, members)``."""


@attrs.frozen
class ReadParked(Step):
    """Read the hosts this owner has parked entries of; answered with the hosts."""


@attrs.frozen
class NextOrphan(Step):
    """Take the next departed worker's stream to drain; answered with it, or None."""


@attrs.frozen
class ReadInFlight(Step):
    """Read what ``stream``'s worker said it was fetching when it died; answered with
    the entry ids."""

    stream: str


@attrs.frozen
class ReadEntries(Step):
    """Read up to ``count`` entries left in ``stream``; answered with ``(id, payload)``
    pairs (none: it is empty)."""

    stream: str
    count: int


@attrs.frozen
class Release(Step):
    """Delete ``stream`` if it is still empty; answered with whether it was."""

    stream: str


@attrs.frozen
class AwaitChange(Step):
    """Wait for the session's state to change (a request ending), until ``until`` at
    the latest; answered with None."""

    until: float


@attrs.frozen
class CutShort(Step):
    """Have the requests of entries ``eids`` end by ``deadline`` (cancel them then);
    answered with None."""

    eids: list[str]
    deadline: float


@attrs.frozen
class TakeDue(Step):
    """Take the crawl's due revisits into the inbox, each due again ``requeue_s`` from
    now unless fetched; answered with the ``Taken``."""

    requeue_s: float


class Process:
    """Exchanges in a row, decided by the core (see the module's docstring): the step
    to do now (``step``, unless a process decides it as it is asked), and what each
    reply, or each failure, means."""

    step: Step
    result: Any = None  # what the driver's turn returns once the process is done

    def next_step(self, now: float) -> Step:
        """The step to do now (:class:`Done`: none is left)."""
        return self.step

    def answered(self, reply: Any, now: float) -> None:
        """The step was done, with ``reply``."""
        raise NotImplementedError

    def failed(self, exc: Exception, now: float) -> None:
        """The step failed with ``exc`` (Redis did not answer). Raises it again, unless
        the process goes on without it (a heartbeat, a read: the next one may pass)."""
        raise exc


class Idle(Process):
    """A turn with nothing to exchange: done at once, with ``result``."""

    def __init__(self, result: Any = None) -> None:
        self.step, self.result = Done(), result


class Turn:
    """What the driver asks the session to start (``Session.start``): a value naming the
    turn and what it starts with. The session answers with the turn's process."""


@attrs.frozen
class Join(Turn):
    """This worker joined at the server's ``now_ms`` (asked at ``sent``, answered at
    ``received``): learn the crawl's scope, members and parked hosts."""

    sent: float
    received: float
    now_ms: int


@attrs.frozen
class Renew(Turn):
    """A heartbeat at ``now``, this process holding ``resident_kib`` of memory."""

    now: float
    resident_kib: int


@attrs.frozen
class Read(Turn):
    """A read of this worker's stream, waiting up to ``block_ms`` for entries."""

    block_ms: int


@attrs.frozen
class Unparks(Turn):
    """Take parked entries back, for the hosts running short."""


@attrs.frozen
class PaceDue(Turn):
    """Read the previous owners' pace records of the hosts due now."""


@attrs.frozen
class Apply(Turn):
    """Apply the newest epoch, if one waits (asked at ``now``)."""

    now: float


@attrs.frozen
class DrainOrphans(Turn):
    """Drain every departed worker's stream there is."""


@attrs.frozen
class Drain(Turn):
    """Move every entry left in ``stream`` to its host's owner (``leaving``: this
    worker's own, once it is out of the ring)."""

    stream: str
    leaving: bool = False


@attrs.frozen
class Leave(Turn):
    """Hand every host back at once; nothing more starts."""


@attrs.frozen
class CommitOutcomes(Turn):
    """Commit the oldest outcomes (at most ``count``) with ``carried``, the links of
    other shards' pages (``misroute``: a deliberate bug's ring to route them by).
    ``archive``: a sink keeps every response; ``revisits``: the crawl keeps revisit
    records."""

    count: int
    carried: Sequence[Any] = ()
    misroute: Callable[[], Any] = lambda: None
    archive: bool = False
    revisits: bool = False


@attrs.frozen
class Dispatch(Turn):
    """The next fetch to start at ``now``: a ``Page``, or an ``Idle`` whose result says
    when to ask again."""

    now: float


@attrs.frozen
class TakeRevisits(Turn):
    """Take the crawl's due revisits (see ``TakeDue``); the result: how many."""

    requeue_s: float


@attrs.frozen
class Forget(Turn):
    """Drop the state of hosts idle a while (asked at ``now``); the result: those hosts."""

    now: float


@attrs.frozen
class Limits(Turn):
    """Check the --max-* limits at ``now``, with ``resident_mib`` of memory held; the
    result: whether one is reached (then this worker stops)."""

    now: float
    resident_mib: float
