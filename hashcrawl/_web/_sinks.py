"""Sinks: where items go. JSON Lines (default) and CSV built in; a protocol for your own.

A sink that also archives (:class:`Archive`, as ``WarcSink`` in ``_warc``) is handed
every response the worker gets, and its ``flush`` joins the same commit as the items'.

The worker writes a batch of items, then flushes, and only then acknowledges the batch's
entries in Redis: what the fleet counts as done is in the sink. The built-in sinks'
``flush`` ends with an fsync (one per commit, not per item), so the items of every
acknowledged page survive a power loss too, on a disk that honours fsync. Delivery is at
least once (a worker that dies after flushing and before acknowledging repeats those
pages), so a sink that upserts on the URL makes repeats harmless.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from hashcrawl._web._models import Response


@runtime_checkable
class Sink(Protocol):
    """Anything with ``write(items)``, ``flush()`` and ``close()``, all blocking.

    ``flush`` returns only once the items written so far would survive the process
    dying, and should make them survive the machine losing power as well (fsync): the
    worker acknowledges the pages that gave them as soon as it returns. The worker calls
    these from a thread, one call at a time.
    """

    def write(self, items: Sequence[Mapping[str, Any]]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Archive(Protocol):
    """A sink that also keeps every response the worker gets (``WarcSink``).

    ``archive`` is called on the worker's event loop as each response arrives, before
    its page's outcome exists: it must not block (keep the records, write nothing) and
    should not raise (keep the error for ``flush``). The commit that acknowledges the
    page calls ``flush`` first, from its thread, and acknowledges once it returns, so
    ``flush`` must write what ``archive`` kept and make it durable. ``named_for`` is
    called once before the worker fetches, with its id, for the names of the files.
    """

    def named_for(self, worker: str) -> None: ...

    def archive(self, response: Response) -> None: ...


class AllSinks:
    """Several sinks as one: items to each, responses to each that archives."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = tuple(sinks)
        self._archives = [s for s in self.sinks if isinstance(s, Archive)]
        self._pool: ThreadPoolExecutor | None = None  # flushes the sinks after the first

    @property
    def archives(self) -> bool:
        return bool(self._archives)

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        for sink in self.sinks:
            sink.write(items)

    def flush(self) -> None:
        """Flush every sink at once, and return once all are durable.

        Each flush ends in an fsync, which waits on the disk and not the processor:
        one after another, a commit that writes items and an archive would wait twice.
        """
        if len(self.sinks) < 2:
            for sink in self.sinks:
                sink.flush()
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self.sinks) - 1, "hashcrawl-flush")
        others = [self._pool.submit(sink.flush) for sink in self.sinks[1:]]
        try:
            self.sinks[0].flush()
        finally:
            errors = [f.exception() for f in others]  # waits for each: none still runs
        for error in errors:
            if error is not None:
                raise error

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def named_for(self, worker: str) -> None:
        for archive in self._archives:
            archive.named_for(worker)

    def archive(self, response: Response) -> None:
        for archive in self._archives:
            archive.archive(response)


def archive_of(sink: Sink) -> Archive | None:
    """The part of ``sink`` that archives responses, if any."""
    if isinstance(sink, AllSinks):
        return sink if sink.archives else None
    return sink if isinstance(sink, Archive) else None


def as_dict(item: Any) -> Mapping[str, Any]:
    """An item as a mapping: dicts as they are, attrs instances through attrs.asdict."""
    if isinstance(item, Mapping):
        return item
    if attrs.has(type(item)):
        return attrs.asdict(item)
    raise TypeError(f"an item must be a dict or an attrs instance, got {type(item).__name__}")


def _append_all(fd: int, data: bytes, *, fsync: bool) -> None:
    """Write all of ``data``, then fsync when asked and ``fd`` is a regular file.

    A pipe or terminal has nothing to sync (fsync would fail with EINVAL).
    """
    while data:
        data = data[os.write(fd, data) :]
    if fsync and stat.S_ISREG(os.fstat(fd).st_mode):
        os.fsync(fd)


class JsonLinesSink:
    """One JSON object per line, appended with single writes to an O_APPEND file (the default).

    Several workers on one machine may share a file: each batch lands whole.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        """Args:
        path: the file to append to; "-" for standard output.
        fsync: make each flush durable (fsync); False trades a power loss's items for speed.
        """
        self.path = os.fspath(path)
        self.fsync = fsync
        if self.path == "-":
            self._fd = os.dup(1)
        else:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending: list[str] = []

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            self._pending.append(json.dumps(item, ensure_ascii=False, default=str) + "\n")

    def flush(self) -> None:
        if self._pending:
            data = "".join(self._pending).encode()
            self._pending.clear()
            _append_all(self._fd, data, fsync=self.fsync)

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


class CsvSink:
    """Comma-separated values with a header row; columns from the first item."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self._fields = list(fields) if fields else None
        self._buffer = io.StringIO()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._header = os.fstat(self._fd).st_size == 0

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        for item in items:
            if self._fields is None:
                self._fields = list(item)
            writer = csv.DictWriter(self._buffer, self._fields, extrasaction="ignore")
            if self._header:
                writer.writeheader()
                self._header = False
            writer.writerow(item)

    def flush(self) -> None:
        data = self._buffer.getvalue().encode()
        self._buffer = io.StringIO()
        if data:
            _append_all(self._fd, data, fsync=self.fsync)

    def close(self) -> None:
        self.flush()
        os.close(self._fd)


def sink_for(path: str | None, *, fsync: bool = True, **warc: Any) -> Sink:
    """The built-in sink for an output path: CSV for ``.csv``, WARC for ``.warc.gz`` and
    ``.warc`` (``warc`` holds ``WarcSink``'s options), JSON Lines otherwise.

    Without a path, items go to standard output as JSON Lines.
    """
    from hashcrawl._web._warc import WarcSink, is_warc_path

    if path is None:
        return JsonLinesSink("-", fsync=fsync)
    if path.endswith(".csv"):
        return CsvSink(path, fsync=fsync)
    if is_warc_path(path):  # hashcrawl join's: the records made in a process of their own
        # (HASHCRAWL_WARC_PROCESS=0: on the event loop, for scripts/bench's comparison)
        process = os.environ.get("HASHCRAWL_WARC_PROCESS", "1") != "0"
        return WarcSink(path, fsync=fsync, **{"process": process, **warc})
    return JsonLinesSink(path, fsync=fsync)


def sinks_for(paths: Sequence[str] | None, *, fsync: bool = True, **warc: Any) -> Sink:
    """The sink for every ``-o`` path at once (see :func:`sink_for`).

    Items go to standard output when no path takes them (none given, or only WARC).
    """
    from hashcrawl._web._warc import is_warc_path

    paths = list(paths or ())
    if all(is_warc_path(path) for path in paths):
        paths.insert(0, "-")
    sinks = [sink_for(None if p == "-" else p, fsync=fsync, **warc) for p in paths]
    return sinks[0] if len(sinks) == 1 else AllSinks(sinks)


def one_sink(sink: Sink | Sequence[Sink]) -> Sink:
    """A sink, or several given as a list or tuple, as one sink."""
    if isinstance(sink, Sink):
        return sink
    return AllSinks(sink)
