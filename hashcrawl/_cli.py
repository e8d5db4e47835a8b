"""The ``hashcrawl`` command: join, submit, status, clear, dead, retry-dead, crawl.

Exit status: 0 done; 1 Redis unreachable or lost (one line); 2 a bad URL, crawl name
or flag (one line).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs
import trio

from ._exceptions import ConfigError, HashcrawlError, QueueError
from ._queue import Queue
from ._redisurl import RedisURL, check_crawl_name
from ._settings import SCOPE, Settings, add_flags
from ._sinks import sink_for
from ._spider import load_spider
from ._statedir import add_state_dir, opened_queue
from ._version import __version__

log = logging.getLogger("hashcrawl")
DEFAULT_CRAWL = "default"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"hashcrawl: {message}", file=sys.stderr)
        raise SystemExit(2)


def _common(p: argparse.ArgumentParser, *, redis: bool = True, state_dir: bool = False) -> None:
    if redis:
        p.add_argument(
            "--redis",
            required=not state_dir,
            help="redis://[user:password@]host:port/db, rediss://, redis+unix:///path?db=N",
        )
    if state_dir:
        add_state_dir(p)
    p.add_argument("--crawl", default=DEFAULT_CRAWL, help="the crawl's name (namespaces its keys)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")


def _crawler_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o", "--output", help="write items to FILE (JSON Lines; CSV if it ends in .csv)"
    )
    add_flags(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hashcrawl", description="A distributed web crawler on Redis.")
    parser.add_argument("--version", action="version", version=f"hashcrawl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    join = sub.add_parser("join", help="run a worker in a crawl fleet")
    _common(join)
    _crawler_flags(join)
    join.add_argument("--spider", help="run a Spider: path/to/file.py[:ClassName]")
    submit = sub.add_parser("submit", help="feed URLs into a crawl ('-' reads standard input)")
    _common(submit)
    submit.add_argument("--priority", type=int, default=0)
    submit.add_argument("--dont-filter", action="store_true", help="submit even URLs seen before")
    add_flags(submit, only=SCOPE)
    submit.add_argument("urls", nargs="+", metavar="URL")
    status = sub.add_parser("status", help="show the fleet and the crawl's progress")
    _common(status, state_dir=True)
    status.add_argument("--json", action="store_true")
    status.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=_seconds,
        metavar="SECONDS",
        help="redraw a live view every SECONDS (default 2) until Ctrl-C",
    )
    clear = sub.add_parser("clear", help="delete the crawl's keys")
    _common(clear, state_dir=True)
    dead = sub.add_parser("dead", help="list pages that used up their attempts")
    _common(dead, state_dir=True)
    retry_dead = sub.add_parser("retry-dead", help="put dead-lettered pages back in the crawl")
    _common(retry_dead, state_dir=True)
    crawl = sub.add_parser("crawl", help="crawl on this machine with a private Redis (no setup)")
    _common(crawl, redis=False)
    _crawler_flags(crawl)
    crawl.add_argument("--workers", type=int, default=2, help="worker processes")
    crawl.add_argument("-q", "--quiet", action="store_true", help="no progress, no summary")
    crawl.add_argument(
        "--state-dir", default=".hashcrawl", help="where the private Redis keeps its data"
    )
    crawl.add_argument("urls", nargs="+", metavar="URL")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s hashcrawl: %(message)s" if args.verbose else "hashcrawl: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is too much
    try:
        return int(_COMMANDS[args.command](args) or 0)
    except ConfigError as exc:
        print(f"hashcrawl: {exc}", file=sys.stderr)
        return 2
    except QueueError as exc:
        print(f"hashcrawl: {exc}", file=sys.stderr)
        return 1
    except HashcrawlError as exc:
        print(f"hashcrawl: {exc}", file=sys.stderr)
        return 1


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_flags(args)


def _seconds(text: str) -> float:
    value = float(text) if text.replace(".", "", 1).isdigit() else 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def cmd_join(args: argparse.Namespace) -> int:
    from ._worker import Worker, unwrapped

    early_stop: list[int] = []
    # A SIGTERM before trio takes over the signals must still mean "stop", not death.
    previous = signal.signal(signal.SIGTERM, lambda number, _: early_stop.append(number))
    settings = settings_from(args)
    url = RedisURL.parse(args.redis)
    check_crawl_name(args.crawl)
    spider = load_spider(args.spider) if args.spider else None
    worker = Worker(
        url,
        args.crawl,
        spider=spider,
        sink=sink_for(args.output),
        **attrs.asdict(settings, recurse=False),
    )

    async def main() -> None:
        async with unwrapped(), trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signals, worker, nursery.cancel_scope, early_stop)
            await worker.run()
            nursery.cancel_scope.cancel()

    if early_stop:
        return 0  # asked to stop before it had joined: nothing to hand back
    try:
        trio.run(main)
    finally:
        signal.signal(signal.SIGTERM, previous)
        worker.sink.close()
    return 0


async def _stop_on_signals(worker: Any, scope: trio.CancelScope, early: list[int]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        if early:
            worker.stop()
        async for _ in signals:
            if worker._stop_requested:
                # A second signal: go now; the lease brings back whatever was held.
                os._exit(1)
            log.warning("stopping: finishing requests in flight, then handing hosts back")
            worker.stop()


def cmd_submit(args: argparse.Namespace) -> int:
    with Queue(args.redis, args.crawl) as queue:
        if args.urls == ["-"]:
            bad = _BadLines()
            added = queue.submit(bad.filter(sys.stdin), **_submit_options(args))
            print(
                f"submitted {added} new URLs"
                + (f"; {bad.count} bad lines skipped" if bad.count else "")
            )
            return 2 if bad.count else 0
        from ._urls import canonicalize

        for url in args.urls:
            canonicalize(url)  # every URL is checked before any goes in
        added = queue.submit(args.urls, **_submit_options(args))
        print(f"submitted {added} new URLs")
    return 0


def _submit_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "priority": args.priority,
        "dont_filter": args.dont_filter,
        "allow_domains": tuple(args.allow_domains or ()),
        "span_hosts": args.span_hosts,
    }


class _BadLines:
    """Skips lines that are not crawlable URLs, reporting each on standard error."""

    def __init__(self) -> None:
        self.count = 0

    def filter(self, lines: Iterator[str]) -> Iterator[str]:
        from ._urls import canonicalize

        for number, line in enumerate(lines, 1):
            url = line.strip()
            if not url:
                continue
            try:
                canonicalize(url)
            except ConfigError as exc:
                self.count += 1
                print(f"hashcrawl: line {number}: {exc}", file=sys.stderr)
                continue
            yield url


def cmd_status(args: argparse.Namespace) -> int:
    from ._statusview import read_view, watch_status

    with opened_queue(args) as queue:
        if args.watch is not None:
            return watch_status(queue, args.watch)
        status = read_view(queue) if args.json else queue.status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    for key in (
        "crawl",
        "waiting",
        "held",
        "workers",
        "seen",
        "queued",
        "fetched",
        "failed",
        "dead",
        "leases_reclaimed",
        "queue_bad",
        "ended",
    ):
        print(f"{key}: {status[key]}")
    if status["mixed_spiders"]:  # a rolling deploy, or a worker started without --spider
        print(f"spiders: {', '.join(status['spiders'])} (the fleet mixes spiders)")
    for sample in status["bad_samples"][:3]:
        print(f"bad entry: {sample}")
    for member in status["members"]:
        spider = f", spider {member['spider']}" if status["mixed_spiders"] else ""
        print(f"  {member['id']}: {member['hosts']} hosts, {member['fetched']} fetched{spider}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    with opened_queue(args) as queue:
        print(f"deleted {queue.clear()} keys")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    with opened_queue(args) as queue:
        for url, error in sorted(queue.dead().items()):
            print(f"{url}\t{error}")
    return 0


def cmd_retry_dead(args: argparse.Namespace) -> int:
    with opened_queue(args) as queue:
        print(f"put back {queue.retry_dead()} pages")
    return 0


def cmd_crawl(args: argparse.Namespace) -> int:
    from ._server import RedisServer
    from ._urls import canonicalize

    check_crawl_name(args.crawl)
    settings = settings_from(args)  # check the flags before starting anything
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    for url in args.urls:
        canonicalize(url)
    state = Path(args.state_dir) / args.crawl
    state.mkdir(parents=True, exist_ok=True)
    with RedisServer(directory=state, unix_socket=True, appendonly=True) as server:
        redis_url = server.url
        with Queue(redis_url, args.crawl) as queue:
            added = queue.submit(
                args.urls, allow_domains=settings.allow_domains, span_hosts=settings.span_hosts
            )
        log.info("submitted %d new URLs; starting %d workers", added, args.workers)
        from ._progress import shown

        with shown(args, redis_url):
            return _run_workers(args, redis_url)


def _run_workers(args: argparse.Namespace, redis_url: str) -> int:
    passed = _passed_flags(args)
    command = [
        sys.executable,
        "-m",
        "hashcrawl",
        "join",
        "--redis",
        redis_url,
        "--crawl",
        args.crawl,
        *passed,
    ]
    from ._metrics import child_metrics_flags

    port = args.metrics_port
    processes = [
        subprocess.Popen(command + child_metrics_flags(port, i)) for i in range(args.workers)
    ]

    def forward(*_: object) -> None:
        for process in processes:
            process.terminate()

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        codes = [p.wait() for p in processes]
    except KeyboardInterrupt:
        codes = [p.wait() for p in processes]  # they got the same Ctrl-C and stop gracefully
    finally:
        signal.signal(signal.SIGTERM, previous)
    return max(codes)


def _passed_flags(args: argparse.Namespace) -> list[str]:
    flags = settings_from(args).to_flags()
    if args.output is not None:
        flags += ["-o", args.output]
    if args.verbose:
        flags.append("-v")
    return flags


_COMMANDS = {
    "join": cmd_join,
    "submit": cmd_submit,
    "status": cmd_status,
    "clear": cmd_clear,
    "dead": cmd_dead,
    "retry-dead": cmd_retry_dead,
    "crawl": cmd_crawl,
}
