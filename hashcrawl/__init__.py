"""hashcrawl: a distributed web crawler with exact fleet-wide politeness.

Every host has one owner on a consistent-hash ring of the live workers; links travel
to their owner's Redis stream; a consumer group's pending entries are the leases.
"""

from ._exceptions import (
    ConfigError,
    Fenced,
    FetchError,
    HashcrawlError,
    InvalidURL,
    QueueError,
    StateLost,
)
from ._fetch import Fetcher, HttpxFetcher
from ._models import Request, Response
from ._queue import Queue
from ._settings import Settings
from ._sinks import CsvSink, JsonLinesSink, Sink
from ._spider import Spider
from ._version import __version__
from ._worker import Worker

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
    "Request",
    "Response",
    "Settings",
    "Sink",
    "Spider",
    "StateLost",
    "Worker",
    "__version__",
]
