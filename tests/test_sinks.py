"""Tests for the sinks: what they write, that flush makes it durable, and when it is called.

Durability is watched from outside: ``strace`` records the process's real fsync calls.
The order against Redis is watched from Redis: when the worker flushes, the pages whose
items it flushes must still be in its stream, unacknowledged.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

import hashcrawl
from hashcrawl._output._sinks import AllSinks, CsvSink, JsonLinesSink, sink_for

PAGES = 30


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-o", "/dev/null", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_strace = pytest.mark.skipif(
    not _strace_works(), reason="needs strace, allowed to trace (ptrace), to see fsync calls"
)

#: Run in a child under strace: FLUSHES flushes of ITEMS items each into a sink.
WRITER = """
import sys
from hashcrawl._output._sinks import sink_for
path, flushes, items, fsync = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sink = sink_for(None if path == "none" else path, fsync=fsync == "on")
print("MARK", flush=True)  # fsyncs before this line are the interpreter's, not the sink's
for batch in range(flushes):
    sink.write([{"url": f"https://a.example/{batch}-{n}"} for n in range(items)])
    sink.flush()
sink.close()
"""


def fsyncs_of(tmp_path: Path, target: str, *, flushes: int, items: int, fsync: bool) -> int:
    """How many fsync/fdatasync calls a child made while writing through a sink."""
    log = tmp_path / "strace.log"
    argv = [sys.executable, "-c", WRITER, target, str(flushes), str(items)]
    command = ["strace", "-f", "-e", "trace=fsync,fdatasync,write", "-o", str(log), *argv]
    done = subprocess.run(
        [*command, "on" if fsync else "off"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    after_mark = log.read_text().split("MARK", 1)[1]
    return len(re.findall(r"\b(?:fsync|fdatasync)\(", after_mark))


@needs_strace
@pytest.mark.parametrize("name", ["items.jsonl", "items.csv"])
def test_flush_fsyncs_once_per_flush_not_per_item(tmp_path: Path, name: str) -> None:
    """Three flushes of fifty items each: exactly three fsyncs, whatever the format."""
    assert fsyncs_of(tmp_path, str(tmp_path / name), flushes=3, items=50, fsync=True) == 3


@needs_strace
def test_no_fsync_makes_flush_skip_it(tmp_path: Path) -> None:
    """fsync=False (--no-fsync) writes the items but never calls fsync."""
    path = tmp_path / "items.jsonl"
    assert fsyncs_of(tmp_path, str(path), flushes=3, items=50, fsync=False) == 0
    assert len(path.read_text().splitlines()) == 150


@needs_strace
def test_standard_output_to_a_pipe_is_not_fsynced(tmp_path: Path) -> None:
    """A pipe has nothing to sync: no fsync, no error, every item arrives."""
    assert fsyncs_of(tmp_path, "none", flushes=2, items=5, fsync=True) == 0


def test_json_lines_sink_appends_one_object_per_line(tmp_path: Path) -> None:
    """Items written and flushed twice land as lines, in order, after what was there."""
    path = tmp_path / "items.jsonl"
    path.write_text('{"old": 1}\n')
    sink = JsonLinesSink(path)
    sink.write([{"url": "u1", "title": "é"}])
    sink.flush()
    sink.write([{"url": "u2"}])
    sink.close()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == [{"old": 1}, {"url": "u1", "title": "é"}, {"url": "u2"}]


def test_csv_sink_writes_one_header_then_rows(tmp_path: Path) -> None:
    """The first item's keys make the header, written once; later flushes add rows."""
    path = tmp_path / "items.csv"
    sink = CsvSink(path)
    sink.write([{"url": "u1", "status": 200}])
    sink.flush()
    sink.write([{"url": "u2", "status": 404}])
    sink.close()
    rows = list(csv.reader(path.read_text().splitlines()))
    assert rows == [["url", "status"], ["u1", "200"], ["u2", "404"]]


class Meeting:
    """A sink whose flush waits for the others' to be under way (a barrier), so flushes
    one after another never return; ``fail`` makes its flush raise once there."""

    def __init__(self, barrier: threading.Barrier, fail: bool = False) -> None:
        self.barrier, self.fail, self.flushed = barrier, fail, False

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        pass

    def flush(self) -> None:
        self.barrier.wait(timeout=30)  # a ceiling for a hang: flushes in turn break it
        if self.fail:
            raise OSError("disk full")
        self.flushed = True

    def close(self) -> None:
        pass


def test_several_sinks_flush_at_once_and_all_before_flush_returns() -> None:
    """Three sinks' fsyncs overlap, and flush returns once every one has finished."""
    barrier = threading.Barrier(3)
    sinks = [Meeting(barrier) for _ in range(3)]
    both = AllSinks(sinks)
    both.flush()
    both.close()
    assert [s.flushed for s in sinks] == [True, True, True]


def test_a_failed_flush_of_any_sink_fails_the_flush() -> None:
    """A second sink's error comes out of flush, after the first sink has flushed."""
    barrier = threading.Barrier(2)
    sinks = [Meeting(barrier), Meeting(barrier, fail=True)]
    both = AllSinks(sinks)
    with pytest.raises(OSError, match="disk full"):
        both.flush()
    both.close()
    assert sinks[0].flushed


def test_sink_for_keeps_the_fsync_choice(tmp_path: Path) -> None:
    """sink_for passes fsync on to the sink it builds, on by default."""
    built = [sink_for(str(tmp_path / "a.jsonl")), sink_for(str(tmp_path / "a.csv"), fsync=False)]
    assert [sink.fsync for sink in built] == [True, False]  # type: ignore[attr-defined]
    for sink in built:
        sink.close()


# -- the worker: flush before acknowledging ---------------------------------------------------


def tree_page(request: hashcrawl.Request) -> hashcrawl.Response:
    """PAGES pages from memory (a MockFetcher's handler): page n links to pages 2n+1 and
    2n+2."""
    number = int(request.url.rpartition("/p")[2])
    links = "".join(
        f'<a href="/p{n}">{n}</a>' for n in (2 * number + 1, 2 * number + 2) if n < PAGES
    )
    return hashcrawl.Response(
        url=request.url,
        status=200,
        headers={"content-type": "text/html"},
        body=f"<title>{number}</title>{links}".encode(),
        request=request,
    )


class WatchingSink:
    """A JsonLinesSink that, at each flush, looks in Redis for the pages it is flushing."""

    def __init__(self, path: Path, client: redis.Redis, crawl: str) -> None:
        self.inner = JsonLinesSink(path)
        self.client = client
        self.pattern = f"hc:{{{crawl}}}:q:*"
        self.batch: list[str] = []
        self.writes = 0
        self.flushes: list[tuple[list[str], int]] = []

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        self.writes += 1
        self.batch += [str(item["url"]) for item in items]
        self.inner.write(items)

    def flush(self) -> None:
        self.inner.flush()
        if self.batch:
            self.flushes.append((self.batch, self._still_queued(self.batch)))
        self.batch = []

    def _still_queued(self, urls: list[str]) -> int:
        payloads = [
            str(fields)
            for stream in self.client.scan_iter(match=self.pattern)
            for _, fields in self.client.xrange(stream)
        ]
        return sum(any(url in payload for payload in payloads) for url in urls)

    def close(self) -> None:
        self.inner.close()


async def test_worker_flushes_items_before_their_pages_are_acknowledged(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """At every flush, each page being flushed is still in Redis, unacknowledged; and
    every write is followed by exactly one flush."""
    with hashcrawl.Queue(redis_url, crawl_name) as queue:
        queue.submit(["https://tree.example/p0"])
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    sink = WatchingSink(tmp_path / "items.jsonl", client, crawl_name)
    worker = hashcrawl.Worker(
        redis_url,
        crawl_name,
        fetcher=hashcrawl.MockFetcher(tree_page),
        sink=sink,
        delay=0,
        idle=0.3,
        obey_robots=False,
    )
    await worker.run()
    sink.close()
    client.close()
    written = [
        json.loads(line)["url"] for line in (tmp_path / "items.jsonl").read_text().splitlines()
    ]
    assert sorted(written) == sorted(f"https://tree.example/p{n}" for n in range(PAGES))
    assert sink.writes == len(sink.flushes) > 0
    for urls, still_queued in sink.flushes:
        assert still_queued == len(urls), urls
