"""The ``hashcrawl`` command: join, submit, status, configure, clear, dead, retry-dead, crawl.

Exit status (the table is in docs/operations.md): 0 done; 1 Redis unreachable or lost,
or stopped at once by a second Ctrl-C; 2 a bad URL, crawl name, flag or output file;
3 a crawl that fetched none of its start URLs; 130 interrupted before it had started;
141 standard output closed (``| head``). Every failure is one line on standard error.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import trio

from hashcrawl._cli._local import (
    Children,
    NothingFetched,
    already_complete,
    expire_previous_members,
    interrupts_held,
    log_line,
    plural,
    submit_start_urls,
    verdict,
)
from hashcrawl._cli._statedir import add_state_dir, opened_queue, redis_of
from hashcrawl._exceptions import ConfigError, HashcrawlError, QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._settings import ADDRESSES, CRAWL, SCOPE, Settings, _number, add_flags, given_flags
from hashcrawl._store._crawlconfig import view_lines
from hashcrawl._store._redisurl import ENV_VAR as REDIS_ENV_VAR
from hashcrawl._store._redisurl import RedisURL, check_crawl_name, masked
from hashcrawl._version import __version__
from hashcrawl._web._addresses import AddressPolicy, url_refusal
from hashcrawl._web._sinks import sinks_for
from hashcrawl._web._spider import load_spider, scrapy_settings

log = logging.getLogger("hashcrawl")
DEFAULT_CRAWL = "default"
FAILED, USAGE, NOTHING_FETCHED, INTERRUPTED, CLOSED_PIPE = 1, 2, 3, 130, 141
START_PATIENCE = 5.0  # seconds a command waits for a Redis that never answered yet
REPORT_EVERY = 60.0  # seconds between two of join's lines on what it has done

if TYPE_CHECKING:
    from hashcrawl._run._worker import Worker


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


def _common(p: argparse.ArgumentParser, *, redis: bool = True, state_dir: bool = False) -> None:
    if redis:
        p.add_argument(
            "--redis",
            help="redis://[user:password@]host:port/db, rediss://, redis+unix:///path?db=N "
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
        help="append items to FILE (JSON Lines; CSV if it ends in .csv), or archive every "
        "fetch to WARC files NAME-TIME-SEQ-WORKER.warc.gz if it is NAME.warc.gz (or "
        ".warc); repeatable, e.g. -o items.jsonl -o pages.warc.gz; without an items "
        "file, items go to standard output",
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
    add_flags(submit, only=SCOPE + ADDRESSES)
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
    add_flags(configure, only=CRAWL)
    configure.add_argument(
        "--reset",
        action="append",
        metavar="FLAG",
        help="put FLAG back to its default, e.g. --reset ignore-robots (repeatable)",
    )
    clear = sub.add_parser("clear", help="delete the crawl's keys")
    _common(clear, state_dir=True)
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
        "-q", "--quiet", action="store_true", help="no progress display and no summary"
    )
    crawl.add_argument(
        "--workers",
        type=_whole_in(1, 64),
        default=2,
        metavar="N",
        help="worker processes, 1 to 64 (default: %(default)s)",
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s hashcrawl: %(message)s" if args.verbose else "hashcrawl: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request is too much
    check_crawl_name(args.crawl)  # here, so the message names the flag, not Python's crawl
    return int(_COMMANDS[args.command](args) or 0)


def _fail(error: object, code: int, typed: Sequence[str]) -> int:
    print(f"hashcrawl: {masked(str(error), typed)}", file=sys.stderr)
    return code


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_flags(args)


def _seconds(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _checked_output(paths: list[str] | None) -> None:
    """Refuse an -o FILE that cannot be written, before anything starts.

    Raises:
        ConfigError: no such directory, no permission, or not a file.
    """
    for path in paths or ():
        if path == "-":
            continue
        if path.endswith((".warc.gz", ".warc")):  # the files are named later, beside it
            where = os.path.dirname(path) or "."
            if not (os.path.isdir(where) and os.access(where, os.W_OK | os.X_OK)):
                raise ConfigError(
                    f"-o cannot write WARC files in {where!r}: not a writable directory"
                )
            continue
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        except OSError as exc:
            raise ConfigError(f"-o cannot write {path!r}: {exc.strerror or exc}") from None


def _spider_of(args: argparse.Namespace) -> Any:
    return load_spider(args.spider) if args.spider else None


def _starts_itself(spider: Any) -> bool:
    """Whether a --spider gives its own start_requests() (each worker submits them)."""
    from hashcrawl._web._spider import Spider

    return spider is not None and spider.start_requests is not Spider.start_requests


def _check_reachable(url: RedisURL, crawl: str) -> None:
    """Fail within seconds if Redis does not answer at start: no lease to protect yet.

    Raises:
        QueueError: no answer within START_PATIENCE seconds.
    """
    from hashcrawl._store._store import Store

    store = Store(url, crawl, timeout=START_PATIENCE)
    deadline = time.monotonic() + START_PATIENCE
    try:
        while True:
            try:
                return store.ping()
            except QueueError:
                # A cluster may be promoting a replica of the crawl's primary: that is
                # worth the patience, where one server refusing connections is not.
                if not store.in_cluster() or time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
    finally:
        store.close()


def cmd_join(args: argparse.Namespace) -> int:
    from hashcrawl._run._worker import Worker, unwrapped

    early_stop: list[int] = []
    # A SIGTERM before trio takes over the signals must still mean "stop", not death.
    previous = signal.signal(signal.SIGTERM, lambda number, _: early_stop.append(number))
    settings = settings_from(args)
    url = redis_of(args)
    check_crawl_name(args.crawl)
    spider = _spider_of(args)
    _checked_output(args.output)
    _check_reachable(url, args.crawl)
    worker = Worker(
        url,
        args.crawl,
        spider=spider,
        sink=sinks_for(
            args.output,
            fsync=settings.fsync,
            max_size=settings.warc_max_size,
            revisits=settings.warc_revisits,
        ),
        **_worker_settings(args, settings, spider),
    )

    async def main() -> None:
        async with unwrapped(), trio.open_nursery() as nursery:
            nursery.start_soon(
                _stop_on_signals, worker, nursery.cancel_scope, early_stop, args.child
            )
            if not args.child:  # crawl's children: their parent shows the progress
                nursery.start_soon(_report, worker)
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


def _worker_settings(args: argparse.Namespace, settings: Settings, spider: Any) -> dict[str, Any]:
    """A worker's own settings, and only those crawl settings its flags (or its spider's
    ``custom_settings``) gave: it takes the crawl's others (see ``_crawlconfig``). A flag
    given wins over the spider's; an own flag left at its default does not."""
    own = {k: v for k, v in attrs.asdict(settings, recurse=False).items() if k not in CRAWL}
    defaults = {f.name: f.default for f in attrs.fields(Settings)}
    changed = {k: v for k, v in own.items() if v != defaults[k]}
    return {**own, **scrapy_settings(spider), **changed, **given_flags(args)}


async def _report(worker: Worker, every: float = REPORT_EVERY) -> None:
    """Say when the worker has joined, then what it has done every ``every`` seconds."""
    while (session := worker.session) is None or not session.epochs.joined_ms:
        await trio.sleep(0.2)
    print(
        f"hashcrawl: joined crawl {worker.crawl} as {worker.id} "
        f"({plural(len(session.latest.members), 'member')}); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    while True:
        await trio.sleep(every)
        session, tally = worker.session, worker.tally
        hosts = len(session.frontier.hosts) if session is not None else 0
        print(
            f"hashcrawl: {worker.id}: {plural(tally.fetched, 'page')}, "
            f"{plural(tally.items, 'item')}, {plural(hosts, 'host')} owned, "
            f"{tally.failed:,} failed, {tally.dead:,} dead-lettered",
            file=sys.stderr,
            flush=True,
        )


async def _stop_on_signals(
    worker: Any, scope: trio.CancelScope, early: list[int], child: bool
) -> None:
    # A child of ``crawl`` leaves Ctrl-C to its parent, which says "stopping" once.
    numbers = (signal.SIGTERM,) if child else (signal.SIGTERM, signal.SIGINT)
    with trio.open_signal_receiver(*numbers) as signals:
        if early:
            worker.stop()
        async for _ in signals:
            if worker.stop_requested:
                # A second signal: go now; the lease brings back whatever was held.
                if not child:
                    print("hashcrawl: stopped at once", file=sys.stderr, flush=True)
                os._exit(FAILED)
            if not child:
                log.warning(
                    "stopping: finishing requests in flight, then handing hosts back "
                    "(press Ctrl-C again to quit at once)"
                )
            worker.stop()


def _policy(args: argparse.Namespace) -> AddressPolicy:
    return AddressPolicy.of(args.allow_nets or (), args.allow_private)


def _check_start_urls(urls: list[str], policy: AddressPolicy) -> None:
    """Refuse bad URLs, and those the workers would refuse to connect to.

    Raises:
        ConfigError: the first such URL, with the rule it breaks.
    """
    from hashcrawl._core._urls import canonicalize

    for url in urls:
        refusal = url_refusal(canonicalize(url), policy)
        if refusal is not None:
            raise ConfigError(refusal)


def cmd_submit(args: argparse.Namespace) -> int:
    policy = _policy(args)
    with Queue(redis_of(args), args.crawl) as queue:
        if args.urls == ["-"]:
            bad = _BadLines(policy)
            added = queue.submit(bad.filter(sys.stdin), **_submit_options(args))
            print(
                f"submitted {plural(added, 'new URL')}"
                + (f"; {plural(bad.count, 'bad line')} skipped" if bad.count else "")
            )
            return USAGE if bad.count else 0
        _check_start_urls(args.urls, policy)  # every URL is checked before any goes in
        added = queue.submit(args.urls, **_submit_options(args))
        print(f"submitted {plural(added, 'new URL')}")
    return 0


def _submit_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "priority": args.priority,
        "dont_filter": args.dont_filter,
        "allow_domains": tuple(getattr(args, "allow_domains", ())),
        "span_hosts": getattr(args, "span_hosts", False),
    }


class _BadLines:
    """Skips lines that are not crawlable URLs, reporting each on standard error.

    Of hosts, only IP literals are checked against the address policy: looking up
    every name of a long list would take longer than submitting it. Workers check
    every address they connect to anyway.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self.count = 0
        self.policy = policy

    def filter(self, lines: Iterator[str]) -> Iterator[str]:
        from hashcrawl._core._urls import canonicalize

        for number, line in enumerate(lines, 1):
            url = line.strip()
            if not url:
                continue
            try:
                refusal = url_refusal(canonicalize(url), self.policy, look_up=False)
                if refusal is not None:
                    raise ConfigError(refusal)
            except ConfigError as exc:
                self.count += 1
                print(f"hashcrawl: line {number}: {exc}", file=sys.stderr)
                continue
            yield url


STATUS_LINES = (
    "crawl",
    "waiting",
    "held",
    "workers",
    "stale",
    "seen",
    "queued",
    "fetched",
    "failed",
    "robots_denied",
    "dead",
    "links_dropped",
    "host_capped",
    "leases_reclaimed",
    "queue_bad",
    "ended",
)


def cmd_status(args: argparse.Namespace) -> int:
    from hashcrawl._cli._statusview import read_view, watch_status

    with existing_queue(args) as queue:
        if args.watch is not None:
            return watch_status(queue, args.watch)
        status = read_view(queue) if args.json else queue.status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    for key in STATUS_LINES:
        print(f"{key}: {status[key]}")
    if status["mixed_spiders"]:  # a rolling deploy, or a worker started without --spider
        print(f"spiders: {', '.join(status['spiders'])} (the fleet mixes spiders)")
    for sample in status["bad_samples"][:3]:
        print(f"bad entry: {sample}")
    for line in view_lines(status["settings"]):
        print(line)
    for member in status["members"]:
        stale = " (stale: silent past its lease, not counted)" if member["stale"] else ""
        spider = f", spider {member['spider']}" if status["mixed_spiders"] else ""
        print(
            f"  {member['id']}: {plural(member['hosts'], 'host')}, "
            f"{member['fetched']} fetched{spider}{stale}"
        )
    return 0


@contextlib.contextmanager
def existing_queue(args: argparse.Namespace) -> Iterator[Queue]:
    """:func:`opened_queue`, for a command that would do nothing useful (or create a
    crawl by mistake) on a crawl that does not exist: a mistyped ``--crawl``.

    Raises:
        ConfigError: no such crawl; the message names those that exist.
    """
    with opened_queue(args) as queue:
        status = queue.status()
        configured = status["settings"]["version"] is not None or "error" in status["settings"]
        if not status["exists"] and not configured:
            raise ConfigError(_unknown_crawl(args, queue.other_crawls()))
        yield queue


def _unknown_crawl(args: argparse.Namespace, others: list[str]) -> str:
    state_dir = getattr(args, "state_dir", None)
    where = state_dir if state_dir is not None else redis_of(args).redacted()
    if not others:
        return f"no crawl named {args.crawl!r} in Redis at {where}, nor any other crawl"
    shown = ", ".join(others[:10]) + (f" and {len(others) - 10} more" if len(others) > 10 else "")
    return f"no crawl named {args.crawl!r} in Redis at {where}; crawls there: {shown}"


def cmd_configure(args: argparse.Namespace) -> int:
    from hashcrawl._store._crawlconfig import change

    given, reset = given_flags(args), _reset_names(args.reset or ())
    with existing_queue(args) as queue:
        if given or reset:
            _, changes = change(queue._store, given, reset=reset)
            print("\n".join(changes) if changes else "no change: the crawl has these settings")
        for line in view_lines(queue.settings()):
            print(line)
    return 0


def _reset_names(flags: Sequence[str]) -> list[str]:
    """The fields that ``--reset`` names by flag (``ignore-robots`` or ``--ignore-robots``).

    Raises:
        ConfigError: not a crawl setting, or one of the scope's (it only grows).
    """
    from hashcrawl._settings import flag_name

    by_flag = {flag_name(getattr(attrs.fields(Settings), n)): n for n in CRAWL}
    names = []
    for flag in flags:
        name = by_flag.get("--" + flag.lstrip("-"))
        if name is None:
            raise ConfigError(f"--reset {flag}: not a crawl setting; they are {', '.join(by_flag)}")
        if name in ("allow_domains", "span_hosts"):
            raise ConfigError(f"--reset {flag}: the scope only grows")
        names.append(name)
    return names


def cmd_clear(args: argparse.Namespace) -> int:
    with opened_queue(args) as queue:
        print(f"deleted {plural(queue.clear(), 'key')}")
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    with existing_queue(args) as queue:
        for url, error in sorted(queue.dead().items()):
            print(f"{url}\t{error}")
    return 0


def cmd_retry_dead(args: argparse.Namespace) -> int:
    with existing_queue(args) as queue:
        print(f"put back {plural(queue.retry_dead(), 'page')}")
    return 0


def cmd_crawl(args: argparse.Namespace) -> int:
    from hashcrawl._cli._server import RedisServer

    check_crawl_name(args.crawl)
    settings = settings_from(args)  # check the flags before starting anything
    spider = _spider_of(args)
    urls = list(args.urls) or list(getattr(spider, "start_urls", None) or ())
    if not urls and not _starts_itself(spider):
        raise ConfigError("crawl needs a start URL (or a --spider with start_urls)")
    _check_start_urls(urls, AddressPolicy.of(settings.allow_nets, settings.allow_private))
    _checked_output(args.output)
    state = _state_dir(args)
    with (
        interrupts_held() as check,
        RedisServer(
            directory=state, unix_socket=True, appendonly=True, die_with_parent=True
        ) as server,
    ):
        return _crawl_on(server.url, args, urls, check)


def _crawl_on(
    redis_url: str, args: argparse.Namespace, urls: list[str], check: Callable[[], None]
) -> int:
    """Run the workers on the private server at ``redis_url``; judge the start URLs after."""
    from hashcrawl._cli._progress import shown
    from hashcrawl._run._metrics import child_metrics_flags
    from hashcrawl._store._crawlconfig import change
    from hashcrawl._store._store import Store

    settings = settings_from(args)
    with contextlib.closing(Store(RedisURL.parse(redis_url), args.crawl)) as store:
        if args.fresh:
            store.clear()
        expire_previous_members(store)
        # The crawl's settings (the spider's custom ones, then the flags): its workers take them.
        spiders = {k: v for k, v in scrapy_settings(_spider_of(args)).items() if k in CRAWL}
        change(store, {**spiders, **given_flags(args)})
        added, before = submit_start_urls(store, urls)
        if already_complete(store, added):
            if not args.quiet:
                print(log_line(_complete(args, before.fetched)), file=sys.stderr)
            return 0
        log.info("submitted %s; starting %d workers", plural(added, "new URL"), args.workers)
        command = _child_command(args)
        children = Children(
            [command + child_metrics_flags(args.metrics_port, i) for i in range(args.workers)],
            # The URL goes through the environment: argv is visible to every user in ps.
            env={**os.environ, REDIS_ENV_VAR: redis_url, **_headers_env(settings)},
        )
        check()  # a Ctrl-C while starting: no worker is started
        with shown(args, redis_url, idle=settings.idle):
            codes = children.run()
        if children.interrupted:
            return max([c for c in codes if c > 0], default=0)  # < 0: stopped while starting
        if any(codes):
            return max([FAILED if c < 0 else c for c in codes], default=0)
        verdict(store, urls, before)
    return 0


def _complete(args: argparse.Namespace, fetched: int) -> str:
    again = f"hashcrawl crawl --fresh --state-dir {shlex.quote(str(args.state_dir))}"
    if args.crawl != DEFAULT_CRAWL:
        again += f" --crawl {shlex.quote(args.crawl)}"
    return (
        f"crawl {args.crawl} was already complete ({plural(fetched, 'page')} fetched, nothing "
        f"left to fetch): its start URLs were crawled before; to crawl them afresh: {again} URL"
    )


def _state_dir(args: argparse.Namespace) -> Path:
    state: Path = Path(args.state_dir) / args.crawl
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--state-dir cannot be used: {exc.strerror or exc}: {str(state)!r}"
        ) from None
    return state


def _headers_env(settings: Settings) -> dict[str, str]:
    """The ``--header`` lines for the children, in the environment: argv shows in ps."""
    import json

    from hashcrawl._settings import HEADERS_ENV_VAR

    return {HEADERS_ENV_VAR: json.dumps(list(settings.headers))} if settings.headers else {}


def _child_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "hashcrawl", "join", "--child", "--crawl", args.crawl]
    command += settings_from(args).to_flags(worker_only=True)  # crawl settings: in Redis
    for path in args.output or ():
        command += ["-o", path]
    if args.spider is not None:
        command += ["--spider", args.spider]
    if args.verbose:
        command.append("-v")
    return command


_COMMANDS = {
    "join": cmd_join,
    "submit": cmd_submit,
    "status": cmd_status,
    "configure": cmd_configure,
    "clear": cmd_clear,
    "dead": cmd_dead,
    "retry-dead": cmd_retry_dead,
    "crawl": cmd_crawl,
}
