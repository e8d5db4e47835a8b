"""hashcrawl: a distributed web crawler with exact fleet-wide politeness.

Every host has one owner on a consistent-hash ring of the live workers; links travel
to their owner's Redis stream; a consumer group's pending entries are the leases.

The names below are imported on first use (PEP 562), so that ``hashcrawl``'s command
starts its Ctrl-C guard before trio, httpx and redis-py are imported.
"""

from __future__ import annotations

import importlib

from ._version import __version__

TYPE_CHECKING = False  # typing itself is not imported: it would lengthen the start-up

_HOMES = {
    "ConfigError": "_exceptions",
    "Fenced": "_exceptions",
    "FetchError": "_exceptions",
    "HashcrawlError": "_exceptions",
    "InvalidURL": "_exceptions",
    "QueueError": "_exceptions",
    "Refused": "_exceptions",
    "StateLost": "_exceptions",
    "Fetcher": "_fetch",
    "HttpxFetcher": "_fetch",
    "Request": "_models",
    "Response": "_models",
    "Queue": "_queue",
    "Settings": "_settings",
    "CsvSink": "_sinks",
    "JsonLinesSink": "_sinks",
    "Sink": "_sinks",
    "Spider": "_spider",
    "Worker": "_worker",
}

if TYPE_CHECKING:
    from typing import Any

    from ._exceptions import (
        ConfigError,
        Fenced,
        FetchError,
        HashcrawlError,
        InvalidURL,
        QueueError,
        Refused,
        StateLost,
    )
    from ._fetch import Fetcher, HttpxFetcher
    from ._models import Request, Response
    from ._queue import Queue
    from ._settings import Settings
    from ._sinks import CsvSink, JsonLinesSink, Sink
    from ._spider import Spider
    from ._worker import Worker
else:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'hashcrawl' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ConfigError",
    "CsvSink",
    "Fenced",
    "FetchError",
    "Fetcher",
    "HashcrawlError",
    "HttpxFetcher",
    "InvalidURL",
    "JsonLinesSink",
    "Queue",
    "QueueError",
    "Refused",
    "Request",
    "Response",
    "Settings",
    "Sink",
    "Spider",
    "StateLost",
    "Worker",
    "__version__",
]
