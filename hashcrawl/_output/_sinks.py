"""Sinks: where items go. JSON Lines (the default), JSON, CSV, XML and Parquet built in,
picked by the end of a file's name; a protocol for your own.

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

import json
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from hashcrawl._exceptions import ConfigError
from hashcrawl._output._documents import (
    Buffer,
    CsvSink,
    Document,
    JsonSink,
    SharedFile,
    XmlSink,
    append_all,
)

log = logging.getLogger("hashcrawl")

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


class JsonLinesSink:
    """One JSON object per line, appended (the default).

    Several workers on one machine may share a file: each flush lands whole, under the
    file's lock, after cutting a line a killed process left torn (see ``_documents``).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        """Args:
        path: the file to append to; "-" for standard output.
        fsync: make each flush durable (fsync); False trades a power loss's items for speed.
        """
        self.path = os.fspath(path)
        self.fsync = fsync
        self._file: SharedFile | None = None
        if self.path == "-":
            self._fd = os.dup(1)
        elif _is_stream(self.path):  # a pipe or a device: appended to as it is
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        else:
            self._file = SharedFile(self.path, fsync=fsync)
        self._pending = Buffer()

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._pending.add(
            json.dumps(item, ensure_ascii=False, default=str) + "\n" for item in items
        )

    def flush(self) -> None:
        pending = self._pending.take()
        if not pending:
            return
        data = "".join(pending).encode()
        if self._file is None:
            append_all(self._fd, data, fsync=self.fsync)
            return
        with self._file.locked() as size:
            end = size
            if size and self._file.read(size - 1, 1) != b"\n":
                start, tail = self._file.end_where(size, lambda tail: b"\n" in tail)
                end = start + tail.rfind(b"\n") + 1
                log.warning("%s ended in a torn write: cut back to its last whole line", self.path)
            self._file.put(end, data)

    def close(self) -> None:
        self.flush()
        if self._file is None:
            os.close(self._fd)
        else:
            self._file.close()


def _is_stream(path: str) -> bool:
    """Whether ``path`` is a device or a pipe (``/dev/null``, ``/dev/stdout``, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


#: The item formats by the end of a file's name, as ``-o FILE`` and :func:`sink_for` read it.
FORMATS = {
    ".jsonl": "JSON Lines",
    ".jl": "JSON Lines",
    ".json": "JSON",
    ".csv": "CSV",
    ".xml": "XML",
    ".parquet": "Parquet",
    ".warc.gz": "WARC",
    ".warc": "WARC",
}


def format_of(path: str) -> str:
    """The ending in :data:`FORMATS` that ``path`` has; JSON Lines for "-" (standard
    output) and for a device or pipe, which take a stream.

    Raises:
        ConfigError: a name with none of those endings, naming them.
    """
    if path == "-" or _is_stream(path):
        return ".jsonl"
    for ending in FORMATS:
        if path.lower().endswith(ending):
            return ending
    raise ConfigError(
        f"cannot tell the item format of {path!r} from its name: it must end in "
        f"{', '.join(FORMATS)} (or be - for standard output)"
    )


def sink_for(path: str | None, *, fsync: bool = True, **warc: Any) -> Sink:
    """The built-in sink for an output path, by the end of its name (:data:`FORMATS`):
    ``WarcSink`` for ``.warc.gz`` and ``.warc`` (``warc`` holds its options).

    Without a path, items go to standard output as JSON Lines.

    Raises:
        ConfigError: a name with no known ending.
    """
    from hashcrawl._output._warc import WarcSink

    ending = ".jsonl" if path is None else format_of(path)
    if path is None or ending in (".jsonl", ".jl"):
        return JsonLinesSink("-" if path is None else path, fsync=fsync)
    if ending == ".parquet":
        from hashcrawl._output._parquet import ParquetSink

        return ParquetSink(path, fsync=fsync)
    if ending.startswith(".warc"):  # hashcrawl join's: the records made in a process of
        # their own (HASHCRAWL_WARC_PROCESS=0: on the event loop, for scripts/bench)
        process = os.environ.get("HASHCRAWL_WARC_PROCESS", "1") != "0"
        return WarcSink(path, fsync=fsync, **{"process": process, **warc})
    kinds: dict[str, type[Document | CsvSink]] = {
        ".json": JsonSink, ".xml": XmlSink, ".csv": CsvSink
    }  # fmt: skip
    return kinds[ending](path, fsync=fsync)


def sinks_for(paths: Sequence[str] | None, *, fsync: bool = True, **warc: Any) -> Sink:
    """The sink for every ``-o`` path at once (see :func:`sink_for`).

    Items go to standard output when no path takes them (none given, or only WARC).
    """
    from hashcrawl._output._warc import is_warc_path

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
