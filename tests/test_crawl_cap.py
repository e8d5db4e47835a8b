"""End to end: --max-pages-total caps the fleet's pages, judged from the server's log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testing.testsite import SITE_FLAGS, SiteServer, generate_site
from tests.test_cli import COMMAND_TIMEOUT, assert_ok, at, hashcrawl, status

CAP = 100
DEADLINE = 60.0


@pytest.mark.slow
def test_three_workers_and_a_kill_fetch_the_cap_and_no_more(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Three workers share a cap of 100 pages on a 200-page site; one is SIGKILLed at
    30 pages. The server sees at most 100 page requests (robots.txt aside: it is not a
    page), and no fewer than 100 less what the killed worker may have taken unsent; the
    two others stop by themselves, exit 0, and the crawl keeps what was left."""
    site = generate_site(pages=200, hosts=6, seed=7, port=0)
    with SiteServer(site) as server, contextlib.ExitStack() as files:
        roots = [server.site.url(host, "/") for host in site.hosts]
        assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", *SITE_FLAGS, *roots))
        errs = [files.enter_context((tmp_path / f"err{i}").open("wb")) for i in range(3)]
        workers = [
            subprocess.Popen(
                [
                    sys.executable, "-m", "hashcrawl", "join", *at(redis_url, crawl_name),
                    "--max-pages-total", str(CAP), "--delay", "0.02", "--lease", "4",
                    "--idle", "2", "-o", str(tmp_path / f"items{i}.jsonl"), *SITE_FLAGS,
                ],
                stdout=subprocess.DEVNULL,
                stderr=errs[i],
            )
            for i in range(3)
        ]  # fmt: skip
        try:
            assert server.wait_for_requests(30 + len(site.hosts), timeout=DEADLINE)
            workers[0].send_signal(signal.SIGKILL)
            codes = [worker.wait(timeout=COMMAND_TIMEOUT) for worker in workers]
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        pages = [r for r in server.requests() if r.path != "/robots.txt"]
    told = [(tmp_path / f"err{i}").read_text() for i in range(3)]
    assert codes[1:] == [0, 0], told
    assert CAP - 16 <= len(pages) <= CAP  # 16: the killed worker's --concurrency
    done = status(redis_url, crawl_name)
    assert done["pages_taken"] == CAP
    assert done["waiting"] + done["held"] > 0  # the rest stays, for a raised cap
    said = [line for text in told for line in text.splitlines() if "--max-pages-total" in line]
    assert len(said) <= 1 and "Traceback" not in "".join(told), told
    assert os.path.getsize(tmp_path / "items1.jsonl") + os.path.getsize(tmp_path / "items2.jsonl")
