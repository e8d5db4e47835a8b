"""robots.txt rules and the server's own pacing hints (Crawl-delay, Retry-After).

Parsing is protego's (Scrapy's robots.txt parser), not ``urllib.robotparser``: protego
follows Google's spec and RFC 9309, with ``*`` and ``$`` wildcards, the longest match
deciding between Allow and Disallow, one group per user agent, and Crawl-delay.
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC

import attrs
from protego import Protego

from hashcrawl._exceptions import ConfigError
from hashcrawl._urls import host_key

_DENY_ALL = "User-agent: *\nDisallow: /\n"
_MAX_RETRY_AFTER = 86400.0
# The product token: what robots.txt groups name ("hashcrawl" in "hashcrawl/0.1 (+...)").
_PRODUCT_TOKEN = re.compile(r"[A-Za-z0-9_-]+")
_DELTA_SECONDS = re.compile(r"[+-]?[0-9]+")


@attrs.frozen
class Robots:
    """The robots.txt rules of one host, as they apply to one user agent.

    Two values are equal when they came from the same text for the same agent.
    """

    text: str = attrs.field(repr=False)
    agent: str
    # Protego values neither compare nor hash; ``text`` stands in for them.
    _parser: Protego = attrs.field(eq=False, repr=False)

    @classmethod
    def parse(cls, text: str, user_agent: str) -> Robots:
        """Parse a robots.txt body for the product token of ``user_agent``.

        Raises:
            ConfigError: ``user_agent`` does not start with a product token.
        """
        return cls(text, _product_token(user_agent), Protego.parse(text))

    @classmethod
    def allow_all(cls) -> Robots:
        """Rules that allow everything: there is no robots.txt (4xx)."""
        return cls.parse("", "*")

    @classmethod
    def deny_all(cls) -> Robots:
        """Rules that allow nothing: robots.txt could not be read (5xx)."""
        return cls.parse(_DENY_ALL, "*")

    def allowed(self, url: str) -> bool:
        """Return True if the rules let our agent fetch ``url``."""
        return self._parser.can_fetch(url, self.agent)

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


def robots_url(canonical_url: str) -> str:
    """Return the URL of the robots.txt that governs ``canonical_url``."""
    scheme = canonical_url.partition(":")[0]
    return f"{scheme}://{host_key(canonical_url)}/robots.txt"


def robots_for_status(status: int, text: str, user_agent: str) -> Robots:
    """Return the rules implied by fetching robots.txt with this status and body.

    As in Google's spec: 2xx parses the body; 429 and 5xx mean the server is in trouble,
    so nothing may be fetched until robots.txt is read again; any other 3xx or 4xx
    (redirects not followed to the end, 404, 403) means there are no rules. A status
    outside 100-599 is treated like a server error.
    """
    if 200 <= status < 300:
        return Robots.parse(text, user_agent)
    if 300 <= status < 500 and status != 429:
        return Robots.allow_all()
    return Robots.deny_all()


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Return the seconds a Retry-After header asks to wait, between 0 and a day.

    Args:
        value: delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT").
        now: the current UNIX time, against which a date is measured.

    Returns None for a missing or unreadable header; a time in the past gives 0.
    """
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return _clamp(float(value))
    return _seconds_until_date(value, now)


def _seconds_until_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (ValueError, TypeError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with the zone unknown (RFC 5322)
        when = when.replace(tzinfo=UTC)
    return _clamp(when.timestamp() - now)


def _clamp(seconds: float) -> float:
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)


def _product_token(user_agent: str) -> str:
    stripped = user_agent.strip()
    if stripped == "*":
        return stripped
    match = _PRODUCT_TOKEN.match(stripped)
    if match is None:
        raise ConfigError(
            f"user_agent must start with a product token like 'hashcrawl/0.1': {user_agent!r}"
        )
    return match.group().lower()
