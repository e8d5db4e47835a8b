"""``--log-file PATH`` (wget's ``-o``): what a worker or a crawl says on standard error,
also appended to a file.

Standard error becomes a :class:`Tee`: the terminal gets every write as before, the file
gets whole lines, each in one write to a file opened for appending, so the workers of a
crawl (each a process with its own tee) can share it without cutting into each other's
lines. The live progress display stays on the terminal (``terminal_of``); its closing
summary goes to both.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TextIO

from hashcrawl._exceptions import ConfigError


class Tee(io.TextIOBase):
    """A text stream that writes to ``terminal`` and appends whole lines to ``fd``."""

    def __init__(self, terminal: TextIO, fd: int) -> None:
        super().__init__()
        self.terminal = terminal
        self.fd: int | None = fd
        self._line = ""

    def write(self, text: str) -> int:
        self.terminal.write(text)
        if self.fd is not None:
            self._line += text
            done, newline, rest = self._line.rpartition("\n")
            if newline:
                self._line = rest
                append_line(self.fd, (done + newline).encode(errors="replace"))
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()

    def fileno(self) -> int:
        return self.terminal.fileno()

    def isatty(self) -> bool:
        return self.terminal.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.terminal.encoding

    def close_file(self) -> None:
        """Append what is left of a line, then stop writing to the file."""
        if self.fd is not None:
            if self._line:
                append_line(self.fd, (self._line + "\n").encode(errors="replace"))
            os.close(self.fd)
            self.fd, self._line = None, ""


def append_line(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a full disk must not stop the crawl
        while data:
            data = data[os.write(fd, data) :]


def log_to(path: str) -> None:
    """Copy standard error to ``path`` from now on (appended to, made if missing).

    Raises:
        ConfigError: the file cannot be opened for appending.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(f"--log-file cannot write {path!r}: {exc.strerror or exc}") from None
    sys.stderr = Tee(sys.stderr, fd)


def stop_logging() -> None:
    """Close the log file, if standard error is copied to one."""
    if isinstance(sys.stderr, Tee):
        sys.stderr.close_file()
        sys.stderr = sys.stderr.terminal


def say_raw(line: str) -> None:
    """Write ``line`` to standard error and the log file with bare system calls, as a
    signal handler must (a print there could re-enter a print it interrupted)."""
    data = f"{line}\n".encode()
    with contextlib.suppress(OSError):
        os.write(sys.stderr.fileno(), data)
    fd = sys.stderr.fd if isinstance(sys.stderr, Tee) else None
    if fd is not None:
        append_line(fd, data)


def terminal_of(stream: TextIO) -> TextIO:
    """The terminal behind ``stream`` when it is a :class:`Tee`, else ``stream``."""
    return stream.terminal if isinstance(stream, Tee) else stream
