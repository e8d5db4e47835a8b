"""Large pages parsed in a process of their own, so that the event loop's core fetches
while the other parses (one host at full speed, on every core).

The default handler (no parse callback, no spider: a spider's selectors need the tree in
this process) sends a 2xx HTML body of at least :data:`AWAY_BYTES` to the child, where
this process may run on two cores or more; smaller pages are parsed on the loop, where
the two hand-overs (a pickle and a pipe each way, a wake-up) would cost more than the
parse saves (docs/performance.md, "Parsing in a second process"). The child starts at
the first such page, so a crawl of small pages never starts it.
``HASHCRAWL_PARSE_PROCESS=1`` sends every page (the experiment's setting),
``HASHCRAWL_PARSE_PROCESS=0`` none.

With one host and ``--per-host 1`` the next request leaves only once the page before it
is handled; the default handler's work is mostly :func:`parse_html` (lxml's tree, then
each link made fit to send, in Python), which holds the GIL, so a thread cannot overlap
it with the next fetch and a process can. :class:`Parser` sends the body down a pipe to
``python -m hashcrawl._spiders._parsing`` and awaits the :class:`Page` (without its tree,
which stays in the child); the worker's loop meanwhile sends the host's next request.
A page the child cannot answer for (it died, or the page did not pickle) is parsed on
the loop as before: this only moves work, it changes no result.

Frames both ways: a 4-byte length, then a pickle: ``(id, body, url, content_type,
max_links)`` to the child, ``(id, (title, links, canonical, dropped, base) or None)``
back. The child ends when its input closes.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from hashcrawl._web._html import Page, parse_html
from hashcrawl._web._models import Response

_LENGTH = struct.Struct("!I")
#: The least body parsed away from the loop by default. On the javadoc pages (median
#: 12 KB, a tenth over 46 KB) the pages above it hold most of the bytes, and so most of
#: the parse; the bench site's pages (6-10 KB) never reach it.
AWAY_BYTES = 16 * 1024


def least_away(choice: str | None = None, cores: int | None = None) -> int | None:
    """The least body size the default parse sends to its process, or None for none:
    ``choice`` is ``HASHCRAWL_PARSE_PROCESS`` ("1": every page, "0": none), ``cores``
    the cores this process may run on."""
    choice = os.environ.get("HASHCRAWL_PARSE_PROCESS", "") if choice is None else choice
    if choice == "1":
        return 0
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    return None if choice == "0" or cores < 2 else AWAY_BYTES


class Parser:
    """The loop's end of one parsing process (started at the first page it is sent,
    per trio run); ``least``: the least body :meth:`prepare` sends it."""

    def __init__(self, least: int = 0) -> None:
        self.least = least
        self._process: trio.Process | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._start_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._waiting: dict[int, tuple[trio.Event, list[Any]]] = {}
        self._next = 0
        self.broken = False  # the child died: every page is parsed on the loop again

    def takes(self, response: Response) -> bool:
        """Whether :meth:`prepare` sends ``response`` to the child: a 2xx HTML body of
        at least ``least`` bytes."""
        large = len(response.body) >= self.least
        return large and 200 <= response.status < 300 and response.is_html

    async def prepare(self, response: Response) -> None:
        """Parse a 2xx HTML ``response`` in the child and keep the page on it, so its
        ``links()`` reads that; one the child could not parse is parsed when asked."""
        if self.takes(response):
            content_type = response.headers.get("content-type")
            page = await self.parse(response.body, response.url, content_type, response.max_links)
            if page is not None:
                response._parsed.append(page)

    async def parse(
        self, body: bytes, url: str, content_type: str | None, max_links: int | None
    ) -> Page | None:
        """The page as :func:`parse_html` gives it, but for its tree; None if the
        child could not say (parse it here then)."""
        process = await self._started()
        if process is None:
            return None
        number, self._next = self._next, self._next + 1
        event, slot = trio.Event(), list[Any]()
        self._waiting[number] = (event, slot)
        try:
            data = pickle.dumps((number, body, url, content_type, max_links), protocol=5)
            assert process.stdin is not None
            async with self._send_lock:
                await process.stdin.send_all(_LENGTH.pack(len(data)) + data)
            await event.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.broken = True
            return None
        finally:
            self._waiting.pop(number, None)
        if not slot or slot[0] is None:
            return None
        title, links, canonical, dropped, base = slot[0]
        return Page(title, links, canonical, dropped, None, base)

    async def _started(self) -> trio.Process | None:
        if self.broken:
            return None
        token = trio.lowlevel.current_trio_token()
        async with self._start_lock:
            if self._process is None or self._token is not token:
                root = str(Path(__file__).resolve().parents[2])
                path = os.environ.get("PYTHONPATH")
                env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
                command = [sys.executable, "-m", "hashcrawl._spiders._parsing"]
                self._process = await trio.lowlevel.open_process(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                    start_new_session=True,
                )  # fmt: skip
                self._token = token
                trio.lowlevel.spawn_system_task(self._read, self._process)
        return self._process

    async def _read(self, process: trio.Process) -> None:
        """Hand each answer to the page waiting for it; at the end, wake them all."""
        assert process.stdout is not None
        buffer = bytearray()
        try:
            while True:
                chunk = await process.stdout.receive_some(1 << 20)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= _LENGTH.size:
                    size = _LENGTH.unpack_from(buffer)[0]
                    if len(buffer) < _LENGTH.size + size:
                        break
                    number, page = pickle.loads(buffer[_LENGTH.size : _LENGTH.size + size])
                    del buffer[: _LENGTH.size + size]
                    waiting = self._waiting.get(number)
                    if waiting is not None:
                        waiting[1].append(page)
                        waiting[0].set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            if self._process is process:
                self.broken = True
            for event, _ in list(self._waiting.values()):
                event.set()
            with trio.CancelScope(shield=True):
                if process.stdin is not None:
                    await process.stdin.aclose()
                process.kill()
                await process.wait()


def main() -> int:
    """The child: parse each page it is sent, answer in order."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while head := stdin.read(_LENGTH.size):
        number, body, url, content_type, max_links = pickle.loads(
            stdin.read(_LENGTH.unpack(head)[0])
        )
        try:
            page = parse_html(body, url, content_type=content_type, max_links=max_links)
            answer = (page.title, page.links, page.canonical, page.dropped, page.base)
        except Exception:
            answer = None
        data = pickle.dumps((number, answer), protocol=5)
        stdout.write(_LENGTH.pack(len(data)) + data)
        stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
