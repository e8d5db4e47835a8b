"""A hostile web on loopback: hosts that misbehave on purpose, the server's log, and a judge.

Each case of issue 10 gets its own host in 127.0.1.0/24 (one port for all, like
`testing.testsite`), serving raw bytes, so a case can drip, lie about its encoding, send
garbage or never answer. `HostileServer` logs every request as it arrives and when its
answer ended; `judge_cases` reads that log, the crawl's dead letters and its output, and
says for each case whether it ended as docs/operations.md ("Hostile web") says it must.
`testing.hostile_run` crawls these hosts beside a normal generated site, for
`scripts/hostile` and `tests/test_hostile.py`.
"""

from __future__ import annotations

import gzip
import socket
import socketserver
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from typing import Any

import attrs

PORT = b"@PORT@"
PRIVATE = "127.0.5.7"  # served, so a request to it shows in the log; never allowed to workers
SECRET = "INTERNAL-METADATA-7f3a"  # the private host's title: must appear in no output
MAX_HEAD = 64 * 1024  # bytes of request head the server reads; a longer URL gets a 414


@attrs.frozen
class Reply:
    """What a hostile host sends for one path.

    Args:
        status, headers, body: the response; ``@PORT@`` in them becomes the port.
        drip: seconds between the body's bytes (0: all at once).
        raw: bytes sent instead of any HTTP response, then the connection closes.
        hang: seconds to wait before answering at all.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/html; charset=utf-8"),)
    body: bytes = b""
    drip: float = 0.0
    raw: bytes | None = None
    hang: float = 0.0


Route = Callable[[str], Reply]  # path -> reply
Check = Callable[["Evidence"], str]  # what went wrong, or ''


@attrs.define
class Hit:
    """One request as the server saw it: when it arrived and when its answer ended."""

    host: str
    path: str
    user_agent: str
    time: float
    ended: float | None = None
    worker: str = ""  #: its X-Worker header: tells a fleet's workers apart (one user agent)

    @property
    def is_robots(self) -> bool:
        return self.path == "/robots.txt"


def html(title: str, *links: str, size: int = 0) -> Reply:
    """An HTML page with a title and links (absolute, with ``@PORT@``), padded to ``size``."""
    anchors = "".join(f'<a href="{link}">x</a>' for link in links)
    body = f"<html><head><title>{title}</title></head><body>{anchors}</body></html>"
    return Reply(body=body.encode().ljust(size, b" "))


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status=status, headers=(("Location", location),), body=b"moved")


def text(body: bytes, content_type: str = "text/plain") -> Reply:
    return Reply(headers=(("Content-Type", content_type),), body=body)


def gzip_bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzipped twice: a few KiB on the wire."""
    inner = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    parts = [inner.compress(chunk) for _ in range(mib)]
    parts.append(inner.flush())
    return gzip.compress(b"".join(parts), 9)


class HostileServer:
    """Serves ``routes`` (host -> route) on one port, logging every request.

    Args:
        routes: for each loopback address, a function from a path to its reply.
    """

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)
        self.port = 0
        self._hits: list[Hit] = []
        self._lock = threading.Lock()
        self._servers: list[socketserver.ThreadingTCPServer] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> HostileServer:
        owner = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                owner._serve(self.request, self.request.getsockname()[0])

        for address in self.routes:
            server = socketserver.ThreadingTCPServer((address, self.port), Handler, False)
            server.daemon_threads = True
            server.allow_reuse_address = True
            server.server_bind()
            server.server_activate()
            self.port = server.server_address[1]
            self._servers.append(server)
            thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"

    def hits(self) -> list[Hit]:
        with self._lock:
            return list(self._hits)

    def _serve(self, connection: socket.socket, host: str) -> None:
        connection.settimeout(60)
        hit = None
        with suppress(OSError):
            head = _read_head(connection)
            if head is None:
                return
            path, agent, worker = _request_line(head)
            hit = Hit(host=host, path=path, user_agent=agent, time=time.time(), worker=worker)
            with self._lock:
                self._hits.append(hit)
            if len(head) >= MAX_HEAD:
                connection.sendall(b"HTTP/1.1 414 URI Too Long\r\nContent-Length: 0\r\n\r\n")
            else:
                self._answer(connection, self.routes[host](path))
        if hit is not None:
            with self._lock:
                hit.ended = time.time()
        with suppress(OSError):
            connection.close()

    def _answer(self, connection: socket.socket, reply: Reply) -> None:
        port = str(self.port).encode()
        if reply.hang:
            time.sleep(reply.hang)  # the hostile server's stall, not a wait for a condition
        if reply.raw is not None:
            connection.sendall(reply.raw)
            return
        body = reply.body.replace(PORT, port)
        lines = [f"HTTP/1.1 {reply.status} X".encode()]
        lines += [f"{k}: {v}".encode().replace(PORT, port) for k, v in reply.headers]
        lines += [f"Content-Length: {len(body)}".encode(), b"Connection: close", b"", b""]
        connection.sendall(b"\r\n".join(lines))
        if not reply.drip:
            connection.sendall(body)
            return
        for i in range(len(body)):
            connection.sendall(body[i : i + 1])
            time.sleep(reply.drip)  # the drip itself


def _read_head(connection: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD:
        chunk = connection.recv(65536)
        if not chunk:
            return data or None
        data += chunk
    return data[:MAX_HEAD]


def _request_line(head: bytes) -> tuple[str, str, str]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    path = parts[1] if len(parts) > 1 else ""
    agent = next((ln[11:].strip() for ln in lines if ln.lower().startswith("user-agent:")), "")
    worker = next((ln[9:].strip() for ln in lines if ln.lower().startswith("x-worker:")), "")
    return path, agent, worker


# --- the cases -------------------------------------------------------------------------------


def case_host(n: int) -> str:
    return f"127.0.1.{n + 2}"


@attrs.frozen
class Evidence:
    """What a case is judged on: the server's log, the dead letters (url -> error), every
    output and log line of the crawl joined, and ``hashcrawl status --json``."""

    host: str
    hits: list[Hit]
    dead: dict[str, str]
    output: str
    status: dict[str, Any]

    @property
    def pages(self) -> list[Hit]:
        return [h for h in self.hits if not h.is_robots]

    def asked(self, path: str) -> bool:
        return any(h.path == path for h in self.hits)

    def dead_with(self, path: str, *words: str) -> str:
        """'' if ``path`` was dead-lettered for a reason naming one of ``words``."""
        mine = f"//{self.host}:"
        errors = [e for url, e in self.dead.items() if mine in url and url.endswith(path)]
        if not errors:
            return f"{path} was not dead-lettered"
        if words and not any(w.lower() in errors[0].lower() for w in words):
            return f"{path} dead-lettered for {errors[0][:80]!r}, expected one of {words}"
        return ""


@attrs.frozen
class Case:
    """One hostile host: what it does, where a crawl of it starts, and the rule it meets.

    ``check(evidence)`` returns what went wrong ('' when the rule held); the evidence's
    ``hits`` are this host's requests only.
    """

    name: str
    host: str
    route: Route
    rule: str
    check: Check
    start: str = "/"  # the path a crawl of it starts from
    dont_filter: str = ""  # "yes": submitted with --dont-filter
    needs: str = ""  # the branch whose fetch-layer work it needs, if not the worker's alone


def _routes(table: Mapping[str, Reply], default: Reply | None = None) -> Route:
    missing = Reply(status=404, body=b"not here")
    return lambda path: table.get(path, default or missing)


SINK = "127.0.1.250"  # where the 100,000 links point: its robots.txt disallows everything


def make_cases(
    *, attempts: int, bomb_mib: int, robots_mib: int, max_pages_per_host: int
) -> list[Case]:
    """Every case of issue 10's table, and a few more found on the way.

    Args:
        attempts: the workers' --max-attempts.
        bomb_mib: what the gzip bomb inflates to (the issue's was 1 GiB).
        robots_mib: the size of the big robots.txt (the issue's was 9.4 MiB).
        max_pages_per_host: the workers' --max-pages-per-host.
    """
    cases: list[Case] = []

    def add(name: str, route: Route, rule: str, check: Check, **more: str) -> None:
        cases.append(Case(name, case_host(len(cases)), route, rule=rule, check=check, **more))

    add(
        "robots-bogus-charset",
        _routes(
            {
                "/robots.txt": Reply(
                    headers=(("Content-Type", "text/plain; charset=bogus"),),
                    body=b"User-agent: *\nDisallow: /private\n",
                ),
                "/": html("bogus robots charset", "/private/x", "/public"),
                "/public": html("public"),
            }
        ),
        "its robots.txt is obeyed (/private never fetched), the rest crawled",
        lambda e: _unless(
            e.asked("/public") and not e.asked("/private/x"), "/public missed or /private fetched"
        ),
    )
    bomb = gzip_bomb(bomb_mib)
    add(
        "gzip-gzip-bomb",
        _routes(
            {
                "/": Reply(
                    headers=(("Content-Type", "text/html"), ("Content-Encoding", "gzip, gzip")),
                    body=bomb,
                )
            }
        ),
        f"{len(bomb)} bytes inflating to {bomb_mib} MiB: capped, dead-lettered",
        lambda e: e.dead_with("/", "body", "larger", "encod", "decompress", "size"),
        needs="hostile-fetch",
    )
    add(
        "drip",
        _routes({"/": Reply(body=b"x" * 20, drip=1.0)}),
        "a body at 1 byte/s ends at --timeout: dead-lettered as timed out",
        lambda e: e.dead_with("/", "timeout", "timed out", "deadline"),
        needs="hostile-fetch",
    )
    # Relative links against a <base> on the sink host: 2 MB, as in the issue.
    base = f'<base href="http://{SINK}:@PORT@/">'.encode()
    many = html("many links", *(f"l/{i}" for i in range(100_000)))
    many = attrs.evolve(many, body=many.body.replace(b"<head>", b"<head>" + base))
    add(
        "100k-links",
        _routes({"/": many}),
        "a 2 MB page of 100,000 links: those past --max-links dropped and counted",
        lambda e: _unless(
            e.asked("/") and e.status.get("links_dropped", 0) >= 90_000,
            f"links_dropped is {e.status.get('links_dropped')}",
        ),
    )
    add(
        "robots-redirect",
        _routes(
            {
                "/robots.txt": redirect("/real-robots.txt", 301),
                "/real-robots.txt": text(b"User-agent: *\nDisallow: /secret\n"),
                "/": html("robots moved", "/secret/page"),
            }
        ),
        "robots.txt's redirect is followed: /secret is never fetched",
        lambda e: _unless(e.asked("/") and not e.asked("/secret/page"), "/secret fetched"),
        needs="hostile-fetch",
    )
    for kind, robots in (
        ("robots-503", Reply(status=503, body=b"down")),
        ("robots-timeout", Reply(hang=40.0, body=b"User-agent: *\nAllow: /\n")),
        ("robots-garbage", Reply(raw=b"\x00\xff not http at all\r\n\r\n")),
    ):
        add(
            kind,
            _routes({"/robots.txt": robots, "/": html(kind, "/p")}),
            "robots.txt unreachable: no page of the host is fetched (disallow all)",
            lambda e: _unless(e.asked("/robots.txt") and not e.pages, "a page was fetched"),
            needs="hostile-fetch",
        )
    big = b"User-agent: *\nDisallow: /big-secret\n" + b"Disallow: /x\n" * (robots_mib << 16)
    add(
        "robots-10mib",
        _routes({"/robots.txt": text(big), "/": html("big robots", "/big-secret")}),
        f"a {robots_mib} MiB robots.txt: its first 500 KiB obeyed, /big-secret never fetched",
        lambda e: _unless(e.asked("/") and not e.asked("/big-secret"), "/big-secret fetched"),
        needs="hostile-fetch",
    )
    add(
        "redirect-chain",
        _routes({f"/r/{i}": redirect(f"/r/{i + 1}") for i in range(40)}),
        "at most 5 redirects followed, then dead-lettered with the reason",
        lambda e: (
            _unless(len(e.pages) <= 6, f"{len(e.pages)} hops requested")
            or e.dead_with("/r/5", "redirect")
        ),
        start="/r/0",
    )
    add(
        "redirect-loop",
        _routes({"/a": redirect("/b"), "/b": redirect("/a")}),
        "a<->b submitted with dont_filter goes idle within 5 hops",
        lambda e: _unless(e.asked("/b") and len(e.pages) <= 6, f"{len(e.pages)} requests"),
        start="/a",
        dont_filter="yes",
    )

    def retried_then_dead(status: int) -> Check:
        return lambda e: (
            _unless(len(e.pages) == attempts, f"{len(e.pages)} requests")
            or e.dead_with("/", f"HTTP {status}")
        )

    for status in (500, 502, 504, 429):
        add(
            f"http-{status}",
            _routes({"/": Reply(status=status, headers=(("Retry-After", "1"),), body=b"no")}),
            f"retried with backoff, dead-lettered after {attempts} attempts, never an item",
            retried_then_dead(status),
        )
    add(
        "private-links",
        _routes(
            {
                "/": html("links inside", f"http://{PRIVATE}:@PORT@/admin", "/go"),
                "/go": redirect(f"http://{PRIVATE}:@PORT@/latest/meta-data/"),
            }
        ),
        f"a link and a redirect to {PRIVATE}: refused and dead-lettered",
        lambda e: (
            _unless(e.asked("/go"), "/go not fetched")
            or _unless(any(PRIVATE in url for url in e.dead), f"nothing on {PRIVATE} dead-lettered")
        ),
        needs="hostile-fetch",
    )
    add(
        "megabyte-url",
        _routes({"/": html("long link", "/" + "a" * 1_000_000)}, html("leaf")),
        "a 1 MB URL is refused, never requested",
        lambda e: _unless(
            e.asked("/") and not any(len(h.path) > 8192 for h in e.hits), "the 1 MB URL was asked"
        ),
        needs="hostile-fetch",
    )
    add(
        "calendar-trap",
        lambda path: html("day", f"/day/{_day(path) + 1}", f"/day/{_day(path) + 2}"),
        f"an endless host gets exactly --max-pages-per-host ({max_pages_per_host}) requests",
        lambda e: _unless(len(e.pages) == max_pages_per_host, f"{len(e.pages)} pages"),
        start="/day/0",
    )
    add(
        "garbage-and-reset",
        _routes(
            {
                "/": html("garbage", "/g", "/reset", "/bogus-charset"),
                "/g": Reply(raw=b"\x16\x03\x01 garbage \xff\xfe\r\n\r\n"),
                "/reset": Reply(raw=b""),
                "/bogus-charset": Reply(
                    headers=(("Content-Type", "text/html; charset=x-no-such"),),
                    body=b"<title>\xff\xfe bogus</title>",
                ),
            }
        ),
        "garbage and resets are retried then dead-lettered; a bogus charset still parses",
        lambda e: (
            e.dead_with("/g")
            or e.dead_with("/reset")
            or _unless(e.asked("/bogus-charset"), "bogus charset page not fetched")
        ),
    )
    return cases


def _unless(ok: bool, problem: str) -> str:
    return "" if ok else problem


def _day(path: str) -> int:
    try:
        return int(path.rsplit("/", 1)[-1])
    except ValueError:
        return 0


def routes_of(cases: Iterable[Case]) -> dict[str, Route]:
    """Every case's route, and the private host (which must never be asked for anything)."""
    routes = {case.host: case.route for case in cases}
    routes[PRIVATE] = lambda path: html(SECRET)
    sink = b"User-agent: *\nDisallow: /\n"
    routes[SINK] = lambda path: text(sink) if path == "/robots.txt" else html("sink")
    return routes


@attrs.frozen
class CaseResult:
    name: str
    rule: str
    problem: str
    needs: str

    @property
    def ok(self) -> bool:
        return not self.problem


def judge_cases(
    cases: Iterable[Case],
    hits: list[Hit],
    dead: dict[str, str],
    output: str,
    status: dict[str, Any],
) -> list[CaseResult]:
    """Each case's verdict, from the server's log, the dead letters, output and status."""
    results = []
    for case in cases:
        mine = [h for h in hits if h.host == case.host]
        evidence = Evidence(case.host, mine, dead, output, status)
        try:
            problem = case.check(evidence)
        except Exception as exc:  # a broken check must fail loudly, not pass
            problem = f"check failed: {exc!r}"
        results.append(CaseResult(case.name, case.rule, problem, case.needs))
    private = [h for h in hits if h.host == PRIVATE]
    problem = f"{len(private)} requests reached {PRIVATE}" if private else ""
    problem = problem or (f"{SECRET!r} appears in an output" if SECRET in output else "")
    results.append(CaseResult("private-address", "never connected to", problem, "hostile-fetch"))
    sunk = [h for h in hits if h.host == SINK and not h.is_robots]
    problem = f"{len(sunk)} pages of {SINK} fetched" if sunk else ""
    results.append(CaseResult("link-sink", "robots.txt disallows it all", problem, ""))
    return results
