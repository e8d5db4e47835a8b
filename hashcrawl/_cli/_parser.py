"""The ``hashcrawl`` command line's grammar: each command's flags, the exit statuses.

The flags of the settings come from their one declaration (``_settings.add_flags``); the
rest are declared here. A mistake is a ``ConfigError`` of one line (exit 2), never
argparse's usage text, and a flag is never matched by a prefix of its name.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from hashcrawl._cli._flagset import add_flags, read_flags
from hashcrawl._cli._statedir import add_state_dir
from hashcrawl._core._flags import _number
from hashcrawl._core._settings import ADDRESSES, CRAWL, SCOPE, Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._store._redisurl import ENV_VAR as REDIS_ENV_VAR
from hashcrawl._version import __version__

DEFAULT_CRAWL = "default"
FAILED, USAGE, NOTHING_FETCHED, INTERRUPTED, CLOSED_PIPE = 1, 2, 3, 130, 141


class _Parser(argparse.ArgumentParser):
    """One-line errors, and no prefix abbreviations (``--del`` is not ``--delay``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)  # main() prints it (exit 2), any password masked

    def refuse_unknown(self, extras: Sequence[str]) -> NoReturn:
        """Name the first argument this command does not take, with a likely meant flag."""
        given = next((x for x in extras if x.startswith("-")), extras[0])
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(given.split("=", 1)[0], flags, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close and given.startswith("-") else ""
        self.error(f"{self.prog.removeprefix('hashcrawl ')} takes no argument {given!r}{hint}")


def _whole_in(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser, *, redis: bool = True, state_dir: bool = False) -> None:
    if redis:
        p.add_argument(
            "--redis",
            help="redis://[user:password@]host:port/db, rediss://, redis+unix:///path?db=N, "
            "redis+sentinel://[user:password@]host[:port],.../service[/db] "
            f"(default: ${REDIS_ENV_VAR}, which keeps a password out of ps)",
        )
        p.add_argument(
            "--redis-password-file", metavar="FILE", help="read the Redis password from FILE"
        )
        p.add_argument(
            "--redis-ca", metavar="FILE", help="trust this CA's certificates for rediss://"
        )
    if state_dir:
        add_state_dir(p)
    p.add_argument(
        "--crawl",
        default=DEFAULT_CRAWL,
        metavar="NAME",
        help="the crawl's name (namespaces its keys) (default: %(default)s)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")


def _crawler_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        action="append",
        help="append items to FILE in the format its name ends in: .jsonl (or .jl), .json, "
        ".csv, .xml, or .parquet (a directory of Parquet files); or archive every fetch "
        "to WARC files NAME-TIME-SEQ-WORKER.warc.gz if it is NAME.warc.gz (or .warc); "
        "repeatable, e.g. -o items.jsonl -o pages.warc.gz; without an items file, items "
        "go to standard output",
    )
    p.add_argument(
        "--log-file",
        metavar="PATH",
        help="also append what is said on standard error to PATH (made if missing)",
    )
    p.add_argument("--spider", metavar="FILE", help="run a Spider: path/to/file.py[:ClassName]")
    add_flags(p)


def build_parser() -> _Parser:
    parser = _Parser(
        prog="hashcrawl",
        description="A distributed web crawler on Redis.",
        epilog="Run 'hashcrawl COMMAND --help' for a command's flags.",
    )
    parser.add_argument("--version", action="version", version=f"hashcrawl {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    join = sub.add_parser("join", help="run a worker in a crawl fleet")
    _common(join)
    _crawler_flags(join)
    join.add_argument(
        "--name",
        metavar="NAME",
        help="the worker's name, unique in the crawl (default: one of its own per process); "
        "started under the name of a worker that has stopped, it takes its place and its "
        "hosts at once; under that of a running one, it is refused",
    )
    join.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="say nothing but errors: no joined, progress, refused-page, stop or closing line",
    )
    join.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    submit = sub.add_parser(
        "submit",
        help="feed URLs into a crawl ('-' reads standard input)",
        description="Add URLs to a crawl. A single '-' reads one URL per line from standard input.",
    )
    _common(submit)
    submit.add_argument(
        "--priority",
        type=_whole_in(-500, 500),
        default=0,
        metavar="N",
        help="higher is fetched first among a host's waiting pages, -500 to 500 "
        "(default: %(default)s)",
    )
    submit.add_argument("--dont-filter", action="store_true", help="submit even URLs seen before")
    submit.add_argument(
        "--new",
        action="store_true",
        help="start the crawl if it does not exist yet (without it, a crawl name that "
        "has no keys, no settings and no workers is refused, as a typo)",
    )
    add_flags(submit, only=(*SCOPE, *ADDRESSES, "shards"))
    submit.add_argument(
        "urls", nargs="+", metavar="URL", help="http(s) URLs, or '-' to read them from stdin"
    )
    status = sub.add_parser("status", help="show the fleet and the crawl's progress")
    _common(status, state_dir=True)
    status.add_argument("--json", action="store_true", help="print every field as one JSON object")
    status.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=_seconds,
        metavar="SECONDS",
        help="redraw a live view every SECONDS (default 2) until Ctrl-C",
    )
    configure = sub.add_parser(
        "configure",
        help="show or change the crawl's settings, for every worker",
        description="Show the crawl's settings, or change them: every worker of the crawl "
        "takes the change within a heartbeat. --allow-domain and --span-hosts widen the "
        "scope (it never narrows). --per-host, --lease and --user-agent change only while "
        "no worker is running.",
    )
    _common(configure, state_dir=True)
    add_flags(configure, only=CRAWL, changes=True)
    configure.add_argument(
        "--reset",
        action="append",
        metavar="FLAG",
        help="put FLAG back to its default, e.g. --reset ignore-robots (repeatable)",
    )
    clear = sub.add_parser(
        "clear",
        help="delete the crawl's keys",
        description="Delete every key of the crawl. On a terminal it asks first, naming the "
        "crawl and what it holds; elsewhere it needs --yes.",
    )
    _common(clear, state_dir=True)
    clear.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    dead = sub.add_parser("dead", help="list pages that used up their attempts")
    _common(dead, state_dir=True)
    retry_dead = sub.add_parser("retry-dead", help="put dead-lettered pages back in the crawl")
    _common(retry_dead, state_dir=True)
    crawl = sub.add_parser(
        "crawl",
        help="crawl on this machine with a private Redis (no setup)",
        description="Crawl on this machine: a private Redis in --state-dir and --workers "
        "worker processes. Without -o, items go to standard output. Running the same "
        "command again goes on where it stopped, and retries start URLs that failed.",
    )
    _common(crawl, redis=False)
    _crawler_flags(crawl)
    crawl.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="say nothing but errors: no progress display, summary, refused-page or stop line",
    )
    crawl.add_argument(
        "--workers",
        type=_whole_in(1, 64),
        default=None,
        metavar="N",
        help="worker processes, 1 to 64 (default: one a core, but no more than the hosts "
        "of a crawl that stays on its hosts: a host has one owner)",
    )
    crawl.add_argument(
        "--state-dir",
        default=".hashcrawl",
        metavar="DIR",
        help="where the private Redis keeps its data (default: %(default)s)",
    )
    crawl.add_argument(
        "--fresh", action="store_true", help="forget this crawl's earlier runs and start over"
    )
    crawl.add_argument(
        "urls", nargs="*", metavar="URL", help="start URLs (or the --spider's start_urls)"
    )
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The command line as a namespace; bare ``hashcrawl`` prints the usage (exit 2)."""
    parser = build_parser()
    if not argv:
        parser.print_help(sys.stderr)
        raise SystemExit(USAGE)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _subparser(parser, args.command).refuse_unknown(extras)
    return args


def _subparser(parser: _Parser, command: str) -> _Parser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: _Parser = action.choices[command]
            return found
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    return read_flags(args)
