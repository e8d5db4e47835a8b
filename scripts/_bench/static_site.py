"""The benchmark's web site: static files for many loopback hosts, and the server for them.

``generate`` writes ``ROOT/127.0.0.N/...`` for hosts 127.0.0.2, 127.0.0.3, ... all on
one port: a ``robots.txt`` per host (allow all but ``/private/``), ``index.html`` and
``p/I.html`` pages of 6-10 KB with ~15 links each (a chain through the host so every
page is reachable from the roots, random pages of the same host, a few pages of other
hosts, now and then a ``/private/`` link that robots.txt forbids).

``StaticServer`` serves that tree: nginx when it is installed (one worker process,
``root ROOT/$server_addr``, an access log with arrival times), else a small asyncio
server in a separate process that reads each file as it is asked for (loading 200,000
pages first took longer than the wait for it to listen). Either writes one line per
request to ``log_path``: ``unix_seconds status server_addr uri``. The server dies with
the process that started it, even one killed with SIGKILL (the kernel's parent-death
signal), and one that fails to listen is stopped before the error is raised.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hashcrawl._store._server import _dies_with as dies_with

ROBOTS = "User-agent: *\nDisallow: /private/\n"
_WORDS = [
    "crawler", "frontier", "lease", "ring", "host", "page", "link", "queue", "worker",
    "redis", "stream", "bloom", "filter", "politeness", "robots", "fetch", "parse",
    "commit", "epoch", "owner", "handoff", "batch", "latency", "throughput", "memory",
    "socket", "server", "client", "request", "response", "header", "body", "title",
]  # fmt: skip


def hosts_for(count: int) -> list[str]:
    if not 1 <= count <= 250:
        raise ValueError(f"hosts must be in 1..250, got {count}")
    return [f"127.0.0.{n}" for n in range(2, 2 + count)]


def allow_flags() -> list[str]:
    """``--allow-net`` flags for every address ``hosts_for`` can give, and no other."""
    first, last = ipaddress.IPv4Address("127.0.0.2"), ipaddress.IPv4Address("127.0.0.251")
    nets = ipaddress.summarize_address_range(first, last)
    return [flag for net in nets for flag in ("--allow-net", str(net))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def page_path(i: int) -> str:
    return "/" if i == 0 else f"/p/{i}.html"


def generate(root: Path, *, hosts: int, pages: int, port: int, seed: int = 7) -> list[str]:
    """Write the site under ``root``; returns the seed URLs (every host's root page)."""
    names = hosts_for(hosts)
    per_host = max(1, pages // hosts)
    rng = random.Random(seed)
    paragraphs = [_paragraph(rng) for _ in range(400)]
    for host in names:
        base = root / host
        (base / "p").mkdir(parents=True, exist_ok=True)
        (base / "robots.txt").write_text(ROBOTS)
        for i in range(per_host):
            body = _page(rng, paragraphs, names, host, i, per_host, port)
            name = base / ("index.html" if i == 0 else f"p/{i}.html")
            name.write_text(body)
    os.chmod(root, 0o755)  # nginx's workers may run as another user
    return [f"http://{h}:{port}/" for h in names]


def _paragraph(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(40, 90)))


def _page(
    rng: random.Random,
    paragraphs: list[str],
    names: list[str],
    host: str,
    i: int,
    per_host: int,
    port: int,
) -> str:
    links = [page_path(i + 1)] if i + 1 < per_host else []
    links += [page_path(rng.randrange(per_host)) for _ in range(10)]
    for _ in range(3):
        other = rng.choice(names)
        links.append(f"http://{other}:{port}{page_path(rng.randrange(per_host))}")
    if rng.random() < 0.1:
        links.append(f"/private/{rng.randrange(1000)}.html")
    target = rng.randint(6000, 10000)
    parts = [
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>",
        f"<title>{host} page {i}</title></head><body>\n<h1>Page {i} of {host}</h1>\n<ul>",
    ]
    parts += [f"<li><a href='{href}'>link {n}</a></li>" for n, href in enumerate(links)]
    parts.append("</ul>")
    size = sum(len(p) for p in parts)
    while size < target - 120:
        text = rng.choice(paragraphs)[: target - size - 100]
        parts.append(f"<p>{text}</p>")
        size += len(text) + 8
    parts.append("</body></html>\n")
    return "\n".join(parts)


# -- serving ---------------------------------------------------------------------------

_NGINX_CONF = """\
worker_processes 1;
worker_rlimit_nofile 8192;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
    types {{ text/html html; text/plain txt; }}
    default_type text/html;
    log_format bench '$msec $status $server_addr $request_uri $request_time $connection';
    access_log {log} bench buffer=256k flush=1s;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    open_file_cache max=2000 inactive=60s;
    client_body_temp_path {work}/tmp-body;
    proxy_temp_path {work}/tmp-proxy;
    fastcgi_temp_path {work}/tmp-fastcgi;
    uwsgi_temp_path {work}/tmp-uwsgi;
    scgi_temp_path {work}/tmp-scgi;
    server {{
{listens}
        root {root}/$server_addr;
        index index.html;
    }}
}}
"""


class StaticServer:
    """nginx (or the asyncio fallback) serving ``root`` for ``hosts`` on ``port``."""

    def __init__(
        self, root: Path, work: Path, *, hosts: int, port: int, use_nginx: bool = True
    ) -> None:
        self.root, self.work, self.port = root, work, port
        self.hosts = hosts_for(hosts)
        self.nginx = (shutil.which("nginx") or _sbin("nginx")) if use_nginx else None
        reason = "nginx not found" if use_nginx else "asked for"
        self.kind = "nginx" if self.nginx else f"the asyncio fallback server ({reason})"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = work / "access.log"

    def start(self, log_path: Path) -> None:
        self.log_path = log_path
        self.work.mkdir(parents=True, exist_ok=True)
        if self.nginx:
            conf = self._write_conf()
            command = [self.nginx, "-p", str(self.work), "-c", str(conf), "-g", "daemon off;"]
        else:
            command = [sys.executable, __file__, "serve", str(self.root), str(self.port)]
            command += [str(log_path), *self.hosts]
        with open(self.work / "server.err", "ab") as err:
            self.process = subprocess.Popen(command, stderr=err, preexec_fn=dies_with(os.getpid()))
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _write_conf(self) -> Path:
        listens = "\n".join(f"        listen {h}:{self.port};" for h in self.hosts)
        user = "user root;" if os.geteuid() == 0 else ""
        text = _NGINX_CONF.format(
            work=self.work, log=self.log_path, listens=listens, root=self.root, user=user
        )
        conf = self.work / "nginx.conf"
        conf.write_text(text)
        return conf

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                err = (self.work / "server.err").read_text()[-2000:]
                raise RuntimeError(f"{self.kind} exited at start: {err}")
            try:
                socket.create_connection((self.hosts[-1], self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not listen on port {self.port} within 10 s")

    def stop(self) -> None:
        """Stop the server; its log is complete when this returns."""
        if self.process is None:
            return
        if self.process.poll() is not None:  # it died by itself: nothing to flush
            self.process = None
            return
        # nginx: SIGQUIT is the graceful stop that flushes the buffered access log.
        self.process.send_signal(signal.SIGQUIT if self.nginx else signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def _sbin(name: str) -> str | None:
    for folder in ("/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"):
        path = Path(folder) / name
        if os.access(path, os.X_OK):
            return str(path)
    return None


def read_log(path: Path) -> Iterator[tuple[float, int, str, str]]:
    """(time, status, host, uri) of every request in an access log."""
    for at, status, host, uri, _, _ in read_spans(path):
        yield at, status, host, uri


def read_spans(path: Path) -> Iterator[tuple[float, int, str, str, float, str]]:
    """(end, status, host, uri, seconds, connection) of every request in an access log.

    nginx logs ``$msec`` as the response's last byte leaves, and ``$request_time`` since
    the request's first byte came (so the request began at end - seconds); the fallback
    server logs neither of the last two (0 and "")."""
    with open(path) as lines:
        for line in lines:
            at, status, host, rest = line.rstrip("\n").split(" ", 3)
            uri, _, tail = rest.partition(" ")
            seconds, _, connection = tail.partition(" ")
            yield float(at), int(status), host, uri, float(seconds or 0), connection


# -- the asyncio fallback server ---------------------------------------------------------------


def _file(root: Path, host: str, uri: str) -> bytes | None:
    """The file ``uri`` names under ``root/host``, read now; None if there is none."""
    name = "index.html" if uri == "/" else uri.partition("?")[0].lstrip("/")
    if ".." in name.split("/"):
        return None
    try:
        return (root / host / name).read_bytes()
    except OSError:  # missing, a directory, unreadable: a 404 like any other
        return None


def _response(status: int, body: bytes, kind: str) -> bytes:
    head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
    head += f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def serve(root: Path, port: int, log_path: Path, hosts: list[str]) -> None:
    with open(log_path, "a", buffering=1 << 16) as log:
        _serve(root, port, log, hosts)


def _serve(root: Path, port: int, log: Any, hosts: list[str]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host = writer.get_extra_info("sockname")[0]
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                uri = head.split(b" ", 2)[1].decode()
                body = _file(root, host, uri)
                kind = "text/plain" if uri.endswith(".txt") else "text/html"
                status = 404 if body is None else 200
                writer.write(_response(status, body or b"not found", kind))
                log.write(f"{time.time():.3f} {status} {host} {uri}\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(handle, h, port, backlog=1024) for h in hosts]
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        for server in servers:
            server.close()
        log.flush()

    asyncio.run(main())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the bench site's fallback server")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("root", type=Path)
    parser.add_argument("port", type=int)
    parser.add_argument("log", type=Path)
    parser.add_argument("hosts", nargs="+")
    args = parser.parse_args()
    serve(args.root, args.port, args.log, args.hosts)
