"""hashcrawl: a distributed web crawler with exact fleet-wide politeness."""

__version__ = "0.1.0"

from ._exceptions import (
    ConfigError,
    Fenced,
    FetchError,
    HashcrawlError,
    InvalidURL,
    QueueError,
)

__all__ = [
    "ConfigError",
    "Fenced",
    "FetchError",
    "HashcrawlError",
    "InvalidURL",
    "QueueError",
    "__version__",
]
