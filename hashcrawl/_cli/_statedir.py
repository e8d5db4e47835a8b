"""The read-only commands on what ``hashcrawl crawl`` left behind in its state dir.

``status``, ``dead`` and the others take ``--state-dir DIR`` instead of ``--redis``: the
crawl's private server is started from ``DIR/CRAWL`` for the command and stopped after.
While ``hashcrawl crawl`` still runs there, its server is used through its socket.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._redisurl import ENV_VAR, RedisURL


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        help="instead of --redis: the --state-dir of a 'hashcrawl crawl' on this machine",
    )


@contextlib.contextmanager
def opened_queue(args: argparse.Namespace) -> Iterator[Queue]:
    """The crawl's queue, from ``--redis`` or from ``--state-dir``.

    Raises:
        ConfigError: both or neither given, or no such crawl in the state dir.
    """
    with redis_url_of(args) as url, Queue(url, args.crawl) as queue:
        yield queue


@contextlib.contextmanager
def redis_url_of(args: argparse.Namespace) -> Iterator[str | RedisURL]:
    state_dir = getattr(args, "state_dir", None)
    if args.redis is not None and state_dir is not None:
        raise ConfigError("give --redis or --state-dir, not both")
    if state_dir is None:
        yield redis_of(args)
        return
    with _private_server(Path(state_dir), args.crawl) as url:
        yield url


def redis_of(args: argparse.Namespace) -> RedisURL:
    """The server of --redis (else $HASHCRAWL_REDIS), with its password and CA flags.

    Raises:
        ConfigError: no URL anywhere, a bad one, or an unusable password or CA file.
    """
    if args.redis is None and not os.environ.get(ENV_VAR) and hasattr(args, "state_dir"):
        raise ConfigError(
            f"--redis (or ${ENV_VAR}, or --state-dir for a 'hashcrawl crawl') is required"
        )
    return RedisURL.from_options(
        args.redis, password_file=args.redis_password_file, ca_file=args.redis_ca
    )


@contextlib.contextmanager
def _private_server(state_dir: Path, crawl: str) -> Iterator[str]:
    from hashcrawl._store._server import RedisServer

    directory = state_dir / crawl
    if not (directory / "appendonlydir").is_dir():
        raise ConfigError(
            f"--state-dir {state_dir}: no crawl named {crawl!r} there{_crawls_in(state_dir)}"
        )
    server = RedisServer(
        directory=directory, unix_socket=True, appendonly=True, die_with_parent=True
    )
    try:
        server.start()
    except ConfigError:  # its crawl is running: use that crawl's own server
        socket = directory.absolute() / "redis.sock"
        if not socket.exists():
            raise
        try:
            yield f"redis+unix://{quote(str(socket))}?db=0"
        except QueueError:
            if socket.exists():
                raise
            raise QueueError(
                f"the crawl in {directory} ended while this command read it; "
                "run the command again to read what it left"
            ) from None
        return
    # A SIGTERM (a `timeout`, a service manager) must stop the server too, not orphan it.
    previous = signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        yield server.url
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()


def _crawls_in(state_dir: Path, most: int = 10) -> str:
    """``; crawls there: a, b`` (the crawls whose state a ``crawl`` kept in ``state_dir``),
    or ``, nor any other crawl``."""
    try:
        names = sorted(p.name for p in state_dir.iterdir() if (p / "appendonlydir").is_dir())
    except OSError:
        names = []
    if not names:
        return ", nor any other crawl"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"; crawls there: {', '.join(names[:most])}{more}"


def _exit_quietly(*_: object) -> None:
    raise SystemExit(0)
