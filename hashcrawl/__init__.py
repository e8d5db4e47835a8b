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
    "BrowserError": "_exceptions",
    "BrowserGone": "_exceptions",
    "ConfigError": "_exceptions",
    "DropItem": "_exceptions",
    "HttpError": "_exceptions",
    "Fenced": "_exceptions",
    "FetchError": "_exceptions",
    "HashcrawlError": "_exceptions",
    "InvalidURL": "_exceptions",
    "QueueError": "_exceptions",
    "Refused": "_exceptions",
    "StateLost": "_exceptions",
    "Fetcher": "_web._fetch",
    "HttpxFetcher": "_web._fetch",
    "MockFetcher": "_web._fakes",
    "MemorySink": "_web._fakes",
    "Request": "_web._models",
    "Response": "_web._models",
    "Queue": "_run._queue",
    "Settings": "_core._settings",
    "CsvSink": "_output._documents",
    "JsonLinesSink": "_output._sinks",
    "JsonSink": "_output._documents",
    "ParquetSink": "_output._parquet",
    "Sink": "_output._sinks",
    "XmlSink": "_output._documents",
    "sink_for": "_output._sinks",
    "Spider": "_spiders._spider",
    "CrawlSpider": "_spiders._spider",
    "Failure": "_spiders._spider",
    "FormRequest": "_spiders._forms",
    "Link": "_spiders._linkrules",
    "LinkExtractor": "_spiders._linkrules",
    "Rule": "_spiders._linkrules",
    "WarcSink": "_output._warc",
    "Worker": "_run._worker",
}

if TYPE_CHECKING:
    from typing import Any

    from hashcrawl._output._documents import CsvSink, JsonSink, XmlSink
    from hashcrawl._output._parquet import ParquetSink
    from hashcrawl._output._sinks import JsonLinesSink, Sink, sink_for
    from hashcrawl._output._warc import WarcSink
    from hashcrawl._run._queue import Queue
    from hashcrawl._run._worker import Worker
    from hashcrawl._spiders._forms import FormRequest
    from hashcrawl._spiders._linkrules import Link, LinkExtractor, Rule
    from hashcrawl._spiders._spider import CrawlSpider, Failure, Spider
    from hashcrawl._web._fakes import MemorySink, MockFetcher
    from hashcrawl._web._fetch import Fetcher, HttpxFetcher
    from hashcrawl._web._models import Request, Response

    from ._core._settings import Settings
    from ._exceptions import (
        BrowserError,
        BrowserGone,
        ConfigError,
        DropItem,
        Fenced,
        FetchError,
        HashcrawlError,
        HttpError,
        InvalidURL,
        QueueError,
        Refused,
        StateLost,
    )
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
    "BrowserError",
    "BrowserGone",
    "ConfigError",
    "CrawlSpider",
    "CsvSink",
    "DropItem",
    "Failure",
    "Fenced",
    "FetchError",
    "Fetcher",
    "FormRequest",
    "HashcrawlError",
    "HttpError",
    "HttpxFetcher",
    "InvalidURL",
    "JsonLinesSink",
    "JsonSink",
    "Link",
    "LinkExtractor",
    "MemorySink",
    "MockFetcher",
    "ParquetSink",
    "Queue",
    "QueueError",
    "Refused",
    "Request",
    "Response",
    "Rule",
    "Settings",
    "Sink",
    "Spider",
    "StateLost",
    "WarcSink",
    "Worker",
    "XmlSink",
    "__version__",
    "sink_for",
]
