"""The store's two halves as protocols: what a worker asks of a crawl's keys, and what
an operator reads or clears. ``_store.Store`` (Redis) implements both; the simulations'
``FaultyStore`` implements the worker's half, so the driver is checked against either.

No IO here: a driver depends on these, never on Redis itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from hashcrawl._core._batch import Batch, Beat, Committed
from hashcrawl._core._due import Fetch
from hashcrawl._core._names import Holder
from hashcrawl._core._pace import Paces


class WorkerStore(Protocol):
    """A crawl's store as one worker uses it: membership, its stream, commits.

    Each call either does all it says or raises ``QueueError`` (``Fenced``, ``StateLost``
    where the store says so); what each does is ``_store.Store``'s docstrings'.
    """

    @property
    def crawl(self) -> str: ...

    @property
    def inbox(self) -> str: ...

    def stream_of(self, worker: str) -> str: ...

    def close(self) -> None: ...

    def join(
        self,
        worker: str,
        info: Mapping[str, str | int],
        *,
        instance: str = "",
        replaces: Holder | None = None,
        lease_ms: int = 0,
        in_hand: Sequence[str] = (),
        timeout_ms: int = 0,
    ) -> tuple[int, int, str]: ...

    def holder(self, name: str) -> Holder | None: ...

    def instance(self) -> str | None: ...

    def durability_warning(self) -> str | None: ...

    def heartbeat(
        self,
        worker: str,
        *,
        lease_ms: int,
        applied: int,
        known_epoch: int,
        stats: Mapping[str, str | int] = {},
        expire_ms: int | None = None,
        instance: str = "",
        forget_ms: int | None = None,
    ) -> Beat: ...

    def leave(self, worker: str, pace: Mapping[str, str]) -> int: ...

    def members(self) -> tuple[int, tuple[str, ...]]: ...

    def commit(self, batch: Batch) -> Committed: ...

    def read(
        self, worker: str, *, count: int, block_ms: int, after: str | None = None
    ) -> list[tuple[str, bytes | None]]: ...

    def orphan(self) -> str | None: ...

    def entries(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]: ...

    def held(self, stream: str, *, count: int) -> list[tuple[str, bytes | None]]: ...

    def release(self, stream: str) -> bool: ...

    def unpark(self, worker: str, epoch: int, host: str, count: int) -> tuple[str, int, int]: ...

    def note_in_flight(self, worker: str, seq: int, eids: Sequence[str]) -> bool: ...

    def take_page(self, cap: int) -> bool: ...

    def give_back_page(self) -> None: ...

    def in_flight_of(self, stream: str) -> set[str]: ...

    def widen_scope(self, members: set[str]) -> None: ...

    def add_parents(self, members: set[str], cap: int) -> tuple[bool, int]: ...

    def scope(self) -> set[str]: ...

    def parked_hosts(self) -> set[str]: ...

    def pace(self, hosts: Sequence[str]) -> Paces: ...

    def start_settings(
        self, texts: Mapping[str, str], scope: Sequence[str], *, max_text: int
    ) -> list[Any]: ...

    def fleet_counters(self) -> dict[str, int]: ...


class RevisitStore(Protocol):
    """A crawl's revisit records as a worker uses them (``_store._revisits.Revisits``)."""

    def put(self, fetches: Sequence[Fetch]) -> int: ...

    def take(self, *, requeue_s: int, now_s: int | None = None, most: int = ...) -> Any: ...


class StatusStore(Protocol):
    """A crawl's store as an operator sees it: status, dead letters, settings, clearing."""

    @property
    def crawl(self) -> str: ...

    def status(self) -> dict[str, Any]: ...

    def worker_records(self) -> dict[str, dict[str, str]]: ...

    def fleet_counters(self) -> dict[str, int]: ...

    def server_info(self) -> dict[str, Any]: ...

    def other_crawls(self, *, scan_at_most: int = 10_000) -> list[str]: ...

    def dead(self) -> dict[str, str]: ...

    def some_dead(self, scan: int) -> dict[str, str]: ...

    def forget_dead(self, keys: Sequence[str]) -> None: ...

    def read_settings(self, fields: Sequence[str], *, max_text: int) -> list[Any]: ...

    def scope_domains(self, *, scan_at_most: int = 100_000) -> tuple[list[str], bool]: ...

    def clear(self) -> int: ...
