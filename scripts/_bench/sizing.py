"""The capacity plan: what a crawl of N pages a second over M URLs needs, from measured
per-unit costs (docs/operations.md, "Sizing a crawl").

Pure arithmetic over what ``capacity`` measures: ``Units`` (Redis bytes of one of each
thing a crawl stores), ``Crawl`` (one measured crawl), ``Costs`` (per page and per
parked entry, read off two calibration crawls), and from them ``predict`` (a crawl's
figures, to set beside what it measured) and ``plan`` (workers, primaries, memory).
"""

from __future__ import annotations

import math

import attrs

MAX_BUFFER = 50_000  # --max-buffer's default: entries a worker holds before it parks
CORE_SHARE = 0.5  # of a primary's core the plan lets a crawl take (room for bursts)


@attrs.frozen(kw_only=True)
class Units:
    """Redis bytes of one of each thing a crawl stores (``used_memory`` growth)."""

    seen_urls: int
    seen_bytes: int  # used_memory's growth over seen_urls URLs through commit.lua
    seen_keys: int  # the filter's layers alone (MEMORY USAGE)
    stream_entry: float
    held_entry: float  # the pending entry's own cost, on top of stream_entry
    parked_entry: float
    host: float  # a pace record and a scope member
    dead_letter: float


@attrs.frozen(kw_only=True)
class Crawl:
    """One measured crawl of the bench's site."""

    pages: int
    workers: int
    wall: float
    seen: int
    commands: int
    redis_cpu: float
    worker_cpu: float
    memory_end: int  # used_memory at the end minus before
    memory_peak: int  # the highest used_memory sampled, minus before
    queued_peak: int  # the highest ``outstanding`` sampled
    max_buffer: int  # each worker's --max-buffer
    parked: int  # entries moved to their host's overflow set (commit.lua's stats.parks)
    calls: dict[str, int]  # per command, scripts' inner calls included
    complete: bool

    @property
    def held_most(self) -> int:
        return self.workers * self.max_buffer

    def top_calls(self, count: int = 8) -> str:
        ranked = sorted(self.calls.items(), key=lambda kv: -kv[1])[:count]
        return ", ".join(f"{name} {self.per_page(calls):.3f}" for name, calls in ranked)

    def per_page(self, total: float) -> float:
        return total / self.pages if self.pages else 0.0


def seen_filter_bytes(urls: int, *, c0: int = 2**20, p: float = 1e-6) -> float:
    """The seen filter's bitmaps once ``urls`` URLs are in it, each layer full-sized as
    soon as it is used (its bits fall anywhere) and rounded up to its allocation."""
    total, left, i = 0, urls, 0
    while left > 0:
        k = math.ceil(math.log(2 ** (i + 1) / p) / math.log(2))
        capacity = c0 * 2 ** min(i, 6)
        total += allocated(math.ceil(math.ceil(capacity * k / math.log(2)) / 8))
        left, i = left - capacity, i + 1
    return total


def allocated(size: int) -> int:
    """The bytes jemalloc gives a request of ``size`` (a large one: four size classes
    between each power of two and the next)."""
    if size <= 16384:
        return size
    spacing = 2 ** ((size - 1).bit_length() - 3)
    return -(-size // spacing) * spacing


def queue_bytes(units: Units, queued: float, held_most: float) -> float:
    """``queued`` entries: up to ``held_most`` held by workers (a stream entry, pending),
    the rest parked in their hosts' overflow sets."""
    held = min(queued, held_most)
    return held * (units.stream_entry + units.held_entry) + (queued - held) * units.parked_entry


# -- the costs and the plan ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Costs:
    """Per-page and per-parked-entry costs, read off two calibration crawls of one site:
    one whose frontier stays within the workers' memory, and one whose --max-buffer is
    small enough that entries park as they do in a crawl of many more pages."""

    commands_page: float
    cpu_page: float  # Redis CPU seconds
    worker_cpu_page: float
    seen_page: float
    queued_page: float  # the frontier's peak against the pages
    commands_parked: float  # on top of the page's own, per entry parked
    cpu_parked: float
    parked_share: float  # entries parked / entries beyond what the workers hold at once
    base: float  # Redis bytes a crawl keeps beside its filter and hosts' records

    @classmethod
    def of(cls, calib: Crawl, parking: Crawl, units: Units, hosts: int) -> Costs:
        commands_page, cpu_page = calib.per_page(calib.commands), calib.per_page(calib.redis_cpu)
        # The calibration parks nothing: its SADDs are the few every crawl makes.
        parked = parking.parked - calib.parked
        beyond = max(parking.seen - parking.held_most, 1)
        extra_commands = parking.commands - parking.pages * commands_page
        extra_cpu = parking.redis_cpu - parking.pages * cpu_page
        if parked < 100:  # the parking crawl's frontier stayed within its memory
            parked, extra_commands, extra_cpu = 0, 0, 0.0
        return cls(
            commands_page=commands_page,
            cpu_page=cpu_page,
            worker_cpu_page=calib.per_page(calib.worker_cpu),
            seen_page=calib.per_page(calib.seen),
            queued_page=calib.per_page(calib.queued_peak),
            commands_parked=extra_commands / max(parked, 1),
            cpu_parked=extra_cpu / max(parked, 1),
            parked_share=parked / beyond,
            base=calib.memory_end - seen_filter_bytes(calib.seen) - hosts * units.host,
        )

    def parked(self, urls: float, held_most: float) -> float:
        """Entries a crawl of ``urls`` URLs parks, its workers holding ``held_most``."""
        return self.parked_share * max(0.0, urls - held_most)


@attrs.frozen(kw_only=True)
class Plan:
    rate: float
    urls: int
    workers: int
    primaries: int
    commands_page: float
    seen: float
    queue: float
    hosts: float
    total: float


def plan(
    costs: Costs,
    units: Units,
    *,
    rate: float,
    urls: int,
    queued: float,
    hosts: int,
    primary_bytes: float,
) -> Plan:
    """Workers, primaries and Redis memory for ``rate`` pages a second over ``urls`` URLs
    (each fetched once), with at most ``queued`` entries waiting at once and ``hosts``
    hosts."""
    workers = max(1, math.ceil(rate * costs.worker_cpu_page))  # a core each
    parked = costs.parked(urls, workers * MAX_BUFFER) / urls
    redis_core = rate * (costs.cpu_page + parked * costs.cpu_parked)
    seen, host = seen_filter_bytes(urls), hosts * units.host
    queue = queue_bytes(units, queued, workers * MAX_BUFFER)
    total = costs.base + seen + queue + host
    return Plan(
        rate=rate,
        urls=urls,
        workers=workers,
        primaries=max(1, math.ceil(redis_core / CORE_SHARE), math.ceil(total / primary_bytes)),
        commands_page=costs.commands_page + parked * costs.commands_parked,
        seen=seen,
        queue=queue,
        hosts=host,
        total=total,
    )


def predict(costs: Costs, units: Units, *, run: Crawl, hosts: int) -> dict[str, float]:
    """The plan's figures for a crawl of ``run``'s pages, workers and --max-buffer on a
    site of the calibration's kind."""
    seen = costs.seen_page * run.pages
    queued = costs.queued_page * run.pages
    parked = costs.parked(seen, run.held_most)
    end = costs.base + seen_filter_bytes(round(seen)) + hosts * units.host
    return {
        "commands": costs.commands_page * run.pages + costs.commands_parked * parked,
        "redis_cpu": costs.cpu_page * run.pages + costs.cpu_parked * parked,
        "seen": seen,
        "parked": parked,
        "queued_peak": queued,
        "memory_end": end,
        "memory_peak": end + queue_bytes(units, queued, run.held_most),
    }
