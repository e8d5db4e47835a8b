"""The commands that run workers: ``join`` (one worker, in a fleet on any Redis) and
``crawl`` (a private Redis in ``--state-dir`` and ``--workers`` children, each a ``join
--child``).

``join`` stops on SIGTERM or Ctrl-C by handing its hosts back, and at once on a second
Ctrl-C (never on a second SIGTERM: one is often delivered twice).
``crawl`` sets the crawl's settings, submits its start URLs, runs its children until the
crawl is idle, and then judges the start URLs (``_local.verdict``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from hashcrawl._cli._checks import check_reachable, checked_output, spider_of
from hashcrawl._cli._flagset import given_flags, write_flags
from hashcrawl._cli._local import (
    Children,
    already_complete,
    cores,
    expire_previous_members,
    interrupts_held,
    log_line,
    plural,
    submit_start_urls,
    verdict,
    worker_count,
)
from hashcrawl._cli._parser import DEFAULT_CRAWL, FAILED, settings_from
from hashcrawl._cli._statedir import redis_of
from hashcrawl._core._names import check_name
from hashcrawl._core._patterns import Patterns
from hashcrawl._core._scope import Scope
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._output._sinks import sinks_for
from hashcrawl._run._queue import check_start_urls
from hashcrawl._spiders._spider import scrapy_settings
from hashcrawl._store._redisurl import ENV_VAR as REDIS_ENV_VAR
from hashcrawl._store._redisurl import RedisURL, check_crawl_name
from hashcrawl._web._addresses import ALLOW_HINT, AddressPolicy

log = logging.getLogger("hashcrawl")
REPORT_EVERY = 60.0  # seconds between two of join's lines on what it has done

if TYPE_CHECKING:
    from hashcrawl._run._worker import Worker


def cmd_join(args: argparse.Namespace) -> int:

    early_stop: list[int] = []
    # A SIGTERM before trio takes over the signals must still mean "stop", not death.
    previous = signal.signal(signal.SIGTERM, lambda number, _: early_stop.append(number))
    settings = settings_from(args)
    url = redis_of(args)
    check_crawl_name(args.crawl)
    if args.name is not None:
        check_name(args.name)
    spider = spider_of(args)
    # The Worker checks them too, in Python's words: here, in the flags', before the -o
    # file or anything in Redis is made.
    starts = list(getattr(spider, "start_urls", None) or ())
    policy = AddressPolicy.of(settings.allow_nets, settings.allow_private)
    patterns = Patterns(settings.accept_regex, settings.reject_regex)
    check_start_urls(starts, policy, patterns, ALLOW_HINT)
    made = [p for p in args.output or () if p != "-" and not os.path.lexists(p)]
    checked_output(args.output)
    try:
        return _join(args, settings, url, spider, early_stop, previous)
    except ConfigError:
        _remove_empty(made)  # refused (the crawl's settings disagree): leave no trace
        raise


def _remove_empty(paths: list[str]) -> None:
    """Remove the files a refused join made, if nothing was written to them."""
    for path in paths:
        with contextlib.suppress(OSError):
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                os.unlink(path)


def _join(
    args: argparse.Namespace,
    settings: Settings,
    url: RedisURL,
    spider: Any,
    early_stop: list[int],
    previous: Any,
) -> int:
    from hashcrawl._run._worker import Worker, unwrapped

    check_reachable(url, args.crawl)
    worker = Worker(
        url,
        args.crawl,
        name=args.name,
        spider=spider,
        sink=sinks_for(
            args.output,
            fsync=settings.fsync,
            max_size=settings.warc_max_size,
            revisits=settings.warc_revisits,
        ),
        **_worker_settings(args, settings, spider),
    )

    worker.name_flag = "--name"

    async def main() -> None:
        async with unwrapped(), trio.open_nursery() as nursery:
            nursery.start_soon(
                _stop_on_signals, worker, nursery.cancel_scope, early_stop, args.child, args.quiet
            )
            if not (args.child or args.quiet):  # crawl's children: their parent reports
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
    if not (args.child or args.quiet):
        print(log_line(_closing(worker)), file=sys.stderr, flush=True)
    return 0


def _closing(worker: Worker) -> str:
    """join's last line: why it left, and what it did."""
    tally, idle = worker.tally, worker.settings.idle
    why = (
        "stopped"
        if worker.stop_requested or idle is None
        else f"the crawl was idle for {idle:g} s (--idle)"
    )
    return (
        f"{worker.id} left crawl {worker.crawl}: {why}; {plural(tally.fetched, 'page')}, "
        f"{plural(tally.items, 'item')}, {tally.failed:,} failed, "
        f"{tally.dead:,} dead-lettered"
    )


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
        f"({plural(len(session.epochs.latest.members), 'member')}); Ctrl-C stops it",
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
    worker: Any, scope: trio.CancelScope, early: list[int], child: bool, quiet: bool = False
) -> None:
    # A child of ``crawl`` leaves Ctrl-C to its parent, which says "stopping" once.
    numbers = (signal.SIGTERM,) if child else (signal.SIGTERM, signal.SIGINT)
    with trio.open_signal_receiver(*numbers) as signals:
        if early:
            worker.stop()
        async for number in signals:
            # Only a second Ctrl-C means "now": ``timeout`` and service managers send
            # SIGTERM to the command and again to its whole group (``crawl``'s workers
            # get it from there and from ``crawl``), one request to stop twice.
            if worker.stop_requested and number == signal.SIGINT:
                # A second signal: go now; the lease brings back whatever was held.
                if not (child or quiet):
                    print("hashcrawl: stopped at once", file=sys.stderr, flush=True)
                os._exit(FAILED)
            if worker.stop_requested:
                continue
            if not (child or quiet):
                log.warning(
                    "stopping: finishing requests in flight, then handing hosts back "
                    "(press Ctrl-C again to quit at once)"
                )
            worker.stop()


def cmd_crawl(args: argparse.Namespace) -> int:
    from hashcrawl._store._server import RedisServer

    check_crawl_name(args.crawl)
    settings = settings_from(args)  # check the flags before starting anything
    spider = spider_of(args)
    urls = list(args.urls) or list(getattr(spider, "start_urls", None) or ())
    if not urls and not _starts_itself(spider):
        raise ConfigError("crawl needs a start URL (or a --spider with start_urls)")
    # A start URL no worker would fetch is refused before anything is written.
    policy = AddressPolicy.of(settings.allow_nets, settings.allow_private)
    patterns = Patterns(settings.accept_regex, settings.reject_regex)
    check_start_urls(urls, policy, patterns, ALLOW_HINT)
    made = [p for p in args.output or () if p != "-" and not os.path.lexists(p)]
    checked_output(args.output)
    state = _state_dir(args)
    try:
        with (
            interrupts_held() as check,
            RedisServer(
                directory=state, unix_socket=True, appendonly=True, die_with_parent=True
            ) as server,
        ):
            return _crawl_on(server.url, args, urls, check)
    except ConfigError:
        _remove_empty(made)  # refused (--shards, say): no -o file left behind
        raise


def _starts_itself(spider: Any) -> bool:
    """Whether a --spider gives its own start() or start_requests() (each worker
    submits what they give)."""
    from hashcrawl._spiders._spider import Spider

    if spider is None:
        return False
    return spider.start is not Spider.start or spider.start_requests is not Spider.start_requests


def _crawl_on(
    redis_url: str, args: argparse.Namespace, urls: list[str], check: Callable[[], None]
) -> int:
    """Run the workers on the private server at ``redis_url``; judge the start URLs after."""
    from hashcrawl._cli._progress import shown
    from hashcrawl._run._metrics import child_metrics_flags
    from hashcrawl._store._crawlconfig import change
    from hashcrawl._store._store import Store

    settings = settings_from(args)
    if settings.shards not in (None, 1):
        raise ConfigError(
            "--shards spreads a crawl over a Redis Cluster's slots (hashcrawl join); "
            "hashcrawl crawl runs its own single Redis, where one shard is all there is"
        )
    with contextlib.closing(Store(RedisURL.parse(redis_url), args.crawl)) as store:
        if args.fresh:
            store.clear()
        expire_previous_members(store)
        # The crawl's settings (the spider's custom ones, then the flags): its workers take them.
        spiders = {k: v for k, v in scrapy_settings(spider_of(args)).items() if k in CRAWL}
        change(store, {**spiders, **given_flags(args)})
        added, before = submit_start_urls(store, urls)
        if already_complete(store, added):
            if not args.quiet:
                print(log_line(_complete(args, before.fetched)), file=sys.stderr)
            return 0
        scope = Scope.from_members(store.scope())
        open_ended = _starts_itself(spider_of(args))
        sizing = worker_count(args.workers, scope, cores=cores(), open_ended=open_ended)
        say = log.warning if sizing.idle and not args.quiet else log.info  # -q: errors only
        say("submitted %s; %s", plural(added, "new URL"), sizing.why)
        command = _child_command(args)
        children = Children(
            [command + child_metrics_flags(args.metrics_port, i) for i in range(sizing.count)],
            quiet=args.quiet,
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
    """The ``--header`` and ``--proxy`` values for the children, in the environment:
    argv shows in ps."""
    import json

    from hashcrawl._core._flags import HEADERS_ENV_VAR, PROXIES_ENV_VAR

    env = {HEADERS_ENV_VAR: json.dumps(list(settings.headers))} if settings.headers else {}
    if settings.proxies:
        env[PROXIES_ENV_VAR] = json.dumps(list(settings.proxies))
    return env


def _child_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "hashcrawl", "join", "--child", "--crawl", args.crawl]
    command += write_flags(settings_from(args), worker_only=True)  # crawl settings: in Redis
    for path in args.output or ():
        command += ["-o", path]
    if args.log_file:
        command += ["--log-file", os.path.abspath(args.log_file)]
    if args.spider is not None:
        command += ["--spider", args.spider]
    if args.verbose:
        command.append("-v")
    if args.quiet:
        command.append("-q")
    return command
