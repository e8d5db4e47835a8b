"""A real forward proxy on loopback for tests and scripts: tinyproxy, with its own
config and log file, and the requests read back from that log.

tinyproxy (Debian's package) logs each request line it forwards ("Request (file
descriptor N): GET http://host:port/path HTTP/1.1"), so a test judges from the proxy's
own log which requests went through it.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+) HTTP/")
READY_WITHIN = 10.0  # seconds a starting tinyproxy may take to listen


def have_tinyproxy() -> bool:
    return shutil.which("tinyproxy") is not None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class Tinyproxy:
    """tinyproxy listening on ``host`` at a free port, logging to ``directory``.

    Args:
        directory: where its config and log go (a test's tmp_path).
        credentials: ``(user, password)`` it asks for (407 without them), or None.
    """

    def __init__(
        self,
        directory: Path,
        *,
        host: str = "127.0.0.1",
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.host, self.port = host, free_port(host)
        self.directory = directory / f"tinyproxy-{self.port}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log = self.directory / "tinyproxy.log"
        self.config = self.directory / "tinyproxy.conf"
        lines = [
            f"Port {self.port}", f"Listen {host}", "Timeout 30", f'LogFile "{self.log}"',
            "LogLevel Connect", "MaxClients 200", "DisableViaHeader Yes",
        ]  # fmt: skip
        if credentials is not None:
            lines.append(f"BasicAuth {credentials[0]} {credentials[1]}")
        self.config.write_text("\n".join(lines) + "\n")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Start it and return once it accepts connections."""
        self._process = subprocess.Popen(
            ["tinyproxy", "-d", "-c", str(self.config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"tinyproxy exited with {self._process.returncode}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)  # a process starting: nothing to await but its socket
        raise RuntimeError(f"tinyproxy did not listen within {READY_WITHIN} s")

    def stop(self) -> None:
        """Stop it (connections refused from now on)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)

    def requests(self) -> list[tuple[str, str]]:
        """(method, URL) of each request it took, from its log."""
        if not self.log.exists():
            return []
        text = self.log.read_text(errors="replace")
        return [(m.group(1), m.group(2)) for m in _REQUEST.finditer(text)]

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
