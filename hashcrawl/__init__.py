"""hashcrawl: a distributed web crawler with exact fleet-wide politeness.

Every host has one owner on a consistent-hash ring of the live workers; links travel
to their owner's Redis stream; a consumer group's pending entries are the leases.
"""

__version__ = "0.1.0"

from ._exceptions import (  # noqa: E402  (the modules below read __version__)
    ConfigError,
    Fenced,
    FetchError,
    HashcrawlError,
    InvalidURL,
    QueueError,
)
from ._fetch import Fetcher, HttpxFetcher  # noqa: E402
from ._models import Request, Response  # noqa: E402
from ._queue import Queue  # noqa: E402
from ._settings import Settings  # noqa: E402
from ._sinks import CsvSink, JsonLinesSink, Sink  # noqa: E402
from ._spider import Spider  # noqa: E402
from ._worker import Worker  # noqa: E402

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
    "Worker",
    "__version__",
]
