#!/usr/bin/env python3
"""Worker memory as hosts grow: one page on each of 100,000 hosts, per-host state only.

Drives a real worker session's per-host state, with no network and no Redis (none is
reached): for each host, an entry is queued in the session's frontier, taken as the
dispatcher takes it, its robots.txt (a 1.8 KB file, as in issue 10) parsed and kept as
``fetch_robots`` keeps it, and the request finished at once. Time is trio's MockClock,
moving 10 ms per host (so 100,000 hosts take 1,000 s of crawl time); the session's own
``forget_idle`` runs every ``FORGET_EVERY`` seconds, as its ``forget_loop`` does.

Prints the process's resident memory every 10,000 hosts and at the end; ``--keep-all``
turns forgetting off, to show what it saves. Exits 1 if the final RSS is over --limit.

    .venv/bin/python scripts/bench_hosts.py              # 100,000 hosts, limit 200 MiB
    .venv/bin/python scripts/bench_hosts.py --keep-all   # without forgetting
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import trio
import trio.testing

from hashcrawl._core import _session as _core
from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._run._driver import Driver
from hashcrawl._run._worker import Worker
from hashcrawl._store._store import Store
from hashcrawl._web._robots import Robots

ROBOTS = (
    "User-agent: *\n"
    + "".join(f"Disallow: /private/section-{i}/\n" for i in range(40))
    + "Allow: /private/section-0/public/\nCrawl-delay: 1\n\n"
    + "User-agent: badbot\nDisallow: /\n\n"
    + "Sitemap: https://example.com/sitemap.xml\n"
)


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def drive(hosts: int, step: float) -> float:
    worker = Worker("redis://127.0.0.1:1/0", "bench", delay=1.0)
    store = Store(worker.url, "bench")  # never asked anything: no connection is made
    session = Driver(worker, store, fetcher=None).session  # type: ignore[arg-type]
    next_forget = trio.current_time() + _core.FORGET_EVERY
    for i in range(hosts):
        name = f"h{i}.example.com"
        held = Held(f"{i}-0", Entry(url=f"http://{name}/"), name)
        session.frontier.add(held, epoch=0).paced = True  # as load_pace leaves it
        taken = session.frontier.take(trio.current_time())
        assert isinstance(taken, Held)
        session.fetching[held.eid] = name
        session.robots[name] = Robots.parse(ROBOTS, worker.settings.user_agent)
        session.finish(held, trio.current_time())
        await trio.sleep(step)
        if trio.current_time() >= next_forget:
            session.forget_idle(trio.current_time())
            next_forget = trio.current_time() + _core.FORGET_EVERY
        if (i + 1) % 10_000 == 0:
            print(f"{i + 1:7} hosts: {len(session.frontier.hosts):6} kept, {rss_mib():6.1f} MiB")
    gc.collect()
    return rss_mib()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--limit", type=float, default=200.0, help="MiB the RSS must stay under")
    parser.add_argument("--keep-all", action="store_true", help="never forget a host")
    options = parser.parse_args()
    if options.keep_all:
        _core.IDLE_HOSTS_KEPT = 10**9
        _core.IDLE_HOST_SECONDS = float("inf")
    print(f"start: {rss_mib():.1f} MiB")
    clock = trio.testing.MockClock(autojump_threshold=0)
    final = trio.run(drive, options.hosts, 0.01, clock=clock)
    verdict = "PASS" if final < options.limit else "FAIL"
    print(f"{options.hosts} hosts: final RSS {final:.1f} MiB (limit {options.limit:g}): {verdict}")
    return 0 if final < options.limit else 1


if __name__ == "__main__":
    sys.exit(main())
