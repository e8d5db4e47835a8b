"""A fake web for the simulations: a generated site graph served through a fetcher.

Nothing here touches the network. A :class:`Site` is a seed and a size; ``Web.of(site)``
builds the same pages from it every time. Pages come in kinds that exercise every path
a worker takes after a fetch:

========  ====================================================================
kind      what the server does
========  ====================================================================
ok        200 with links, quickly
slow      200 with links, taking 0.8-2.6 s: some attempts outlast the timeout
flaky     the first one or two requests fail (connection reset), then 200
broken    every request fails: the page ends in the dead letters
missing   404, no links
busy      503 (500 for every other busy page, by its URL's checksum) with
          Retry-After: 1 to the first request, then 200
moved     301 to another page of the site
========  ====================================================================

One site in three also has a *killer* page (an ``ok`` page, drawn apart from the
others, so every other page stays as it was): its answer kills the worker that reads
it, as a page that makes a parser crash or exhaust memory would. The crawl must still
end: the fleet blames it through the in-flight records and dead-letters it (``died``).

A host's robots.txt is absent (404), sets a Crawl-delay, or cannot be fetched (then
none of its pages may be fetched, and they end in the dead letters: RFC 9309).

A :class:`SimFetcher` is one worker's fetcher. A request first *waits to leave* (as
for a free connection), for a gap drawn per request, until the simulation sends it on
a turn of its worker (a paused worker sends nothing). Then it asks the driver's check
right before sending, as the default fetcher does as it writes the request
(``sending_only_while``), and raises ``NotSent`` if the check says no. Otherwise it
reaches the server and is logged, with the moment the server is done with it. The
answer is held back until the simulation *releases* the flight, so a fetch is three
steps, and others can happen in between.

The fleet-scale run (``simulations.fleet``) uses :class:`FleetWeb` instead: a million
URLs generated on demand, answered at once, with a :class:`Tally` in place of the log.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import trio

from hashcrawl._exceptions import FetchError
from hashcrawl._web._models import Request, Response
from hashcrawl._web._pools import NotSent, _may_send
from simulations.changes import Change, revised

HTML = {"content-type": "text/html; charset=utf-8"}
KINDS = ("ok",) * 12 + ("slow",) * 2 + ("flaky",) * 2 + ("broken", "missing", "busy", "moved")
ROBOTS = ("absent",) * 3 + ("delay", "unreachable")
CRAWL_DELAY = 1.5


@attrs.frozen
class Site:
    """A generated site: ``pages`` pages over ``hosts`` hosts, shaped by ``seed``."""

    seed: int
    hosts: int
    pages: int

    def __repr__(self) -> str:
        return f"Site(seed={self.seed}, hosts={self.hosts}, pages={self.pages})"


@attrs.frozen
class Page:
    """One page: where it links, and how its server behaves."""

    url: str
    host: str
    kind: str
    links: tuple[str, ...]
    duration: float
    fails: int = 0


@attrs.frozen
class Answer:
    """What the server does with one request: how long it takes and what it sends."""

    duration: float
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = attrs.Factory(dict)
    error: str | None = None

    @property
    def final(self) -> bool:
        """A page fetched for good: not a failure, and not a "come back later"."""
        return self.error is None and not (self.status == 429 or 500 <= self.status <= 599)


@attrs.frozen
class Fetch:
    """One request as the server saw it: who sent it, when, and until when it was busy."""

    worker: str
    url: str
    host: str
    start: float
    end: float
    final: bool
    robots: bool
    status: int = 0  # the answer's status (0: none came, the connection failed)


class Web:
    """Every page and robots.txt of a site, and a count of requests per URL."""

    def __init__(
        self, pages: dict[str, Page], robots: dict[str, str], killer: str | None = None
    ) -> None:
        self.pages = pages
        self.robots = robots
        self.killer = killer
        self.requests: dict[str, int] = {}
        # How pages change, in a revisiting example (simulations/changes.py); else none.
        self.changes: dict[str, Change] = {}

    @classmethod
    def of(cls, site: Site) -> Web:
        rng = random.Random(site.seed)
        hosts = [f"h{i}.test" for i in range(site.hosts)]
        urls = [f"http://{hosts[rng.randrange(len(hosts))]}/p{j}" for j in range(site.pages)]
        pages = {url: _page(rng, url, urls) for url in urls}
        robots = {host: rng.choice(ROBOTS) for host in hosts}
        return cls(pages, robots, _killer(site.seed, pages))

    def kills(self, url: str) -> bool:
        """Whether reading the answer for ``url`` kills the worker."""
        return url == self.killer

    def url(self, index: int) -> str:
        """Page ``index`` of the site (modulo its size); from 90 up, a URL it does not have."""
        if index >= 90:
            return f"http://h0.test/nowhere{index}"
        urls = list(self.pages)
        return urls[index % len(urls)]

    def crawl_delay(self, host: str) -> float:
        return CRAWL_DELAY if self.robots.get(host) == "delay" else 0.0

    def answer(self, url: str, asked: Mapping[str, str] | None = None, now: float = 0.0) -> Answer:
        """The server's answer to the next request for ``url`` (with headers ``asked``,
        at ``now``: a changing page's version, or a 304, depends on both)."""
        seen = self.requests.get(url, 0)
        self.requests[url] = seen + 1
        if url.endswith("/robots.txt"):
            return self._robots(url.split("/")[2])
        page = self.pages.get(url)
        if page is None:
            return Answer(0.05, 404, b"not here", dict(HTML))
        answer = _answer(page, seen)
        change = self.changes.get(url)
        if change is None or answer.status != 200 or answer.error is not None:
            return answer
        got = revised(change, answer.body, asked or {}, now)
        headers = {**answer.headers, **got.headers}
        return attrs.evolve(answer, status=got.status, body=got.body, headers=headers)

    def links_of(self, url: str) -> tuple[str, ...]:
        """The links a fetched page gives the crawler (a redirect's target included)."""
        page = self.pages.get(url)
        if page is None or page.kind in ("missing", "broken"):
            return ()
        return page.links

    def _robots(self, host: str) -> Answer:
        policy = self.robots.get(host, "absent")
        if policy == "unreachable":
            return Answer(0.1, error="connection refused")
        if policy == "delay":
            text = f"User-agent: *\nCrawl-delay: {CRAWL_DELAY}\n"
            return Answer(0.05, 200, text.encode(), {"content-type": "text/plain"})
        return Answer(0.05, 404, b"", {"content-type": "text/plain"})


def _page(rng: random.Random, url: str, urls: list[str]) -> Page:
    host = url.split("/")[2]
    kind = rng.choice(KINDS)
    same = [u for u in urls if u.split("/")[2] == host and u != url] or [url]
    count = rng.randint(1, 4)
    links = tuple(
        dict.fromkeys(rng.choice(same if rng.random() < 0.7 else urls) for _ in range(count))
    )
    if kind == "moved":
        links = (rng.choice(urls),)
    duration = rng.uniform(0.8, 2.6) if kind == "slow" else rng.uniform(0.05, 0.5)
    fails = rng.randint(1, 2) if kind == "flaky" else 0
    return Page(url, host, kind, links, round(duration, 3), fails)


def _killer(seed: int, pages: dict[str, Page]) -> str | None:
    # Its own draws, so that adding it changed no other page of any site.
    rng = random.Random(f"killer {seed}")
    ok = [url for url, page in pages.items() if page.kind == "ok"]
    return rng.choice(ok) if ok and rng.random() < 1 / 3 else None


def _answer(page: Page, seen: int) -> Answer:
    if page.kind == "broken" or (page.kind == "flaky" and seen < page.fails):
        return Answer(page.duration, error="connection reset by peer")
    if page.kind == "missing":
        return Answer(page.duration, 404, b"<title>missing</title>", dict(HTML))
    if page.kind == "busy" and seen == 0:
        status = 500 if zlib.crc32(page.url.encode()) % 2 else 503  # both ends of 5xx' range
        return Answer(page.duration, status, b"busy", {**HTML, "retry-after": "1"})
    if page.kind == "moved":
        return Answer(page.duration, 301, b"", {**HTML, "location": page.links[0]})
    duration = page.duration * (1.0 + 0.5 * (seen % 2)) if page.kind == "slow" else page.duration
    return Answer(duration, 200, _html(page), dict(HTML))


def _html(page: Page) -> bytes:
    anchors = "".join(f'<a href="{link}">{link}</a>\n' for link in page.links)
    return f"<html><head><title>{page.url}</title></head><body>{anchors}</body></html>".encode()


@attrs.define(eq=False)
class Flight:
    """A request the server has received and the worker has not yet seen answered."""

    fetch: Fetch
    answer: Answer
    released: trio.Event = attrs.Factory(trio.Event)


@attrs.define(eq=False)
class Departure:
    """A request waiting to leave: sent on the first turn of its worker from ``ready``."""

    url: str
    ready: float
    go: trio.Event = attrs.Factory(trio.Event)


class SimFetcher:
    """One worker's fetcher: holds each request until sent, logs it, and holds its
    answer until released."""

    def __init__(
        self,
        web: Any,
        worker: str,
        log: Any,
        *,
        timeout: float,
        hold: bool = True,
        gap: Callable[[], float] | None = None,
    ) -> None:
        """Args:
        hold: keep each request until sent and each answer until its flight is
            released; without, send and answer at once.
        gap: draws how long a request waits before it may leave; without, a request
            leaves at once (as in the examples and scripts from before the gap).
        """
        self.web = web
        self.gap = gap
        self.holding = False  # an aimed rule holds the requests started now back
        self.waiting: list[Departure] = []
        self.cut_short: list[str] = []  # requests the server got, cancelled unanswered
        self.hold = hold
        self.worker = worker
        self.log = log
        self.timeout = timeout
        self.flights: list[Flight] = []
        self.read: dict[str, float] = {}  # url -> when this worker last read an answer for it

    async def fetch(self, request: Request) -> Response:
        if self.hold and (self.gap is not None or self.holding):
            await self._leave(request.url)
        flight = self._send(request)
        if self.hold:
            self.flights.append(flight)
            try:
                await flight.released.wait()
            except trio.Cancelled:
                self.cut_short.append(request.url)
                raise
            finally:
                self.flights.remove(flight)
        self.read[request.url] = trio.current_time()
        answer = flight.answer
        if answer.duration > self.timeout:
            raise FetchError(f"timed out after {self.timeout:g} s")
        if answer.error is not None:
            raise FetchError(answer.error)
        return Response(request.url, answer.status, answer.headers, answer.body, request)

    async def _leave(self, url: str) -> None:
        """Wait to be sent, then ask the check right before sending (as HttpxFetcher
        does when it writes the request).

        Raises:
            NotSent: the check said no; nothing reached the server.
        """
        if self.holding:  # until the aimed rule lets it go
            departure = Departure(url, math.inf)
        else:
            assert self.gap is not None
            departure = Departure(url, trio.current_time() + self.gap())
        self.waiting.append(departure)
        try:
            await departure.go.wait()
        finally:
            self.waiting.remove(departure)
        check = _may_send.get()
        if check is not None and not check():
            raise NotSent("this worker may no longer fetch the host")

    def let_go(self, now: float) -> None:
        """The requests an aimed rule held back may leave from ``now``."""
        for departure in self.waiting:
            departure.ready = min(departure.ready, now)

    def leaving(self, now: float) -> list[Departure]:
        """Requests that may leave by ``now``."""
        return [d for d in self.waiting if d.ready <= now]

    def _send(self, request: Request) -> Flight:
        url, start = request.url, trio.current_time()
        answer = self.web.answer(url, dict(request.headers), start)
        busy = min(answer.duration, self.timeout)
        final = answer.final and answer.duration <= self.timeout
        host = url.split("/")[2]
        robots = url.endswith("/robots.txt")
        timed_out = answer.duration > self.timeout
        status = 0 if answer.error is not None or timed_out else answer.status
        fetch = Fetch(
            self.worker, url, host, start, start + busy, final and not robots, robots, status
        )
        self.log.append(fetch)
        return Flight(fetch, answer)

    def due(self, now: float) -> Iterator[Flight]:
        """Flights whose answer has arrived by ``now``, earliest first."""
        return iter(sorted((f for f in self.flights if f.fetch.end <= now), key=_end))


def _end(flight: Flight) -> float:
    return flight.fetch.end


# -- the fleet's web: answers at once, counts instead of logging ----------------------------


class FleetWeb:
    """``hosts`` hosts of ``pages`` pages each: page j links to pages 3j+1..3j+3 of its
    host, and now and then to a page of another host (found again from there)."""

    def __init__(self, hosts: int, pages: int, seed: int) -> None:
        self.hosts = hosts
        self.pages = pages
        self.seed = seed

    def roots(self) -> list[str]:
        return [self.url(h, 0) for h in range(self.hosts)]

    def url(self, host: int, page: int) -> str:
        return f"http://h{host}.fleet/p{page}"

    def answer(self, url: str, asked: Any = None, now: float = 0.0) -> Answer:
        host, page = self.where(url)
        links = [self.url(host, c) for c in range(3 * page + 1, 3 * page + 4) if c < self.pages]
        if (host * 31 + page + self.seed) % 7 == 0:
            links.append(self.url((host * 7 + page) % self.hosts, page % self.pages))
        anchors = "".join(f'<a href="{link}">x</a>' for link in links)
        body = f"<html><head><title>{page}</title></head><body>{anchors}</body></html>"
        return Answer(0.05, 200, body.encode(), dict(HTML))

    def where(self, url: str) -> tuple[int, int]:
        host, _, page = url.removeprefix("http://h").partition(".fleet/p")
        return int(host), int(page)


class Tally:
    """Requests as the web saw them: counted, and checked for pacing host by host."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        self.last_start: dict[str, float] = {}
        self.too_soon = 0

    def append(self, fetch: Fetch) -> None:
        self.requests += 1
        last = self.last_start.get(fetch.host)
        if last is not None and fetch.start < last + self.delay - 1e-6:
            self.too_soon += 1
        self.last_start[fetch.host] = fetch.start


class DoneSink:
    """Marks every page an item was written for; counts repeats."""

    def __init__(self, web: FleetWeb) -> None:
        self.web = web
        self.done = bytearray(web.hosts * web.pages)
        self.items = 0

    def write(self, items: Any) -> None:
        for item in items:
            host, page = self.web.where(str(item["url"]))
            self.done[host * self.web.pages + page] = 1
            self.items += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
