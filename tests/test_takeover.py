"""Static membership end to end: a worker SIGKILLed and started again under its --name
takes its own place (its hosts fetched again by it, nothing lost, no politeness broken),
and a second live worker under one name is refused with one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis as redis_py

from hashcrawl._store._server import RedisServer
from testing.fleet import wait_until
from testing.practice import CRAWL, _hashcrawl, _run, practice_failures, run_practice


@pytest.mark.slow
def test_a_worker_restarted_under_its_name_takes_its_place_within_the_lease(
    tmp_path: Path,
) -> None:
    """Two workers, --lease 60, the first SIGKILLed and started again 3 s later under its
    name: it takes its place (its log says so), the dead worker's hosts are requested
    again after the restart, and the crawl ends with nothing missing and no
    politeness broken, every live worker exiting 0.

    The successor paces the hosts its predecessor had pages of in hand from the takeover
    plus --timeout (a request it started may still be running at the server): --timeout
    10 instead of the default 30 keeps that wait, and the test, 20 s shorter; the
    loopback site answers in milliseconds."""
    lines: list[str] = []
    verdict, exits = run_practice(
        pages=300,
        hosts=10,
        workers=2,
        delay=0.1,
        lease=60,
        idle=5,
        replace_after=3,
        workdir=tmp_path,
        timeout=600,
        progress=lines.append,
        same_name=True,
        worker_flags=["--timeout", "10"],
    )
    assert practice_failures(verdict, exits) == []
    assert verdict.fetched == verdict.expected
    assert [exit.killed for exit in exits] == [True, False, False]
    replacement = (tmp_path / "worker-3.log").read_text()
    assert "taking the place of worker-1~" in replacement
    # Its hosts are fetched again, by it: nobody else owns them (a host whose pages were
    # all done before the kill has nothing left to fetch, so not every one need be).
    [line] = [x for x in lines if x.startswith("the killed worker's hosts after its restart")]
    requested = int(line.split(": ")[1].split(" of ")[0])
    assert requested > 0


def test_a_second_worker_under_a_running_workers_name_is_refused(tmp_path: Path) -> None:
    """While a worker named alpha heartbeats, another started as alpha exits 2 with one
    line naming the running one's pid, and writes nothing to Redis."""
    with RedisServer(directory=tmp_path / "redis") as server:
        client = redis_py.Redis.from_url(server.url, decode_responses=True)
        flags = ["join", "--redis", server.url, "--crawl", CRAWL, "--name", "alpha"]
        with (tmp_path / "first.log").open("wb") as log:
            first = _hashcrawl([*flags, "--idle", "60"], stdout=log)
        try:
            members = f"hc:{{{CRAWL}}}:members"
            wait_until(lambda: bool(client.zrange(members, 0, -1)), what="the first join")
            before = {k: client.dump(k) for k in client.keys("hc:*") if "members" not in k}
            second = _run(flags)
            assert second.returncode == 2
            *warnings, last = second.stdout.strip().splitlines()
            assert last == (
                f"hashcrawl: a worker named alpha is running (pid {first.pid} on "
                f"{_host(client, members)}); pick another --name"
            )
            assert all("appendonly" in line for line in warnings)  # this test's Redis
            after = {k: client.dump(k) for k in client.keys("hc:*") if "members" not in k}
            assert set(after) == set(before)
            assert [m.split("~")[0] for m in client.zrange(members, 0, -1)] == ["alpha"]
        finally:
            first.terminate()
            first.wait(timeout=60)
            client.close()


def _host(client: redis_py.Redis, members: str) -> str:
    [member] = client.zrange(members, 0, -1)
    return str(client.hget(members.replace("members", "w:" + member), "host"))
