"""The commands on a crawl's state in Redis: ``submit``, ``status``, ``configure``,
``clear``, ``dead`` and ``retry-dead``.

Each opens the crawl's ``Queue`` (``--redis``, or the private server of ``--state-dir``)
and does one thing; those that would do nothing useful on a crawl that does not exist
(a mistyped ``--crawl``) say so, naming the crawls there are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import attrs

from hashcrawl._cli._checks import check_start_urls
from hashcrawl._cli._flagset import given_flags
from hashcrawl._cli._local import plural
from hashcrawl._cli._parser import USAGE
from hashcrawl._cli._statedir import opened_queue, redis_of
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._run._queue import Queue
from hashcrawl._store._crawlconfig import view_lines
from hashcrawl._web._addresses import AddressPolicy, SubmitCheck


def cmd_submit(args: argparse.Namespace) -> int:
    policy = _policy(args)
    if args.urls != ["-"]:
        check_start_urls(args.urls, policy)  # every URL is checked before any goes in
    with Queue(redis_of(args), args.crawl, shards=args.shards) as queue:
        if not args.new:
            _check_exists(args, queue, hint="; submit --new starts a crawl of that name")
        if args.urls == ["-"]:
            bad = _BadLines(policy)
            added = queue.submit(bad.filter(sys.stdin), **_submit_options(args))
            print(
                f"submitted {plural(added, 'new URL')}"
                + (f"; {plural(bad.count, 'bad line')} skipped" if bad.count else "")
            )
            return USAGE if bad.count else 0
        added = queue.submit(args.urls, **_submit_options(args))
        print(f"submitted {plural(added, 'new URL')}")
    return 0


def _policy(args: argparse.Namespace) -> AddressPolicy:
    return AddressPolicy.of(args.allow_nets or (), args.allow_private)


def _submit_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "priority": args.priority,
        "dont_filter": args.dont_filter,
        "allow_domains": tuple(getattr(args, "allow_domains", ())),
        "span_hosts": getattr(args, "span_hosts", False),
        "allow_nets": tuple(args.allow_nets or ()),
        "allow_private": args.allow_private,
    }


class _BadLines:
    """Skips lines that are not crawlable URLs, reporting each on standard error.

    The address rule is applied as ``Queue.submit`` applies it (``SubmitCheck``): IP
    literals always, host names for the first few distinct ones only, since looking up
    every name of a long list would take longer than submitting it. Workers check
    every address they connect to anyway.
    """

    def __init__(self, policy: AddressPolicy) -> None:
        self.count = 0
        self.check = SubmitCheck(policy)

    def filter(self, lines: Iterator[str]) -> Iterator[str]:
        from hashcrawl._core._urls import canonicalize

        for number, line in enumerate(lines, 1):
            url = line.strip()
            if not url:
                continue
            try:
                refusal = self.check.refusal(canonicalize(url))
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
    "pattern_refused",
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
        _check_exists(args, queue)
        yield queue


def _check_exists(args: argparse.Namespace, queue: Queue, hint: str = "") -> dict[str, Any]:
    """The crawl's status, if it exists: it has keys, or recorded settings.

    Raises:
        ConfigError: no such crawl; the message names those that exist, then ``hint``.
    """
    status = queue.status()
    configured = status["settings"]["version"] is not None or "error" in status["settings"]
    if not status["exists"] and not configured:
        raise ConfigError(_unknown_crawl(args, queue.other_crawls()) + hint)
    return status


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
    from hashcrawl._core._flags import flag_name

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
    """Delete the crawl's keys: with --yes, or once a terminal's user said yes.

    Raises:
        ConfigError: no such crawl, or no --yes and no terminal to ask on.
    """
    with opened_queue(args) as queue:
        status = _check_exists(args, queue)
        if not args.yes and not _confirmed(args, status):
            return USAGE
        print(f"deleted {plural(queue.clear(), 'key')}")
    return 0


def _confirmed(args: argparse.Namespace, status: dict[str, Any]) -> bool:
    """Ask on the terminal whether to delete the crawl; a script must say --yes.

    Raises:
        ConfigError: standard input is not a terminal.
    """
    if not sys.stdin.isatty():
        raise ConfigError(
            f"clear deletes crawl {args.crawl!r} for good; add --yes to do it without a terminal"
        )
    where = args.state_dir if getattr(args, "state_dir", None) else redis_of(args).redacted()
    held = (
        f"{plural(status['seen'], 'URL')} seen, {status['fetched']:,} fetched, "
        f"{status['waiting'] + status['held']:,} to fetch, {plural(status['workers'], 'worker')}"
    )
    print(f"delete crawl {args.crawl} in {where} ({held})? [y/N] ", end="", file=sys.stderr)
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("hashcrawl: nothing deleted", file=sys.stderr)
    return False


def cmd_dead(args: argparse.Namespace) -> int:
    with existing_queue(args) as queue:
        dead = queue.dead()
        for url, error in sorted(dead.items()):
            print(f"{url}\t{error}")
    if not dead:  # on stderr: ``dead | wc -l`` still counts dead letters
        print(f"hashcrawl: crawl {args.crawl} has no dead letters", file=sys.stderr)
    return 0


def cmd_retry_dead(args: argparse.Namespace) -> int:
    with existing_queue(args) as queue:
        print(f"put back {plural(queue.retry_dead(), 'page')}")
    return 0
