"""A generated multi-host test web site, the server that logs every request to it, and a judge.

hashcrawl is judged from outside: `judge` reads the `SiteServer`'s own request log and the
crawl's JSON Lines output, and compares them with `Site.expected()`, the URLs a correct crawler
fetches. `Site.expected()` is computed from the bytes the server sends (anchors, `<base href>`,
redirects, robots.txt), not from the generator's own graph, so it is an independent oracle.

Hosts are loopback addresses 127.0.0.2, 127.0.0.3, ... all on one TCP port; Linux routes all of
127.0.0.0/8 to `lo` without configuration. A site generated with `port=0` gets its port from the
server that serves it: use `server.site` afterwards.

This module is longer than the usual ~400 lines because the brief keeps the site, its server and
the judge in one file that tests and scripts/practice import together.
"""

from __future__ import annotations

import collections
import errno
import http.server
import ipaddress
import itertools
import json
import posixpath
import random
import selectors
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import attrs

from testing.peers import client_pid

PORT_TOKEN = "@PORT@"  # stands for the port in stored bodies; replaced when a response is made
ROBOTS_PATH = "/robots.txt"
ROBOTS_CRAWL_DELAY = 0.05  # lower than any practice --delay, so it changes nothing
HTML = "text/html; charset=utf-8"
_WORDS = ("crawler", "frontier", "lease", "ring", "host", "page", "link", "queue", "worker")
_ROBOTS_TEXT = {
    "allow": "User-agent: *\nDisallow:\n",
    "disallow": "User-agent: *\nDisallow: /private/\n",
    "delay": f"User-agent: *\nCrawl-delay: {ROBOTS_CRAWL_DELAY}\nDisallow: /private/\n",
}

# Linux's SO_TIMESTAMPNS (the socket module lacks it): the kernel stamps each packet on arrival.
_SO_TIMESTAMPNS = 35 if sys.platform == "linux" else None

Key = tuple[str, str]  # (host, path)
_T = TypeVar("_T")

#: The addresses test sites are served on, 127.0.0.2 to 127.0.0.255, as networks: what a
#: crawl of one is allowed to reach (hashcrawl refuses private addresses by default).
#: 127.0.0.1, where Redis and other local services listen, is left out.
SITE_NETS = tuple(
    str(net)
    for net in ipaddress.summarize_address_range(
        ipaddress.IPv4Address("127.0.0.2"), ipaddress.IPv4Address("127.0.0.255")
    )
)
#: SITE_NETS as `hashcrawl join`/`crawl` flags.
SITE_FLAGS = tuple(flag for net in SITE_NETS for flag in ("--allow-net", net))


@attrs.frozen
class Resource:
    """One stored response; `body` and `location` hold `PORT_TOKEN` where the port goes."""

    status: int
    content_type: str
    body: str
    location: str | None = None


_NOT_FOUND = Resource(404, HTML, "<html><head><title>Not found</title></head></html>")


@attrs.frozen(eq=False)
class Site:
    """A generated site: its hosts, port and responses, and what a correct crawl of it fetches."""

    port: int
    hosts: tuple[str, ...]
    resources: Mapping[Key, Resource] = attrs.field(repr=False)
    crawl_delays: Mapping[str, float]
    _cache: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)

    @property
    def root(self) -> str:
        return self.url(self.hosts[0], "/")

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def on_port(self, port: int) -> Site:
        """The same site served on `port`."""
        return Site(
            port=port, hosts=self.hosts, resources=self.resources, crawl_delays=self.crawl_delays
        )

    def response_for(self, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
        """The (status, headers, body) the server sends for GET `path` on `host`."""
        resource = self.resources.get((host, path), _NOT_FOUND)
        headers = {"Content-Type": resource.content_type}
        if resource.location is not None:
            headers["Location"] = self._render(resource.location)
        return resource.status, headers, self._render(resource.body).encode()

    def disallows(self, url: str) -> bool:
        """Whether the robots.txt of `url`'s host forbids fetching it."""
        robots = self._cached("robots", self._parse_robots)
        parser = robots.get(urlsplit(url).hostname or "")
        return parser is not None and not parser.can_fetch("hashcrawl", url)

    def expected(self) -> frozenset[str]:
        """URLs a correct crawler requests, robots.txt itself excepted."""
        return self._cached("crawl", self._crawl)[0]

    def forbidden(self) -> frozenset[str]:
        """URLs that are linked (or redirected to) but that robots.txt disallows."""
        return self._cached("crawl", self._crawl)[1]

    def _render(self, text: str) -> str:
        return text.replace(PORT_TOKEN, str(self.port))

    def _cached(self, name: str, compute: Callable[[], _T]) -> _T:
        if name not in self._cache:  # a race only computes the same value twice
            self._cache[name] = compute()
        value: _T = self._cache[name]  # stored under this name by this same call
        return value

    def _parse_robots(self) -> dict[str, RobotFileParser]:
        parsers = {}
        for host in self.hosts:
            status, _, body = self.response_for(host, ROBOTS_PATH)
            if status == 200:
                parsers[host] = RobotFileParser()
                parsers[host].parse(body.decode().splitlines())
        return parsers

    def _crawl(self) -> tuple[frozenset[str], frozenset[str]]:
        fetched: set[str] = set()
        forbidden: set[str] = set()
        seen = {self.root}
        queue = collections.deque([self.root])
        while queue:
            url = queue.popleft()
            if self.disallows(url):
                forbidden.add(url)
                continue
            fetched.add(url)
            for link in self._links_from(url):
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
        return frozenset(fetched), frozenset(forbidden)

    def _links_from(self, url: str) -> list[str]:
        parts = urlsplit(url)
        status, headers, body = self.response_for(parts.hostname or "", parts.path)
        if status in (301, 302, 303, 307, 308):
            targets = [urljoin(url, headers["Location"])]
        elif status == 200 and headers["Content-Type"].startswith("text/html"):
            targets = _anchors(url, body.decode())
        else:
            targets = []
        links = (urldefrag(target).url for target in targets)
        return [link for link in links if urlsplit(link).hostname in self.hosts]


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "base" and self.base is None and href:
            self.base = href
        elif tag == "a" and href is not None:
            self.hrefs.append(href)


def _anchors(url: str, html: str) -> list[str]:
    """Absolute http(s) URLs of the `<a href>`s in `html`, resolved against `<base href>`."""
    parser = _AnchorParser()
    parser.feed(html)
    parser.close()
    base = urljoin(url, parser.base or "")
    links = (urljoin(base, href) for href in parser.hrefs)
    return [link for link in links if urlsplit(link).scheme in ("http", "https")]


# --- generation ---------------------------------------------------------------------------


def generate_site(*, pages: int, hosts: int, seed: int, port: int) -> Site:
    """Generate a deterministic site of `pages` HTML pages spread over `hosts` hosts.

    Besides the pages it has redirects, dead links, non-HTML files and /private/ pages (which
    robots.txt forbids on some hosts), each linked from a page or two. `port=0` leaves the
    port to `SiteServer`.

    Raises:
        ValueError: if `hosts` is not in 1..250 or `pages` is less than `hosts`.
    """
    if not 1 <= hosts <= 250:
        raise ValueError(f"hosts must be between 1 and 250, got {hosts}")
    if pages < hosts:
        raise ValueError(
            f"pages must be at least hosts ({hosts}) so every host has a page, got {pages}"
        )
    rng = random.Random(seed)
    names = tuple(str(ipaddress.IPv4Address("127.0.0.2") + i) for i in range(hosts))
    policies = dict(zip(names, _robots_policies(rng, hosts), strict=True))
    plan = _Plan(rng, names, policies)
    plan.add_pages(pages)
    plan.add_extras(pages)
    resources = plan.render()
    delays = {host: ROBOTS_CRAWL_DELAY for host, kind in policies.items() if kind == "delay"}
    return Site(port=port, hosts=names, resources=resources, crawl_delays=delays)


def _robots_policies(rng: random.Random, hosts: int) -> list[str]:
    """One robots.txt kind per host: delay (1-2 hosts), disallow, missing (404) and allow."""
    kinds = ["delay"] * (1 if hosts < 10 else 2)
    kinds += ["disallow"] * max(1, hosts // 3) + ["missing"] * max(1, hosts // 3)
    kinds = (kinds + ["allow"] * hosts)[:hosts]
    rng.shuffle(kinds)
    return kinds


class _Plan:
    """The link graph while it is being generated; `render` turns it into resources."""

    def __init__(self, rng: random.Random, hosts: tuple[str, ...], policies: dict[str, str]):
        self.rng = rng
        self.hosts = hosts
        self.policies = policies
        self.pages: list[Key] = []
        self.by_host: dict[str, list[Key]] = {host: [] for host in hosts}
        self.links: dict[Key, list[Key]] = {}
        self.extras: dict[Key, Resource | None] = {}  # None: an HTML page rendered later

    def add_pages(self, count: int) -> None:
        for i in range(count):
            host = self.hosts[i] if i < len(self.hosts) else self.rng.choice(self.hosts)
            page = (host, "/" if i < len(self.hosts) else self._page_path(i))
            if self.pages:  # a tree edge from an earlier page makes every page reachable
                self.links[self._parent(page)].append(page)
            self.pages.append(page)
            self.by_host[host].append(page)
            self.links[page] = []
        for page in self.pages:
            wanted = self.rng.randint(8, 15)
            while len(self.links[page]) < wanted:
                self.links[page].append(self._neighbour(page[0]))

    def _page_path(self, i: int) -> str:
        return (
            f"/p/{i}.html" if self.rng.random() < 0.5 else f"/s/{self.rng.choice('abc')}/{i}.html"
        )

    def _parent(self, page: Key) -> Key:
        same_host = self.by_host[page[0]]
        if same_host and self.rng.random() < 0.85:
            return self.rng.choice(same_host)
        return self.rng.choice(self.pages)

    def _neighbour(self, host: str) -> Key:
        if self.rng.random() < 0.8:
            return self.rng.choice(self.by_host[host])
        return self.rng.choice(self.pages)

    def add_extras(self, pages: int) -> None:
        few = max(2, pages // 50)
        guarded = [h for h, kind in self.policies.items() if kind in ("disallow", "delay")]
        unguarded = [h for h in self.hosts if h not in guarded] or guarded
        for k in range(few):  # half on hosts whose robots.txt forbids /private/, half not
            host = self.rng.choice(guarded if k % 2 == 0 else unguarded)
            self._add_extra((host, f"/private/{k}.html"), None)
            self._add_extra((self.rng.choice(self.hosts), f"/gone/{k}.html"), _NOT_FOUND)
            source_host = self.rng.choice(self.hosts)
            self._add_extra((source_host, f"/r/{k}"), self._redirect(k, source_host))
        for k in range(max(2, pages // 100)):
            self._add_extra((self.rng.choice(self.hosts), _file_path(k)), _file(k))

    def _add_extra(self, key: Key, resource: Resource | None) -> None:
        self.extras[key] = resource
        if resource is None:
            self.links[key] = [self._neighbour(key[0]) for _ in range(8)]
        for _ in range(self.rng.randint(1, 2)):
            self.links[self.rng.choice(self.pages)].append(key)

    def _redirect(self, k: int, source_host: str) -> Resource:
        """A 301 or 302 to a page, on the same host (sometimes a relative Location) or not."""
        host, path = self._neighbour(source_host)
        location = f"http://{host}:{PORT_TOKEN}{path}"
        if host == source_host and self.rng.random() < 0.3:
            location = path
        return Resource(301 if k % 2 else 302, HTML, "<html><body>Moved.</body></html>", location)

    def render(self) -> dict[Key, Resource]:
        resources: dict[Key, Resource] = {}
        for host, kind in self.policies.items():
            if kind != "missing":
                resources[host, ROBOTS_PATH] = Resource(200, "text/plain", _ROBOTS_TEXT[kind])
        for key, extra in self.extras.items():
            if extra is not _NOT_FOUND:
                resources[key] = extra or Resource(200, HTML, self._page_html(key))
        for key in self.pages:
            resources[key] = Resource(200, HTML, self._page_html(key))
        return resources

    def _page_html(self, key: Key) -> str:
        host, path = key
        base = self._base(key)
        anchors = [_spell(self.rng, base or key, target) for target in self.links[key]]
        if self.rng.random() < 0.2:
            anchors += ["mailto:webmaster@example.invalid", "javascript:void(0)"]
            # with a <base href>, "#sec" would resolve against the base, not this page
            anchors += [] if base else ["#sec"]
        self.rng.shuffle(anchors)
        items = "".join(
            f'<li><a href="{href}">link {n}</a></li>\n' for n, href in enumerate(anchors)
        )
        base_tag = f'<base href="http://{base[0]}:{PORT_TOKEN}{base[1]}">' if base else ""
        title = f"Page {path} on {host}"
        head = f"<!doctype html>\n<html><head><title>{title}</title>{base_tag}</head>\n"
        body = f'<body><h1 id="top">{title}</h1>\n<ul>\n{items}</ul>\n'
        return head + body + self._filler(target=self.rng.randint(500, 1800)) + "</body></html>\n"

    def _base(self, key: Key) -> Key | None:
        if key[1] == "/" or self.rng.random() >= 0.02:
            return None
        host = key[0] if self.rng.random() < 0.7 else self.rng.choice(self.hosts)
        return host, f"/s/{self.rng.choice('abc')}/"

    def _filler(self, *, target: int) -> str:
        paragraphs = ['<p id="sec">']
        size = 0
        while size < target:
            paragraph = " ".join(self.rng.choices(_WORDS, k=40)) + "</p>\n<p>"
            paragraphs.append(paragraph)
            size += len(paragraph)
        return "".join(paragraphs) + "</p>\n"


def _spell(rng: random.Random, base: Key, target: Key) -> str:
    """An href that resolves to `target` from a document (or base) at `base`."""
    (base_host, base_path), (host, path) = base, target
    absolute = f"http://{host}:{PORT_TOKEN}{path}"
    roll = rng.random()
    if host != base_host:
        href = absolute if roll < 0.85 else absolute.removeprefix("http:")
    elif roll < 0.45 and path != "/":
        href = posixpath.relpath(path, posixpath.dirname(base_path))
        href = "./" + href if roll < 0.05 and not href.startswith("..") else href
    else:
        href = path if roll < 0.75 else absolute
    return href + rng.choice(("#sec", "#top", "#")) if rng.random() < 0.15 else href


def _file_path(k: int) -> str:
    return f"/files/{k}.txt" if k % 2 == 0 else f"/files/{k}.pdf"


def _file(k: int) -> Resource:
    """A non-HTML file whose text looks like a link, to catch a crawler that parses it."""
    trap = f'<a href="/trap/{k}.html">not a link</a>\n'
    if k % 2 == 0:
        return Resource(200, "text/plain; charset=utf-8", f"Plain notes {k}.\n{trap}")
    return Resource(200, "application/pdf", f"%PDF-1.4\n% test file {k}\n{trap}%%EOF\n")


# --- the server ---------------------------------------------------------------------------


@attrs.frozen
class Request:
    """One request as the server saw it.

    `time` is when the request's first byte reached the server's socket (a kernel stamp, on
    Linux), else when its request line was parsed. `pid` is the process that sent it,
    when the server was asked to find out (``SiteServer(who=True)``) and could.
    """

    time: float
    host: str
    port: int
    path: str
    status: int
    user_agent: str
    method: str = "GET"
    pid: int | None = None

    @property
    def url(self) -> str:
        return urldefrag(f"http://{self.host}:{self.port}{self.path}").url

    @property
    def is_robots(self) -> bool:
        return self.path == ROBOTS_PATH

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def from_json(cls, line: str) -> Request:
        row = json.loads(line)
        return cls(
            time=row["time"],
            host=row["host"],
            port=row["port"],
            path=row["path"],
            status=row["status"],
            user_agent=row["user_agent"],
            method=row["method"],
            pid=row.get("pid"),
        )


def _enable_arrival_stamps(sock: socket.socket) -> None:
    if _SO_TIMESTAMPNS is not None:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)


def _arrival_stamp(connection: socket.socket) -> float | None:
    """When the next unread byte reached the kernel, waiting for it; None if unknown.

    A handler thread may run milliseconds after the request arrived (the GIL, a busy CPU),
    which would make requests look closer together than the crawler sent them.
    """
    if _SO_TIMESTAMPNS is None:
        return None
    try:
        _, ancillary, _, _ = connection.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK)
    except OSError:  # a timeout or a reset: handle_one_request will meet it again
        return None
    for level, kind, data in ancillary:
        if (level, kind) == (socket.SOL_SOCKET, _SO_TIMESTAMPNS) and len(data) >= 16:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return float(seconds + nanoseconds / 1e9)
    return None


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response carries Content-Length
    disable_nagle_algorithm = True  # headers and body go out in two writes
    rbufsize = 0  # unbuffered, so the next request's bytes wait in the kernel for their stamp
    timeout = 30  # an idle keep-alive connection ends after this many seconds
    server: _HostServer

    def setup(self) -> None:
        super().setup()
        _enable_arrival_stamps(self.connection)
        self.server.owner._track(self.connection)
        self.client_pid = client_pid(self.connection) if self.server.owner.who else None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._untrack(self.connection)

    def handle_one_request(self) -> None:
        self.arrived_at = _arrival_stamp(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.received_at = self.arrived_at or time.time()
        return super().parse_request()

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence: SiteServer keeps its own log."""

    def _answer(self, *, send_body: bool) -> None:
        owner, host = self.server.owner, self.server.server_address[0]
        status, headers, body = owner.site.response_for(str(host), self.path)
        owner._record(
            Request(
                time=self.received_at,
                host=str(host),
                port=owner.site.port,
                path=self.path,
                status=status,
                method=self.command,
                user_agent=self.headers.get("User-Agent", ""),
                pid=self.client_pid,
            )
        )
        if owner.latency:
            time.sleep(owner.latency)  # simulated server slowness, not a wait for a condition
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class _HostServer(http.server.ThreadingHTTPServer):
    request_queue_size = 128
    timeout = 0  # handle_request() never blocks: the accept loop only calls it when ready

    def __init__(self, address: tuple[str, int], owner: SiteServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve the name of 127.0.0.x, which can hang offline.
        super(http.server.HTTPServer, self).server_bind()
        _enable_arrival_stamps(self.socket)  # so the first request's packets get stamps too
        self.server_name, self.server_port = self.server_address[:2]  # type: ignore[assignment]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore clients that go away (a killed worker); report anything else."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class SiteServer:
    """Serves a `Site` on all its hosts and logs every request.

    Args:
        site: the site; if its port is 0, a free port is chosen and `self.site` is the site on it.
        latency: seconds each response waits before it is sent.
        log_path: also append each request to this file as a JSON line.
        who: log the process that sent each request (a descendant of this one; found
            once a connection, from /proc: see ``testing.peers``).
    """

    def __init__(
        self,
        site: Site,
        *,
        latency: float = 0.0,
        log_path: Path | None = None,
        who: bool = False,
    ):
        self.site = site
        self.latency = latency
        self.log_path = log_path
        self.who = who
        self._records: list[Request] = []
        self._logged = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._closing = False
        self._servers: list[_HostServer] = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def start(self) -> Self:
        self._servers = self._bind_all()
        self.site = self.site.on_port(self._servers[0].server_address[1])
        self._log_file = self.log_path.open("a") if self.log_path else None
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._accepter = threading.Thread(target=self._accept_loop, daemon=True)
        self._accepter.start()
        return self

    def stop(self) -> None:
        """Stop accepting, end open connections, and wait for every handler thread."""
        self._wake_writer.send(b"x")
        self._accepter.join()
        with self._connections_lock:
            self._closing = True
            connections = list(self._connections)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for server in self._servers:
            server.server_close()  # joins its handler threads
        self._wake_reader.close()
        self._wake_writer.close()
        if self._log_file:
            self._log_file.close()

    def requests(self) -> list[Request]:
        """A copy of the request log so far."""
        with self._logged:
            return list(self._records)

    def wait_for_requests(self, count: int, *, timeout: float) -> bool:
        """Block until `count` requests have been logged; False if `timeout` passed first."""
        with self._logged:
            return self._logged.wait_for(lambda: len(self._records) >= count, timeout)

    def _bind_all(self) -> list[_HostServer]:
        for _ in range(50):
            servers: list[_HostServer] = []
            try:
                servers.append(_HostServer((self.site.hosts[0], self.site.port), self))
                port = servers[0].server_address[1]
                servers += [_HostServer((host, port), self) for host in self.site.hosts[1:]]
                return servers
            except OSError as error:
                for server in servers:
                    server.server_close()
                if self.site.port or error.errno != errno.EADDRINUSE:
                    raise
        raise OSError(errno.EADDRINUSE, "no port was free on every host after 50 tries")

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            for server in self._servers:
                selector.register(server, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_reader:
                        return
                    key.fileobj.handle_request()  # type: ignore[union-attr]

    def _track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)
            if self._closing:  # accepted while stopping: end it, stop() has its list already
                with suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def _untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def _record(self, request: Request) -> None:
        with self._logged:
            self._records.append(request)
            if self._log_file:
                self._log_file.write(request.to_json() + "\n")
                self._log_file.flush()
            self._logged.notify_all()


def read_log(path: Path) -> list[Request]:
    """The requests a `SiteServer` appended to `path`."""
    return [Request.from_json(line) for line in path.read_text().splitlines() if line]


# --- the judge ----------------------------------------------------------------------------


@attrs.frozen
class Verdict:
    """What the server log and the output files say about a crawl of a site."""

    expected: int
    fetched: int
    missing: tuple[str, ...]
    duplicates: int
    too_close: int
    delay: float
    min_gap: Mapping[str, float]
    forbidden_fetched: tuple[str, ...]
    robots_fetches_per_host: int
    unexpected: tuple[str, ...]
    output_items: int
    bad_output_lines: int
    missing_from_output: tuple[str, ...]
    requests: int

    def lines(self) -> list[str]:
        """Human-readable figures, one per line."""
        gap_host = min(self.min_gap, key=self.min_gap.__getitem__, default=None)
        gap = f"{self.min_gap[gap_host]:.4f} s on {gap_host}" if gap_host else "n/a"
        return [
            f"requests logged:          {self.requests}",
            f"expected URLs:            {self.expected}",
            f"fetched (expected):       {self.fetched}",
            f"missing:                  {len(self.missing)}{_sample(self.missing)}",
            f"duplicate requests:       {self.duplicates}",
            f"too-close pairs:          {self.too_close} (delay {self.delay} s; min gap {gap})",
            f"forbidden fetched:        {len(self.forbidden_fetched)}"
            f"{_sample(self.forbidden_fetched)}",
            f"robots.txt max per host:  {self.robots_fetches_per_host}",
            f"unexpected URLs:          {len(self.unexpected)}{_sample(self.unexpected)}",
            f"output items:             {self.output_items} ({self.bad_output_lines} bad lines)",
            f"missing from output:      {len(self.missing_from_output)}"
            f"{_sample(self.missing_from_output)}",
        ]


def _sample(urls: Sequence[str]) -> str:
    return f"  e.g. {', '.join(urls[:3])}" if urls else ""


def judge(
    site: Site,
    log_records: Iterable[Request],
    output_files: Iterable[Path],
    *,
    delay: float,
    tolerance: float = 0.0,
) -> Verdict:
    """Judge a crawl of `site` from the server's log and the crawl's JSON Lines output.

    Args:
        delay: the crawl's per-host delay; a host's robots.txt Crawl-delay counts if larger.
        tolerance: seconds by which a gap may fall short of the delay (measurement jitter).
    """
    records = list(log_records)
    pages = [r for r in records if not r.is_robots]
    counts = collections.Counter(r.url for r in pages)
    expected = site.expected()
    robots = collections.Counter(r.host for r in records if r.is_robots)
    too_close, min_gap = _spacing(site, records, delay=delay, tolerance=tolerance)
    items, bad_lines = _output_urls(output_files)
    return Verdict(
        expected=len(expected),
        fetched=len(expected & counts.keys()),
        missing=tuple(sorted(expected - counts.keys())),
        duplicates=sum(count - 1 for count in counts.values()),
        too_close=too_close,
        delay=delay,
        min_gap=min_gap,
        forbidden_fetched=tuple(sorted(url for url in counts if site.disallows(url))),
        robots_fetches_per_host=max(robots.values(), default=0),
        unexpected=tuple(sorted(counts.keys() - expected)),
        output_items=len(items),
        bad_output_lines=bad_lines,
        missing_from_output=tuple(sorted(expected - set(items))),
        requests=len(records),
    )


def _spacing(
    site: Site, records: list[Request], *, delay: float, tolerance: float
) -> tuple[int, dict[str, float]]:
    """Pairs of consecutive requests to one host closer than its delay, and each host's min gap."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    for record in records:
        times[record.host].append(record.time)
    too_close = 0
    min_gap = {}
    for host, stamps in times.items():
        gaps = [b - a for a, b in itertools.pairwise(sorted(stamps))]
        limit = max(delay, site.crawl_delays.get(host, 0.0)) - tolerance
        too_close += sum(gap < limit for gap in gaps)
        if gaps:
            min_gap[host] = min(gaps)
    return too_close, min_gap


def _output_urls(paths: Iterable[Path]) -> tuple[list[str], int]:
    """The `url` of every item in the JSON Lines files, and how many lines were not items.

    A missing file has no items (its worker may have died before writing one); a cut-off last
    line (a worker killed mid-write) counts as a bad line.
    """
    urls: list[str] = []
    bad = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                urls.append(json.loads(line)["url"])
            except (ValueError, KeyError, TypeError):
                bad += 1
    return urls, bad
