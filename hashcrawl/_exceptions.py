"""hashcrawl's exceptions.

The tree::

    HashcrawlError
    ├── ConfigError (also ValueError)     a bad URL, crawl name, flag or setting: exit 2
    │   ├── InvalidURL                    a URL hashcrawl cannot crawl or connect to
    │   └── ShardsChanged                 the crawl was given shards as this worker
    │                                     joined it as one (a worker without --shards
    │                                     starts again with them, see ``_worker``)
    │   └── NameTaken                     a worker of this --name is running
    ├── QueueError (also ConnectionError) Redis unreachable, hanging or refusing: exit 1
    │   ├── Fenced                        this worker lost its membership (a lease passed)
    │   └── StateLost                     the crawl's keys are gone (Redis lost its data)
    ├── FetchError                        a page could not be fetched (network, timeout)
    │   ├── Refused                       fetching it breaks a rule (a private address):
    │   │                                 retrying cannot help, so it is not retried
    │   └── BrowserError                  the browser could not render a page (a DevTools
    │       │                             error, past --render-timeout, its tab gone)
    │       └── BrowserGone               the browser's pipe closed: it died or was ended
    ├── HttpError                         an answer whose status the callback does not
    │                                     take: what an errback's failure holds
    └── DropItem                          raised by an item pipeline to drop an item

Errors from redis-py, httpx and the browser's DevTools protocol are translated into these
at the adapter that calls them, and no message ever carries a password.

Apart from the tree, ``NotSent`` is a request stopped before it left, raised by a
fetcher that asks as it writes (``_web._pools``) and handed to the page that sent it
(``Page.failed``), and ``Interrupted`` a fetch a handoff cut short, handed to its page
by the dispatcher: never errors a user sees.
"""

from __future__ import annotations

from typing import Any


class HashcrawlError(Exception):
    """Base class of every error hashcrawl raises on purpose."""


class ConfigError(HashcrawlError, ValueError):
    """A setting, flag, crawl name or URL is not acceptable."""


class InvalidURL(ConfigError):
    """A URL that hashcrawl cannot crawl (or, for Redis URLs, connect to)."""


class ShardsChanged(ConfigError):
    """Another worker recorded the crawl's shards just before this one joined it as a
    crawl of one shard (two workers starting a crawl at once, with different --shards)."""


class NameTaken(ConfigError):
    """A worker of the name this one was given is running: two may not share one."""


class QueueError(HashcrawlError, ConnectionError):
    """The shared store could not be reached, hung, or refused what was asked."""


class Fenced(QueueError):
    """This worker is no longer a member: others have taken back what it held."""


class StateLost(QueueError):
    """The crawl's state in Redis is gone: restarted without persistence, flushed, cleared."""


class FetchError(HashcrawlError):
    """A page could not be fetched: network error, timeout, or body too large."""


class Refused(FetchError):
    """A page the fetcher will not fetch by rule: retrying cannot help.

    A private address not allowed by ``allow_nets``/``allow_private``, or a body in
    stacked or unknown content encodings. The message names the rule and how to allow it.
    """


class BrowserError(FetchError):
    """The browser could not render a page: the DevTools protocol answered an error, the
    page ran past its render timeout, or its tab crashed. Retried like any failed fetch;
    the worker and the browser carry on."""


class BrowserGone(BrowserError):
    """The browser's DevTools pipe closed (the browser died or was ended): every command
    still waiting for an answer fails with this, and the next page starts a new browser."""


class HttpError(HashcrawlError):
    """A response whose status its callback does not take (not 2xx, and not listed in
    ``handle_httpstatus_list``): an errback's ``failure.value``, with the ``response``."""

    def __init__(self, response: Any) -> None:
        super().__init__(f"HTTP {response.status} is not handled: {response.url}")
        self.response = response


class DropItem(HashcrawlError):
    """Raise it in an item pipeline's ``process_item`` to drop the item, as in Scrapy."""


class NotSent(Exception):
    """A request was stopped before it left: its worker may no longer fetch the host."""


class Interrupted(Exception):
    """A fetch was cut short (a handoff's deadline): the page was not fetched after all."""
