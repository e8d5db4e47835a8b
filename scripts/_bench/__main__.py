"""hashcrawl's benchmark: crawl a local multi-host site with hashcrawl and scrapy-redis.

Run through ``scripts/bench`` (which prepares ``.venv-bench``). Three named scenarios run
instead of the default one, each with options of its own (``scripts/bench --cluster
--help``):

- ``--capacity``: the capacity plan's inputs (per-unit Redis memory, per-page costs)
  measured, and its prediction for a crawl against what that crawl measured
  (``capacity.py``);
- ``--cluster``: the bench's crawl on one Redis server and on local Redis Clusters, with
  and without ``--shards`` (``cluster.py``);
- ``--revisits``: fixed against adaptive revisits on the revisit test site, judged from
  its log (``revisits.py``).

The default scenario, one run on one machine:

1. generate a site of ``--pages`` pages over ``--hosts`` loopback hosts and serve it
   with nginx (or a fallback server, named in the output);
2. crawl it to the end with hashcrawl (1 worker), the bare loop (``_bench/bare.py``: trio,
   httpx and lxml with no coordination, the stack's ceiling), scrapy-redis (1 process),
   then hashcrawl with 2 and 4 workers, each against a fresh private Redis;
   then crawl a one-host site with ``wget -r``, ``hashcrawl crawl`` and the bare loop
   (``_bench/onehost.py``);
3. push ``--seen-urls`` URLs through the seen filter and measure its memory and its
   wrongly-seen rate; watch a worker's memory with ``--queued`` URLs queued;
4. optionally (``--profile``) crawl once more under py-spy and print the top of the
   profile.

It prints a table and the ratios hashcrawl / scrapy-redis. Nothing here asserts on
time: the figures are for reading, and the targets are printed beside them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import capacity, cluster, crawl, memory, onehost, pyspy, revisits, static_site

REPO = Path(__file__).resolve().parent.parent
MB = 1024
WARC_RUN = "hashcrawl x1 +warc"  # the same crawl, archiving every fetch too
WARC_ALONE = "hashcrawl x1 warc only"  # -o pages.warc.gz alone (items to standard output)
WARC_LOOP = "hashcrawl x1 +warc on the loop"  # HASHCRAWL_WARC_PROCESS=0: no writer process
PARSE_RUN = "hashcrawl x1 +parse process"  # HASHCRAWL_PARSE_PROCESS=1 (issue 22's experiment)


# A named scenario and what runs it, with the arguments after its name.
SCENARIOS: dict[str, Callable[[list[str]], int]] = {
    "--capacity": capacity.main,
    "--cluster": cluster.main,
    "--revisits": revisits.main,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _exit_on_signal)
    for name, scenario in SCENARIOS.items():
        if name in argv:
            argv.remove(name)
            return scenario(argv)
    args = _parser().parse_args(argv)
    if args.timeout is None:  # 240 s was a 20,000-page crawl's; 200,000 pages outran it
        args.timeout = max(240.0, 240.0 * args.pages / 20_000)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hashcrawl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _default(args, work)
    finally:  # an interrupted run too: its site can take gigabytes
        if not args.keep and not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nlogs, outputs and results.json are in {work}")


def _default(args: argparse.Namespace, work: Path) -> int:
    """The default scenario, in ``work``."""
    clock = _Clock()
    machine = describe_machine()
    clock.say(f"work directory {work}; load average {_load()}")
    port = static_site.free_port()
    seeds = static_site.generate(work / "site", hosts=args.hosts, pages=args.pages, port=port)
    pages = len(seeds) * max(1, args.pages // args.hosts)
    site = static_site.StaticServer(
        work / "site", work / "server", hosts=args.hosts, port=port, use_nginx=not args.no_nginx
    )
    clock.say(f"site: {pages} pages on {args.hosts} hosts, served by {site.kind}")
    results = []
    for name, launch in _contenders(args, seeds) if args.pages else []:
        result = crawl.measure(
            name, launch, site=site, work=work, expected_pages=pages, timeout=args.timeout
        )
        results.append(result)
        clock.say(f"{name}: {result.pages_per_s:.0f} pages/s; load average {_load()}")
    one_host = []
    if args.one_host_pages or args.one_host_docs:
        one_host = onehost.run(
            work,
            pages=args.one_host_pages,
            docs=args.one_host_docs,
            per_host=args.one_host_per_host,
            timeout=args.timeout * 3,
            before=args.before,
            parse_process=args.parse_process,
        )
        for r in one_host:
            clock.say(f"one host, {r.name}: {r.pages} pages in {r.wall:.1f} s; load {_load()}")
    seen = queued = None
    if args.seen_urls:
        seen = memory.seen_filter(work, urls=args.seen_urls, probes=args.probes, batch=args.batch)
        clock.say(f"seen filter: {seen['urls']} URLs at {seen['urls_per_s']:.0f}/s")
    if args.queued:
        site.start(work / "queued-access.log")
        try:
            queued = memory.queued_rss(
                work, site_hosts=site.hosts, port=port, urls=args.queued, watch=args.watch
            )
        finally:
            site.stop()
        clock.say(f"queued: {args.queued} URLs queued, worker peak RSS measured")
    profile = _profile(args, seeds, site, work, pages, clock) if args.profile else None
    report = {
        "machine": machine,
        "command": " ".join(["scripts/bench", *sys.argv[1:]]),
        "server": site.kind,
        "pages": pages,
        "hosts": args.hosts,
        "load_at_end": _load(),
        "seconds": clock.elapsed(),
        "crawls": [r.as_dict() for r in results],
        "one_host": [r.as_dict() for r in one_host],
        "seen_filter": seen,
        "queued": queued,
    }
    (work / "results.json").write_text(json.dumps(report, indent=1))
    print(render(report, results, profile))
    if one_host:
        print("\n".join(onehost.render(one_host)))
    return 0


def _exit_on_signal(number: int, frame: object) -> None:
    """SIGTERM or SIGHUP as an exit that runs every ``finally``: the servers stop."""
    raise SystemExit(128 + number)


def _contenders(args: argparse.Namespace, seeds: list[str]) -> list[tuple[str, Any]]:
    runs: list[tuple[str, Any]] = [("hashcrawl x1", crawl.hashcrawl_launcher(seeds, 1))]
    if args.before:
        launch = crawl.hashcrawl_launcher(seeds, 1, checkout=args.before)
        runs.append(("hashcrawl x1 before", launch))
    if args.parse_process:
        env = {"HASHCRAWL_PARSE_PROCESS": "1"}
        runs.append((PARSE_RUN, crawl.hashcrawl_launcher(seeds, 1, env=env)))
    if not args.no_bare:
        runs.append(("bare loop x1", crawl.bare_launcher(seeds)))
    if args.warc:
        runs.append((WARC_RUN, crawl.hashcrawl_launcher(seeds, 1, warc=True)))
        launch = crawl.hashcrawl_launcher(seeds, 1, warc=True, items=False)
        runs.append((WARC_ALONE, launch))
        env = {"HASHCRAWL_WARC_PROCESS": "0"}
        runs.append((WARC_LOOP, crawl.hashcrawl_launcher(seeds, 1, warc=True, env=env)))
    if not args.no_scrapy:
        runs.append(("scrapy-redis x1", crawl.scrapy_launcher(seeds)))
    for n in args.scale:
        runs.append((f"hashcrawl x{n}", crawl.hashcrawl_launcher(seeds, n)))
    return runs


def _profile(
    args: argparse.Namespace,
    seeds: list[str],
    site: static_site.StaticServer,
    work: Path,
    pages: int,
    clock: _Clock,
) -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    raw = work / "profile.txt"
    wrap = [spy, "record", "--rate", "100", "--format", "raw", "--output", str(raw), "--"]
    launch = crawl.hashcrawl_launcher(seeds, 1, wrap=wrap)
    crawl.measure(
        "profile", launch, site=site, work=work, expected_pages=pages, timeout=args.timeout
    )
    clock.say("profiled one more hashcrawl x1 crawl under py-spy")
    return pyspy.top(raw)


# -- the report ----------------------------------------------------------------------------


def render(report: dict[str, Any], results: list[Any], profile: str | None) -> str:
    m = report["machine"]
    lines = [
        "",
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']:.0f} GB RAM; {m['os']}",
        f"software: {m['software']}",
        f"site: {report['pages']} pages on {report['hosts']} hosts, served by "
        f"{report['server']}; load average at the end {report['load_at_end']}; "
        f"bench took {report['seconds']:.0f} s",
    ]
    if results:
        lines += [
            "",
            "| contender | procs | pages | wall s | pages/s | pages/s/proc | CPU s/1k pages "
            "| main thread CPU s/1k | main busy | Redis cmds/page | Redis B/URL seen "
            "| peak RSS MB | Redis CPU s/1k pages |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            *[_row(r) for r in results],
            *_notes(results),
            *_ratios(results),
        ]
    if report["seen_filter"]:
        lines += _seen_lines(report["seen_filter"])
    if report["queued"]:
        lines += _queued_lines(report["queued"])
    if profile:
        lines += ["", "profile of one hashcrawl worker (py-spy, 100 Hz):", profile]
    return "\n".join(lines)


def _row(r: Any) -> str:
    flag = "" if r.complete else " (INCOMPLETE)"
    cells = [
        f"{r.name}{flag}",
        f"{r.processes}",
        f"{r.pages}",
        f"{r.wall:.1f}",
        f"{r.pages_per_s:.0f}",
        f"{r.pages_per_s / r.processes:.0f}",
        f"{r.cpu_per_1k:.2f}",
        f"{r.main_cpu_per_1k:.2f}",
        f"{r.busy / r.processes:.2f}",
        f"{r.calls_per_page:.2f}",
        f"{r.memory_per_url:.0f}",
        f"{r.rss_kb / MB:.0f}",
        f"{r.redis_cpu / max(r.pages, 1) * 1000:.3f}",
    ]
    return "| " + " | ".join(cells) + " |"


def _notes(results: list[Any]) -> list[str]:
    lines = ["", "Redis commands per page, by command (scripts' inner calls included):"]
    lines += [f"  {r.name}: {r.top_calls()}" for r in results]
    return lines


def _ratios(results: list[Any]) -> list[str]:
    by_name = {r.name: r for r in results}
    hc, peer = by_name.get("hashcrawl x1"), by_name.get("scrapy-redis x1")
    bare = by_name.get("bare loop x1")
    lines = [""]
    if hc is not None and bare is not None:
        lines += [
            "hashcrawl x1 / bare loop x1 (the stack with no coordination):",
            f"  pages/s                 {_ratio(hc.pages_per_s, bare.pages_per_s)}"
            "   (target >= 0.85x)",
            f"  CPU s per 1k pages      {_ratio(hc.cpu_per_1k, bare.cpu_per_1k)}",
        ]
    if hc is not None and peer is not None:
        lines += [
            "hashcrawl x1 / scrapy-redis x1:",
            f"  pages/s per process     {_ratio(hc.pages_per_s, peer.pages_per_s)}"
            "   (target >= 6x)",
            f"  CPU s per 1k pages      {_ratio(hc.cpu_per_1k, peer.cpu_per_1k)}",
            f"  Redis commands per page {_ratio(hc.calls_per_page, peer.calls_per_page)}"
            f"   (target: hashcrawl <= 1.3, is {hc.calls_per_page:.2f})",
            f"  Redis bytes per URL     {_ratio(hc.memory_per_url, peer.memory_per_url)}",
            f"  peak RSS                {_ratio(hc.rss_kb, peer.rss_kb)}",
        ]
    warcs = [by_name.get(WARC_RUN), by_name.get(WARC_ALONE), by_name.get(WARC_LOOP)]
    for warc in warcs:
        if hc is not None and warc is not None:
            lines.append(
                f"WARC output: {warc.name} / hashcrawl x1 pages/s "
                f"{_ratio(warc.pages_per_s, hc.pages_per_s)}   (target >= 0.85x); "
                f"CPU s per 1k pages {_ratio(warc.cpu_per_1k, hc.cpu_per_1k)}, main thread "
                f"{_ratio(warc.main_cpu_per_1k, hc.main_cpu_per_1k)}"
            )
    if hc is not None:
        for r in results:
            if r.name.startswith("hashcrawl x") and r is not hc and r not in warcs:
                if r.name == PARSE_RUN:
                    lines.append(
                        f"parse process: {r.name} / hashcrawl x1 pages/s "
                        f"{_ratio(r.pages_per_s, hc.pages_per_s)}; CPU s per 1k pages "
                        f"{_ratio(r.cpu_per_1k, hc.cpu_per_1k)}, main thread "
                        f"{_ratio(r.main_cpu_per_1k, hc.main_cpu_per_1k)}"
                    )
                    continue
                speedup = r.pages_per_s / hc.pages_per_s if hc.pages_per_s else 0.0
                lines.append(f"scaling: {r.name} is {speedup:.2f}x hashcrawl x1's pages/s")
    return lines


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _seen_lines(s: dict[str, Any]) -> list[str]:
    layers = ", ".join(
        f"L{x['layer']}: {x['bits'] / 8 / 2**20:.1f} MiB k={x['k']} fill {x['fill']:.3f}"
        for x in s["layers"]
    )
    return [
        "",
        f"seen filter: {s['urls']:,} distinct URLs through commit.lua "
        f"(batches of {s['batch']}, {s['pushers']} submitting processes, "
        f"{s['urls_per_s']:,.0f} URLs/s)",
        f"  Redis memory per URL: {s['bytes_per_url']:.2f} B   (target <= 16 at 10M URLs; "
        f"the bitmaps' size at 10M is {s['projected_10m']:.2f} B/URL by the layer shapes)",
        f"  layers: {layers}",
        f"  wrongly seen: {s['wrongly_seen']} of {s['probes']:,} new URLs; "
        f"rate estimated from the filter's fill {s['estimated_fp']:.2e}; "
        f"design bound {s['bound']:.0e}   (target < 1e-6)",
    ]


def _queued_lines(q: dict[str, Any]) -> list[str]:
    return [
        "",
        f"worker with {q['urls']:,} URLs queued fleet-wide (submitted in "
        f"{q['submit_seconds']:.0f} s, then watched for {q['watched_seconds']:.0f} s; "
        f"{q['fetched_meanwhile']:,} fetched, {q['queued_at_end']:,} still queued): "
        f"peak RSS {q['peak_rss_kb'] / MB:.0f} MB   (target < 200 MB)",
    ]


# -- the machine ---------------------------------------------------------------------------


def describe_machine() -> dict[str, Any]:
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory,
        "os": f"{platform.system()} {platform.release()}",
        "software": _software(),
    }


def _software() -> str:
    from importlib.metadata import version

    parts = [f"Python {platform.python_version()}", _first_line(["redis-server", "--version"])]
    nginx = shutil.which("nginx") or static_site._sbin("nginx")
    if nginx:
        parts.append(_first_line([nginx, "-v"]))
    for package in ("hashcrawl", "httpx", "trio", "redis", "Scrapy", "scrapy-redis", "Twisted"):
        try:
            parts.append(f"{package} {version(package)}")
        except Exception:
            parts.append(f"{package} absent")
    return ", ".join(parts) + f"; hashcrawl at {_checkout()}"


def _checkout() -> str:
    """The commit measured, and whether hashcrawl/ had uncommitted changes then."""
    commit = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    diff = subprocess.run(
        ["git", "-C", str(REPO), "diff", "HEAD", "--", "hashcrawl"],
        capture_output=True,
        check=False,
    ).stdout
    if not diff:
        return f"commit {commit}"
    digest = hashlib.sha1(diff).hexdigest()[:8]
    return f"commit {commit} plus uncommitted changes in hashcrawl/ (diff sha1 {digest})"


def _first_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except OSError:
        return f"{command[0]} absent"
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0] if text else "?"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class _Clock:
    def __init__(self, say: Callable[[str], None] = print) -> None:
        self.started = time.monotonic()
        self._say = say

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        self._say(f"[{self.elapsed():6.1f}s] {text}")
        sys.stdout.flush()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=20_000, help="pages in the site (0: no crawls)")
    p.add_argument("--hosts", type=int, default=50, help="loopback hosts (at most 250)")
    p.add_argument("--scale", type=int, nargs="*", default=[2, 4], help="more worker counts")
    p.add_argument("--no-scrapy", action="store_true", help="skip the scrapy-redis crawl")
    p.add_argument("--no-bare", action="store_true", help="skip the bare loop's crawl")
    p.add_argument(
        "--before",
        type=Path,
        help="also crawl with the hashcrawl of this checkout (git archive COMMIT | tar -x -C DIR)",
    )
    p.add_argument(
        "--one-host-pages", type=int, default=4000, help="pages of the one-host site (0: skip)"
    )
    p.add_argument(
        "--one-host-docs", type=Path, help="crawl this directory of HTML as the one-host site"
    )
    p.add_argument(
        "--one-host-per-host", type=int, default=1, help="--per-host of the one-host crawls"
    )
    p.add_argument(
        "--warc",
        action="store_true",
        help="also crawl with -o pages.warc.gz beside the items, with it alone, and beside "
        "the items with the records made on the event loop (HASHCRAWL_WARC_PROCESS=0)",
    )
    p.add_argument(
        "--parse-process",
        action="store_true",
        help="also crawl (many hosts and one) with HASHCRAWL_PARSE_PROCESS=1",
    )
    p.add_argument("--no-nginx", action="store_true", help="serve with the fallback server")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds allowed per crawl (default: 240 per 20,000 pages, at least 240: a "
        "crawl cut at its timeout is marked INCOMPLETE)",
    )
    p.add_argument(
        "--seen-urls",
        type=int,
        default=2_000_000,
        help="URLs through the seen filter (0: skip); 10M takes ~10 min of Redis CPU alone",
    )
    p.add_argument("--probes", type=int, default=1_000_000, help="new URLs to test the filter")
    p.add_argument("--batch", type=int, default=1000, help="URLs per commit in the seen test")
    p.add_argument(
        "--queued", type=int, default=1_000_000, help="URLs queued in the RSS test (0: skip)"
    )
    p.add_argument("--watch", type=float, default=15.0, help="seconds to watch that worker")
    p.add_argument("--profile", action="store_true", help="also profile a worker with py-spy")
    p.add_argument("--workdir", type=Path, help="keep everything here")
    p.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    scenarios = p.add_argument_group(
        "named scenarios", "run instead of the default one; the options after them are theirs"
    )
    scenarios.add_argument(
        "--capacity",
        action="store_true",
        help="the capacity plan's inputs measured, and its prediction for a crawl against "
        "what the crawl measured (scripts/bench --capacity --help)",
    )
    scenarios.add_argument(
        "--cluster",
        action="store_true",
        help="one Redis server against local clusters, with and without --shards "
        "(scripts/bench --cluster --help)",
    )
    scenarios.add_argument(
        "--revisits",
        action="store_true",
        help="fixed against adaptive revisits, judged from the site's log "
        "(scripts/bench --revisits --help)",
    )
    return p


if __name__ == "__main__":
    sys.exit(main())
