"""How robots.txt is fetched (RFC 9309), and the server's own pacing hints.

The rules themselves (:class:`Robots`, parsed by protego) are ``hashcrawl._core._robotsrules``'s,
where the session keeps them without importing any of the web.

Fetching is :class:`RobotsFetch`, a pure state machine the worker drives (RFC 9309):
up to five redirects are followed, to any host; 2xx gives the rules in the first
500 KiB of the body; 4xx means there are none (allow all); 5xx, 429, a network error
or a timeout mean "unreachable": nothing may be fetched for now, and robots.txt is
asked for again after a backoff. Rules are kept for 24 hours, then fetched again.
"""

from __future__ import annotations

from collections.abc import Mapping

from hashcrawl._core._respond import parse_retry_after as parse_retry_after
from hashcrawl._core._robotsrules import RULES_TTL as RULES_TTL
from hashcrawl._core._robotsrules import Robots as Robots
from hashcrawl._core._robotsrules import Unreachable as Unreachable
from hashcrawl._core._urls import host_key, join_url
from hashcrawl._web._html import decode_body

#: Most redirects followed to reach a robots.txt (RFC 9309 2.3.1.2: at least five).
MAX_REDIRECTS = 5
#: Bytes of a robots.txt parsed; the rest is ignored (RFC 9309 2.5: at least 500 KiB).
MAX_ROBOTS_BYTES = 500 * 1024


def robots_url(canonical_url: str) -> str:
    """Return the URL of the robots.txt that governs ``canonical_url``."""
    scheme = canonical_url.partition(":")[0]
    return f"{scheme}://{host_key(canonical_url)}/robots.txt"


def robots_for_status(status: int, text: str, user_agent: str) -> Robots:
    """Return the rules implied by fetching robots.txt with this status and body.

    As in Google's spec: 2xx parses the body; 429 and 5xx mean the server is in trouble,
    so nothing may be fetched until robots.txt is read again; any other 3xx or 4xx
    (redirects not followed to the end, 404, 403) means there are no rules. A status
    outside 100-599 is treated like a server error. (:class:`RobotsFetch` is what the
    worker uses; this is the same rule for one response, text already decoded.)
    """
    if 200 <= status < 300:
        return Robots.parse(text, user_agent)
    if 300 <= status < 500 and status != 429:
        return Robots.allow_all()
    return Robots.deny_all()


class RobotsFetch:
    """Fetching one host's robots.txt, one request at a time (the caller makes them).

    ``url`` is the URL to fetch next. Give each response to :meth:`answered`, or each
    failure to :meth:`failed`; each returns the next URL to fetch (a redirect), the
    rules, or :class:`Unreachable`. Never raises, whatever the server sent.
    """

    def __init__(self, page_url: str, user_agent: str) -> None:
        self.url = robots_url(page_url)
        self.user_agent = user_agent
        self.hops = 0

    def answered(
        self,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        now: float,
        *,
        truncated: bool = False,
    ) -> str | Robots | Unreachable:
        """The next URL, the rules, or Unreachable, from one response.

        Args:
            now: UNIX time, against which a Retry-After date is measured.
            truncated: ``body`` is only the start of the file (the fetcher's cap).
        """
        if 300 <= status < 400:
            return self._redirect(headers.get("location"))
        if 200 <= status < 300:
            text = decode_body(_whole_lines(body, truncated), headers.get("content-type"))
            return Robots.parse(text, self.user_agent)
        if 400 <= status < 500 and status != 429:
            return Robots.allow_all()
        wait = parse_retry_after(headers.get("retry-after"), now)
        return Unreachable(f"robots.txt unreachable: HTTP {status} from {self.url}", wait)

    def failed(self, error: str) -> Unreachable:
        """Unreachable, from a network error or a timeout."""
        return Unreachable(f"robots.txt unreachable: {error}"[:300])

    def _redirect(self, location: str | None) -> str | Robots:
        target = join_url(self.url, location) if location else None
        if target is None or self.hops >= MAX_REDIRECTS:
            return Robots.allow_all()  # no file at the end of it: "unavailable" (4xx)
        self.hops += 1
        self.url = target
        return target


def _whole_lines(body: bytes, truncated: bool) -> bytes:
    """The first ``MAX_ROBOTS_BYTES`` of a robots.txt, without a line cut short: the
    cut "Disallow: /" of "Disallow: /x" would disallow everything."""
    if len(body) > MAX_ROBOTS_BYTES:
        body, truncated = body[:MAX_ROBOTS_BYTES], True
    return body[: body.rfind(b"\n") + 1] if truncated else body
