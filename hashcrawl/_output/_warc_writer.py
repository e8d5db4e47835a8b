"""A WarcSink's records made in a process of their own (``WarcSink(process=True)``).

The worker's event loop runs on one core; the records of a page (two digests, header
lines, a gzip member, ~110 us of CPU in a crawl) would take a tenth of it. With
``process``, :meth:`WarcSink.archive` only keeps each fetch's bytes; the commit's flush
sends them down a pipe to the writer (``python -m
hashcrawl._output._warc_child``), which builds, compresses, writes and fsyncs them as an
in-process :class:`WarcSink` would, and answers once they are durable: only then does
the flush return, and the worker acknowledge the pages. If the writer dies, the flush
raises, so no page is acknowledged without its records.

Frames on the pipe (network byte order): ``R`` a fetch (``FETCH`` then its strings and
bytes), ``N`` a worker name, ``F`` flush, ``C`` close; the writer answers ``F`` and
``C`` with ``K`` and the files written so far (JSON), or ``E`` and an error message.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, NamedTuple

from hashcrawl._exceptions import HashcrawlError


class Fetch(NamedTuple):
    """One fetch as its records need it (what the writer process is sent)."""

    url: str
    status: int
    truncated: bool
    date: str  # WARC-Date: when the request was sent
    address: str  # "" when not known
    request_head: bytes
    request_body: bytes
    response_head: bytes
    body: bytes


# url, status, truncated, date, address, request head, request body, response head, body
FETCH = struct.Struct("!IH?BBIIII")
LENGTH = struct.Struct("!I")
EARLY = 1 << 16  # bytes of fetches the loop keeps before it hands them to the writer
PIPE_SIZE = 1 << 20  # a commit's fetches in a few writes, not one per 64 KiB


class WarcWriterError(HashcrawlError, OSError):
    """The writer process ended, or failed to write: the flush did not happen (a
    one-line error of ``hashcrawl join``, as every :class:`HashcrawlError` is)."""


class Writer:
    """The worker's end of a writer process: keeps fetches, sends them at each flush.

    ``keep`` is called on the event loop: every ``EARLY`` bytes it hands what it kept to
    the writer with a write that never waits (what does not fit waits for the flush),
    so the writer works while the crawl goes on and a flush waits only for the last
    records. ``flush`` and ``close`` run in the commit's thread, one at a time (the
    sink's lock), and the loop sends nothing while one runs.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._frames: list[bytes] = []
        self._kept, self._next_send = 0, EARLY  # bytes in _frames; when to send them
        self._flushing = False
        self._process: subprocess.Popen[bytes] | None = None
        self._files: list[str] = []  # every file written, by this writer and any before
        self._earlier: list[str] = []  # the files of writers that died

    def named_for(self, worker: str) -> None:
        """Name the files after ``worker``, and start the writer now (the worker calls
        this before it fetches), so that its start-up is not the first flush's wait."""
        with self._lock:
            self._options["worker"] = worker
            if self._process is not None:
                name = worker.encode()
                self._frames += [b"N", LENGTH.pack(len(name)), name]
                return
        with contextlib.suppress(OSError):  # the first flush tries again, and says why
            self._start()

    def keep(self, fetch: Fetch) -> None:
        url, date, address = (fetch.url.encode(errors="replace"), fetch.date.encode(),
                              fetch.address.encode())  # fmt: skip
        head = FETCH.pack(
            len(url), fetch.status, fetch.truncated, len(date), len(address),
            len(fetch.request_head), len(fetch.request_body), len(fetch.response_head),
            len(fetch.body),
        )  # fmt: skip
        frame = [b"R", head, url, date, address, fetch.request_head, fetch.request_body]
        frame += [fetch.response_head, fetch.body]
        with self._lock:
            self._frames += frame
            self._kept += sum(map(len, frame))
            if self._kept >= self._next_send and not self._flushing:
                self._send_early()

    def _send_early(self) -> None:
        """Write what was kept if the pipe takes it now (under the lock, on the loop)."""
        process = self._process
        if process is None or process.stdin is None:
            return
        data, fd = b"".join(self._frames), process.stdin.fileno()
        try:
            os.set_blocking(fd, False)
            try:
                sent = os.write(fd, data)
            finally:
                os.set_blocking(fd, True)
        except OSError:  # a full pipe (the flush waits), or a writer gone (it fails)
            sent = 0
        rest = data[sent:]
        self._frames, self._kept = ([rest] if rest else []), len(rest)
        self._next_send = self._kept + EARLY  # a full pipe is not asked again at once

    def flush(self) -> list[str]:
        """Send what was kept, and return once the writer has made it durable."""
        self._ask(b"F")
        return list(self._files)

    def close(self) -> list[str]:
        """Flush, then end the writer (its files closed)."""
        self._ask(b"C")
        process, self._process = self._process, None
        if process is not None:
            _end(process)
        return list(self._files)

    def _ask(self, what: bytes) -> None:
        with self._lock:
            frames, self._frames = self._frames, []
            self._kept, self._next_send, self._flushing = 0, EARLY, True
        try:
            if frames or self._process is not None:
                self._exchange(frames, what)
        finally:
            with self._lock:
                self._flushing = False

    def _exchange(self, frames: list[bytes], what: bytes) -> None:
        process = self._process or self._start()
        assert process.stdin is not None and process.stdout is not None
        try:
            _send(process.stdin.fileno(), b"".join([*frames, what]))
            answer = read_exactly(process.stdout, 1 + LENGTH.size)
            text = read_exactly(process.stdout, LENGTH.unpack(answer[1:])[0]).decode()
        except (OSError, EOFError):
            raise self._gone(process) from None
        if answer[:1] == b"E":
            raise WarcWriterError(f"the WARC writer failed: {text}")
        self._files = self._earlier + json.loads(text)

    def _start(self) -> subprocess.Popen[bytes]:
        """Start the writer: this Python, this checkout of hashcrawl, its own session
        (a Ctrl-C at the terminal is the worker's to handle; the writer ends when the
        worker closes it, or when its pipe closes)."""
        root = str(Path(__file__).resolve().parents[2])
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
        command = [sys.executable, "-m", "hashcrawl._output._warc_child", json.dumps(self._options)]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
        assert process.stdin is not None
        with contextlib.suppress(OSError, AttributeError, ImportError):  # Linux's bigger pipe
            import fcntl

            fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        self._process = process
        return process

    def _gone(self, process: subprocess.Popen[bytes]) -> WarcWriterError:
        try:
            status = _end(process, timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            status = _end(process)
        self._process, self._earlier = None, list(self._files)
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        return WarcWriterError(
            f"the WARC writer (pid {process.pid}) {how}: the records of pages not yet "
            "acknowledged may not be written, so those pages are not acknowledged"
        )


def _end(process: subprocess.Popen[bytes], timeout: float | None = None) -> int:
    """Close the pipes to ``process`` (it reads the end of its input) and reap it."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a broken pipe's unwritten buffer
                pipe.close()
    return process.wait(timeout)


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return data


def read_fetch(stream: IO[bytes]) -> Fetch:
    """The fetch of an ``R`` frame, its kind byte read already."""
    url_n, status, truncated, date_n, address_n, *sizes = FETCH.unpack(
        read_exactly(stream, FETCH.size)
    )
    url, date, address = (
        read_exactly(stream, n).decode(errors="replace") for n in (url_n, date_n, address_n)
    )
    request_head, request_body, response_head, body = (read_exactly(stream, n) for n in sizes)
    return Fetch(
        url, status, truncated, date, address, request_head, request_body, response_head, body
    )
