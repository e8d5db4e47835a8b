"""A tiny HTTP server on loopback that sends exactly the bytes a test scripts, slowly if asked.

Hostile cases (a body dripped a byte a second, a gzip bomb, stacked encodings, a bogus
charset) need control that a well-behaved server does not give: each answer here is a
list of byte strings written with an optional pause between them. The server logs every
request line it reads, so a test can show that a request never arrived.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Self

Answer = Iterable[bytes | float]  # bytes to write, or seconds to wait before the next
Handler = Callable[[str], Answer]  # from a request path to its answer


def response(status: int, body: bytes = b"", **headers: str) -> list[bytes | float]:
    """A whole response in one write, with Content-Length and Connection: close."""
    lines = [f"HTTP/1.1 {status} X"]
    names = {"Content-Length": str(len(body)), "Connection": "close"}
    names.update({k.replace("_", "-"): v for k, v in headers.items()})
    lines += [f"{k}: {v}" for k, v in names.items()]
    return [("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body]


def bomb(inflated: int, layers: int = 1) -> bytes:
    """Zeros that inflate to ``inflated`` bytes, gzipped ``layers`` times."""
    data = gzip.compress(b"\0" * inflated, compresslevel=9)
    for _ in range(layers - 1):
        data = gzip.compress(data, compresslevel=9)
    return data


class RawServer:
    """Serves ``handler``'s answers on ``host`` (a loopback address) until closed."""

    def __init__(
        self, handler: Handler, host: str = "127.0.0.2", *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.handler, self.host, self.tls = handler, host, tls
        self.paths: list[str] = []
        self.heads: list[bytes] = []  # each request's first bytes as read: its head
        self._ended = threading.Condition()
        self.ended = 0  # connections answered and closed
        self._socket = socket.create_server((host, 0))
        self._socket.settimeout(0.05)  # so that the loop sees a close without a connection
        self._closed = threading.Event()
        self.port = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, path: str = "/") -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}{path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(None)
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def wait_for_ended(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` connections were answered and closed; whether they were."""
        with self._ended:
            return self._ended.wait_for(lambda: self.ended >= count, timeout)

    def _answer(self, connection: socket.socket) -> None:
        try:
            with connection:
                if self.tls is None:
                    self._respond(connection)
                    return
                with self.tls.wrap_socket(connection, server_side=True) as wrapped:
                    self._respond(wrapped)
        except OSError:
            return  # the client hung up, as a bounded client should
        finally:
            with self._ended:
                self.ended += 1
                self._ended.notify_all()

    def _respond(self, connection: socket.socket) -> None:
        received = connection.recv(65536)
        head_like = received.split(b" ", 1)[0].isalpha()  # a method, not a TLS hello
        while head_like and b"\r\n\r\n" not in received and len(received) < 65536:
            more = connection.recv(65536)  # a head written in pieces (a proxy writes so)
            if not more:
                break
            received += more
        self.heads.append(received.partition(b"\r\n\r\n")[0])
        head = received.decode("latin-1")
        path = head.split(" ", 2)[1] if head.count(" ") >= 2 else "/"
        self.paths.append(path)
        for part in self.handler(path):
            if isinstance(part, float | int):
                time.sleep(part)
            else:
                connection.sendall(part)
