"""A small crawl that has ended but whose worker is still a member, for the watching tests."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from hashcrawl import Queue, Worker
from hashcrawl._output._sinks import JsonLinesSink
from hashcrawl._run._handler import Parse
from hashcrawl._run._metrics import status_class
from testing.fleet import DEADLINE, await_until, fast_settings, page_requests
from testing.testsite import Request, Site, SiteServer, generate_site


def settled(redis_url: str, crawl: str, server: SiteServer) -> bool:
    """Nothing waits or is held, and the heartbeats have reported every page logged."""
    with Queue(redis_url, crawl) as queue:
        status = queue.status()
    pages = len(page_requests(server.requests()))
    return status["waiting"] == status["held"] == 0 and status["fetched"] == pages > 0


@contextlib.asynccontextmanager
async def settled_crawl(
    redis_url: str,
    crawl: str,
    tmp_path: Path,
    *,
    site: Site | None = None,
    parse: Parse | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[Worker, SiteServer]]:
    """One worker that has crawled a site (a small generated one by default) to the end,
    has reported all it counted, and is still a member."""
    site = site or generate_site(pages=40, hosts=3, seed=4, port=0)
    sink = JsonLinesSink(tmp_path / "items.jsonl")
    worker = Worker(
        redis_url, crawl, sink=sink, parse=parse, **fast_settings(idle=None, **settings)
    )
    with SiteServer(site) as server, trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            with Queue(redis_url, crawl) as queue:
                await trio.to_thread.run_sync(
                    lambda: queue.submit([server.site.root], allow_private=True)
                )
            await reported(redis_url, crawl, server)
            yield worker, server
            worker.stop()
    sink.close()


def by_class(requests: list[Request]) -> dict[str, int]:
    return dict(collections.Counter(status_class(r.status) for r in page_requests(requests)))


def heartbeat_since(redis_url: str, crawl: str, since_ms: int) -> bool:
    """Every live member has sent a heartbeat after ``since_ms`` (Redis server time)."""
    with Queue(redis_url, crawl) as queue:
        members = queue.status()["members"]
    return bool(members) and all(m["last_heartbeat_ms"] > since_ms for m in members)


def server_ms(redis_url: str, crawl: str) -> int:
    with Queue(redis_url, crawl) as queue:
        return int(queue._store.server_info()["now_ms"])


async def reported(redis_url: str, crawl: str, server: SiteServer) -> None:
    """Wait until the crawl has settled and a heartbeat sent after that has landed: then
    every count the workers hold (commits' retries and dead letters too) is in Redis."""
    await await_until(lambda: settled(redis_url, crawl, server), what="the crawl")
    since = await trio.to_thread.run_sync(server_ms, redis_url, crawl)
    await await_until(
        lambda: heartbeat_since(redis_url, crawl, since), what="a heartbeat after the crawl"
    )
