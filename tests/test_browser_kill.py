"""Rendering survives a SIGKILL: two rendering workers crawl two loopback sites of
JavaScript pages (one host each, one owner each); the owner of one is SIGKILLed
mid-crawl and a new worker joins in its place. Judged from the sites' logs, the item
files and /proc: every page fetched, every item the pages' scripts and steps write
found, and nothing left of the killed worker's browser (its death signal ended it, and
the next browser start removed its profile).

Skipped, with the reason, where no Chromium is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest
import trio

from hashcrawl._browser._process import NAMES, PROFILE_PREFIX
from hashcrawl._core._ring import Ring
from hashcrawl._core._urls import canonicalize, host_key
from hashcrawl._store._server import RedisServer
from testing.fleet import Processes, new_crawl_name, wait_until
from testing.jssite import PAGES, JsSite
from testing.pss import run_processes
from tests.test_browser import ended

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        next((n for n in NAMES if shutil.which(n)), None) is None,
        reason="no Chromium on PATH (scripts/test installs it)",
    ),
]
HOSTS = ("127.0.0.2", "127.0.0.4")  # 127.0.0.3 is the hostile page's listener
SPIDER = """
from urllib.parse import urlsplit

import hashcrawl
from testing.jssite import STEPS


class Rendering(hashcrawl.Spider):
    start_urls = {starts!r}

    def parse(self, response):
        where = urlsplit(response.url)
        for name in response.css("li.item::text").getall():
            yield {{"site": where.hostname, "page": where.path, "item": name}}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, render=True, steps=STEPS.get(href, []))
"""
#: Every page of one site, as its documents are requested.
DOCUMENTS = {"/", "/script", "/more", "/scroll", "/links", "/p/1", "/p/2", "/p/3"}


def split_names(roots: list[str]) -> tuple[str, str]:
    """Two worker names whose ring gives each one of the two sites' hosts."""
    hosts = [host_key(canonicalize(root)) for root in roots]
    for n in range(2, 100):
        names = ("w1", f"w{n}")
        ring = Ring.of(0, names)
        if {ring.owner_of(host) for host in hosts} == set(names):
            return names
    raise AssertionError(f"no two names split {hosts}")


def successor(survivor: str, host: str) -> str:
    """A name for the replacement that the ring gives ``host`` beside ``survivor`` (so it
    renders, and its browser's start sweeps what the killed worker left)."""
    for n in range(100, 200):
        if Ring.of(0, (survivor, f"w{n}")).owner_of(host) == f"w{n}":
            return f"w{n}"
    raise AssertionError(f"no name takes {host} from {survivor}")


def browser_of(worker: int, mark: str, temporary: Path) -> set[int]:
    """The Chromium processes of the worker of pid ``worker``: its profile (in
    ``temporary``) on their command line (as ``pgrep -f`` finds them), or its mark in
    their environment (its crash handler, re-parented to init)."""
    found = run_processes(worker, mark)
    flag = f"--user-data-dir={temporary}/{PROFILE_PREFIX}{worker}-".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and flag in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
        except OSError:
            continue
    return {pid for pid in found if pid != worker and _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_rendering_worker_killed_mid_crawl_loses_nothing_and_leaves_no_browser(
    shared_redis: RedisServer, tmp_path: Path, browser_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner of one site is SIGKILLed once it has rendered its "Load more" page and
    replaced: both sites' pages all fetched, their items all found, and the killed
    worker's browser gone, its profile removed. (The workers' temporary directory is the
    test's own, ``browser_tmp``: another test's browser start would sweep the killed
    worker's profile first.)"""
    mark = ("HASHCRAWL_KILLED_WORKER", uuid.uuid4().hex)
    temporary = browser_tmp
    monkeypatch.setenv("TMPDIR", str(temporary))  # the workers' (this process has its own)
    with (
        JsSite(HOSTS[0]) as first,
        JsSite(HOSTS[1]) as second,
        Processes(shared_redis.url, new_crawl_name(), tmp_path) as fleet,
    ):
        roots = [first.root + "/", second.root + "/"]
        spider = tmp_path / "rendering.py"
        spider.write_text(SPIDER.format(starts=roots))
        flags = ["--spider", str(spider), "--render", "--delay", "0.25", "--lease", "5",
                 "--grace", "2", "--idle", "3", "--timeout", "5", "--render-timeout", "20",
                 "--max-attempts", "3", "-q", *(f"--allow-net={h}" for h in HOSTS)]  # fmt: skip
        names = split_names(roots)
        victim = Ring.of(0, names).owner_of(host_key(canonicalize(roots[0])))
        workers = {}
        for name in names:
            if name == victim:
                os.environ[mark[0]] = mark[1]
            try:
                workers[name] = fleet.join(*flags, "--name", name)
            finally:
                os.environ.pop(mark[0], None)
        killed = workers[victim]
        wait_until(lambda: "/api/more" in first.paths(), what="the victim's Load more")
        browser = browser_of(killed.pid, "=".join(mark), temporary)
        killed.signal(signal.SIGKILL)
        assert killed.wait() == -signal.SIGKILL
        killed_at = len(first.paths())
        left = trio.run(ended, browser)
        after_kill = browser_of(killed.pid, "=".join(mark), temporary)
        profiles = list(temporary.glob(f"{PROFILE_PREFIX}{killed.pid}-*"))
        survivor = next(name for name in names if name != victim)
        host = host_key(canonicalize(roots[0]))
        replacement = fleet.join(*flags, "--name", successor(survivor, host))
        codes = [worker.wait() for worker in (*workers.values(), replacement) if worker != killed]
        items = [json.loads(line) for path in fleet.outputs for line in _whole_lines(path)]
        logs = {HOSTS[0]: first.paths(), HOSTS[1]: second.paths()}
    assert codes == [0, 0]
    assert len(browser) >= 3  # the browser, its zygote and a renderer at least
    assert (left, after_kill) == (set(), set())
    assert len(profiles) == 1 and not profiles[0].exists()  # swept by the next start
    assert set(first.paths()[killed_at:]) & DOCUMENTS, "the kill came after the site's last page"
    for host in HOSTS:
        assert set(logs[host]) >= DOCUMENTS
        found = {(i["page"], i["item"]) for i in items if i["site"] == host}
        assert found == {(page, item) for page, names in PAGES.items() for item in names}


def _whole_lines(path: Path) -> list[str]:
    """The lines of an item file, but a last one a SIGKILL cut."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.endswith("}")]
