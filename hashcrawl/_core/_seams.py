"""What the core asks of the parts a driver gives it, as protocols: the core names no
implementation, so it imports none of the web, Redis or the event loop.

The real parts: ``hashcrawl._run._metrics.Tally`` (counts), ``hashcrawl._web._cookies.Jars``
(cookies), ``hashcrawl._web._models.Response`` (a reply).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    pass


class Tally(Protocol):
    """The worker's counts of what its pages did, for its heartbeat and /metrics; the
    core adds to the plain counts itself."""

    fetched: int
    failed: int
    items: int
    robots_denied: int
    pattern_refused: int
    links_dropped: int
    host_capped: int

    def counts(self) -> dict[str, int]: ...

    def beat_fields(self, now: float, *, since: dict[str, int]) -> dict[str, int | str]: ...

    def response(self, status: int, size: int, seconds: float) -> None: ...

    def error(self, message: str, seconds: float | None = None) -> None: ...

    def links(self, found: int, kept: int) -> None: ...

    def committed(self, outcomes: list[Any], max_attempts: int, seconds: float) -> None: ...


class CookieJars(Protocol):
    """The cookies of the hosts a worker owns, one jar per host, as text to hand over."""

    def hosts(self) -> list[str]: ...

    def header(self, host: str, method: str, url: str) -> str | None: ...

    def take(self, host: str, method: str, url: str, set_cookies: list[str]) -> None: ...

    def pop(self, host: str) -> str: ...

    def record(self, host: str) -> str: ...

    def adopt(self, host: str, text: str) -> None: ...

    def changed(self) -> list[str]: ...

    def stored(self, host: str, text: str) -> None: ...


class Reply(Protocol):
    """What the core reads of a response: its status, body and final URL."""

    @property
    def status(self) -> int: ...

    @property
    def body(self) -> bytes: ...

    @property
    def url(self) -> str: ...
