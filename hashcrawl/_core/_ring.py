"""Who owns a host: a consistent-hash ring over the live members (uhashring, ketama)."""

from __future__ import annotations

import functools

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
        return cls(epoch, ordered, _hash_ring(ordered) if ordered else None)

    def owner_of(self, host: str) -> str | None:
        """The member that alone may fetch ``host``; None when nobody is alive."""
        if self._ring is None:
            return None
        return str(self._ring.get_node(host))

    def __contains__(self, worker: object) -> bool:
        return worker in self.members


@functools.lru_cache(maxsize=32)
def _hash_ring(members: tuple[str, ...]) -> HashRing:
    """The ketama ring of ``members``, built once: 160 points a member, hashed with md5.

    Every epoch change and every drained batch asks for a ring, mostly of members seen
    before (and in the simulations, every worker asks for the same one). A HashRing is
    never changed once built, so one can be shared.
    """
    return HashRing(nodes=list(members), hash_fn="ketama")
