"""A logged-in Scrapy spider survives the SIGKILL of the worker owning the site: its
replacement carries on with the session the killed worker's commits stored (judged
from the site's own log), and the items are Scrapy's."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from hashcrawl._core._ring import Ring
from hashcrawl._core._urls import canonicalize, host_key
from hashcrawl._store._server import RedisServer
from testing.fleet import Processes, new_crawl_name, wait_until
from testing.ports import DEFAULT_SITE, EXAMPLES
from testing.scrapysite import MEMBER_PAGES, ScrapySite

NAMES = ("w1", "w2")


@pytest.mark.slow
def test_the_sites_owner_killed_after_the_login_its_successor_stays_logged_in(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    """The owner is SIGKILLed once /account was answered: every later request carries
    the session and is let in, and the items are the user and every member page."""
    with ScrapySite() as site, Processes(shared_redis.url, new_crawl_name(), tmp_path) as fleet:
        spider = tmp_path / "login.py"
        spider.write_text((EXAMPLES / "login.py").read_text().replace(DEFAULT_SITE, site.root))
        host = site.root.split("//")[1].split(":")[0]
        flags = ["--spider", str(spider), "--allow-net", host, "--delay", "0.3",
                 "--lease", "3", "--grace", "2", "--idle", "3", "-q"]  # fmt: skip
        workers = {name: fleet.join(*flags, "--name", name) for name in NAMES}
        wait_until(lambda: any(s.path == "/account" for s in site.seen()), what="the login")
        owner = Ring.of(0, NAMES).owner_of(host_key(canonicalize(site.root)))
        assert owner is not None
        workers[owner].signal(signal.SIGKILL)
        killed_at = len(site.seen())
        codes = {name: worker.wait() for name, worker in workers.items()}
        seen = site.seen()
        items = [json.loads(line) for path in fleet.outputs for line in _whole_lines(path)]
    assert codes[owner] == -signal.SIGKILL and all(c == 0 for n, c in codes.items() if n != owner)
    members = {f"/members/{n}" for n in range(1, MEMBER_PAGES + 1)}
    after = [s for s in seen[killed_at:] if s.path != "/robots.txt"]
    assert after, "the kill came after the last page: nothing was left to judge"
    assert [
        (s.path, s.status) for s in after if "session=" not in s.cookie or s.status != 200
    ] == []
    assert {s.path for s in seen if s.path in members and s.status == 200} == members
    assert {json.dumps(i, sort_keys=True) for i in items} == {
        json.dumps({"user": "ann", "status": 200}, sort_keys=True),
        *(
            json.dumps({"member": f"Member page {n}", "secret": str(n * 11)}, sort_keys=True)
            for n in range(1, MEMBER_PAGES + 1)
        ),
    }


def _whole_lines(path: Path) -> list[str]:
    """The lines of an item file, but a last one a SIGKILL cut."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if line.endswith("}")]
