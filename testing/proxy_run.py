"""The proxy acceptance run: worker processes crawl a many-host loopback site through a
pool of tinyproxy proxies, and one proxy is stopped mid-crawl.

Judged from the site's log (every expected page, politeness per target host, as
``testing.testsite.judge`` judges any crawl), and from the proxies' own logs: every
request the site saw is in a proxy's log (none went direct), and the hosts the stopped
proxy carried that were fetched after the stop went through another proxy.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from testing.practice import CRAWL, Progress, _store, _Workers, practice_failures
from testing.proxies import Tinyproxy
from testing.testsite import SITE_FLAGS, SiteServer, Verdict, generate_site, judge


@attrs.frozen
class ProxyVerdict:
    """What the proxies' logs say, beside the site's verdict."""

    site: Verdict
    through: tuple[int, ...]  # requests each proxy logged
    direct: int  # site requests found in no proxy's log
    stopped_hosts: int  # hosts the stopped proxy carried before its stop
    moved_hosts: int  # of those, requested after the stop (through another proxy)
    exits: tuple[int | None, ...]

    def lines(self) -> list[str]:
        through = ", ".join(f"proxy {n + 1}: {count}" for n, count in enumerate(self.through))
        return [
            *self.site.lines(),
            f"requests in the proxies' logs: {through}",
            f"site requests in no proxy's log: {self.direct}",
            f"hosts of the stopped proxy: {self.stopped_hosts}, "
            f"requested after its stop through another: {self.moved_hosts}",
        ]

    def failures(self) -> list[str]:
        from testing.practice import WorkerExit

        exits = [WorkerExit(f"worker-{n + 1}", code) for n, code in enumerate(self.exits)]
        failures = practice_failures(self.site, exits)
        if self.direct:
            failures.append(f"{self.direct} site requests are in no proxy's log")
        if self.stopped_hosts and not self.moved_hosts:
            failures.append("no host of the stopped proxy was fetched after its stop")
        return failures


def run_proxied(
    *,
    pages: int,
    hosts: int,
    workdir: Path,
    workers: int = 2,
    proxies: int = 2,
    delay: float = 0.2,
    lease: float = 4.0,
    idle: float = 2.0,
    seed: int = 1,
    timeout: float = 600.0,
    progress: Progress = print,
) -> ProxyVerdict:
    """Crawl a generated site through ``proxies`` tinyproxies; stop the first a third of
    the way in; judge from the site's and the proxies' logs."""
    workdir.mkdir(parents=True, exist_ok=True)
    site = generate_site(pages=pages, hosts=hosts, seed=seed, port=0)
    pool = [Tinyproxy(workdir) for _ in range(proxies)]
    with (
        SiteServer(site, log_path=workdir / "requests.jsonl") as server,
        _store(workdir, cluster=False) as stored,
    ):
        flags = [
            "--delay", str(delay), "--lease", str(lease), "--idle", str(idle), *SITE_FLAGS,
            "--allow-net", "127.0.0.1/32", "--span-hosts", "--max-attempts", "8",
        ]  # fmt: skip
        for proxy in pool:
            flags += ["--proxy", proxy.url]
        crew = _Workers(stored[0], workdir, flags, progress)
        try:
            for proxy in pool:
                proxy.start()
            stopped_at = _crawl(server, crew, pool[0], workers, time.monotonic() + timeout)
        finally:
            for proxy in pool:
                proxy.stop()
            crew.kill_remaining()
        requests = server.requests()
    verdict = judge(server.site, requests, crew.outputs, delay=delay)
    logs = [proxy.requests() for proxy in pool]
    return ProxyVerdict(
        site=verdict,
        through=tuple(len(log) for log in logs),
        direct=_direct([r.url for r in requests], logs),
        **_moved(logs[0], [(r.time, r.url) for r in requests], stopped_at),
        exits=tuple(exit.code for exit in crew.exits),
    )


def _crawl(
    server: SiteServer, crew: _Workers, first: Tinyproxy, workers: int, deadline: float
) -> float:
    """Run the crawl, stopping ``first`` a third of the way in; when it stopped (time.time())."""
    for _ in range(workers):
        crew.start()
    crew.submit(server.site.root)
    target = len(server.site.expected()) // 3
    crew.progress(f"waiting for {target} requests before stopping proxy 1")
    while not server.wait_for_requests(target, timeout=5.0) and crew.running():
        crew.progress(f"{len(server.requests())} requests so far")
    first.stop()
    stopped_at = time.time()
    crew.progress(f"stopped proxy 1 ({first.url}) after {len(server.requests())} requests")
    crew.wait_all(deadline, lambda: f"{len(server.requests())} requests so far")
    return stopped_at


def _direct(site_urls: Sequence[str], logs: Sequence[Sequence[tuple[str, str]]]) -> int:
    """How many of the site's requests no proxy logged (counted with repeats)."""
    proxied = collections.Counter(url for log in logs for _, url in log)
    seen = collections.Counter(site_urls)
    return sum(max(0, count - proxied[url]) for url, count in seen.items())


def _moved(
    stopped_log: Sequence[tuple[str, str]], timed: Sequence[tuple[float, str]], stopped_at: float
) -> dict[str, int]:
    """The stopped proxy's hosts, and how many of them the site saw after the stop."""
    carried = {urlsplit(url).netloc for _, url in stopped_log}
    after = {urlsplit(url).netloc for at, url in timed if at > stopped_at}
    return {"stopped_hosts": len(carried), "moved_hosts": len(carried & after)}


__all__ = ["CRAWL", "ProxyVerdict", "run_proxied"]
