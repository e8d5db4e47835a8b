"""The default fetcher's CPU per request, no proxy: to compare two checkouts' direct path.

    .venv/bin/python scripts/_bench/fetch_path.py [--repo PATH] [--requests N]

Serves a 27 KB file with Python's threaded ``http.server`` on 127.0.0.5 in a child
process, then fetches it ``--requests`` times, 8 at a time, with ``HttpxFetcher`` from
the checkout at ``--repo`` (default: this one), and prints the client's CPU seconds
(``time.process_time``: the server's work is not counted) and wall seconds. Run it
alternately against two checkouts; the CPU figure is the one to compare on a busy
machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--requests", type=int, default=2000)
    options = parser.parse_args()
    sys.path.insert(0, str(options.repo))
    with tempfile.TemporaryDirectory() as root:
        Path(root, "page.html").write_bytes(os.urandom(20_000).hex()[:27_000].encode())
        with socket.socket() as probe:
            probe.bind(("127.0.0.5", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.5"],
            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_for(port)
            import trio

            trio.run(_fetch_all, f"http://127.0.0.5:{port}/page.html", options.requests)
        finally:
            server.terminate()
            server.wait()


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.5", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)  # a starting process: only its socket says it is ready
    raise RuntimeError("http.server did not start")


async def _fetch_all(url: str, count: int) -> None:
    import trio

    import hashcrawl
    from hashcrawl import HttpxFetcher, Request

    fetcher = HttpxFetcher(allow_private=True, max_per_host=8)

    async def fetch(n: int) -> None:
        for _ in range(n):
            assert (await fetcher.fetch(Request(url))).status == 200

    await fetch(50)  # connections open, caches warm
    cpu, wall = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(fetch, count // 8)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    where = Path(hashcrawl.__file__).parent.parent
    print(f"{where}: {cpu:.3f} CPU s, {wall:.3f} wall s for {count // 8 * 8} requests")
    await fetcher.aclose()


if __name__ == "__main__":
    main()
