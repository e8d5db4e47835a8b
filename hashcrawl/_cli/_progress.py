"""``hashcrawl crawl``'s progress display while it runs, and its summary when it ends.

The crawl's parent process owns its private Redis, so it reads the crawl's figures
from there every second (every ten off a terminal), never per page: the workers have
put them there in their heartbeats. On a terminal the figures are one live line drawn
by rich; otherwise a plain line is printed every ten seconds.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import math
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

from hashcrawl._cli._local import counted
from hashcrawl._cli._logfile import terminal_of
from hashcrawl._cli._statusview import read_view
from hashcrawl._exceptions import HashcrawlError
from hashcrawl._run._queue import Queue

TERMINAL_EVERY = 1.0
PLAIN_EVERY = 10.0
RATE_WINDOW = 60.0


def progress_line(
    view: dict[str, Any], *, rate: float, elapsed: float, idle: float | None = None
) -> str:
    """One line of figures: pages, pages/s, to fetch, in flight, hosts, errors, dead; and
    once nothing is left, that the crawl is waiting out ``idle`` (--idle) to end.

    "To fetch" is status's ``waiting`` (queued, not taken) and ``held`` (taken by an
    owner) less what is in flight: owners read their streams ahead into memory, so what
    they hold and have not started is as far from done as what they have not read. It is
    never called "waiting", which is status's name for the first part only."""
    hosts = sum(m["hosts"] for m in view["members"])
    to_fetch = max(0, view["waiting"] + view["held"] - view["in_flight"])
    line = (
        f"{counted(view['fetched'], 'page')}, {rate:.1f}/s, {to_fetch:,} to fetch, "
        f"{view['in_flight']} in flight, {counted(hosts, 'host')}, "
        f"{counted(view['failed'], 'error')}, "
        f"{view['dead']:,} dead, {_duration(elapsed)}"
    )
    quiet = view.get("idle_s")
    if quiet is None:
        return line + _hostless(view["members"], to_fetch)
    if idle is None:
        return f"{line}; nothing left to fetch: until more URLs come (--idle none)"
    left = max(0, math.ceil(idle - quiet))
    return f"{line}; nothing left to fetch: ending in {left} s (--idle {idle:g})"


def _hostless(members: list[dict[str, Any]], to_fetch: int) -> str:
    """Why a worker sits idle while pages wait: it owns no host (fewer hosts than
    workers), and a host is never shared, so that its pacing holds fleet-wide."""
    idle = sum(1 for m in members if not m["hosts"])
    if not (idle and to_fetch):
        return ""
    verb = "owns" if idle == 1 else "own"
    return (
        f"; {idle} of {counted(len(members), 'worker')} {verb} no host: each host has one "
        "owner, which paces it (--delay)"
    )


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Rate:
    """Pages per second over the last minute, from samples of the running total."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, now: float, total: int) -> float:
        self._samples.append((now, total))
        while len(self._samples) > 1 and self._samples[1][0] <= now - RATE_WINDOW:
            self._samples.popleft()
        then, before = self._samples[0]
        return (total - before) / (now - then) if now > then else 0.0


class Progress:
    """Reads the crawl's figures in a thread and shows them on ``stream``."""

    def __init__(
        self,
        redis_url: str,
        crawl: str,
        *,
        stream: TextIO,
        every: float | None = None,
        idle: float | None = None,
    ) -> None:
        """Args:
        every: seconds between two lines off a terminal (default 10).
        idle: the workers' --idle, which the line counts down once nothing is left.
        """
        self.redis_url, self.crawl, self.idle = redis_url, crawl, idle
        self.console = Console(file=stream, highlight=False)
        self.terminal = self.console.is_terminal
        self.every = PLAIN_EVERY if every is None else every
        self.started = time.monotonic()
        self.rate = Rate()
        self.view: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress")

    def start(self) -> Progress:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any] | None:
        """Stop showing; returns the last view (read once more, now)."""
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(HashcrawlError), Queue(self.redis_url, self.crawl) as queue:
            self.view = read_view(queue)
        return self.view

    def line(self) -> str:
        assert self.view is not None
        elapsed = time.monotonic() - self.started
        rate = self.rate.add(elapsed, self.view["fetched"])
        return progress_line(self.view, rate=rate, elapsed=elapsed, idle=self.idle)

    def _run(self) -> None:
        with Queue(self.redis_url, self.crawl) as queue:
            if self._read(queue) and self.view is not None:
                # The rate's first sample: the pages a crawl resumed had done before.
                self.rate.add(time.monotonic() - self.started, self.view["fetched"])
            if self.terminal:
                self._live(queue)
            else:
                self._plain(queue)

    def _read(self, queue: Queue) -> bool:
        try:
            self.view = read_view(queue)
        except HashcrawlError:
            return False  # a worker reports Redis trouble itself; the display waits
        return True

    def _live(self, queue: Queue) -> None:
        from rich.live import Live

        with Live(console=self.console, auto_refresh=False, transient=True) as live:
            while not self._stop.wait(TERMINAL_EVERY):
                if self._read(queue):
                    live.update(Text(self.line()), refresh=True)

    def _plain(self, queue: Queue) -> None:
        while not self._stop.wait(self.every):
            if self._read(queue):
                print(f"hashcrawl: {self.line()}", file=self.console.file, flush=True)


def summary(view: dict[str, Any], *, elapsed: float, args: argparse.Namespace) -> str:
    """What the crawl did, where its items went, and what to do next."""
    where = f"--state-dir {shlex.quote(str(args.state_dir))} --crawl {shlex.quote(args.crawl)}"
    statuses = ", ".join(f"{k} {v:,}" for k, v in view["statuses"].items()) or "none"
    errors = ", ".join(f"{k} {v:,}" for k, v in view["errors"].items()) or "none"
    lines = [
        f"crawl {args.crawl}: {counted(view['fetched'], 'page')}, {counted(view['items'], 'item')} "
        f"in {_duration(elapsed)}",
        f"  statuses: {statuses}",
        f"  errors: {errors}",
        f"  retries: {view['retries']:,}",
        f"  dead letters: {view['dead']:,}",
    ]
    if view["dead"]:
        lines.append(f"    see them: hashcrawl dead {where}")
        lines.append(f"    try them again: hashcrawl retry-dead {where}, then crawl again")
    output = ", ".join(getattr(args, "output", None) or ())
    lines.append(f"  items in: {output}" if output else "  items: not written (no -o FILE)")
    left = view["waiting"] + view["held"]
    cap = (view.get("settings") or {}).get("max_pages_total")
    if left and cap is not None and view.get("pages_taken", 0) >= cap:
        entries = f"{left:,} entry" if left == 1 else f"{left:,} entries"
        lines.append(
            f"  stopped at --max-pages-total {cap:,} with {entries} left: to go on, raise it "
            f"(hashcrawl configure {where} --max-pages-total N) and run the same command again"
        )
    elif left:
        entries = f"{left:,} entry" if left == 1 else f"{left:,} entries"
        lines.append(f"  stopped with {entries} left: run the same command again to resume")
    else:
        lines.append(f"  nothing left to crawl; the state is in {args.state_dir}")
    lines.append(f"  status: hashcrawl status {where}")
    return "\n".join(lines)


@contextlib.contextmanager
def shown(
    args: argparse.Namespace,
    redis_url: str,
    *,
    stream: TextIO | None = None,
    idle: float | None = None,
) -> Iterator[None]:
    """Show ``hashcrawl crawl``'s progress while the body runs, then its summary."""
    if getattr(args, "quiet", False):
        yield
        return
    out = stream or sys.stderr
    # The live view stays on the terminal: a --log-file gets the summary, not the redraws.
    progress = Progress(redis_url, args.crawl, stream=terminal_of(out), idle=idle).start()
    try:
        yield
    finally:
        view = progress.stop()
        if view is not None:
            elapsed = time.monotonic() - progress.started
            print(summary(view, elapsed=elapsed, args=args), file=out, flush=True)
