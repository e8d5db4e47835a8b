#!/usr/bin/env python3
"""The stack's ceiling: a bare trio + httpx + lxml crawl loop, with no coordination at all.

No Redis, no robots.txt, no retries, no politeness beyond ``--per-host`` requests in
flight to one host (a queue and an httpx client per host, since one pool for every host
scans all its connections on each request), a Python set for dedupe: what hashcrawl's
own stack can do with nothing of hashcrawl around it. It follows ``<a href>`` links to
the start URLs' hosts, with fragments dropped, and writes one JSON line per page (URL,
status and title, no fsync). It ends when nothing is queued and nothing is in flight.

    python scripts/_bench/bare.py --concurrency 64 --per-host 1 -o pages.jsonl URL...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict, deque
from typing import TextIO
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx
import lxml.html
import trio


class Loop:
    """Per-host queues, each host taken by one task at a time (``per_host`` at most), so
    that no task waits on a busy host while another host has work."""

    def __init__(self, seeds: list[str], concurrency: int, per_host: int, out: TextIO) -> None:
        self.hosts = {urlsplit(u).netloc for u in seeds}
        self.seen = set(seeds)
        self.queues: defaultdict[str, deque[str]] = defaultdict(deque)
        self.taken: defaultdict[str, int] = defaultdict(int)  # tasks on each host
        self.send, self.receive = trio.open_memory_channel[str](float("inf"))  # ready hosts
        self.outstanding = 0  # queued or in flight: the crawl ends at 0
        self.per_host, self.concurrency, self.out = per_host, concurrency, out
        self.errors = 0
        for url in seeds:
            self.queue(url)

    def queue(self, url: str) -> None:
        host = urlsplit(url).netloc
        self.outstanding += 1
        self.queues[host].append(url)
        if self.taken[host] < self.per_host:
            self.taken[host] += 1
            self.send.send_nowait(host)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=self.per_host, max_keepalive_connections=None)
        clients = {h: httpx.AsyncClient(limits=limits, timeout=30) for h in self.hosts}
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(self.concurrency):
                    nursery.start_soon(self.worker, clients, nursery.cancel_scope)
        finally:
            for client in clients.values():
                await client.aclose()

    async def worker(self, clients: dict[str, httpx.AsyncClient], scope: trio.CancelScope) -> None:
        async for host in self.receive:
            url = self.queues[host].popleft()
            try:
                await self.fetch(clients[host], url)
            finally:
                self.outstanding -= 1
            if self.queues[host]:
                self.send.send_nowait(host)  # the host's next URL, by whichever task is free
            else:
                self.taken[host] -= 1
            if self.outstanding == 0:
                scope.cancel()  # nothing queued, nothing in flight: the crawl is over

    async def fetch(self, client: httpx.AsyncClient, url: str) -> None:
        try:
            response = await client.get(url)
        except httpx.HTTPError as exc:
            self.errors += 1
            print(f"{url}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        title = None
        if response.status_code == 200 and "html" in response.headers.get("content-type", ""):
            title = self.follow(url, response.content)
        line = {"url": url, "status": response.status_code, "title": title}
        self.out.write(json.dumps(line) + "\n")

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
                self.queue(link)
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
        loop = Loop(args.urls, args.concurrency, args.per_host, out)
        trio.run(loop.run)
    print(f"{len(loop.seen)} URLs seen, {loop.errors} fetch errors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
