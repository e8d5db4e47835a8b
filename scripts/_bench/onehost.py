"""One host crawled to the end by ``wget -r``, ``hashcrawl crawl`` and the bare loop, in one run.

The site is one host's tree: by default the bench generator's pages on one host, or a
directory of HTML given with ``--one-host-docs`` (Debian's javadoc, say:
``apt-get download openjdk-17-doc && dpkg-deb -x openjdk-17-doc_*.deb root``, then
``root/usr/share/doc/openjdk-17-jre-headless/api``). nginx serves it as
``static_site.StaticServer`` does, and each contender's wall time runs from the first
request nginx saw to the last page it served; pages are the distinct URLs it answered 200
for (robots.txt excluded), so a contender that follows stylesheet links counts them too.

- ``wget -r``: ``wget -r -l inf --delete-after -nv`` (robots.txt obeyed, one connection);
- ``hashcrawl crawl``: one worker with its private Redis, ``--delay 0``, the ``--per-host``
  given, ``-o items.jsonl`` (fsynced, as by default);
- ``bare loop``: ``scripts/_bench/bare.py`` with the same ``--per-host``.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import crawl, static_site

SCRIPTS = Path(__file__).resolve().parent


def site(work: Path, *, pages: int, docs: Path | None, port: int) -> tuple[Path, str]:
    """The tree to serve (``ROOT/127.0.0.2``) and the start URL."""
    root = work / "one-host"
    if docs is None:
        (seed,) = static_site.generate(root, hosts=1, pages=pages, port=port)
        return root, seed
    root.mkdir(parents=True, exist_ok=True)
    (root / "127.0.0.2").symlink_to(docs.resolve())
    start = "index.html" if (docs / "index.html").exists() else ""
    return root, f"http://127.0.0.2:{port}/{start}"


def run(
    work: Path,
    *,
    pages: int,
    docs: Path | None,
    per_host: int,
    timeout: float,
    before: Path | None = None,
    parse_process: bool = False,
) -> list[Any]:
    """Crawl the site with each contender in turn; ``before`` adds ``hashcrawl crawl``
    of that checkout (see ``crawl.hashcrawl_launcher``); ``parse_process`` adds it
    with ``HASHCRAWL_PARSE_PROCESS=1`` (the default parse in a process of its own)."""
    port = static_site.free_port()
    root, seed = site(work, pages=pages, docs=docs, port=port)
    server = static_site.StaticServer(root, work / "one-host-server", hosts=1, port=port)
    results = []
    for name, command in _contenders(seed, work, per_host):
        if command is None:
            print(f"  {name}: skipped (not installed)")
            continue
        results.append(_measure(name, command, server, work, timeout))
        if parse_process and name.startswith("hashcrawl"):
            env = {"HASHCRAWL_PARSE_PROCESS": "1"}
            label = f"{name} +parse process"
            results.append(_measure(label, command, server, work, timeout, env=env))
        if before is not None and name.startswith("hashcrawl"):
            name = name.replace("hashcrawl crawl", "hashcrawl crawl before")
            results.append(_measure(name, command, server, work, timeout, before))
    return results


def _contenders(seed: str, work: Path, per_host: int) -> list[tuple[str, list[str] | None]]:
    wget = shutil.which("wget")
    state = work / "one-host-state"
    wget_command = [wget, "-r", "-l", "inf", "--delete-after", "-nv", "-P", str(work / "wget")]
    crawl = [
        sys.executable, "-m", "hashcrawl", "crawl", seed, "--delay", "0",
        "--per-host", str(per_host), "--concurrency", "64", "--idle", "2",
        "--workers", "1", "--allow-net", "127.0.0.0/8", "--state-dir", str(state),
        "--fresh", "-q", "-o", str(work / "one-host-items.jsonl"),
    ]  # fmt: skip
    bare = [
        sys.executable, str(SCRIPTS / "bare.py"), seed, "--concurrency", "64",
        "--per-host", str(per_host), "-o", str(work / "one-host-bare.jsonl"),
    ]  # fmt: skip
    return [
        ("wget -r", [*wget_command, seed] if wget else None),
        (f"hashcrawl crawl --per-host {per_host}", crawl),
        (f"bare loop --per-host {per_host}", bare),
    ]


def _measure(
    name: str,
    command: list[str],
    server: Any,
    work: Path,
    timeout: float,
    checkout: Path | None = None,
    env: dict[str, str] | None = None,
) -> Any:
    run_dir = work / ("one-host-" + "-".join(name.split()))
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "access.log"
    server.start(log)
    try:
        pid = crawl._spawn(command, run_dir / "stderr.txt", checkout, env)
        # wget exits 8 when the server answered some request with an error (a broken
        # link, as javadoc has): the crawl itself went to its end.
        ok = (0, 8) if name.startswith("wget") else (0,)
        usage, in_time = crawl.wait_all([pid], time.monotonic() + timeout, ok)
    finally:
        server.stop()
    pages, requests, first, last = crawl.served(log)
    return crawl.Result(
        name=name,
        processes=1,
        pages=pages,
        requests=requests,
        wall=last - first,
        cpu=usage.cpu,
        rss_kb=usage.rss_kb,
        redis_calls={},
        redis_memory=0,
        redis_cpu=0.0,
        seen=0,
        items=0,
        complete=in_time,
    )


def render(results: list[Any]) -> list[str]:
    """The one-host table, with each contender's time against wget's."""
    wget = next((r for r in results if r.name == "wget -r"), None)
    lines = [
        "",
        "one host, crawled to the end (CPU: the contender's process and every process it "
        "reaped, so hashcrawl crawl's worker and private Redis are in it):",
        "| contender | pages | wall s | pages/s | CPU s/1k pages | time / wget's |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        ratio = f"{r.wall / wget.wall:.2f}x" if wget and wget.wall else "n/a"
        flag = "" if r.complete else " (INCOMPLETE)"
        lines.append(
            f"| {r.name}{flag} | {r.pages} | {r.wall:.1f} | {r.pages_per_s:.0f} | "
            f"{r.cpu_per_1k:.2f} | {ratio} |"
        )
    return lines
