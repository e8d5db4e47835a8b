"""What one hostile response costs the default fetcher: peak memory and time.

Serves, on 127.0.0.2, a double-gzipped bomb of about a kilobyte ("gzip, gzip"), a
single-gzipped bomb of 1 GiB of zeros, and a body dripped a byte every 0.2 s. Each is
fetched once in a fresh process with ``HttpxFetcher`` (10 MiB body cap, ``--timeout
2``), which prints its peak RSS over its RSS before the fetch, the time taken and the
outcome. ``--code DIR`` runs the hashcrawl package found in DIR instead (an older
checkout, say: ``git archive REV hashcrawl | tar -x -C DIR``), for a before/after.

    .venv/bin/python scripts/hostile_fetch_costs.py [--code DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

HOST = "127.0.0.2"
CHILD = r"""
import inspect, resource, sys, time, trio
from hashcrawl import HttpxFetcher, Request
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
params = inspect.signature(HttpxFetcher).parameters
options = {"timeout": 2.0}
if "allow_nets" in params: options["allow_nets"] = ["127.0.0.2"]
async def main():
    fetcher = HttpxFetcher(**options)
    before, started = rss(), time.monotonic()
    try:
        response = await fetcher.fetch(Request(sys.argv[1]))
        cut = getattr(response, "truncated", False)
        outcome = f"{len(response.body)} bytes kept" + (", truncated" if cut else "")
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {str(exc)[:70]}"
    took = time.monotonic() - started
    print(f"peak RSS +{rss() - before:7.1f} MiB  {took:5.2f} s  {outcome}")
trio.run(main)
"""


def gzipped(chunks: object, size_hint: int = 0) -> bytes:
    """gzip the byte strings ``chunks`` yields, without holding what they add up to."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(chunk) for chunk in chunks]  # type: ignore[attr-defined]
    return b"".join([*out, z.flush()])


def zeros(total: int, step: int = 2**20) -> object:
    for _ in range(total // step):
        yield b"\0" * step


def serve(bodies: dict[str, tuple[bytes, str]]) -> int:
    server = socket.create_server((HOST, 0))

    def answer(connection: socket.socket) -> None:
        with connection:
            try:
                path = connection.recv(65536).decode("latin-1").split(" ")[1]
                if path == "/drip":
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
                    for _ in range(100):
                        time.sleep(0.2)
                        connection.sendall(b"x")
                    return
                body, coding = bodies[path]
                head = f"HTTP/1.1 200 OK\r\nContent-Encoding: {coding}\r\n"
                head += f"Content-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
                connection.sendall(head.encode() + body)
            except OSError:
                pass

    def loop() -> None:
        while True:
            connection, _ = server.accept()
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return int(server.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", help="directory holding the hashcrawl package to run")
    args = parser.parse_args()
    one_gib = gzipped(zeros(2**30))
    double = gzipped([gzipped(zeros(2**30))])
    port = serve({"/double": (double, "gzip, gzip"), "/single": (one_gib, "gzip")})
    env = dict(os.environ)
    code = args.code or str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = code
    print(f"hashcrawl from {code}")
    cases = [
        (f"gzip, gzip bomb, {len(double)} bytes -> 1 GiB", "/double"),
        (f"gzip bomb, {len(one_gib)} bytes -> 1 GiB", "/single"),
        ("a byte every 0.2 s, --timeout 2", "/drip"),
    ]
    for label, path in cases:
        url = f"http://{HOST}:{port}{path}"
        result = subprocess.run(
            [sys.executable, "-c", CHILD, url],
            env=env,
            cwd=code,  # "-c" puts the working directory first on the path
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"{label:40} {result.stdout.strip() or result.stderr.strip()[-200:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
