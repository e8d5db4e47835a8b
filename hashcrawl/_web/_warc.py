"""WARC output: every fetch as a request and a response record, written with warcio.

A :class:`WarcSink` writes WARC 1.1 (ISO 28500), the format Heritrix, wget, StormCrawler
and Common Crawl write and pywb, cdxj-indexer, warcio and FastWARC read. Each file opens
with a ``warcinfo`` record; each fetch the worker makes (pages, redirects, error
statuses, robots.txt, sitemaps) gives a ``response`` record holding the HTTP response as
received (status line, header lines, body still content-encoded, as wget and Heritrix
keep it) and a ``request`` record that names it in ``WARC-Concurrent-To``.

warcio builds the records and computes their digests; hashcrawl gives it the header
bytes as received (warcio would re-serialise parsed headers, and re-encode bytes that
are not ASCII) and gzips each record as its own member, so a file cut short reads up to
its last whole record. (FastWARC was faster by a fifth in ``scripts/bench_warc_libs.py``
but wrote no ``WARC-Payload-Digest`` for these records; gzip dominates either way.)

Durability is the items' promise: records are written as the fetches end, and
``flush`` fsyncs them; the worker flushes before it acknowledges the pages, so every
acknowledged page's records are on disk. Files are this process's alone (their names
carry the worker's id and a sequence number, and are created exclusively), and a new
one starts once the current one would pass ``max_size``.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import importlib.metadata
import io
import os
import socket
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from hashcrawl._exceptions import ConfigError
from hashcrawl._settings import WARC_MAX_SIZE
from hashcrawl._version import __version__
from hashcrawl._web._models import Exchange, Response

#: Payload digests a worker remembers for revisit records; the oldest are forgotten.
REVISIT_MEMORY = 100_000
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
# zlib's default: warcio's own gzip (level 9) took 1.8 times as long per record in
# scripts/bench_warc_libs.py for files a few per cent smaller.
GZIP_LEVEL = 6
_SUFFIXES = (".warc.gz", ".warc")
_DROPPED = (b"content-encoding", b"transfer-encoding", b"content-length")  # see _exchange_of


def is_warc_path(path: str) -> bool:
    """Whether an output path names WARC files (``NAME.warc.gz`` or ``NAME.warc``)."""
    return path.endswith(_SUFFIXES)


class _AsReceived(StatusAndHeaders):  # type: ignore[misc]
    """HTTP headers that warcio writes as the bytes given, not re-serialised."""

    def __init__(self, head: bytes) -> None:
        super().__init__("", [], protocol="")
        self.headers_buff = head

    def compute_headers_buffer(self, header_filter: Any = None) -> None:
        """Keep the bytes as received (warcio calls this before writing)."""

    def __bool__(self) -> bool:
        return True  # warcio parses the payload for headers when given none


def payload_digest(payload: bytes) -> str:
    """A WARC digest, ``sha1:`` and base 32, as warcio and Heritrix write it."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


class WarcSink:
    """WARC files of every fetch: ``NAME-TIME-SEQ-WORKER.warc.gz``, one writer each.

    A sink like the item sinks (items written to it are ignored: give an item sink as
    well, ``Worker(sink=[JsonLinesSink(...), WarcSink(...)])``), which the worker also
    hands every response it gets (:meth:`archive`).

    Args:
        path: ``NAME.warc.gz`` (each record its own gzip member) or ``NAME.warc``; the
            files are ``NAME-YYYYMMDDhhmmss-SEQ-WORKER`` with the same ending, in the
            same directory.
        max_size: start a new file before one would pass this many bytes (a pair of
            records bigger than that gets a file of its own).
        revisits: write a response whose payload digest equals one this sink already
            archived as a ``revisit`` record (identical-payload-digest profile),
            headers only, referring to the first.
        fsync: make each flush durable (fsync); False trades a power loss's records
            for speed.

    Raises:
        ConfigError: ``path`` does not end in ``.warc.gz`` or ``.warc``, or ``max_size``
            is not above 0.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_size: int = WARC_MAX_SIZE,
        revisits: bool = False,
        fsync: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        suffix = next((s for s in _SUFFIXES if self.path.endswith(s)), None)
        if suffix is None:
            raise ConfigError(f"a WARC path must end in .warc.gz or .warc, got {self.path!r}")
        if max_size <= 0:
            raise ConfigError(f"--warc-max-size must be above 0, got {max_size}")
        self.max_size, self.revisits, self.fsync = max_size, revisits, fsync
        self._stem, self._suffix = self.path[: -len(suffix)], suffix
        self._worker = f"{socket.gethostname().split('.')[0][:24] or 'host'}-{os.getpid()}"
        self._writer = WARCWriter(io.BytesIO(), gzip=False, warc_version="1.1")
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size, self._sequence, self._dirty = 0, 0, False
        self._seen: collections.OrderedDict[str, tuple[str, str, str]] = collections.OrderedDict()
        #: The files this sink has written, oldest first.
        self.files: list[str] = []

    def named_for(self, worker: str) -> None:
        """Name the files after ``worker`` (the worker calls this before it fetches)."""
        with self._lock:
            self._worker = worker

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Items are not archived: an item sink beside this one takes them."""

    def archive(self, response: Response) -> None:
        """Write ``response``'s request and response (or revisit) records, not yet synced."""
        exchange = response.exchange or _exchange_of(response)
        with self._lock:  # one writer, its revisit memory and the file: one call at a time
            data = b"".join(self._record(r) for r in self._records(response, exchange))
            if self._fd is not None and self._size + len(data) > self.max_size:
                self._close_file()
            if self._fd is None:
                self._open_file()
            self._append(data)

    def flush(self) -> None:
        with self._lock:
            if self._dirty and self._fd is not None and self.fsync:
                os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._close_file()

    # -- records -------------------------------------------------------------------------

    def _records(self, response: Response, exchange: Exchange) -> list[Any]:
        """The response (or revisit) record, then the request record naming it."""
        writer, uri = self._writer, response.url
        date = datetime_to_iso_date(exchange.started.replace(tzinfo=None), use_micros=True)
        common = {"WARC-Date": date}  # each record's WARC-Type comes first (see below)
        if exchange.address:
            common["WARC-IP-Address"] = exchange.address
        digest = payload_digest(exchange.body)
        first = self._first_with(digest, response, exchange)
        if first is not None:
            answer = writer.create_revisit_record(
                uri,
                digest,
                first[0],
                first[1],
                _AsReceived(exchange.response_head),
                {"WARC-Type": "revisit", **common},
            )
            answer.rec_headers.add_header("WARC-Refers-To", first[2])
        else:
            told = {**common, "WARC-Payload-Digest": digest}
            if response.truncated:
                told["WARC-Truncated"] = "length"
            answer = self._http_record(uri, "response", exchange.response_head, exchange.body, told)
        answer_id = answer.rec_headers.get_header("WARC-Record-ID")
        if first is None and self.revisits:
            self._remember(digest, (uri, date, answer_id), response, exchange)
        asked = {**common, "WARC-Concurrent-To": answer_id}
        sent = self._http_record(
            uri, "request", exchange.request_head, exchange.request_body, asked
        )
        return [answer, sent]

    def _http_record(
        self, uri: str, kind: str, head: bytes, body: bytes, headers: dict[str, str]
    ) -> Any:
        return self._writer.create_warc_record(
            uri,
            kind,
            payload=io.BytesIO(body),
            length=len(body),
            warc_headers_dict={"WARC-Type": kind, **headers},
            http_headers=_AsReceived(head),
        )

    def _first_with(
        self, digest: str, response: Response, exchange: Exchange
    ) -> tuple[str, str, str] | None:
        """The record first archived with this payload, if this one is to be a revisit."""
        if not (self.revisits and _dedupable(response, exchange)):
            return None
        return self._seen.get(digest)

    def _remember(
        self, digest: str, first: tuple[str, str, str], response: Response, exchange: Exchange
    ) -> None:
        if not _dedupable(response, exchange):
            return
        self._seen.setdefault(digest, first)
        if len(self._seen) > REVISIT_MEMORY:
            self._seen.popitem(last=False)

    def _record(self, record: Any) -> bytes:
        out = io.BytesIO()
        self._writer.out = out
        self._writer.write_record(record)
        data = out.getvalue()
        if self._suffix == ".warc.gz":  # one gzip member per record
            gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            data = gzip.compress(data) + gzip.flush()
        return data

    # -- files -----------------------------------------------------------------------------

    def _open_file(self) -> None:
        """Create the next file of this sink (never one that exists) and begin it."""
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        while True:
            name = f"{self._stem}-{stamp}-{self._sequence:05d}-{self._worker}{self._suffix}"
            self._sequence += 1
            try:
                self._fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        self.files.append(name)
        self._size = 0
        if self.fsync:  # the new name must outlive a power loss too
            directory = os.open(os.path.dirname(os.path.abspath(name)), os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        self._append(self._record(self._warcinfo(os.path.basename(name))))

    def _warcinfo(self, filename: str) -> Any:
        info = {
            "software": f"hashcrawl/{__version__} (warcio/{importlib.metadata.version('warcio')})",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            "hostname": socket.gethostname(),
            "worker": self._worker,
        }
        return self._writer.create_warcinfo_record(filename, info)

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        while data:
            written = os.write(self._fd, data)
            self._size += written
            data = data[written:]
        self._dirty = True

    def _close_file(self) -> None:
        assert self._fd is not None
        try:
            if self._dirty and self.fsync:
                os.fsync(self._fd)  # its records may belong to pages not yet acknowledged
        finally:
            os.close(self._fd)
            self._fd, self._dirty = None, False


def _dedupable(response: Response, exchange: Exchange) -> bool:
    """Whether a payload may be a revisit's: whole and not empty (every empty payload
    has one digest, and a redirect's says nothing)."""
    return bool(exchange.body) and not response.truncated


def _exchange_of(response: Response) -> Exchange:
    """An exchange for a response whose fetcher kept none: the decoded body, with the
    headers that described the encoding as sent dropped, since they no longer hold."""
    import datetime
    import urllib.parse

    split = urllib.parse.urlsplit(response.request.url)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    asked = [(b"Host", split.netloc.encode())]
    asked += [(n.encode(), v.encode()) for n, v in response.request.headers]
    told = [
        (n.encode("latin-1", "replace"), v.encode("utf-8"))
        for n, v in response.headers.items()
        if n.lower().encode("latin-1", "replace") not in _DROPPED
    ]
    told.append((b"Content-Length", str(len(response.body)).encode()))
    return Exchange(
        request_head=_head(f"{response.request.method} {target} HTTP/1.1".encode(), asked),
        request_body=response.request.body,
        response_head=_head(f"HTTP/1.1 {response.status} ".encode(), told),
        body=response.body,
        started=datetime.datetime.now(datetime.UTC),
    )


def _head(first: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    lines = [first, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"
