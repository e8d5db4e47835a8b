"""Items as a directory of closed Parquet files, none of them ever left half written.

A Parquet file is readable only once its footer is written, at its close, and a file
closed at every flush would be one file per fifth of a second. So each flush appends
the batch to a journal in the directory (JSON Lines, fsynced: the pages are acknowledged
on that), and the journal becomes a closed part, ``part-TOKEN-SEQ.parquet``, once it
holds ``rows`` items or is ``seconds`` old, and at close. A part is written under a
hidden name, fsynced and renamed, so a reader of the directory sees whole parts only.

A journal is locked (flock) by the sink writing it. A sink opening the directory makes
the parts of journals no process holds: a worker killed with SIGKILL leaves its journal,
and the worker that replaces it (or any sink opened on the directory after) turns it
into its part. The part's name comes from the journal's, so doing it twice (a crash in
between) makes the same file again, not a second copy.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hashcrawl._exceptions import ConfigError
from hashcrawl._output._documents import Buffer, append_all

log = logging.getLogger("hashcrawl")
JOURNAL = ".journal-"  # a hidden name: Parquet readers skip names that begin with a dot
ROWS = 10_000  # items in a part, at most (a part also closes once SECONDS old)
SECONDS = 60.0


def parquet_module() -> Any:
    """pyarrow, with its parquet module loaded.

    Raises:
        ConfigError: pyarrow is not installed, with how to install it.
    """
    try:
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(
            "Parquet output needs pyarrow: pip install 'hashcrawl[parquet]'"
        ) from None
    return pyarrow


class ParquetSink:
    """Items as Parquet files in the directory ``path`` (made if missing), which
    ``pyarrow.parquet.read_table(path)`` reads as one table.

    The columns and their types are those of the directory's first part, or of the first
    items; a field no column has is left out, with one warning. Values go as JSON has
    them (a value JSON cannot hold as its own, as its ``str``). ``files`` lists the parts
    this sink has closed.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rows: int = ROWS,
        seconds: float = SECONDS,
        fsync: bool = True,
    ) -> None:
        """Args:
        path: the directory of parts.
        rows: items in a part, at most.
        seconds: how long a part may stay open while items come (at close it closes).
        fsync: make each flush durable (fsync).

        Raises:
            ConfigError: no pyarrow, or ``path`` is not a directory that can be made.
        """
        self.pa = parquet_module()
        self.path = os.fspath(path)
        self.rows, self.seconds, self.fsync = rows, seconds, fsync
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot make Parquet directory {self.path!r}: {exc}") from None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._token = f"{stamp}-{os.getpid()}-{secrets.token_hex(3)}"
        self._seq = 0
        self._journal: int | None = None
        self._opened_at = 0.0
        self._count = 0
        self._pending = Buffer()  # the shards of one worker write and flush from threads
        self._flushing = threading.Lock()
        self._warned = False
        #: The parts this sink has closed, oldest first.
        self.files: list[str] = []
        self.recover()

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._pending.add(
            json.dumps(item, ensure_ascii=False, default=str) + "\n" for item in items
        )

    def flush(self) -> None:
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        pending = self._pending.take()
        if pending:
            if self._journal is None:
                self._open_journal()
            assert self._journal is not None
            append_all(self._journal, "".join(pending).encode(), fsync=self.fsync)
            self._count += len(pending)
        old = time.monotonic() - self._opened_at >= self.seconds
        if self._journal is not None and (self._count >= self.rows or old):
            self._seal()

    def close(self) -> None:
        self.flush()
        if self._journal is not None:
            self._seal()

    def recover(self) -> None:
        """Make the part of every journal in the directory that no process holds."""
        for journal in sorted(Path(self.path).glob(f"{JOURNAL}*.jsonl")):
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(journal, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)  # its sink is alive and writing it
                    continue
                if _same_file(journal, fd):
                    log.warning("%s: making the part a stopped worker left unmade", journal)
                    self._part_of(fd, journal)
                else:  # another sink made it while this one waited
                    os.close(fd)

    def _open_journal(self) -> None:
        name = Path(self.path) / f"{JOURNAL}{self._token}-{self._seq:05d}.jsonl"
        self._journal = os.open(name, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.flock(self._journal, fcntl.LOCK_EX)
        self._opened_at = time.monotonic()

    def _seal(self) -> None:
        assert self._journal is not None
        name = Path(self.path) / f"{JOURNAL}{self._token}-{self._seq:05d}.jsonl"
        self._part_of(self._journal, name)
        self._journal, self._count, self._seq = None, 0, self._seq + 1

    def _part_of(self, fd: int, journal: Path) -> None:
        """Write ``journal``'s part (a torn last line left out), then remove the journal
        and close ``fd``, its lock."""
        try:
            items = _items_of(_read_all(fd))
            if items:
                part = Path(self.path) / f"part-{journal.name.removeprefix(JOURNAL)}"
                self._write_part(items, part.with_suffix(".parquet"))
            os.unlink(journal)
        finally:
            os.close(fd)

    def _write_part(self, items: list[dict[str, Any]], part: Path) -> None:
        pq = self.pa.parquet
        table = self._table(items)
        hidden = part.with_name(f".{part.name}.tmp")
        pq.write_table(table, hidden)
        if self.fsync:
            _fsync_path(hidden)
        os.replace(hidden, part)
        if self.fsync:
            _fsync_path(part.parent)
        self.files.append(str(part))

    def _table(self, items: list[dict[str, Any]]) -> Any:
        """The items as a table in the directory's columns, or in their own the first
        time, or when they do not fit (said in a warning: nothing is dropped for it)."""
        pa = self.pa
        schema = self._schema()
        if schema is not None:
            new = {str(k) for item in items for k in item} - set(schema.names)
            if new and not self._warned:
                self._warned = True
                log.warning("%s has no column for the fields %s: left out", self.path, sorted(new))
            try:
                return pa.Table.from_pylist(items, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                log.warning(
                    "%s: items do not fit the columns of its first part (%s): this part "
                    "has its own",
                    self.path,
                    exc,
                )
        table = pa.Table.from_pylist(items)
        # A column all None in the first items is most likely text: say so, or no later
        # part with text in it would fit the directory's columns.
        fields = [f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in table.schema]
        return table.cast(pa.schema(fields))

    def _schema(self) -> Any:
        parts = sorted(Path(self.path).glob("part-*.parquet"))
        return self.pa.parquet.read_schema(parts[0]) if parts else None


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed meanwhile)."""
    try:
        return path.stat().st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _items_of(data: bytes) -> list[dict[str, Any]]:
    """A journal's items; a last line its writer's death left torn was never
    acknowledged, and is left out."""
    lines = data.split(b"\n")
    return [json.loads(line) for line in lines[:-1]]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
