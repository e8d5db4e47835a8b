#!/usr/bin/env python3
"""The stack's ceiling: a bare trio + httpx + lxml crawl loop, with no coordination at all.

No Redis, no robots.txt, no retries, no politeness beyond ``--per-host`` requests in
flight to one host, a Python set for dedupe: what hashcrawl's own stack can do with
nothing of hashcrawl around it. It follows ``<a href>`` links to the start URLs' hosts,
with fragments dropped, and writes one JSON line per page (URL, status and title, no
fsync). It ends when nothing is queued and nothing is in flight.

    python scripts/bench_bare.py --concurrency 64 --per-host 1 -o pages.jsonl URL...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx
import lxml.html
import trio


class Loop:
    def __init__(self, seeds: list[str], concurrency: int, per_host: int, out: object) -> None:
        self.hosts = {urlsplit(u).netloc for u in seeds}
        self.seen = set(seeds)
        self.send, self.receive = trio.open_memory_channel[str](float("inf"))
        self.outstanding = len(seeds)  # queued or in flight: the crawl ends at 0
        self.per_host: defaultdict[str, trio.Semaphore] = defaultdict(
            lambda: trio.Semaphore(per_host)
        )
        self.concurrency = concurrency
        self.out = out
        for url in seeds:
            self.send.send_nowait(url)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=None)
        async with (
            httpx.AsyncClient(limits=limits, timeout=30) as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(self.concurrency):
                nursery.start_soon(self.worker, client, nursery.cancel_scope)

    async def worker(self, client: httpx.AsyncClient, scope: trio.CancelScope) -> None:
        async for url in self.receive:
            try:
                await self.fetch(client, url)
            finally:
                self.outstanding -= 1
            if self.outstanding == 0:
                scope.cancel()  # nothing queued, nothing in flight: the crawl is over

    async def fetch(self, client: httpx.AsyncClient, url: str) -> None:
        async with self.per_host[urlsplit(url).netloc]:
            try:
                response = await client.get(url)
            except httpx.HTTPError:
                return
        title = None
        if response.status_code == 200 and "html" in response.headers.get("content-type", ""):
            title = self.follow(url, response.content)
        line = {"url": url, "status": response.status_code, "title": title}
        self.out.write(json.dumps(line) + "\n")  # type: ignore[attr-defined]

    def follow(self, url: str, body: bytes) -> str | None:
        try:
            root = lxml.html.document_fromstring(body)
        except (lxml.etree.LxmlError, ValueError):
            return None
        for element in root.iter("a"):
            href = element.get("href")
            if not href:
                continue
            try:
                link = urldefrag(urljoin(url, href.strip())).url
                host = urlsplit(link).netloc
            except ValueError:
                continue
            if host in self.hosts and link not in self.seen:
                self.seen.add(link)
                self.outstanding += 1
                self.send.send_nowait(link)
        title = root.find(".//title")
        return title.text_content().strip() if title is not None else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("urls", nargs="+")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--per-host", type=int, default=1)
    p.add_argument("-o", "--output", default="/dev/null")
    args = p.parse_args()
    with open(args.output, "w") as out:
        trio.run(Loop(args.urls, args.concurrency, args.per_host, out).run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
