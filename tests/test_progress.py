"""``hashcrawl crawl``'s progress and summary, and the commands that read its state dir."""

from __future__ import annotations

import io
import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from hashcrawl._cli._progress import Progress
from hashcrawl._cli._workers import _report
from testing.fleet import DEADLINE, page_requests, wait_until
from testing.testsite import SITE_FLAGS, Site, SiteServer, generate_site
from tests.test_cli import assert_ok, assert_one_line_error, hashcrawl
from tests.watching import by_class, settled_crawl


def crawl(site: Site, tmp_path: Path, *more: str) -> tuple[int, str]:
    """``hashcrawl crawl`` of ``site`` with its state in tmp_path/state: (exit, stderr)."""
    flags = [
        "--delay",
        "0.02",
        "--idle",
        "1",
        "--span-hosts",
        *SITE_FLAGS,
        "--state-dir",
        str(tmp_path / "state"),
    ]
    output = ["-o", str(tmp_path / "items.jsonl")]
    result = hashcrawl("crawl", site.root, *output, *flags, *more)
    return result.code, result.err


def test_crawl_summary_shows_the_figures_of_the_servers_request_log(tmp_path: Path) -> None:
    """Off a terminal, the summary counts pages and statuses as the site served them, plainly."""
    with SiteServer(generate_site(pages=30, hosts=2, seed=8, port=0)) as server:
        code, err = crawl(server.site, tmp_path)
        requests = server.requests()
    assert code == 0
    assert "\x1b" not in err
    pages = len(page_requests(requests))
    assert f"crawl default: {pages:,} pages, {pages:,} items" in err
    for cls, count in by_class(requests).items():
        assert f"{cls} {count:,}" in err
    assert f"items in: {tmp_path / 'items.jsonl'}" in err
    assert "dead letters: 0" in err
    assert f"hashcrawl status --state-dir {tmp_path / 'state'} --crawl default" in err


def test_quiet_crawl_prints_nothing(tmp_path: Path) -> None:
    """-q silences the progress and the summary."""
    with SiteServer(generate_site(pages=5, hosts=1, seed=8, port=0)) as server:
        assert crawl(server.site, tmp_path, "-q") == (0, "")


def test_status_and_dead_read_what_a_finished_crawl_left_in_its_state_dir(tmp_path: Path) -> None:
    """status --state-dir starts the crawl's private Redis from its files and reads it."""
    with SiteServer(generate_site(pages=12, hosts=2, seed=9, port=0)) as server:
        assert crawl(server.site, tmp_path, "-q") == (0, "")
        requests = server.requests()
    state = str(tmp_path / "state")
    doc = json.loads(assert_ok(hashcrawl("status", "--state-dir", state, "--json")))
    assert doc["fetched"] == len(page_requests(requests))
    assert doc["statuses"] == by_class(requests)
    assert doc["ended"] is True
    dead = hashcrawl("dead", "--state-dir", state)
    assert (dead.code, dead.out, dead.err) == (
        0,
        "",
        "hashcrawl: crawl default has no dead letters\n",
    )
    # Its server was stopped after each command: a third one can start it again.
    assert "fetched: " in assert_ok(hashcrawl("status", "--state-dir", state))


def test_status_of_a_state_dir_without_that_crawl_exits_2(tmp_path: Path) -> None:
    """A --state-dir holding no such crawl is a one-line error, and nothing is created."""
    line = assert_one_line_error(hashcrawl("status", "--state-dir", str(tmp_path / "none")), 2)
    assert "no crawl named 'default'" in line
    assert not (tmp_path / "none").exists()


def test_status_refuses_both_redis_and_state_dir(tmp_path: Path) -> None:
    """--redis and --state-dir name two places: one line, exit 2."""
    args = ["--redis", "redis://127.0.0.1:1/0", "--state-dir", str(tmp_path)]
    assert "not both" in assert_one_line_error(hashcrawl("status", *args), 2)


async def test_progress_off_a_terminal_prints_plain_lines_with_the_crawls_figures(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Off a terminal the progress is a plain line of figures, printed at each interval;
    with nothing left, it says the crawl is waiting out --idle to end."""
    async with settled_crawl(redis_url, crawl_name, tmp_path) as (_, server):
        stream = io.StringIO()
        progress = Progress(redis_url, crawl_name, stream=stream, every=0.05, idle=30).start()
        with trio.fail_after(DEADLINE):
            while stream.getvalue().count("\n") < 2:
                await trio.sleep(0.05)
        await trio.to_thread.run_sync(progress.stop)
        pages = len(page_requests(server.requests()))
    last = stream.getvalue().splitlines()[-1]
    assert "\x1b" not in stream.getvalue()
    assert last.startswith(f"hashcrawl: {pages:,} pages, ")
    assert ", 0 to fetch, 0 in flight, " in last
    assert ", 0 errors, 0 dead, 0:00:0" in last
    assert "; nothing left to fetch: ending in " in last and last.endswith(" s (--idle 30)")


def scraped_pages(port: int) -> tuple[float, float] | None:
    """(pages fetched, fleet entries outstanding) from one worker's /metrics, if it answers."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    found = {"pages": 0.0, "outstanding": -1.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "hashcrawl_pages_total":
                found["pages"] += s.value
            elif s.name == "hashcrawl_fleet_outstanding":
                found["outstanding"] = s.value
    return found["pages"], found["outstanding"]


def test_crawl_gives_each_worker_its_own_metrics_port(tmp_path: Path) -> None:
    """crawl --workers 2 --metrics-port P serves P and P+1; together they count every page."""
    port = free_port_pair()
    # Twelve hosts: the chance that the ring gives one worker none is 1 in 2,048.
    site = generate_site(pages=60, hosts=12, seed=6, port=0)
    with SiteServer(site) as server:
        flags = ["--workers", "2", "--metrics-port", str(port), "--idle", "5", "-q", "--span-hosts"]
        flags += SITE_FLAGS
        args = ["crawl", server.site.root, "--delay", "0.02", "--state-dir", str(tmp_path / "s")]
        with subprocess.Popen([sys.executable, "-m", "hashcrawl", *args, *flags]) as crawl:
            wait_until(lambda: counted_everything(server, port), what="both ports to count it all")
            assert all((scraped_pages(p) or (0, 0))[0] > 0 for p in (port, port + 1))
            assert crawl.wait(timeout=DEADLINE) == 0


def counted_everything(server: SiteServer, port: int) -> bool:
    """Workers on port and port+1 together count every page logged, with nothing left."""
    answers = [scraped_pages(port), scraped_pages(port + 1)]
    pages = len(page_requests(server.requests()))
    if any(a is None or a[1] != 0 for a in answers):
        return False
    return sum(a[0] for a in answers if a) == pages > 0


def free_port_pair() -> int:
    """A port P on 127.0.0.1 such that P and P+1 are both free now, below the ephemeral
    range: a port the kernel hands out (to any process's connection or bind to port 0)
    could be taken again before the crawl's second worker binds it, as one was once
    with the suite on three xdist workers."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(50):
        port = random.randrange(low // 2, low - 1)
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        with socket.socket() as first:
            try:
                first.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError("no two neighbouring free ports")


def test_running_a_finished_crawl_again_says_it_was_complete_without_waiting(
    tmp_path: Path,
) -> None:
    """The same command again, on a crawl with nothing left, ends at once (not after its
    --idle 600, past the test's ceiling), says it was complete and how to start afresh,
    and requests nothing."""
    with SiteServer(generate_site(pages=5, hosts=1, seed=8, port=0)) as server:
        assert crawl(server.site, tmp_path, "-q") == (0, "")
        logged = len(server.requests())
        code, err = crawl(server.site, tmp_path, "--idle", "600")
        again = server.requests()[logged:]
    assert (code, again) == (0, [])
    pages = len(page_requests(server.requests()))
    assert err.startswith(f"hashcrawl: crawl default was already complete ({pages} pages fetched")
    assert f"crawl --fresh --state-dir {tmp_path / 'state'} URL" in err
    assert len(err.splitlines()) == 1


async def test_join_says_it_joined_then_what_it_has_done(
    redis_url: str, crawl_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """join's lines: one when the worker is a member, then its figures at each interval,
    which count the pages the site served."""
    lines: list[str] = []
    async with settled_crawl(redis_url, crawl_name, tmp_path) as (worker, server):
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_report, worker, 0.01)
                while len(lines) < 2:
                    got = capsys.readouterr().err.splitlines()
                    lines += [line for line in got if line.startswith("hashcrawl: ")]
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        pages = len(page_requests(server.requests()))
    joined = f"hashcrawl: joined crawl {crawl_name} as {worker.id} (1 member); Ctrl-C stops it"
    assert lines[0] == joined
    assert lines[1].startswith(f"hashcrawl: {worker.id}: {pages} pages, {pages} items, ")
    assert lines[1].endswith(" owned, 0 failed, 0 dead-lettered")


def test_progress_and_status_headline_spell_one_of_a_thing_in_the_singular() -> None:
    """One host, one error, one worker: never "1 hosts" or "1 workers"."""
    from hashcrawl._cli._progress import progress_line
    from hashcrawl._cli._statusview import _headline

    member = {"hosts": 1}
    view = {"fetched": 3, "waiting": 0, "held": 0, "in_flight": 0, "failed": 1, "dead": 0}
    line = progress_line({**view, "members": [member]}, rate=0.0, elapsed=1.0)
    assert ", 1 host, 1 error, 0 dead, " in line
    headline = _headline(
        {
            **view,
            "crawl": "c",
            "ended": False,
            "workers": 1,
            "pages_per_s": 0.0,
            "items": 0,
            "seen": 3,
        }
    ).plain
    assert headline.startswith("crawl c: 1 worker, 3 fetched")


def test_the_progress_line_never_calls_waiting_what_status_calls_held() -> None:
    """Entries held by their owners and not started are "to fetch" on the progress line:
    "waiting" means one thing, status's (queued and not yet taken)."""
    from hashcrawl._cli._progress import progress_line

    view = {"fetched": 3, "waiting": 0, "held": 44, "in_flight": 4, "failed": 0, "dead": 0}
    line = progress_line({**view, "members": [{"hosts": 2}]}, rate=0.0, elapsed=1.0)
    assert ", 40 to fetch, 4 in flight, " in line
    assert "waiting" not in line


def test_one_page_one_item_one_entry_are_singular_in_the_line_and_the_summary() -> None:
    """A crawl of one page: "1 page, ... 1 item", never "1 pages" or "1 items"."""
    import argparse

    from hashcrawl._cli._progress import progress_line, summary

    view = {"fetched": 1, "items": 1, "waiting": 1, "held": 0, "in_flight": 0, "failed": 0}
    view |= {"dead": 0, "retries": 0, "statuses": {"2xx": 1}, "errors": {}, "members": []}
    args = argparse.Namespace(state_dir=".hashcrawl", crawl="default", output=["a.jsonl"])
    line = progress_line(view, rate=0.0, elapsed=1.0)
    text = summary(view, elapsed=1.0, args=args)
    assert line.startswith("1 page, ")
    assert text.startswith("crawl default: 1 page, 1 item in ")
    assert "stopped with 1 entry left" in text


def test_the_progress_line_says_why_a_worker_without_hosts_has_nothing_to_do() -> None:
    """Two workers on one site: the line says one owns no host, and why (one owner a
    host, paced by --delay), rather than leave a slow crawl unexplained."""
    from hashcrawl._cli._progress import progress_line

    view = {"fetched": 9, "waiting": 0, "held": 30, "in_flight": 1, "failed": 0, "dead": 0}
    members = [{"hosts": 1}, {"hosts": 0}]
    line = progress_line({**view, "members": members}, rate=1.0, elapsed=9.0)
    assert line.endswith(
        "; 1 of 2 workers owns no host: each host has one owner, which paces it (--delay)"
    )
    busy = progress_line({**view, "members": [{"hosts": 1}, {"hosts": 1}]}, rate=1, elapsed=9)
    assert "owns no host" not in busy
