"""WARC output: every fetch as a request and a response record, written with FastWARC.

A :class:`WarcSink` writes WARC 1.1 (ISO 28500), the format Heritrix, wget, StormCrawler
and Common Crawl write and pywb, cdxj-indexer, warcio and FastWARC read. Each file opens
with a ``warcinfo`` record; each fetch the worker makes (pages, redirects, error
statuses, robots.txt, sitemaps) gives a ``response`` record holding the HTTP response as
received (status line, header lines, body still content-encoded, as wget and Heritrix
keep it) and a ``request`` record that names it in ``WARC-Concurrent-To``.

FastWARC (resiliparse's, compiled) builds each record from the bytes as given and
computes its ``WARC-Block-Digest``; hashcrawl computes ``WARC-Payload-Digest`` (FastWARC
writes none for a record it did not parse) and gzips each record as its own member, so
a file cut short reads up to its last whole record. warcio, the reference reader, was
the first choice, but in ``scripts/bench_warc_libs.py`` it took 1.4 times the CPU per
record pair at the same gzip level (its pure-Python header handling), 6.9 times with
its own gzip (level 9), and it re-encodes header bytes that are not ASCII. The tests
read every file back with warcio, so a second implementation checks what is written.

Durability is the items' promise: the worker archives the responses of a commit's
pages (and any fetched since) right before its flush, which writes and fsyncs them
(one write for them all: each system call in the writing thread is a turn of the GIL
the event loop's thread waits for), and only then
acknowledges the pages, so every acknowledged page's records are on disk. Files are
this process's alone (their names carry the worker's id and a sequence number, and are
created exclusively), and a new one starts once the current one would pass
``max_size``.
"""

from __future__ import annotations

import base64
import collections
import datetime
import hashlib
import importlib.metadata
import io
import os
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from fastwarc.warc import WarcRecord, WarcRecordType

from hashcrawl._exceptions import ConfigError
from hashcrawl._settings import WARC_MAX_SIZE
from hashcrawl._version import __version__
from hashcrawl._web._models import Exchange, Response

#: Payload digests a worker remembers for revisit records; the oldest are forgotten.
REVISIT_MEMORY = 100_000
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
#: A 304 to a conditional request (a crawl's --revisit): the server said nothing changed.
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
RESPONSE_TYPE = "application/http; msgtype=response"
REQUEST_TYPE = "application/http; msgtype=request"
# Level 6 (zlib's default) took 2.7 times the CPU per record pair of level 1 in
# scripts/bench_warc_libs.py, for files a fifth smaller: on the page path, speed wins.
GZIP_LEVEL = 1
_SUFFIXES = (".warc.gz", ".warc")
_DROPPED = (b"content-encoding", b"transfer-encoding", b"content-length")  # see _exchange_of


def is_warc_path(path: str) -> bool:
    """Whether an output path names WARC files (``NAME.warc.gz`` or ``NAME.warc``)."""
    return path.endswith(_SUFFIXES)


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
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size, self._sequence, self._dirty = 0, 0, False
        self._pending: list[bytes] = []  # records appended, not yet written
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
        """Add ``response``'s request and response (or revisit) records; the next
        :meth:`flush` (or :meth:`close`) writes them, in one system call, and syncs them."""
        exchange = response.exchange or _exchange_of(response)
        with self._lock:  # one writer, its revisit memory and the file: one call at a time
            data = self._records(response, exchange)
            if self._fd is not None and self._size + len(data) > self.max_size:
                self._close_file()
            if self._fd is None:
                self._open_file()
            self._append(data)

    def flush(self) -> None:
        with self._lock:
            if self._dirty and self._fd is not None:
                self._write_pending()
                if self.fsync:
                    os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._close_file()

    # -- records -------------------------------------------------------------------------

    def _records(self, response: Response, exchange: Exchange) -> bytes:
        """The response (or revisit) record, then the request record naming it."""
        uri = response.url
        common = {"WARC-Target-URI": uri}
        if exchange.address:
            common["WARC-IP-Address"] = exchange.address
        date = exchange.started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        digest = payload_digest(exchange.body)
        first = self._first_with(digest, response, exchange)
        told = {**common, "Content-Type": RESPONSE_TYPE, "WARC-Payload-Digest": digest}
        if response.status == 304:  # not modified: headers only, whatever the flag
            told["WARC-Profile"] = NOT_MODIFIED_PROFILE
            answer, answer_id = self._record(
                WarcRecordType.revisit, date, told, exchange.response_head
            )
        elif first is not None:  # the body is the first's: headers only
            told.update(_refers_to(first))
            answer, answer_id = self._record(
                WarcRecordType.revisit, date, told, exchange.response_head
            )
        else:
            if response.truncated:
                told["WARC-Truncated"] = "length"
            block = exchange.response_head + exchange.body
            answer, answer_id = self._record(WarcRecordType.response, date, told, block)
            if self.revisits and _dedupable(response, exchange):
                self._remember(digest, (uri, date, answer_id))
        asked = {**common, "Content-Type": REQUEST_TYPE, "WARC-Concurrent-To": answer_id}
        block = exchange.request_head + exchange.request_body
        request, _ = self._record(WarcRecordType.request, date, asked, block)
        return answer + request

    def _record(
        self, kind: WarcRecordType, date: str, headers: Mapping[str, str], block: bytes
    ) -> tuple[bytes, str]:
        """One record as it goes in the file (gzipped for .warc.gz), and its id."""
        record = WarcRecord()
        record.init_headers(kind, uuid.uuid4().urn[4:].encode("ascii"))
        record.headers["WARC-Date"] = date
        for name, value in headers.items():
            record.headers[name] = value
        record.set_bytes_content(block)
        out = io.BytesIO()
        record.write(out, checksum_data=True)  # WARC-Block-Digest
        data = out.getvalue()
        if self._suffix == ".warc.gz":  # one gzip member per record
            data = _gzip_member(data)
        return data, str(record.record_id)

    def _first_with(
        self, digest: str, response: Response, exchange: Exchange
    ) -> tuple[str, str, str] | None:
        """The record first archived with this payload, if this one is to be a revisit."""
        if not (self.revisits and _dedupable(response, exchange)):
            return None
        return self._seen.get(digest)

    def _remember(self, digest: str, first: tuple[str, str, str]) -> None:
        self._seen.setdefault(digest, first)
        if len(self._seen) > REVISIT_MEMORY:
            self._seen.popitem(last=False)

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
        self._append(self._warcinfo(os.path.basename(name)))

    def _warcinfo(self, filename: str) -> bytes:
        versions = f"hashcrawl/{__version__} (fastwarc/{importlib.metadata.version('fastwarc')})"
        fields = {
            "software": versions,
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            "hostname": socket.gethostname(),
            "worker": self._worker,
        }
        block = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode()
        headers = {"WARC-Filename": filename, "Content-Type": "application/warc-fields"}
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return self._record(WarcRecordType.warcinfo, date, headers, block)[0]

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        self._pending.append(data)
        self._size += len(data)
        self._dirty = True

    def _write_pending(self) -> None:
        """Write what :meth:`_append` kept, at once: one system call, not one a record."""
        assert self._fd is not None
        data, self._pending = b"".join(self._pending), []
        while data:
            data = data[os.write(self._fd, data) :]

    def _close_file(self) -> None:
        assert self._fd is not None
        try:
            self._write_pending()
            if self._dirty and self.fsync:
                os.fsync(self._fd)  # its records may belong to pages not yet acknowledged
        finally:
            os.close(self._fd)
            self._fd, self._dirty = None, False


def _gzip_member(data: bytes) -> bytes:
    """``data`` as one gzip member, its window no bigger than it needs.

    Setting up zlib's full 32 KiB window and hash table cost more than compressing a
    small record (58 us against 3 us for 600 bytes); a window that holds the whole
    record loses no match.
    """
    bits = min(zlib.MAX_WBITS, max(9, (len(data) - 1).bit_length()))
    gzip = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + bits, max(1, bits - 7))
    return gzip.compress(data) + gzip.flush()


def _refers_to(first: tuple[str, str, str]) -> dict[str, str]:
    uri, date, record_id = first
    return {
        "WARC-Profile": REVISIT_PROFILE,
        "WARC-Refers-To": record_id,
        "WARC-Refers-To-Target-URI": uri,
        "WARC-Refers-To-Date": date,
    }


def _dedupable(response: Response, exchange: Exchange) -> bool:
    """Whether a payload may be a revisit's: whole and not empty (every empty payload
    has one digest, and a redirect's says nothing)."""
    return bool(exchange.body) and not response.truncated


def _exchange_of(response: Response) -> Exchange:
    """An exchange for a response whose fetcher kept none: the decoded body, with the
    headers that described the encoding as sent dropped, since they no longer hold."""
    import urllib.parse

    split = urllib.parse.urlsplit(response.request.url)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    asked = [(b"Host", split.netloc.encode())]
    asked += [(n.encode(), v.encode()) for n, v in response.request.headers]
    told = [
        (n.encode("latin-1", "replace"), v.encode("utf-8", "replace"))
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
