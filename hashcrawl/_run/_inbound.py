"""Links crossing shards: what one shard's pages found for another, waiting for that
shard's next commit to carry them (``_sharding``; a crawl of one shard has none)."""

from __future__ import annotations

import attrs

from hashcrawl._core._entry import Entry
from hashcrawl._core._ring import Ring


@attrs.define(eq=False)
class Parcel:
    """Links found on one shard's pages, of hosts in another: ``done`` once a commit of
    that shard has added them, confirmed."""

    entries: list[Entry]
    done: bool = False


class Inbound:
    """Links other shards' pages found for this membership's shard, waiting for its next
    commit to carry them (one shard: never any)."""

    def __init__(self) -> None:
        self.parcels: list[Parcel] = []
        self.misroute: Ring | None = None  # deliver_by_source_ring: routed wrongly by this

    def __bool__(self) -> bool:
        return bool(self.parcels)

    def put(self, entries: list[Entry]) -> Parcel:
        parcel = Parcel(entries)
        self.parcels.append(parcel)
        return parcel

    def take(self) -> list[Parcel]:
        taken, self.parcels = self.parcels, []
        return taken

    def put_back(self, parcels: list[Parcel]) -> None:
        """A commit that took ``parcels`` did not go through: the next one carries them."""
        self.parcels[:0] = parcels
