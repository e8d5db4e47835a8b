"""What a fleet-scale run measured, and how it reads (see ``simulations.fleet``)."""

from __future__ import annotations

from collections import Counter

import attrs


@attrs.define
class Figures:
    """What one fleet run measured."""

    workers: int
    hosts: int
    pages_total: int
    lease: float
    pages_done: int = 0
    items: int = 0
    requests: int = 0
    too_soon: int = 0
    commands: int = 0
    store_calls: int = 0
    commands_by_name: dict[str, int] = attrs.Factory(dict)
    memory_end: int = 0
    memory_peak: int = 0
    queued_at_peak: int = 0
    urls_seen: int = 0
    joins: int = 0
    crashes: int = 0
    leaves: int = 0
    moved_per_join: list[float] = attrs.Factory(list)
    expiry_seconds: list[float] = attrs.Factory(list)
    reclaim_seconds: list[float] = attrs.Factory(list)
    simulated: float = 0.0
    real: float = 0.0

    @property
    def commands_per_page(self) -> float:
        return self.commands / max(1, self.pages_done)

    def lines(self) -> list[str]:
        top = ", ".join(f"{k} {v / max(1, self.pages_done):.2f}" for k, v in self._top())
        per_url_end = self.memory_end / max(1, self.urls_seen)
        per_queued = self.memory_peak / max(1, self.queued_at_peak)
        return [
            f"{self.workers} workers, {self.hosts} hosts, {self.pages_total} URLs; "
            f"{self.joins} joins, {self.crashes} kills, {self.leaves} leaves",
            f"done {self.pages_done}/{self.pages_total} pages ({self.items} items, "
            f"{self.requests} requests, {self.too_soon} too soon) in {self.simulated:.0f} "
            f"simulated s, {self.real:.0f} s real",
            f"hosts moved per join: {_stats(self.moved_per_join, '{:.2%}')}",
            f"dead worker expired after: {_stats(self.expiry_seconds, '{:.1f} s')}",
            f"its entries all re-routed after: {_stats(self.reclaim_seconds, '{:.1f} s')}",
            f"Redis commands per page: {self.commands_per_page:.2f}, counting those scripts "
            f"run ({top}); Store calls (round trips) per page: "
            f"{self.store_calls / max(1, self.pages_done):.2f}",
            f"Redis memory per URL seen, at the end: {per_url_end:.1f} B "
            f"({self.memory_end / 2**20:.1f} MiB for {self.urls_seen} URLs)",
            f"Redis memory at its peak: {self.memory_peak / 2**20:.1f} MiB with "
            f"{self.queued_at_peak} entries queued ({per_queued:.0f} B per queued entry, "
            "filter included)",
        ]

    def _top(self) -> list[tuple[str, int]]:
        return Counter(self.commands_by_name).most_common(6)


def _stats(values: list[float], fmt: str) -> str:
    if not values:
        return "none measured"
    ordered = sorted(values)
    middle = ordered[len(ordered) // 2]
    return (
        f"median {fmt.format(middle)}, min {fmt.format(ordered[0])}, "
        f"max {fmt.format(ordered[-1])} over {len(values)}"
    )
