"""What a worker counts as it crawls, and the Prometheus ``/metrics`` that shows it.

A :class:`Tally` is the worker's one count structure, plain Python with no IO: the
session adds to it as pages are fetched, parsed and committed, the heartbeat sends
:meth:`Tally.beat_fields` to Redis (the ``w:ID`` hash, in the heartbeat it sends
anyway), where ``status`` and ``crawl``'s summary sum them over the fleet, and a
:class:`WorkerCollector` reads it when Prometheus scrapes. Each worker has its own
``CollectorRegistry``, so embedded workers and tests never share one.
"""

from __future__ import annotations

import bisect
import collections
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from hashcrawl._core._outcome import Kind, Outcome, is_last_attempt
from hashcrawl._exceptions import ConfigError

if TYPE_CHECKING:
    from hashcrawl._core._session import Session

# Seconds: loopback pages take a millisecond, slow origins many seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RATE_WINDOW = 60.0  # seconds over which a heartbeat's "pages in the last minute" is taken
MAX_KINDS = 24  # distinct error kinds kept; a fetcher inventing more gets "other"
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")


def error_kind(message: str) -> str:
    """A short, bounded label for a fetch error: httpx's exception name, or a rule.

    ``"ReadTimeout: timed out"`` is ``ReadTimeout``; a body over ``--max-body`` is
    ``body_too_large``; a plain reason such as ``"connection refused (...)"`` is
    ``connection_refused``; anything else is ``other``.
    """
    if message.startswith("body larger than"):
        return "body_too_large"
    head = message.split(":", 1)[0].split("(", 1)[0].strip()
    if _KIND.fullmatch(head):
        return head
    words = head.lower().split()
    snake = "_".join(words)
    return snake if 0 < len(words) <= 4 and _KIND.fullmatch(snake) else "other"


def status_class(status: int) -> str:
    """``2xx`` for 200..299 and so on; ``other`` outside 100..599."""
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


@attrs.define
class Histogram:
    """Counts per latency bucket (not cumulative), and their sum."""

    counts: list[int] = attrs.Factory(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        bounds = [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
        running, out = 0, []
        for bound, count in zip(bounds, list(self.counts), strict=True):
            running += count
            out.append((bound, float(running)))
        return out


@attrs.define
class Tally:
    """A worker's own counts since it started, across its memberships.

    ``fetched`` counts responses, ``failed`` fetches that got none; ``errors`` counts
    both those failures and failed parse callbacks (kind ``parse``), by kind.
    ``retries`` and ``dead`` count what commits settled: a page put back for another
    attempt, or dead-lettered.
    """

    fetched: int = 0
    failed: int = 0
    items: int = 0
    robots_denied: int = 0
    pattern_refused: int = 0
    fenced: int = 0
    links_dropped: int = 0
    host_capped: int = 0
    sub_refused: int = 0  # a rendered page's requests to hosts it may not fetch from
    statuses: dict[str, int] = attrs.Factory(dict)
    errors: dict[str, int] = attrs.Factory(dict)
    bytes: int = 0
    retries: int = 0
    dead: int = 0
    queue_bad: int = 0
    links_found: int = 0
    links_kept: int = 0
    fetch_latency: Histogram = attrs.Factory(Histogram)
    commit_latency: Histogram = attrs.Factory(Histogram)
    _samples: collections.deque[tuple[float, int]] = attrs.Factory(collections.deque)

    @property
    def pages(self) -> int:
        return sum(self.statuses.values())

    def response(self, status: int, size: int, seconds: float) -> None:
        cls = status_class(status)
        self.statuses[cls] = self.statuses.get(cls, 0) + 1
        self.bytes += size
        self.fetch_latency.observe(seconds)

    def error(self, message: str, seconds: float | None = None) -> None:
        kind = error_kind(message)
        if kind not in self.errors and len(self.errors) >= MAX_KINDS:
            kind = "other"
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if seconds is not None:
            self.fetch_latency.observe(seconds)

    def links(self, found: int, kept: int) -> None:
        self.links_found += found
        self.links_kept += kept

    def committed(self, outcomes: list[Outcome], max_attempts: int, seconds: float) -> None:
        """Count what a commit that went through settled: retries, dead letters, bad."""
        self.commit_latency.observe(seconds)
        for o in outcomes:
            if o.kind is Kind.BAD:
                self.queue_bad += 1
            elif o.kind is Kind.DEAD:
                self.dead += 1
            elif o.kind is Kind.RETRY and o.held is not None:
                if is_last_attempt(o.held.entry, max_attempts):
                    self.dead += 1
                else:
                    self.retries += 1

    def per_minute(self, now: float) -> int:
        """Pages fetched in the last minute (sampled at heartbeats, so to within one)."""
        pages = self.pages
        self._samples.append((now, pages))
        while len(self._samples) > 1 and self._samples[1][0] <= now - RATE_WINDOW:
            self._samples.popleft()
        then, before = self._samples[0]
        span = now - then
        return round((pages - before) * 60 / span) if span > 0 else 0

    def counts(self) -> dict[str, int]:
        """Every count, flat, as the heartbeat names them."""
        counts = {
            "fetched": self.fetched,
            "failed": self.failed,
            "items": self.items,
            "robots_denied": self.robots_denied,
            "pattern_refused": self.pattern_refused,
            "fenced": self.fenced,
            "links_dropped": self.links_dropped,
            "host_capped": self.host_capped,
            "sub_refused": self.sub_refused,
            "bytes": self.bytes,
            "retries": self.retries,
            "dead_letters": self.dead,
            "links_found": self.links_found,
            "links_kept": self.links_kept,
        }
        counts.update({"status_" + cls: n for cls, n in dict(self.statuses).items()})
        counts.update({"error_" + kind: n for kind, n in dict(self.errors).items()})
        return counts

    def beat_fields(self, now: float, *, since: dict[str, int]) -> dict[str, int | str]:
        """What the heartbeat adds to the worker's ``w:ID`` hash (see docs/design.md).

        Counts are those since ``since`` (the counts when this membership began): a
        worker that rejoins under a new id must not count its earlier pages twice.
        """
        fields: dict[str, int | str] = {
            name: count - since.get(name, 0) for name, count in self.counts().items()
        }
        fields["per_minute"] = self.per_minute(now)
        return fields


def parse_top(text: str) -> list[tuple[str, int]]:
    """The pairs of a ``busiest``/``backed_off`` field; what does not parse is skipped."""
    pairs = []
    for part in (text or "").split(","):
        host, _, figure = part.rpartition("=")
        if host and figure.lstrip("-").isdigit():
            pairs.append((host, int(figure)))
    return pairs


# -- Prometheus ----------------------------------------------------------------------


class Worker(Protocol):
    """What a scrape reads of a worker (a ``hashcrawl.Worker``): named here, not imported,
    so that the worker may import this module."""

    tally: Tally

    @property
    def session(self) -> Session | None: ...

    def fleet_counters(self) -> dict[str, int]: ...


class WorkerCollector:
    """Reads a worker's tally and session when Prometheus scrapes (in the server's thread)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        t = self.worker.tally
        pages = CounterMetricFamily(
            "hashcrawl_pages", "Pages fetched, by status class", labels=["class"]
        )
        for cls, count in sorted(dict(t.statuses).items()):
            pages.add_metric([cls], count)
        yield pages
        errors = CounterMetricFamily(
            "hashcrawl_fetch_errors",
            "Fetches that failed, and parse callbacks that raised (kind parse), by kind",
            labels=["kind"],
        )
        for kind, count in sorted(dict(t.errors).items()):
            errors.add_metric([kind], count)
        yield errors
        for name, doc, value in (
            ("response_bytes", "Bytes of response bodies read", t.bytes),
            ("retries", "Pages put back for another attempt", t.retries),
            ("dead_letters", "Pages this worker dead-lettered", t.dead),
            ("queue_bad", "Unreadable queue entries this worker dropped", t.queue_bad),
            ("links_found", "Links found on pages", t.links_found),
            ("links_kept", "Links kept after depth, domain and robots.txt rules", t.links_kept),
        ):
            yield CounterMetricFamily("hashcrawl_" + name, doc, value=value)
        yield from self._histograms(t)
        for gauge, about, figure in self._gauges():
            yield GaugeMetricFamily("hashcrawl_" + gauge, about, value=figure)
        yield from self._fleet()

    def _histograms(self, t: Tally) -> Iterator[Any]:
        from prometheus_client.core import HistogramMetricFamily

        for name, doc, h in (
            ("fetch_seconds", "Seconds a fetch took, failed ones included", t.fetch_latency),
            ("commit_seconds", "Seconds a commit to Redis took", t.commit_latency),
        ):
            yield HistogramMetricFamily("hashcrawl_" + name, doc, h.cumulative(), h.total)

    def _gauges(self) -> list[tuple[str, str, float]]:
        session = self.worker.session
        if session is None:
            return []
        now = session.figures()
        return [
            ("in_flight", "Requests in flight now", now.in_flight),
            ("held", "Entries read and not yet committed", now.held),
            ("hosts_owned", "Hosts this worker owns and knows of", now.hosts),
            ("frontier_size", "Entries waiting in this worker's memory", now.queued),
            ("members", "Live members of the crawl, as this worker knows", now.members),
        ]

    def _fleet(self) -> Iterator[Any]:
        """Fleet-wide counters kept in Redis, read once per scrape (off the page path)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            figures = self.worker.fleet_counters()
        except Exception:  # a scrape must answer even with Redis away
            return
        for name, doc in (
            ("leases_reclaimed", "Entries held by dead workers and taken back, fleet-wide"),
            ("queue_bad", "Unreadable entries dropped, fleet-wide"),
            ("revisit_changed", "Revisits that found the page changed, fleet-wide"),
            ("revisit_unchanged", "Revisits that found the page unchanged, fleet-wide"),
            ("revisit_bad", "Unreadable revisit records dropped, fleet-wide"),
        ):
            yield CounterMetricFamily("hashcrawl_fleet_" + name, doc, value=figures.get(name, 0))
        for name, doc in (
            ("dead", "Dead letters now, fleet-wide (retry-dead lowers it)"),
            ("outstanding", "Entries waiting or held anywhere in the fleet"),
            ("revisit_pages", "Pages with a revisit record, fleet-wide"),
            ("revisit_due_now", "Revisited pages due now, not yet taken"),
            ("revisit_overdue", "Revisited pages due over a minute ago, not yet taken"),
            ("revisit_due_next_hour", "Revisited pages due within the next hour"),
        ):
            yield GaugeMetricFamily("hashcrawl_fleet_" + name, doc, value=figures.get(name, 0))


def serve(worker: Worker, port: int, addr: str) -> Any:
    """Serve ``worker``'s metrics on ``addr:port`` in a thread; returns the server.

    Raises:
        ConfigError: the address cannot be bound (in use, say).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker))
    try:
        server, _ = start_http_server(port, addr, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"--metrics-port {port} on --metrics-addr {addr}: {exc.strerror or exc}"
        ) from None
    return server


def child_metrics_flags(port: int | None, index: int) -> list[str]:
    """The port of ``hashcrawl crawl``'s child worker ``index``: PORT, PORT+1, ..."""
    return [] if port is None else ["--metrics-port", str(port + index)]
