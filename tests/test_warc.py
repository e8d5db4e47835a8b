"""Tests for hashcrawl._output._warc: WARC records as received, their digests, files and kills.

Every file is read back with warcio, digests checked (``check_digests``), and payloads
compared with the bytes the test server sent, not with what hashcrawl decoded.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from fastwarc.warc import WarcRecordType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

import hashcrawl
from hashcrawl import ConfigError, HttpxFetcher, JsonLinesSink, Request, Response, WarcSink
from hashcrawl._cli._checks import checked_output
from hashcrawl._cli._parser import build_parser
from hashcrawl._output._sinks import AllSinks, CsvSink, archive_of, sinks_for
from hashcrawl._output._warc import NOT_MODIFIED_PROFILE, REVISIT_PROFILE, payload_digest
from hashcrawl._output._warc_writer import EARLY
from testing.fleet import (
    fast_settings,
    host,
    href,
    make_site,
    page,
    redirect,
)
from testing.rawserver import RawServer, bomb
from testing.testsite import SITE_NETS, Resource, SiteServer

SECRET = "Bearer s3cret-token"


def records_of(path: Path | str) -> list[dict[str, Any]]:
    """Every record of a WARC file, its digests checked by warcio, as plain values.

    FastWARC reads the file too, and must find the same records with the same digests
    good: hashcrawl builds the records itself, so two readers check them."""
    found = []
    with open(path, "rb") as stream:
        for record in ArchiveIterator(stream, check_digests="raise"):
            found.append(_plain(record))
    assert fastwarc_read(path) == [r["headers"]["WARC-Record-ID"] for r in found]
    return found


def fastwarc_read(path: Path | str) -> list[str]:
    """The record ids FastWARC reads in ``path``, each record's digests checked."""
    ids = []
    with open(path, "rb") as stream:
        for record in FastArchiveIterator(stream, parse_http=False):
            assert record.verify_block_digest(consume=False)
            if record.record_type == WarcRecordType.response:  # a revisit's is the first's
                record.parse_http()
                assert record.verify_payload_digest()
            ids.append(record.record_id)
    return ids


def _plain(record: Any) -> dict[str, Any]:
    headers = dict(record.rec_headers.headers)
    http = record.http_headers
    return {
        "type": record.rec_type,
        "headers": headers,
        "http": http.to_str() if http is not None else None,
        "payload": record.raw_stream.read(),
    }


def raw_answer(head: bytes, *body: bytes) -> Callable[[str], list[bytes | float]]:
    return lambda path: [head, *body]


async def fetched(
    tmp_path: Path, answer: Callable[[str], Iterable[bytes | float]], **options: Any
) -> tuple[Response, list[dict[str, Any]]]:
    """Fetch "/" from a RawServer, archive it, and read the file back."""
    sink = WarcSink(tmp_path / "pages.warc.gz")
    with RawServer(answer) as server:
        fetcher = HttpxFetcher(allow_nets=[server.host], keep_raw=True, **options)
        try:
            response = await fetcher.fetch(Request(server.url()))
        finally:
            await fetcher.aclose()
    sink.archive(response)
    sink.close()
    (path,) = sink.files
    return response, records_of(path)


def response_record(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [r for r in records if r["type"] in ("response", "revisit")]
    return found


HTML = b"<html><head><title>t</title></head><body>" + b"words " * 2000 + b"</body></html>"


async def test_a_gzip_body_is_archived_as_received_and_decoded_for_parsing(tmp_path):
    """The payload is the gzip bytes the server sent; the response's body is the page."""
    sent = gzip.compress(HTML)
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(sent)
    response, records = await fetched(tmp_path, raw_answer(head, sent))
    record = response_record(records)
    assert response.body == HTML
    assert record["payload"] == sent
    assert record["headers"]["WARC-Payload-Digest"] == payload_digest(sent)
    assert "Content-Encoding: gzip" in record["http"]


async def test_a_chunked_deflate_body_is_archived_unchunked_with_its_coding_kept(tmp_path):
    """Chunking is removed (and the header renamed so readers look for no chunks); the
    payload digest is over the deflate bytes, as the WARC standard asks."""
    sent = zlib.compress(HTML)
    pieces = [sent[i : i + 700] for i in range(0, len(sent), 700)]
    chunks = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n"
    response, records = await fetched(tmp_path, raw_answer(head, *chunks))
    record = response_record(records)
    assert response.body == HTML
    assert record["payload"] == sent
    assert record["headers"]["WARC-Payload-Digest"] == payload_digest(sent)
    assert "X-Crawler-Transfer-Encoding: chunked" in record["http"]
    assert "\r\nTransfer-Encoding" not in record["http"]


async def test_header_lines_are_archived_byte_for_byte(tmp_path):
    """Bytes that are not ASCII, and the names' case, reach the file as the server sent them."""
    head = b"HTTP/1.1 200 Fine Thanks\r\nx-lower: caf\xc3\xa9 \xff\r\nContent-Length: 2\r\n\r\n"
    _, records = await fetched(tmp_path, raw_answer(head, b"ok"))
    (path,) = (tmp_path).glob("pages-*.warc.gz")
    with gzip.open(path) as stream:
        whole = stream.read()
    assert head + b"ok" in whole
    assert response_record(records)["payload"] == b"ok"


async def test_a_body_cut_at_max_body_is_archived_as_cut_and_marked_truncated(tmp_path):
    """An unencoded body over --max-body: the first max_body bytes, WARC-Truncated: length."""
    body = bytes(range(256)) * 100
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    response, records = await fetched(tmp_path, raw_answer(head, body), max_body=1000)
    record = response_record(records)
    assert response.truncated and response.body == body[:1000]
    assert record["payload"] == body[:1000]
    assert record["headers"]["WARC-Truncated"] == "length"
    assert record["headers"]["WARC-Payload-Digest"] == payload_digest(body[:1000])


async def test_a_gzip_bomb_is_archived_cut_within_max_body(tmp_path):
    """A bomb's compressed bytes are kept under the cap too: a prefix of what was sent."""
    sent = bomb(50 * 1024 * 1024)
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(sent)
    response, records = await fetched(tmp_path, raw_answer(head, sent), max_body=4096)
    record = response_record(records)
    assert response.truncated and len(response.body) == 4096
    assert 0 < len(record["payload"]) <= 4096 and sent.startswith(record["payload"])
    assert record["headers"]["WARC-Truncated"] == "length"


async def test_a_body_cut_short_by_the_server_is_archived_as_far_as_it_came(tmp_path):
    """A server that closes before its Content-Length fails the fetch: no record claims it."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n"
    with pytest.raises(hashcrawl.FetchError):
        await fetched(tmp_path, raw_answer(head, b"only this"))
    assert list(tmp_path.glob("pages-*")) == []


async def test_request_and_response_are_paired_and_credentials_are_not_archived(tmp_path):
    """The request record names its response in WARC-Concurrent-To, with the same URI,
    date and address; a --header value is written as 'redacted'."""
    head = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\n"
    _, records = await fetched(
        tmp_path, raw_answer(head, b"gone"), headers=[("Authorization", SECRET)]
    )
    info, answer, asked = records
    assert info["type"] == "warcinfo" and asked["type"] == "request"
    assert asked["headers"]["WARC-Concurrent-To"] == answer["headers"]["WARC-Record-ID"]
    for name in ("WARC-Target-URI", "WARC-Date", "WARC-IP-Address"):
        assert asked["headers"][name] == answer["headers"][name]
    assert answer["headers"]["WARC-IP-Address"] == "127.0.0.2"
    assert answer["http"].startswith("HTTP/1.1 404 Not Found")
    assert asked["http"].startswith("GET / HTTP/1.1")
    assert "Authorization: redacted" in asked["http"]
    (path,) = tmp_path.glob("pages-*.warc.gz")
    with gzip.open(path) as stream:
        assert SECRET.encode() not in stream.read()


def response_for(url: str, body: bytes, status: int = 200) -> Response:
    """A response as a fetcher that keeps no exchange gives it."""
    return Response(
        url=url,
        status=status,
        headers={"Content-Type": "text/html"},
        body=body,
        request=Request(url),
    )


def test_a_response_without_an_exchange_is_archived_from_what_it_holds(tmp_path):
    """A custom fetcher's response: its body as given, with a Content-Length that fits."""
    sink = WarcSink(tmp_path / "a.warc")
    sink.archive(response_for("https://a.example/x?q=1", b"<p>hi</p>"))
    sink.close()
    _, answer, asked = records_of(sink.files[0])
    assert answer["payload"] == b"<p>hi</p>"
    assert "Content-Length: 9" in answer["http"]
    assert asked["http"].startswith("GET /x?q=1 HTTP/1.1")


def test_archive_writes_nothing_and_the_flush_writes_and_keeps_every_record(tmp_path):
    """The worker archives on its event loop: records are kept until the flush (which
    runs in the commit's thread) writes them, every one, in order, across rotations."""
    sink = WarcSink(tmp_path / "k.warc.gz", max_size=4000)
    bodies = [os.urandom(900) for _ in range(9)]
    for n, body in enumerate(bodies[:5]):
        sink.archive(response_for(f"https://a.example/{n}", body))
    assert len(sink.files) > 1
    assert all(os.path.getsize(name) == 0 for name in sink.files)
    sink.flush()
    assert all(os.path.getsize(name) > 0 for name in sink.files)
    for n, body in enumerate(bodies[5:], start=5):
        sink.archive(response_for(f"https://a.example/{n}", body))
    sink.close()
    payloads = [
        r["payload"] for name in sink.files for r in records_of(name) if r["type"] == "response"
    ]
    assert payloads == bodies


def test_a_file_that_cannot_be_created_fails_the_next_flush_not_the_fetch(tmp_path):
    """archive raises nothing on the event loop; the flush that would precede the
    pages' acknowledgement raises, so nothing is acknowledged without its records."""
    sink = WarcSink(tmp_path / "gone" / "x.warc.gz")
    sink.archive(response_for("https://a.example/", b"x"))
    with pytest.raises(FileNotFoundError):
        sink.flush()
    with pytest.raises(FileNotFoundError):  # and every flush after it
        sink.flush()


def test_a_writer_process_that_dies_fails_the_flush_with_one_line(tmp_path):
    """Killed between flushes, the writer takes the records sent to it since with it:
    the flush raises (a HashcrawlError: one line from hashcrawl join), and a sink
    flushed again starts a new writer whose records read back whole."""
    sink = WarcSink(tmp_path / "w.warc.gz", process=True)
    sink.archive(response_for("https://a.example/1", b"one"))
    sink.flush()
    assert sink._writer is not None and sink._writer._process is not None
    os.kill(sink._writer._process.pid, signal.SIGKILL)
    sink.archive(response_for("https://a.example/2", b"two"))
    with pytest.raises(hashcrawl.HashcrawlError, match=r"killed by signal 9.*not acknowledged"):
        sink.flush()
    sink.archive(response_for("https://a.example/3", b"three"))
    sink.close()
    payloads = [r["payload"] for f in sink.files for r in records_of(f) if r["type"] == "response"]
    assert payloads == [b"one", b"three"]
    assert len(sink.files) == len(set(sink.files)) == 2  # each writer's own file


def test_a_writer_process_gets_fetches_between_flushes_and_keeps_their_order(tmp_path):
    """Past EARLY bytes the loop hands fetches to the writer without waiting for the
    flush; every record still reads back, in order, after the flush."""
    sink = WarcSink(tmp_path / "e.warc.gz", process=True, max_size=300_000)
    sink.archive(response_for("https://a.example/0", b"first"))
    sink.flush()  # the writer runs from here on
    bodies = [os.urandom(8000) for _ in range(120)]  # ~960 KB, past EARLY three times
    for n, body in enumerate(bodies, start=1):
        sink.archive(response_for(f"https://a.example/{n}", body))
    assert sink._writer is not None and sink._writer._kept < EARLY  # the rest went early
    sink.flush()
    payloads = [r["payload"] for f in sink.files for r in records_of(f) if r["type"] == "response"]
    assert payloads == [b"first", *bodies]
    sink.close()


def test_a_writer_process_that_cannot_write_fails_the_flush(tmp_path):
    """A file the writer cannot create: the flush raises the writer's error."""
    sink = WarcSink(tmp_path / "gone" / "x.warc.gz", process=True)
    sink.archive(response_for("https://a.example/", b"x"))
    with pytest.raises(hashcrawl.HashcrawlError, match="FileNotFoundError"):
        sink.flush()
    sink.close()


def test_a_url_with_control_characters_cannot_end_a_header_line(tmp_path):
    """A custom fetcher's URL with CR, LF or NUL in it: escaped in WARC-Target-URI."""
    sink = WarcSink(tmp_path / "c.warc")
    sink.archive(response_for("https://a.example/x\r\nWARC-Type:bogus\x00", b"hi"))
    sink.close()
    _, answer, asked = records_of(sink.files[0])
    uri = "https://a.example/x%0D%0AWARC-Type:bogus%00"
    assert answer["type"] == "response" and answer["payload"] == b"hi"
    assert answer["headers"]["WARC-Target-URI"] == asked["headers"]["WARC-Target-URI"] == uri


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
def test_files_rotate_before_passing_max_size_and_each_opens_with_warcinfo(tmp_path, process):
    """Each file stays under --warc-max-size, begins with warcinfo, and carries the
    worker's id and its sequence number; no record is lost or split between files."""
    sink = WarcSink(tmp_path / "r.warc.gz", max_size=6000, process=process)
    sink.named_for("box-7-beef")
    bodies = [os.urandom(1500) for _ in range(12)]
    for n, body in enumerate(bodies):
        sink.archive(response_for(f"https://a.example/{n}", body))
    sink.close()
    assert len(sink.files) > 2
    payloads = []
    for number, name in enumerate(sink.files):
        assert Path(name).name.startswith("r-") and name.endswith(
            f"-{number:05d}-box-7-beef.warc.gz"
        )
        assert os.path.getsize(name) <= 6000
        records = records_of(name)
        assert records[0]["type"] == "warcinfo"
        assert records[0]["headers"]["WARC-Filename"] == Path(name).name
        payloads += [r["payload"] for r in records if r["type"] == "response"]
    assert payloads == bodies


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
def test_two_sinks_of_one_name_never_write_one_file(tmp_path, process):
    """Files are created exclusively: a second writer of the same name gets its own."""
    first = WarcSink(tmp_path / "s.warc", process=process)
    second = WarcSink(tmp_path / "s.warc", process=process)
    for sink in (first, second):
        sink.named_for("same-worker")
        sink.archive(response_for("https://a.example/", b"x"))
        sink.close()
    assert len(set(first.files + second.files)) == 2


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
def test_a_repeated_payload_is_a_revisit_only_with_the_flag(tmp_path, process):
    """With revisits, the second response of one payload is a revisit record, headers
    only, referring to the first; without, both are responses."""
    for revisits in (True, False):
        sink = WarcSink(tmp_path / f"{revisits}.warc.gz", revisits=revisits, process=process)
        for url in ("https://a.example/1", "https://b.example/2", "https://a.example/3"):
            body = b"<p>one page</p>" if url != "https://a.example/3" else b"<p>other</p>"
            sink.archive(response_for(url, body))
        sink.close()
        kinds = [r["type"] for r in records_of(sink.files[0]) if r["type"] != "request"]
        if not revisits:
            assert kinds == ["warcinfo", "response", "response", "response"]
            continue
        assert kinds == ["warcinfo", "response", "revisit", "response"]
        first, again = [
            r for r in records_of(sink.files[0]) if r["type"] in ("response", "revisit")
        ][:2]
        assert again["headers"]["WARC-Profile"] == REVISIT_PROFILE
        assert again["headers"]["WARC-Refers-To"] == first["headers"]["WARC-Record-ID"]
        assert again["headers"]["WARC-Refers-To-Target-URI"] == "https://a.example/1"
        assert again["headers"]["WARC-Payload-Digest"] == first["headers"]["WARC-Payload-Digest"]
        assert again["payload"] == b""


def test_a_304_is_a_server_not_modified_revisit(tmp_path: Path) -> None:
    """A revisit's 304 is archived as a revisit record of the server-not-modified
    profile, headers only, with or without --warc-revisits."""
    sink = WarcSink(tmp_path / "304.warc.gz")
    sink.archive(response_for("https://a.example/1", b"", status=304))
    sink.close()
    [record] = [r for r in records_of(sink.files[0]) if r["type"] not in ("warcinfo", "request")]
    assert record["type"] == "revisit"
    assert record["headers"]["WARC-Profile"] == NOT_MODIFIED_PROFILE
    assert record["payload"] == b""


def whole_file(tmp_path: Path) -> tuple[bytes, list[dict[str, Any]]]:
    sink = WarcSink(tmp_path / "cut.warc.gz")
    for n in range(6):
        sink.archive(response_for(f"https://a.example/{n}", os.urandom(300) * (n + 1)))
    sink.close()
    data = Path(sink.files[0]).read_bytes()
    return data, records_of(sink.files[0])


def member_ends(data: bytes) -> list[int]:
    """Where each gzip member of ``data`` ends."""
    ends, at = [], 0
    while at < len(data):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        inflate.decompress(data[at:])
        at = len(data) - len(inflate.unused_data)
        ends.append(at)
    return ends


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.floats(0, 1))
def test_a_file_cut_at_any_byte_reads_cleanly_up_to_its_last_whole_record(tmp_path, cut):
    """Each record is its own gzip member: cut anywhere, every whole record reads back
    with its digests checked; only the cut one can fail."""
    data, records = whole_file(tmp_path)
    at = int(cut * len(data))
    whole = sum(end <= at for end in member_ends(data))
    got = []
    try:
        for record in ArchiveIterator(io.BytesIO(data[:at]), check_digests="raise"):
            got.append(_plain(record))
    except Exception:
        pass
    assert got[:whole] == records[:whole]
    assert len(got) >= whole


def test_the_sinks_of_each_output_path(tmp_path):
    """-o paths give their sinks; items go to standard output when only WARC is asked."""
    both = sinks_for([str(tmp_path / "i.jsonl"), str(tmp_path / "p.warc.gz")], max_size=10)
    assert isinstance(both, AllSinks) and archive_of(both) is both
    assert [type(s) for s in both.sinks] == [JsonLinesSink, WarcSink]
    assert both.sinks[1].max_size == 10  # type: ignore[attr-defined]
    assert both.sinks[1]._writer is not None  # type: ignore[attr-defined]  # join's: a process
    alone = sinks_for([str(tmp_path / "p.warc")])
    assert isinstance(alone, AllSinks)
    assert [type(s) for s in alone.sinks] == [JsonLinesSink, WarcSink]
    assert archive_of(sinks_for([str(tmp_path / "i.csv")])) is None
    assert isinstance(sinks_for([str(tmp_path / "i.csv")]), CsvSink)
    for sink in (both, alone):
        sink.close()


def test_output_flags_repeat_and_are_checked(tmp_path):
    """-o repeats; a WARC path in a directory that does not exist is refused at once."""
    args = build_parser().parse_args(
        ["join", "-o", "items.jsonl", "-o", "pages.warc.gz", "--warc-max-size", "5000"]
    )
    assert args.output == ["items.jsonl", "pages.warc.gz"] and args.warc_max_size == 5000
    with pytest.raises(ConfigError, match="not a writable directory"):
        checked_output([str(tmp_path / "nowhere" / "pages.warc.gz")])
    with pytest.raises(ConfigError, match=r"\.warc\.gz or \.warc"):
        WarcSink(tmp_path / "pages.gz")
    with pytest.raises(ConfigError, match="--warc-max-size must be above 0"):
        hashcrawl.Settings(warc_max_size=0)


# -- with a worker ---------------------------------------------------------------------------


def small_site() -> Any:
    a, b = host(0), host(1)
    return make_site(
        {
            (a, "/"): page("root", "/one", "/moved", "/missing", href(b, "/")),
            (a, "/one"): page("one"),
            (a, "/moved"): redirect(301, "/one?from=moved"),
            (a, "/robots.txt"): Resource(200, "text/plain", "User-agent: *\nDisallow: /no\n"),
            (b, "/"): page("b root"),
        }
    )


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
async def test_a_crawl_archives_every_answer_the_server_gave_and_writes_items_too(
    redis_url, crawl_name, tmp_path, process
):
    """Every request in the server's log (robots.txt, a redirect, a 404 included) has a
    response record whose payload is the served body, paired with its request; the
    items file is written beside the archive."""
    warc = WarcSink(tmp_path / "pages.warc.gz", process=process)
    items = JsonLinesSink(tmp_path / "items.jsonl")
    worker = hashcrawl.Worker(redis_url, crawl_name, sink=[items, warc], **fast_settings())
    with SiteServer(small_site()) as server:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker.run)
                with hashcrawl.Queue(redis_url, crawl_name) as queue:
                    queue.submit([server.site.root], allow_nets=SITE_NETS)
        served = server.requests()
        site = server.site
    worker.sink.close()
    records = [r for path in warc.files for r in records_of(path)]
    answers = {r["headers"]["WARC-Target-URI"]: r for r in records if r["type"] == "response"}
    asked = [r for r in records if r["type"] == "request"]
    assert {"/robots.txt", "/moved", "/missing", "/one?from=moved"} <= {r.path for r in served}
    assert sorted(answers) == sorted({req.url for req in served})
    for req in served:
        status, _, body = site.response_for(req.host, req.path)
        record = answers[req.url]
        assert record["payload"] == body
        assert record["http"].startswith(f"HTTP/1.1 {status}")
    ids = {r["headers"]["WARC-Record-ID"] for r in answers.values()}
    assert sorted(r["headers"]["WARC-Concurrent-To"] for r in asked) == sorted(ids)
    written = [
        json.loads(line)["url"] for line in (tmp_path / "items.jsonl").read_text().splitlines()
    ]
    assert site.url(host(0), "/one") in written


class WatchingWarcSink(WarcSink):
    """A WarcSink that, at each flush, looks in Redis for the pages it archived since."""

    def __init__(self, path: Path, client: redis.Redis, crawl: str, *, process: bool) -> None:
        super().__init__(path, process=process)
        self.client, self.pattern = client, f"hc:{{{crawl}}}:q:*"
        self.batch: list[str] = []
        self.flushes: list[tuple[int, int]] = []

    def archive(self, response: Response) -> None:
        super().archive(response)
        self.batch.append(response.url)

    def flush(self) -> None:
        # The worker archives on its event loop while this runs in the commit's thread:
        # what it archives from here on belongs to the next flush.
        batch, self.batch = self.batch, []
        super().flush()
        if batch:
            on_disk = {
                r["headers"]["WARC-Target-URI"]
                for name in self.files
                for r in records_of(name)
                if r["type"] == "response"
            }
            written = sum(url in on_disk for url in batch)
            self.flushes.append((len(batch), self._still_queued(batch), written))

    def _still_queued(self, urls: list[str]) -> int:
        payloads = [
            str(fields)
            for stream in self.client.scan_iter(match=self.pattern)
            for _, fields in self.client.xrange(stream)
        ]
        return sum(any(url in payload for payload in payloads) for url in urls)


def tree_page(request: Request) -> Response:
    """Pages p0..p14 of a binary tree (a MockFetcher's handler), with no item-producing
    callback needed."""
    number = int(request.url.rsplit("p", 1)[1])
    links = "".join(f'<a href="/p{n}">{n}</a>' for n in (2 * number + 1, 2 * number + 2) if n < 15)
    return response_for(request.url, f"<title>{number}</title>{links}".encode())


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "writer-process"])
async def test_records_are_flushed_before_their_pages_are_acknowledged(
    redis_url, crawl_name, tmp_path, process
):
    """At every flush, each page archived since the last one is in the file once flush
    returns, and still in Redis, unacknowledged, though an archive-only crawl writes no
    items."""
    with hashcrawl.Queue(redis_url, crawl_name) as queue:
        queue.submit(["https://tree.example/p0"])
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    sink = WatchingWarcSink(tmp_path / "t.warc.gz", client, crawl_name, process=process)
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
    urls = [
        r["headers"]["WARC-Target-URI"]
        for r in records_of(sink.files[0])
        if r["type"] == "response"
    ]
    assert sorted(urls) == sorted(f"https://tree.example/p{n}" for n in range(15))
    assert sink.flushes
    assert all(archived == queued == written for archived, queued, written in sink.flushes)
