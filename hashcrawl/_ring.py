"""Who owns a host: a consistent-hash ring over the live members (uhashring, ketama)."""

from __future__ import annotations

import attrs
from uhashring import HashRing


@attrs.frozen
class Ring:
    """The live members at one membership epoch, and the owner of every host."""

    epoch: int
    members: tuple[str, ...]
    _ring: HashRing | None = attrs.field(eq=False, repr=False)

    @classmethod
    def of(cls, epoch: int, members: tuple[str, ...] | list[str]) -> Ring:
        """Build the ring every worker builds from the same sorted member list."""
        ordered = tuple(sorted(members))
        ring = HashRing(nodes=list(ordered), hash_fn="ketama") if ordered else None
        return cls(epoch, ordered, ring)

    def owner_of(self, host: str) -> str | None:
        """The member that alone may fetch ``host``; None when nobody is alive."""
        if self._ring is None:
            return None
        return str(self._ring.get_node(host))

    def __contains__(self, worker: object) -> bool:
        return worker in self.members
