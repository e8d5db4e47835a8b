"""What a command checks before it starts anything: its output files, its start URLs,
its spider, and that Redis answers.

Each check fails with one line naming the flag or URL and the rule it breaks, so that a
mistake costs seconds, not a fleet started and stopped.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._output._documents import foreign_document
from hashcrawl._output._parquet import parquet_module
from hashcrawl._output._sinks import format_of
from hashcrawl._spiders._spider import load_spider
from hashcrawl._store._redisurl import RedisURL

if TYPE_CHECKING:
    from hashcrawl._store._store import Store

START_PATIENCE = 5.0  # seconds a command waits for a Redis that never answered yet


def checked_output(paths: list[str] | None) -> None:
    """Refuse an -o FILE that cannot be written, before anything starts.

    Raises:
        ConfigError: a name with no known format, no such directory, no permission, not
            a file, or a JSON or XML file this crawler did not write.
    """
    for path in paths or ():
        if path == "-":
            continue
        try:
            ending = format_of(path)
        except ConfigError as exc:
            raise ConfigError(f"-o {exc}") from None
        if ending in (".warc.gz", ".warc", ".parquet"):  # files named later, in or beside it
            _check_directory(path, ending)
            continue
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        except OSError as exc:
            raise ConfigError(f"-o cannot write {path!r}: {exc.strerror or exc}") from None
        refusal = foreign_document(path, ending)
        if refusal is not None:
            raise ConfigError(f"-o {refusal}")


def _check_directory(path: str, ending: str) -> None:
    if ending == ".parquet":
        parquet_module()  # refuse at once when pyarrow is missing
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigError(f"-o {path!r} is a file: Parquet output is a directory of parts")
        where = path if os.path.isdir(path) else os.path.dirname(path.rstrip("/")) or "."
    else:
        where = os.path.dirname(path) or "."
    if not (os.path.isdir(where) and os.access(where, os.W_OK | os.X_OK)):
        kind = "Parquet" if ending == ".parquet" else "WARC"
        raise ConfigError(f"-o cannot write {kind} files in {where!r}: not a writable directory")


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
                # A cluster or Sentinel may be promoting a replica of the crawl's
                # primary: that is worth the patience, where one server refusing
                # connections is not.
                if not _may_fail_over(store) or time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
    finally:
        store.close()


def _may_fail_over(store: Store) -> bool:
    """Whether ``store``'s keys may move in a failover; a URL naming sentinels says so
    even while none of them names a primary (one being promoted)."""
    if store.url.scheme == "redis+sentinel":
        return True
    return store.may_fail_over()
