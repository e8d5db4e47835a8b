"""robots.txt rules as a worker keeps them, and the sitemaps a host names: no IO.

Parsing is protego's (Scrapy's robots.txt parser), not ``urllib.robotparser``: protego
follows Google's spec and RFC 9309, with ``*`` and ``$`` wildcards, the longest match
deciding between Allow and Disallow, one group per user agent, and Crawl-delay. How
robots.txt is fetched is ``hashcrawl._web._robots``'s.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable

import attrs
from protego import Protego

from hashcrawl._core._entry import Entry
from hashcrawl._core._links import request_url
from hashcrawl._exceptions import ConfigError

#: Seconds rules are kept before robots.txt is fetched again (RFC 9309 2.4).
RULES_TTL = 24 * 3600.0
#: ``Sitemap:`` lines of a robots.txt queued, at most.
MAX_ROBOTS_SITEMAPS = 50
# Rules from more text than this can take milliseconds per URL to check (protego walks
# them in Python): the worker checks them in a thread, off its event loop.
_HEAVY_TEXT = 32 * 1024

#: robots.txt verdicts remembered, all hosts' together: a host's pages link the same few
#: hundred URLs over and over, and protego parses each URL and walks the rules anew
#: (~15 us a link). Then they start over.
VERDICTS_KEPT = 16384
_REMEMBERED_URL = 512  # longer URLs are checked every time: the memory stays a few MiB
_VERDICTS: dict[tuple[int, str], bool] = {}
_DENY_ALL = "User-agent: *\nDisallow: /\n"
# The product token: what robots.txt groups name ("hashcrawl" in "hashcrawl/0.1 (+...)").
_PRODUCT_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


@attrs.frozen
class Robots:
    """The robots.txt rules of one host, as they apply to one user agent.

    Two values are equal when they came from the same text for the same agent.
    """

    text: str = attrs.field(repr=False)
    agent: str
    # Protego values neither compare nor hash; ``text`` stands in for them.
    _parser: Protego = attrs.field(eq=False, repr=False)
    #: When to fetch robots.txt again (the caller's clock); never by default.
    until: float = attrs.field(default=math.inf, eq=False, kw_only=True)
    # Names these rules in ``_VERDICTS`` (a new one for each value, evolved ones too).
    _token: int = attrs.field(factory=itertools.count().__next__, init=False, eq=False, repr=False)

    @classmethod
    def parse(cls, text: str, user_agent: str) -> Robots:
        """Parse a robots.txt body for the product token of ``user_agent``.

        Raises:
            ConfigError: ``user_agent`` does not start with a product token.
        """
        return cls(text, product_token(user_agent), Protego.parse(text))

    @classmethod
    def allow_all(cls) -> Robots:
        """Rules that allow everything: there is no robots.txt (4xx)."""
        return cls.parse("", "*")

    @classmethod
    def deny_all(cls) -> Robots:
        """Rules that allow nothing: robots.txt could not be read (5xx)."""
        return cls.parse(_DENY_ALL, "*")

    def kept_until(self, until: float) -> Robots:
        """The same rules, to be fetched again at ``until``."""
        return attrs.evolve(self, until=until)

    @property
    def heavy(self) -> bool:
        """Whether checking a URL may take long enough to be done off the event loop."""
        return len(self.text) > _HEAVY_TEXT

    def expired(self, now: float) -> bool:
        """Whether robots.txt is due to be fetched again."""
        return now >= self.until

    def allowed(self, url: str) -> bool:
        """Return True if the rules let our agent fetch ``url``."""
        key = (self._token, url)
        verdict = _VERDICTS.get(key)
        if verdict is None:
            verdict = self._parser.can_fetch(url, self.agent)
            if len(url) <= _REMEMBERED_URL:
                if len(_VERDICTS) >= VERDICTS_KEPT:
                    _VERDICTS.clear()  # bounded: the verdicts start over
                _VERDICTS[key] = verdict
        return verdict

    @property
    def sitemaps(self) -> list[str]:
        """The URLs of the ``Sitemap:`` lines, in order (for every agent alike)."""
        return [str(url) for url in self._parser.sitemaps]

    @property
    def crawl_delay(self) -> float | None:
        """Seconds between requests asked of our agent's group, or None if not asked.

        The group is the one naming our agent, else the ``*`` group; as in Google's
        spec, a group naming us replaces ``*`` entirely, Crawl-delay included.
        """
        return self._parser.crawl_delay(self.agent)


@attrs.frozen
class Unreachable:
    """robots.txt could not be read: fetch nothing from the host until it is asked again.

    Args:
        reason: what went wrong, for the page's error and the dead letters.
        retry_after: seconds the server asked to wait (Retry-After), if it did.
    """

    reason: str
    retry_after: float | None = None

    def wait(self, attempts: int) -> float:
        """Seconds until robots.txt is asked for again: the server's Retry-After, else
        the backoff of a failed page (1, 2, 4... seconds for its attempts, at most 60)."""
        if self.retry_after is not None:
            return self.retry_after
        return min(60.0, 2.0 ** min(attempts, 6))


def sitemap_urls(page_url: str, robots_sitemaps: Iterable[str]) -> list[str]:
    """The sitemaps to queue for a host: its robots.txt's ``Sitemap:`` URLs (at most
    ``MAX_ROBOTS_SITEMAPS``), then ``/sitemap.xml``; each as a URL to request."""
    found = [request_url(page_url, "/sitemap.xml")]
    for count, url in enumerate(robots_sitemaps):
        if count >= MAX_ROBOTS_SITEMAPS:
            break
        found.insert(count, request_url(page_url, url))
    return list(dict.fromkeys(u for u in found if u is not None))


def first_sitemaps(entry: Entry, robots_sitemaps: Iterable[str]) -> list[Entry]:
    """The sitemap entries to queue for the host of ``entry``, the first page fetched there."""
    urls = sitemap_urls(entry.url, robots_sitemaps)
    return [Entry(url=u, depth=entry.depth, sitemap=1) for u in urls]


def product_token(user_agent: str) -> str:
    """The product token of ``user_agent``, lowercased: what robots.txt groups name.

    Raises:
        ConfigError: ``user_agent`` does not start with one.
    """
    stripped = user_agent.strip()
    if stripped == "*":
        return stripped
    match = _PRODUCT_TOKEN.match(stripped)
    if match is None:
        raise ConfigError(
            f"user_agent must start with a product token like 'hashcrawl/0.1': {user_agent!r}"
        )
    return match.group().lower()
