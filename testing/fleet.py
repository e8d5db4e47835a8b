"""Helpers for the integration tests: workers in-process and as processes, small sites, logs.

Crawls are judged from the `SiteServer`'s request log and the workers' output files, never
from hashcrawl's own counters. Every wait here polls a condition with a deadline; none
sleeps for a fixed time to let something happen.
"""

from __future__ import annotations

import collections
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs
import trio

from hashcrawl._output._sinks import JsonLinesSink
from hashcrawl._run._queue import Queue
from hashcrawl._run._worker import Worker
from testing.testsite import (
    PORT_TOKEN,
    ROBOTS_PATH,
    SITE_FLAGS,
    SITE_NETS,
    Request,
    Resource,
    Site,
    SiteServer,
)

REPO = Path(__file__).resolve().parent.parent
# Seconds any one wait may take before the test calls it a hang. Never a measure of
# speed: a wait is for an event (a join, a request, an exit), and on two cores shared
# with other work the suite's slowest such wait once took 60 s. Only a hang takes this.
DEADLINE = 300.0
POLL = 0.02  # seconds between two looks at a condition being waited for
HTML = "text/html; charset=utf-8"
ITEM_FIELDS = {
    "url", "final_url", "location", "status", "content_type", "length", "title", "canonical",
    "depth", "fetched_at", "worker",
}  # fmt: skip

Key = tuple[str, str]  # (host, path)
_REPORT = re.compile(
    r"hashcrawl: (joined crawl \S+ as |\S+: [\d,]+ pages?, |\S+ left crawl \S+: "
    r"|.*said once per crawl)"
)


def is_report(line: str) -> bool:
    """A line of ``join``'s on what it does (joined; its figures every minute; a page
    its rules refused, once per reason; its closing line)."""
    return _REPORT.match(line) is not None


def new_crawl_name() -> str:
    """A crawl name no other test uses (for fixtures wider than one test)."""
    return "t" + uuid.uuid4().hex[:10]


def fast_settings(**changes: Any) -> dict[str, Any]:
    """Worker settings that keep a crawl of a small loopback site to a few seconds."""
    # Test sites link their hosts from the first one's root: the crawl spans hosts.
    return {
        "delay": 0.02,
        "lease": 2.0,
        "idle": 0.5,
        "grace": 2.0,
        "span_hosts": True,
        "allow_nets": SITE_NETS,
        **changes,
    }


# --- small sites built by hand ---------------------------------------------------------------


def host(n: int) -> str:
    """The n-th test host, from 127.0.0.2 on (as the generator numbers them)."""
    return f"127.0.0.{n + 2}"


def href(host: str, path: str) -> str:
    """An absolute link to `path` on `host`, the port filled in when the page is served."""
    return f"http://{host}:{PORT_TOKEN}{path}"


def page(title: str, *links: str) -> Resource:
    """An HTML page with a title and a list of links."""
    items = "".join(f'<li><a href="{link}">{n}</a></li>' for n, link in enumerate(links))
    body = f"<html><head><title>{title}</title></head><body><ul>{items}</ul></body></html>"
    return Resource(200, HTML, body)


def redirect(status: int, location: str) -> Resource:
    return Resource(status, HTML, "<html><body>Moved.</body></html>", location)


def robots(text: str) -> Resource:
    return Resource(200, "text/plain", text)


def make_site(resources: Mapping[Key, Resource], *, crawl_delays: Mapping[str, float] = {}) -> Site:
    """A site of exactly these resources; the first key's host is the root host (root "/")."""
    hosts = tuple(dict.fromkeys(h for h, _ in resources))
    return Site(port=0, hosts=hosts, resources=dict(resources), crawl_delays=dict(crawl_delays))


def tree_site(*, hosts: int, fanout: int, levels: int) -> tuple[Site, dict[Key, int]]:
    """A tree of pages spread over hosts, each page linked from its parent only.

    Returns the site (port 0) and the level of each (host, path): the root's is 0.
    """
    resources: dict[Key, Resource] = {}
    level_of: dict[Key, int] = {}
    nodes = [(0, 0)]  # (index, level); node 0 is the root
    where = {0: (host(0), "/")}
    children: dict[int, list[int]] = collections.defaultdict(list)
    count = 1
    for index, level in nodes:
        if level == levels:
            continue
        for _ in range(fanout):
            where[count] = (host(count % hosts), f"/n/{count}.html")
            children[index].append(count)
            nodes.append((count, level + 1))
            count += 1
    for index, level in nodes:
        h, path = where[index]
        links = [href(*where[child]) for child in children[index]]
        links.append(href(*where[0]))  # a link back to the root, already seen
        resources[h, path] = page(f"node {index}", *links)
        level_of[h, path] = level
    return make_site(resources), level_of


class BusyOnce:
    """A site whose listed pages first answer a status with Retry-After, then normally.

    It stands in for a `Site` wherever the server and the judge use one.
    """

    def __init__(self, site: Site, busy: Mapping[Key, tuple[int, int]]) -> None:
        self._site = site
        self._busy = dict(busy)  # (host, path) -> (status, Retry-After seconds)
        self._answered: set[Key] = set()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._site, name)

    def on_port(self, port: int) -> BusyOnce:
        return BusyOnce(self._site.on_port(port), self._busy)

    def response_for(self, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            first = (host, path) in self._busy and (host, path) not in self._answered
            self._answered.add((host, path))
        if not first:
            return self._site.response_for(host, path)
        status, wait = self._busy[host, path]
        return status, {"Content-Type": "text/plain", "Retry-After": str(wait)}, b"busy\n"


class Gated:
    """A site that answers nothing until `open()`: a fleet can gather before any page goes.

    It stands in for a `Site` wherever the server and the judge use one. A request that
    arrives while the gate is shut waits for it (at most DEADLINE seconds).
    """

    def __init__(self, site: Site, gate: threading.Event | None = None) -> None:
        self._site = site
        self._gate = gate or threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._site, name)

    def on_port(self, port: int) -> Gated:
        return Gated(self._site.on_port(port), self._gate)

    def open(self) -> None:
        self._gate.set()

    def response_for(self, host: str, path: str) -> tuple[int, dict[str, str], bytes]:
        self._gate.wait(DEADLINE)
        return self._site.response_for(host, path)


# --- reading what happened ---------------------------------------------------------------


def page_requests(records: Iterable[Request]) -> list[Request]:
    """The requests for pages: robots.txt left out."""
    return [r for r in records if not r.is_robots]


def request_counts(records: Iterable[Request]) -> collections.Counter[str]:
    """How often each page URL was requested."""
    return collections.Counter(r.url for r in page_requests(records))


def times_by_host(records: Iterable[Request]) -> dict[str, list[float]]:
    """Each host's request arrival times (robots.txt included), in order."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    for record in records:
        times[record.host].append(record.time)
    return {name: sorted(stamps) for name, stamps in times.items()}


def read_items(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every item in the JSON Lines files (a missing file has none)."""
    items = []
    for path in paths:
        if path.exists():
            items += [json.loads(line) for line in path.read_text().splitlines() if line]
    return items


def robots_requests_per_host(records: Iterable[Request]) -> collections.Counter[str]:
    return collections.Counter(r.host for r in records if r.path == ROBOTS_PATH)


def status_of(redis_url: str, crawl: str) -> dict[str, Any]:
    with Queue(redis_url, crawl) as queue:
        return queue.status()


def submit(redis_url: str, crawl: str, urls: Sequence[str], *, priority: int = 0) -> int:
    with Queue(redis_url, crawl) as queue:
        return queue.submit(urls, priority=priority, allow_private=True)


def wait_until(condition: Callable[[], bool], *, what: str, timeout: float = DEADLINE) -> None:
    """Poll `condition` until it holds; fail the test naming `what` if `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)


async def await_until(condition: Callable[[], bool], *, what: str) -> None:
    """`wait_until` for trio tests: the condition runs in a thread, the loop keeps going."""
    with trio.move_on_after(DEADLINE) as scope:
        while not await trio.to_thread.run_sync(condition):
            await trio.sleep(POLL)
    if scope.cancelled_caught:
        raise AssertionError(f"timed out after {DEADLINE:g} s waiting for {what}")


# --- workers in this process ---------------------------------------------------------------


@attrs.define
class Crew:
    """In-process workers of one crawl, each writing its own JSON Lines file."""

    redis_url: str
    crawl: str
    directory: Path
    workers: list[Worker] = attrs.Factory(list)
    outputs: list[Path] = attrs.Factory(list)
    ended: int = 0  # workers whose run has returned (a member no more)

    def hire(self, settings: Mapping[str, Any]) -> Worker:
        """A new worker (not yet running) with its own output file."""
        output = self.directory / f"items-{self.crawl}-{len(self.outputs)}.jsonl"
        worker = Worker(self.redis_url, self.crawl, sink=JsonLinesSink(output), **settings)
        self.workers.append(worker)
        self.outputs.append(output)
        return worker

    async def run(self, worker: Worker) -> None:
        """Run one worker until it ends, then close its output file."""
        try:
            await worker.run()
        finally:
            self.ended += 1
            worker.sink.close()

    def members(self) -> int:
        """How many workers are members of the crawl now."""
        return int(status_of(self.redis_url, self.crawl)["workers"])

    def items(self) -> list[dict[str, Any]]:
        return read_items(self.outputs)


async def crawl_in_process(
    crew: Crew, settings: Sequence[Mapping[str, Any]], urls: Sequence[str]
) -> None:
    """Start one worker per settings, submit `urls` once all have joined, run until all end.

    A worker that ended before the submit counts as joined: one that stops at its first
    heartbeat (``--max-memory 1``) may leave before a busy machine lets another join, and
    a wait for them all to be members at once then failed at its deadline."""
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for each in settings:
                nursery.start_soon(crew.run, crew.hire(each))
            await await_until(
                lambda: crew.members() + crew.ended >= len(settings),
                what="every worker to join",
            )
            await trio.to_thread.run_sync(submit, crew.redis_url, crew.crawl, urls)


@attrs.frozen
class Crawled:
    """A finished crawl: the site as it was served, the server's log and the crew that ran."""

    site: Site
    requests: list[Request]
    crew: Crew


async def crawl_site(
    redis_url: str,
    directory: Path,
    site: Site,
    settings: Sequence[Mapping[str, Any]],
    *,
    latency: float = 0.0,
) -> Crawled:
    """Serve `site`, crawl it from its root with one worker per settings, and return the crawl."""
    crew = Crew(redis_url, new_crawl_name(), directory)
    with SiteServer(site, latency=latency) as server:
        await crawl_in_process(crew, settings, [server.site.root])
        return Crawled(server.site, server.requests(), crew)


class Scenarios:
    """Independent crawls run side by side in one trio run, so a module's crawls take as
    long as the slowest rather than their sum; a test reads the one it judges, and a
    scenario that failed fails only the tests that read it.
    """

    def __init__(self, scenarios: Mapping[str, Callable[[], Awaitable[Any]]]) -> None:
        self._scenarios = dict(scenarios)
        self._results: dict[str, Any] = {}
        self._errors: dict[str, BaseException] = {}

    def run(self) -> Scenarios:
        trio.run(self._run_all)
        return self

    async def _run_all(self) -> None:
        async with trio.open_nursery() as nursery:
            for name, scenario in self._scenarios.items():
                nursery.start_soon(self._run_one, name, scenario)

    async def _run_one(self, name: str, scenario: Callable[[], Awaitable[Any]]) -> None:
        try:
            self._results[name] = await scenario()
        except Exception as exc:  # kept for the tests that read this scenario
            self._errors[name] = exc

    def __getitem__(self, name: str) -> Any:
        if name in self._errors:
            raise RuntimeError(f"scenario {name!r} failed") from self._errors[name]
        return self._results[name]


# --- workers as processes ------------------------------------------------------------------


class Process:
    """One `hashcrawl` command running as a child process, its output kept in files."""

    def __init__(self, arguments: Sequence[str], directory: Path, label: str) -> None:
        self.label = label
        self.stdout_path = directory / f"{label}.out"
        self.stderr_path = directory / f"{label}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "hashcrawl", *arguments],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float = DEADLINE) -> int:
        """The exit status; fails the test if the process is still running after `timeout`."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.label} still running after {timeout:g} s") from None

    def signal(self, number: signal.Signals) -> None:
        self.popen.send_signal(number)

    def stderr_lines(self) -> list[str]:
        return self.stderr_path.read_text().splitlines()

    def error_lines(self) -> list[str]:
        """stderr without the join's one-line warning that Redis keeps no AOF (test
        servers) and its lines on what it does (joined, and every minute its figures)."""
        return [
            line
            for line in self.stderr_lines()
            if "runs without appendonly" not in line and not is_report(line)
        ]

    def stop(self) -> None:
        if self.running():
            self.popen.kill()
        self.popen.wait()


class Processes:
    """Worker processes of a test; whatever still runs at the end is killed and reaped."""

    def __init__(self, redis_url: str, crawl: str, directory: Path) -> None:
        self.redis_url = redis_url
        self.crawl = crawl
        self.directory = directory
        self.started: list[Process] = []
        self.outputs: list[Path] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for process in self.started:
            process.stop()

    def join(self, *flags: str) -> Process:
        """Start `hashcrawl join` with its own output file and these flags."""
        label = f"worker-{len(self.started) + 1}"
        output = self.directory / f"{label}.jsonl"
        arguments = ["join", "--redis", self.redis_url, "--crawl", self.crawl, "-o", str(output)]
        process = Process([*arguments, *flags], self.directory, label)
        self.started.append(process)
        self.outputs.append(output)
        return process

    def by_pid(self, pid: int) -> Process:
        return next(p for p in self.started if p.pid == pid)

    def status(self) -> dict[str, Any]:
        """The crawl as `hashcrawl status --json` shows it."""
        command = ["status", "--redis", self.redis_url, "--crawl", self.crawl, "--json"]
        result = subprocess.run(
            [sys.executable, "-m", "hashcrawl", *command],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=True,
        )
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def busiest_member(self) -> Process:
        """The worker process that owns the most hosts, by its last heartbeat."""
        members = status_of(self.redis_url, self.crawl)["members"]
        busiest = max(members, key=lambda member: member["hosts"])
        return self.by_pid(busiest["pid"])


def flags(*, delay: float, lease: float, idle: float | str, **more: object) -> list[str]:
    """Command-line flags: --delay, --lease, --idle, --span-hosts (test sites span hosts),
    the test sites' --allow-net, then --name value for each of `more`."""
    out = ["--delay", str(delay), "--lease", str(lease), "--idle", str(idle), "--span-hosts"]
    out += SITE_FLAGS
    for name, value in more.items():
        out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def root_and_two_pages() -> Site:
    """A root linking to two pages on its own host."""
    a = host(0)
    return make_site(
        {
            (a, "/"): page("root", href(a, "/a"), href(a, "/b")),
            (a, "/a"): page("a"),
            (a, "/b"): page("b"),
        }
    )
