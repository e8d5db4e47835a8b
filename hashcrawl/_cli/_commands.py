"""The ``hashcrawl`` command: join, submit, status, configure, clear, dead, retry-dead, crawl.

This module dispatches: the grammar is ``_parser``'s, the checks before a start are
``_checks``', the commands that run workers (join, crawl) are ``_workers``', and those on a
crawl's state (the rest) are ``_manage``'s.

Exit status (the table is in docs/operations.md): 0 done; 1 Redis unreachable or lost,
or stopped at once by a second Ctrl-C; 2 a bad URL, crawl name, flag or output file;
3 a crawl that fetched none of its start URLs; 130 interrupted before it had started;
141 standard output closed (``| head``). Every failure is one line on standard error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from hashcrawl._cli._local import NothingFetched
from hashcrawl._cli._logfile import log_to, stop_logging
from hashcrawl._cli._manage import (
    cmd_clear,
    cmd_configure,
    cmd_dead,
    cmd_retry_dead,
    cmd_status,
    cmd_submit,
)
from hashcrawl._cli._parser import CLOSED_PIPE, FAILED, INTERRUPTED, NOTHING_FETCHED, USAGE, parse
from hashcrawl._cli._workers import cmd_crawl, cmd_join
from hashcrawl._exceptions import ConfigError, HashcrawlError
from hashcrawl._store._redisurl import ENV_VAR as REDIS_ENV_VAR
from hashcrawl._store._redisurl import check_crawl_name, masked


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    finally:
        stop_logging()


def _main(argv: Sequence[str]) -> int:
    # What the user typed: a message may quote a misplaced --redis URL, password and all.
    typed = [*argv, os.environ.get(REDIS_ENV_VAR, "")]
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # here, where a closed pipe can still be caught
    except ConfigError as exc:
        return _fail(exc, USAGE, typed)
    except NothingFetched as exc:
        return _fail(exc, NOTHING_FETCHED, typed)
    except HashcrawlError as exc:
        return _fail(exc, FAILED, typed)
    except KeyboardInterrupt:
        return _fail("interrupted", INTERRUPTED, typed)
    except BrokenPipeError:
        # The reader went away (``status | head``): end quietly, as tools killed by
        # SIGPIPE do, and keep the interpreter's own flush at exit from complaining.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE


def _run(argv: Sequence[str]) -> int:
    args = parse(argv)
    if getattr(args, "log_file", None):
        log_to(args.log_file)  # before logging takes sys.stderr for its handler
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s hashcrawl: %(message)s" if args.verbose else "hashcrawl: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is too much
    if getattr(args, "quiet", False):  # the lines that say what a worker refused, once
        logging.getLogger("hashcrawl.notices").setLevel(logging.ERROR)
    check_crawl_name(args.crawl)  # here, so the message names the flag, not Python's crawl
    return int(_COMMANDS[args.command](args) or 0)


def _fail(error: object, code: int, typed: Sequence[str]) -> int:
    print(f"hashcrawl: {masked(str(error), typed)}", file=sys.stderr)
    return code


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "join": cmd_join,
    "submit": cmd_submit,
    "status": cmd_status,
    "configure": cmd_configure,
    "clear": cmd_clear,
    "dead": cmd_dead,
    "retry-dead": cmd_retry_dead,
    "crawl": cmd_crawl,
}
