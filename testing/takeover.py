"""A killed worker restarted under its ``--name``: how soon its hosts are fetched again.

Judged from the test server's request log and the item files: the killed worker's hosts
are those the ring of the workers that wrote items before the kill gives to its ids (the
first item file's); for each, the first request at or after the restart.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from hashcrawl._core._ring import Ring
from testing.testsite import Request


def _ids_before(path: Path, before: float) -> set[str]:
    if not path.exists():
        return set()
    ids = set()
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if datetime.datetime.fromisoformat(item["fetched_at"]).timestamp() < before:
            ids.add(str(item["worker"]))
    return ids


def takeover_delays(
    requests: Sequence[Request], outputs: Sequence[Path], killed_at: float, restarted_at: float
) -> dict[str, float | None]:
    """Each host the killed worker owned -> seconds from the restart to its first request
    since (None: never requested again)."""
    ids = [_ids_before(path, killed_at) for path in outputs]
    dead = ids[0] if ids else set()
    ring = Ring.of(0, tuple(set().union(*ids)))
    hosts = {urlsplit(r.url).netloc for r in requests}
    delays: dict[str, float | None] = {h: None for h in hosts if ring.owner_of(h) in dead}
    for r in sorted(requests, key=lambda r: r.time):
        host = urlsplit(r.url).netloc
        if host in delays and delays[host] is None and r.time >= restarted_at:
            delays[host] = r.time - restarted_at
    return delays


def takeover_line(
    requests: Sequence[Request], outputs: Sequence[Path], killed_at: float, restarted_at: float
) -> str:
    delays = takeover_delays(requests, outputs, killed_at, restarted_at)
    seen = sorted((d, h) for h, d in delays.items() if d is not None)
    if not seen:
        return f"none of the killed worker's {len(delays)} hosts was requested after the restart"
    slowest, host = seen[-1]
    median = statistics.median(d for d, _ in seen)
    return (
        f"the killed worker's hosts after its restart under its name: {len(seen)} of "
        f"{len(delays)} requested again, the first request to each {seen[0][0]:.1f}-"
        f"{slowest:.1f} s after the restart (median {median:.1f} s; slowest {host})"
    )
