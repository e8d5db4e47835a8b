"""Who owns a host: a consistent-hash ring over the live members' names (uhashring, ketama).

A member's id is its name, or ``NAME~TOKEN`` for a worker started with ``--name``: each
incarnation has an id of its own (fencing goes by ids), and all have the name's place on
the ring, so a worker that takes its predecessor's place moves no host.
"""

from __future__ import annotations

import functools

import attrs
from uhashring import HashRing

#: Hosts whose owner one ring remembers; past this many it starts over (hosts come
#: from pages, so their number is anyone's to choose).
OWNERS_REMEMBERED = 10_000
#: Between a worker's name and its incarnation's token in a member id.
INCARNATION = "~"


def name_of(member: str) -> str:
    """The name whose place on the ring ``member`` has: its id up to the first ``~``."""
    return member.partition(INCARNATION)[0]


@attrs.frozen
class Ring:
    """The live members at one membership epoch, and the owner of every host."""

    epoch: int
    members: tuple[str, ...]
    _ring: _Owners | None = attrs.field(eq=False, repr=False)

    @classmethod
    def of(cls, epoch: int, members: tuple[str, ...] | list[str]) -> Ring:
        """Build the ring every worker builds from the same sorted member list: over
        their names, each name standing for its member (of two members with one name,
        which a join refuses, the later id in order)."""
        ordered = tuple(sorted(members))
        return cls(epoch, ordered, _owners(ordered) if ordered else None)

    def owner_of(self, host: str) -> str | None:
        """The member that alone may fetch ``host``; None when nobody is alive."""
        if self._ring is None:
            return None
        return self._ring.owner_of(host)

    def __contains__(self, worker: object) -> bool:
        return worker in self.members


class _Owners:
    """A ring's owner of each host, each looked up once: every page asks several times
    (before it is sent, as it leaves, when it is answered) and so does each of its links,
    and a ketama lookup costs a microsecond or two where a dict's is 30 ns."""

    def __init__(self, ring: HashRing, members: dict[str, str]) -> None:
        self._ring = ring
        self._members = members  # name -> member id
        self._owners: dict[str, str] = {}

    def owner_of(self, host: str) -> str:
        owner = self._owners.get(host)
        if owner is None:
            if len(self._owners) >= OWNERS_REMEMBERED:
                self._owners.clear()
            owner = self._owners[host] = self._members[str(self._ring.get_node(host))]
        return owner


@functools.lru_cache(maxsize=32)
def _owners(members: tuple[str, ...]) -> _Owners:
    """The owners of ``members`` (sorted ids), built once and shared, memo and all."""
    ids = {name_of(m): m for m in members}
    return _Owners(_hash_ring(tuple(sorted(ids))), ids)


@functools.lru_cache(maxsize=32)
def _hash_ring(names: tuple[str, ...]) -> HashRing:
    """The ketama ring of ``names``, built once: 160 points a name, hashed with md5.

    Every epoch change and every drained batch asks for a ring, mostly of members seen
    before (and in the simulations, every worker asks for the same one). A HashRing is
    never changed once built, so one can be shared.
    """
    return HashRing(nodes=list(names), hash_fn="ketama")
