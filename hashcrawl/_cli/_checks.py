"""What a command checks before it starts anything: its output files, its start URLs,
its spider, and that Redis answers.

Each check fails with one line naming the flag or URL and the rule it breaks, so that a
mistake costs seconds, not a fleet started and stopped.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._web._addresses import AddressPolicy, SubmitCheck
from hashcrawl._web._spider import load_spider

START_PATIENCE = 5.0  # seconds a command waits for a Redis that never answered yet


def checked_output(paths: list[str] | None) -> None:
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


def check_start_urls(urls: list[str], policy: AddressPolicy) -> None:
    """Refuse bad URLs, and those the workers would refuse to connect to.

    Raises:
        ConfigError: the first such URL, with the rule it breaks.
    """
    from hashcrawl._core._urls import canonicalize

    check = SubmitCheck(policy)  # as Queue.submit judges them, in the flags' words
    for url in urls:
        refusal = check.refusal(canonicalize(url))
        if refusal is not None:
            raise ConfigError(refusal)


def spider_of(args: argparse.Namespace) -> Any:
    return load_spider(args.spider) if args.spider else None


def check_reachable(url: RedisURL, crawl: str) -> None:
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
