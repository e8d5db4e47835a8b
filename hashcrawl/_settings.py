"""A worker's settings: one frozen value, checked once, with the CLI's defaults."""

from __future__ import annotations

from typing import Any

import attrs

from ._exceptions import ConfigError
from ._version import DEFAULT_USER_AGENT


def _positive(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"--{attribute.name.replace('_', '-')} must be above 0, got {value}")


def _not_negative(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(f"--{attribute.name.replace('_', '-')} must be 0 or more, got {value}")


@attrs.frozen(kw_only=True)
class Settings:
    """How one worker crawls. Politeness settings should be the same on every worker.

    Args:
        delay: least seconds between two requests to one host, fleet-wide.
        per_host: most requests in flight to one host.
        concurrency: most requests in flight from this worker.
        idle: seconds the crawl must have been idle before the worker ends; None: never.
        lease: seconds of silence after which a worker is taken for dead.
        grace: seconds a stopping worker gives requests in flight.
        max_pages, max_items, max_errors, max_time, max_memory: stop this worker (not
            the crawl) after so many pages, items, failed fetches, seconds or MiB of
            resident memory; what it held goes to the other workers at once.
    """

    delay: float = attrs.field(default=1.0, validator=_not_negative)
    per_host: int = attrs.field(default=1, validator=_positive)
    concurrency: int = attrs.field(default=16, validator=_positive)
    idle: float | None = 30.0
    lease: float = attrs.field(default=60.0, validator=_positive)
    grace: float = attrs.field(default=30.0, validator=_not_negative)
    user_agent: str = attrs.field(default=DEFAULT_USER_AGENT)
    allow_domains: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    max_depth: int | None = None
    max_attempts: int = attrs.field(default=4, validator=_positive)
    timeout: float = attrs.field(default=30.0, validator=_positive)
    max_bytes: int = attrs.field(default=10 * 1024 * 1024, validator=_positive)
    max_buffer: int = attrs.field(default=50_000, validator=_positive)
    obey_robots: bool = True
    max_pages: int | None = attrs.field(default=None, validator=_positive)
    max_items: int | None = attrs.field(default=None, validator=_positive)
    max_errors: int | None = attrs.field(default=None, validator=_positive)
    max_time: float | None = attrs.field(default=None, validator=_positive)
    max_memory: float | None = attrs.field(default=None, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.idle is not None and self.idle < 0:
            raise ConfigError(f"--idle must be 0 or more seconds or 'none', got {self.idle}")
        if self.delay * 2 > self.lease:
            # A dead owner's last request may be up to a quarter lease after its last
            # heartbeat, and its hosts move a full lease after it: a delay must fit between.
            raise ConfigError(
                f"--delay must be at most half of --lease, got {self.delay} and {self.lease}"
            )

    @property
    def beat_interval(self) -> float:
        """Seconds between heartbeats: often enough to notice joins and fence quickly."""
        return min(1.0, self.lease / 10)

    @property
    def fresh_for(self) -> float:
        """Seconds after a heartbeat was sent during which this worker may still fetch."""
        return self.lease / 4

    @property
    def answer_timeout(self) -> float:
        """Longest wait for any one answer from Redis, reconnecting included."""
        return self.lease / 3
