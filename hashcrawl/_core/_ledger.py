"""The commit ledger: a session's outcomes not yet committed, oldest first, which of
them hold one of the --concurrency slots, and whose items are already written. No IO.

Outcomes leave the ledger only once a commit of them went through, so a commit cut
short (by a stop, say) is done again by the next one, without writing its items twice.
"""

from __future__ import annotations

from typing import Any

import attrs

from hashcrawl._core._outcome import Outcome

COMMIT_MAX = 200  # outcomes in one commit


@attrs.frozen
class Commit:
    """The oldest outcomes, committed together, and the items they write first."""

    outcomes: list[Outcome]
    items: list[Any]


class Ledger:
    """What waits to be committed: ``outcomes``, and the counts kept of them."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.uncommitted = 0  # fetched pages in ``outcomes``: each holds a slot
        self.items_pending = 0  # items of those, not yet written
        self.committing = 0  # of ``uncommitted``, those in the commit under way
        self._slotted: set[int] = set()  # ids of outcomes counted in ``uncommitted``
        self._written: set[int] = set()  # ids of outcomes whose items are written

    def __len__(self) -> int:
        return len(self.outcomes)

    def backlogged(self) -> bool:
        """Too much read and not committed: what was read must be committed (parked,
        forwarded) before reading on, or memory grows with the stream after all."""
        return len(self.outcomes) >= 2 * COMMIT_MAX

    def add(self, outcome: Outcome) -> None:
        """An entry settled without a fetch (bad, forwarded, parked...): no slot."""
        self.outcomes.append(outcome)

    def add_fetched(self, outcome: Outcome) -> None:
        """A fetched page's outcome: it holds a slot until committed."""
        self.outcomes.append(outcome)
        self.uncommitted += 1
        self._slotted.add(id(outcome))
        self.items_pending += len(outcome.items)

    def next_commit(self, count: int = COMMIT_MAX) -> Commit:
        """The oldest outcomes to commit (at most ``count``), with the items not yet written."""
        outcomes = self.outcomes[: min(count, COMMIT_MAX)]
        items = [item for o in outcomes if id(o) not in self._written for item in o.items]
        return Commit(outcomes, items)

    def items_written(self, count: int) -> None:
        self.items_pending -= count

    def commit_begun(self, commit: Commit) -> None:
        """``commit`` is under way: what fetches end meanwhile waits for the next one."""
        self.committing = sum(1 for o in commit.outcomes if id(o) in self._slotted)

    @property
    def waiting(self) -> int:
        """Fetched pages that wait for a commit not yet under way."""
        return self.uncommitted - self.committing

    def commit_written(self, commit: Commit) -> None:
        """``commit``'s items are written (or, with a deliberate bug, will be)."""
        self._written.update(id(o) for o in commit.outcomes)

    def committed(self, commit: Commit) -> None:
        """``commit`` went through: its outcomes leave, and free their slots."""
        outcomes = commit.outcomes
        del self.outcomes[: len(outcomes)]
        slots = [o for o in outcomes if id(o) in self._slotted]
        self.uncommitted -= len(slots)
        self._slotted.difference_update(id(o) for o in slots)
        self._written.difference_update(id(o) for o in outcomes)
        self.committing = 0
