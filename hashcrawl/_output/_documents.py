"""Item files that stay whole: JSON, XML and CSV written a flush at a time, by several
processes at once, and repaired after a crash.

Each flush takes an exclusive ``flock`` on the file, looks at its end, writes the batch
there and fsyncs, so workers on one machine may share a file. A JSON or XML document is
closed after every flush (``]`` or ``</items>`` is written after the batch, and the next
flush writes over it), so the file is a valid document whenever no flush is under way.
A process killed during its flush may leave that flush's bytes torn (a write to a file
can stop part way): the next flush, or the next sink opened on the file, finds the end
that is not whole and cuts the file back to the end of its last whole item first. Only
items of that unfinished flush are cut, and their pages were not acknowledged: they are
fetched again. docs/operations.md ("Item formats") says what each format looks like.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from hashcrawl._exceptions import ConfigError

log = logging.getLogger("hashcrawl")
CHUNK = 1 << 16  # bytes read at a time when looking back for an item's end
BIG_CHUNK = 1 << 20  # bytes read at a time when counting a CSV file's quotes


def append_all(fd: int, data: bytes, *, fsync: bool, at: int | None = None) -> None:
    """Write all of ``data`` (at offset ``at``, or where the file's offset is), then
    fsync when asked and ``fd`` is a regular file.

    A pipe or terminal has nothing to sync (fsync would fail with EINVAL).
    """
    while data:
        done = os.write(fd, data) if at is None else os.pwrite(fd, data, at)
        data = data[done:]
        at = None if at is None else at + done
    if fsync and stat.S_ISREG(os.fstat(fd).st_mode):
        os.fsync(fd)


class Buffer:
    """Items written and not yet flushed. The shards of one worker write to one sink
    and flush it from threads: a flush takes what is there, and a write meanwhile waits
    for the next flush instead of being cleared with the taken ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []

    def add(self, items: Iterable[Any]) -> None:
        with self._lock:
            self._items.extend(items)

    def take(self) -> list[Any]:
        with self._lock:
            items, self._items = self._items, []
        return items


class SharedFile:
    """A file that processes append to one flush at a time, under an exclusive flock.

    A flock is held by the open file, not the thread, so a thread lock comes first: the
    shards of one worker flush one sink from several threads, and without it two flushes
    wrote at the same end, one over the other.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._threads = threading.Lock()
        self.pending = Buffer()

    @contextlib.contextmanager
    def locked(self) -> Iterator[int]:
        """Hold the file's lock; yields its size."""
        with self._threads:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield os.fstat(self._fd).st_size
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def put(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset``, cut whatever lay beyond it (a repair's), and fsync."""
        end = offset + len(data)
        if os.fstat(self._fd).st_size > end:
            os.ftruncate(self._fd, end)
        append_all(self._fd, data, fsync=self.fsync, at=offset)

    def end_where(self, size: int, enough: Callable[[bytes], bool]) -> tuple[int, bytes]:
        """The file's end that is ``enough`` (or all of it), and the offset it starts at:
        items may be long, so it reads back twice as far each time until they show."""
        start, window = size, CHUNK
        while start > 0:
            start = max(0, size - window)
            data = self.read(start, size - start)
            if enough(data):
                return start, data
            window *= 2
        return 0, self.read(0, size)

    def close(self) -> None:
        os.close(self._fd)


class Document(SharedFile):
    """Items between a head and a tail, each batch written over the tail and closed again.

    Subclasses give ``HEAD``, ``TAIL``, ``SEPARATOR`` (between two items), ``encode`` (an
    item's bytes) and ``whole_end`` (where the last whole item of a torn end stops).
    """

    HEAD: bytes
    TAIL: bytes
    SEPARATOR = b""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        super().__init__(path, fsync=fsync)
        with self.locked() as size:
            self._end(size)  # a new file is a valid empty document from the start

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.pending.add([self.encode(item) for item in items])  # all, or none

    def flush(self) -> None:
        pending = self.pending.take()
        if not pending:
            return
        body = self.SEPARATOR.join(pending)
        with self.locked() as size:
            end = self._end(size)
            before = self.SEPARATOR if end > len(self.HEAD) else b""
            self.put(end, before + body + self.TAIL)

    def close(self) -> None:
        self.flush()
        super().close()

    def _end(self, size: int) -> int:
        """Where the next items go: before the tail, once a torn end is cut back.

        Raises:
            ConfigError: the file holds something else, which this sink will not change.
        """
        empty = self.HEAD + self.TAIL
        if size < len(empty) and empty.startswith(self.read(0, size)):
            self.put(0, empty)  # new, or its first write torn
            return len(self.HEAD)
        if self.read(0, len(self.HEAD)) == self.HEAD:
            if self.read(size - len(self.TAIL), len(self.TAIL)) == self.TAIL:
                return size - len(self.TAIL)
            end = self.whole_end(size)
            if end is not None:
                log.warning("%s ended in a torn write: cut back to its last whole item", self.path)
                self.put(end, self.TAIL)
                return end
        raise ConfigError(_foreign(self.path, type(self).__name__))

    def encode(self, item: Mapping[str, Any]) -> bytes:
        raise NotImplementedError

    def whole_end(self, size: int) -> int | None:
        raise NotImplementedError


def foreign_document(path: str, ending: str) -> str | None:
    """Why a JSON or XML sink would refuse the file ``path``, or None: a file that is
    not empty and does not begin as this crawler's documents do."""
    kind = {".json": JsonSink, ".xml": XmlSink}.get(ending)
    if kind is None:
        return None
    try:
        with open(path, "rb") as file:
            begun = file.read(len(kind.HEAD))
    except FileNotFoundError:
        return None
    return None if kind.HEAD.startswith(begun) else _foreign(path, kind.__name__)


def _foreign(path: str, kind: str) -> str:
    return f"{path!r} holds something a {kind} did not write: it is left as it is; give a new name"


class JsonSink(Document):
    """A JSON array, one item per line between ``[`` and ``]``, as Scrapy's feed export
    writes it, and valid after every flush."""

    HEAD = b"[\n"
    TAIL = b"\n]"
    SEPARATOR = b",\n"

    def encode(self, item: Mapping[str, Any]) -> bytes:
        return json.dumps(item, ensure_ascii=False, default=str).encode()

    def whole_end(self, size: int) -> int | None:
        """An item is one line: the last line if its object is whole, else the line
        before it (written whole, since a line break follows it) less its comma; None
        if neither is an item."""
        start, data = self.end_where(size, lambda data: data.count(b"\n") >= 2)
        last = data.rfind(b"\n") + 1
        line = data[last:]
        close = line.rfind(b"}")
        if line.startswith(b"{") and _is_object(line[: close + 1]):
            return start + last + close + 1
        if last == 0:
            return None
        before = data.rfind(b"\n", 0, last - 1) + 1
        previous = data[before : last - 1]
        if start + before == 0 and previous == b"[":
            return len(self.HEAD)  # no whole item yet
        item = previous.removesuffix(b",")
        return start + before + len(item) if _is_object(item) else None


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


_XML_NAME = re.compile(r"[^\W\d][\w.-]*")
# Characters XML 1.0 does not allow at all: a parser refuses the whole file for one.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class XmlSink(Document):
    """``<items>`` of ``<item>`` elements, a field per element and a list's values as
    ``<value>`` children, as Scrapy's feed export writes it, and valid after every flush.

    A field name that is not an XML name is refused (ConfigError, naming it, for the
    whole batch). Characters
    XML cannot hold become U+FFFD; a carriage return is kept as ``&#13;``.
    """

    HEAD = b'<?xml version="1.0" encoding="utf-8"?>\n<items>\n'
    TAIL = b"</items>"

    def encode(self, item: Mapping[str, Any]) -> bytes:
        parts = ["<item>"]
        for name, value in item.items():
            _xml_field(parts, str(name), value)
        parts.append("</item>\n")
        return "".join(parts).encode()

    def whole_end(self, size: int) -> int | None:
        """Every item ends in ``</item>`` and a line break, which no text can hold."""
        start, data = self.end_where(size, lambda data: b"</item>\n" in data)
        found = data.rfind(b"</item>\n")
        return len(self.HEAD) if found < 0 else start + found + len(b"</item>\n")


def _xml_field(parts: list[str], name: str, value: Any) -> None:
    if not _XML_NAME.fullmatch(name):
        raise ConfigError(f"an item field written to XML must be an XML name, got {name!r}")
    parts.append(f"<{name}>")
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _xml_field(parts, str(key), inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            _xml_field(parts, "value", inner)
    elif value is not None:
        text = _NOT_XML.sub("\ufffd", value if isinstance(value, str) else str(value))
        parts.append(escape(text).replace("\r", "&#13;"))
    parts.append(f"</{name}>")


class CsvSink(SharedFile):
    """Comma-separated values with a header row, as Scrapy's feed export writes them.

    The columns are ``fields``, or those of the file's header when it has one (workers
    sharing a file agree), or else the first item's keys. A field no column has is left
    out, with one warning; a list of strings is joined with commas.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        fsync: bool = True,
    ) -> None:
        super().__init__(path, fsync=fsync)
        self._fields = list(fields) if fields else None
        self._warned = False
        self._header_read = False
        self._whole = 0  # where whole rows are known to end: rows are looked at once

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.pending.add(items)

    def flush(self) -> None:
        pending = self.pending.take()
        if not pending:
            return
        if self._fields is None:
            self._fields = [str(name) for name in pending[0]]
        with self.locked() as size:
            end = self._whole_end(self._whole if self._whole <= size else 0, size)
            if end < size:
                log.warning("%s ended in a torn write: cut back to its last whole row", self.path)
            buffer = io.StringIO(newline="")
            writer = csv.writer(buffer)
            if end == 0:
                writer.writerow(self._columns())
            elif not self._header_read:
                self._fields, self._header_read = self._header(), True
            writer.writerows(self._row(item) for item in pending)
            data = buffer.getvalue().encode()
            self.put(end, data)
            self._whole = end + len(data)

    def close(self) -> None:
        self.flush()
        super().close()

    def _header(self) -> list[str]:
        """The columns of the file's header row (its names hold no line break)."""
        data = b""
        while b"\n" not in data and (more := self.read(len(data), CHUNK)):
            data += more
        return next(csv.reader([data.split(b"\n", 1)[0].decode("utf-8", "replace")]))

    def _columns(self) -> list[str]:
        assert self._fields is not None  # set by the flush, from its first item
        return self._fields

    def _row(self, item: Mapping[str, Any]) -> list[Any]:
        columns = self._columns()
        if not self._warned and not set(map(str, item)) <= set(columns):
            self._warned = True
            dropped = sorted(set(map(str, item)) - set(columns))
            log.warning("%s has no column for the fields %s: left out", self.path, dropped)
        return [_csv_value(item.get(name, "")) for name in columns]

    def _whole_end(self, start: int, size: int) -> int:
        """Where the last whole row after ``start`` (a row's end) ends: a line break
        outside quotes, with an even count of quote characters before it. A row torn
        just after a line break inside its quotes ends in one too, so the quotes of
        every row others wrote since this sink's last flush are counted (in C, a fast
        pass), then line breaks are looked at from the end, the last one first."""
        quotes = sum(
            self.read(at, min(BIG_CHUNK, size - at)).count(b'"')
            for at in range(start, size, BIG_CHUNK)
        )
        end = size
        while end > start:  # quotes: those before ``end``
            begin = max(start, end - CHUNK)
            chunk = self.read(begin, end - begin)
            at = len(chunk)
            while (found := chunk.rfind(b"\n", 0, at)) >= 0:
                quotes -= chunk.count(b'"', found, at)
                if quotes % 2 == 0:
                    return begin + found + 1
                at = found
            quotes -= chunk.count(b'"', 0, at)
            end = begin
        return start


def _csv_value(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return value
