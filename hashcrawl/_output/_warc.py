"""WARC output: every fetch as a request and a response record.

A :class:`WarcSink` writes WARC 1.1 (ISO 28500), the format Heritrix, wget, StormCrawler
and Common Crawl write and pywb, cdxj-indexer, warcio and FastWARC read. Each file opens
with a ``warcinfo`` record; each fetch the worker makes (pages, redirects, error
statuses, robots.txt, sitemaps) gives a ``response`` record holding the HTTP response as
received (status line, header lines, body still content-encoded, as wget and Heritrix
keep it) and a ``request`` record that names it in ``WARC-Concurrent-To``.

Records are built here, header lines and both digests (``WARC-Block-Digest``,
``WARC-Payload-Digest``), and each is gzipped as its own member (ISA-L's igzip through
``isal``, zlib where it is missing), so a file cut short reads up to its last whole
record. FastWARC's builder did the header lines before; it held the GIL for ~17 us a
record against ~3 us for these few lines of text, and the tests read every file back with
warcio and FastWARC both, digests checked, so two readers check what is written.

Where the work happens: :meth:`WarcSink.archive` runs on the worker's event loop as each
response arrives and builds and compresses the records there (~55 us a page of 8 KiB);
:meth:`WarcSink.flush`, in the commit's thread, only writes and fsyncs them (system calls
that let go of the GIL). Built in that thread instead, as before, the records cost the
event loop's thread far more than their own CPU: each system call the loop made handed
the GIL to the archiving thread for up to the switch interval.

Durability is the items' promise: every response is archived before its page's outcome
exists, and the commit that acknowledges the page flushes first, so every acknowledged
page's records are on disk. Files are this process's alone (their names carry the
worker's id and a sequence number, and are created exclusively), and a new one starts
once the current one would pass ``max_size``.
"""

from __future__ import annotations

import base64
import collections
import datetime
import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hashcrawl._core._settings import WARC_MAX_SIZE
from hashcrawl._exceptions import ConfigError
from hashcrawl._output._warc_writer import Fetch, Writer
from hashcrawl._version import __version__
from hashcrawl._web._models import Exchange, Response

try:  # ISA-L's deflate: 2.8 times zlib's speed at level 1, files no bigger (see GZIP_LEVEL)
    from isal import isal_zlib as _deflate

except ImportError:  # pragma: no cover - a platform with no isal wheel
    import zlib as _deflate  # type: ignore[no-redef]

#: Payload digests a worker remembers for revisit records; the oldest are forgotten.
REVISIT_MEMORY = 100_000
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
#: A 304 to a conditional request (a crawl's --revisit): the server said nothing changed.
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
RESPONSE_TYPE = "application/http; msgtype=response"
REQUEST_TYPE = "application/http; msgtype=request"
# isal's level 1 compressed the bench site's pages in 22 us (zlib's level 1: 61 us) to
# files 2% smaller than zlib's (isal's level 0: 16 us, 14% bigger). zlib: its level 1.
GZIP_LEVEL = 1
_GZIP = 16 + 15  # wbits: a gzip member, a 32 KiB window
_SUFFIXES = (".warc.gz", ".warc")
_DROPPED = (b"content-encoding", b"transfer-encoding", b"content-length")  # see _exchange_of
_END = b"\r\n\r\n"


def is_warc_path(path: str) -> bool:
    """Whether an output path names WARC files (``NAME.warc.gz`` or ``NAME.warc``)."""
    return path.endswith(_SUFFIXES)


def payload_digest(payload: bytes) -> str:
    """A WARC digest, ``sha1:`` and base 32, as warcio and Heritrix write it."""
    return _digest(hashlib.sha1(payload))


def _digest(sha1: Any) -> str:
    return "sha1:" + base64.b32encode(sha1.digest()).decode("ascii")


@attrs.define
class _Piece:
    """Records for one file, to be written at the next flush."""

    fd: int
    records: list[bytes] = attrs.Factory(list)
    created: str | None = None  # the file's name, when the file is new: its directory is synced
    last: bool = False  # the file is full: closed once this is written


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
        process: build, compress, write and fsync the records in a process of their
            own (``hashcrawl join`` does), started by :meth:`named_for` (else at the
            first flush): :meth:`archive` only keeps each fetch's bytes, and the
            records' CPU leaves the worker's core. Its death fails the flush.
            Without: records are built and compressed in :meth:`archive`, and the
            flush writes them.

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
        process: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        suffix = next((s for s in _SUFFIXES if self.path.endswith(s)), None)
        if suffix is None:
            raise ConfigError(f"a WARC path must end in .warc.gz or .warc, got {self.path!r}")
        if max_size <= 0:
            raise ConfigError(f"--warc-max-size must be above 0, got {max_size}")
        self.max_size, self.revisits, self.fsync = max_size, revisits, fsync
        self._stem, self._suffix = self.path[: -len(suffix)], suffix
        self._gzip = suffix == ".warc.gz"
        self._worker = f"{socket.gethostname().split('.')[0][:24] or 'host'}-{os.getpid()}"
        self._lock = threading.Lock()  # the records kept and the file: held briefly
        self._writing = threading.Lock()  # one flush or close at a time
        self._fd: int | None = None
        self._size, self._sequence = 0, 0
        self._pieces: list[_Piece] = []  # records kept, not yet written, oldest first
        self._failed: Exception | None = None  # what went wrong in archive, raised by flush
        self._seen: collections.OrderedDict[str, tuple[str, str, str]] = collections.OrderedDict()
        #: The files this sink has written, oldest first (with ``process``: as of the
        #: last flush).
        self.files: list[str] = []
        self._writer: Writer | None = None
        if process:
            options = {"path": self.path, "max_size": max_size, "revisits": revisits}
            self._writer = Writer({**options, "fsync": fsync, "worker": self._worker})

    def named_for(self, worker: str) -> None:
        """Name the files after ``worker`` (the worker calls this before it fetches)."""
        with self._lock:
            self._worker = worker
        if self._writer is not None:
            self._writer.named_for(worker)

    def write(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Items are not archived: an item sink beside this one takes them."""

    def archive(self, response: Response) -> None:
        """Build ``response``'s request and response (or revisit) records and keep
        them; the next :meth:`flush` (or :meth:`close`) writes and syncs them.

        The worker calls this on its event loop as each response arrives: it writes
        nothing (it creates the next file when one is due, a rare ``open``), and raises
        nothing: what fails here (a file that cannot be created) fails the next flush,
        so no page is acknowledged without its records.
        """
        try:
            fetch = fetch_of(response)
        except Exception as exc:
            with self._lock:
                self._failed = self._failed or exc
            return
        if self._writer is not None:
            self._writer.keep(fetch)
        else:
            self.keep(fetch)

    def keep(self, fetch: Fetch) -> None:
        """:meth:`archive` for a fetch as the writer process gets it."""
        with self._lock:  # the revisit memory and the file: one call at a time
            try:
                data = self._records(fetch)
                if self._fd is not None and self._size + len(data) > self.max_size:
                    self._piece().last = True
                    self._fd = None
                if self._fd is None:
                    self._open_file()
                self._append(data)
            except Exception as exc:
                self._failed = self._failed or exc

    def flush(self) -> None:
        with self._writing:
            with self._lock:
                pieces, self._pieces = self._pieces, []
            self._write(pieces)
            if self._writer is not None:
                self.files = self._writer.flush()
            if self._failed is not None:
                raise self._failed

    def close(self) -> None:
        with self._writing:
            if self._writer is not None:
                self.files = self._writer.close()
            with self._lock:
                if self._fd is not None:
                    self._piece().last = True
                    self._fd = None
                pieces, self._pieces = self._pieces, []
            self._write(pieces)

    # -- records -------------------------------------------------------------------------

    def _records(self, fetch: Fetch) -> bytes:
        """The response (or revisit) record, then the request record naming it."""
        common = f"WARC-Target-URI: {_value(fetch.url)}\r\n"
        if fetch.address:
            common += f"WARC-IP-Address: {_value(fetch.address)}\r\n"
        date = fetch.date
        digest = payload_digest(fetch.body)
        first = self._first_with(digest, fetch)
        told = f"{common}Content-Type: {RESPONSE_TYPE}\r\nWARC-Payload-Digest: {digest}\r\n"
        head, body = fetch.response_head, fetch.body
        if fetch.status == 304:  # not modified: headers only, whatever the flag
            told += f"WARC-Profile: {NOT_MODIFIED_PROFILE}\r\n"
            answer, answer_id = self._record("revisit", date, told, head)
        elif first is not None:  # the body is the first's: headers only
            told += "".join(f"{name}: {_value(v)}\r\n" for name, v in _refers_to(first).items())
            answer, answer_id = self._record("revisit", date, told, head)
        else:
            if fetch.truncated:
                told += "WARC-Truncated: length\r\n"
            answer, answer_id = self._record("response", date, told, head, body)
            if self.revisits and _dedupable(fetch):
                self._remember(digest, (fetch.url, date, answer_id))
        asked = f"{common}Content-Type: {REQUEST_TYPE}\r\nWARC-Concurrent-To: {answer_id}\r\n"
        request, _ = self._record("request", date, asked, fetch.request_head, fetch.request_body)
        return answer + request

    def _record(
        self, kind: str, date: str, headers: str, head: bytes, body: bytes = b""
    ) -> tuple[bytes, str]:
        """One record as it goes in the file (gzipped for .warc.gz), and its id.

        ``headers`` are the record's own header lines; its block is ``head + body``.
        """
        record_id = f"<urn:uuid:{uuid.uuid4()}>"
        sha1 = hashlib.sha1(head)
        sha1.update(body)
        lines = (
            f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Date: {date}\r\n"
            f"WARC-Record-ID: {record_id}\r\nContent-Length: {len(head) + len(body)}\r\n"
            f"{headers}WARC-Block-Digest: {_digest(sha1)}\r\n\r\n"
        ).encode(errors="replace")  # a lone surrogate in a URL
        data = b"".join((lines, head, body, _END))
        if self._gzip:  # one gzip member per record
            data = _deflate.compress(data, GZIP_LEVEL, _GZIP)
        return data, record_id

    def _first_with(self, digest: str, fetch: Fetch) -> tuple[str, str, str] | None:
        """The record first archived with this payload, if this one is to be a revisit."""
        if not (self.revisits and _dedupable(fetch)):
            return None
        return self._seen.get(digest)

    def _remember(self, digest: str, first: tuple[str, str, str]) -> None:
        self._seen.setdefault(digest, first)
        if len(self._seen) > REVISIT_MEMORY:
            self._seen.popitem(last=False)

    # -- files -----------------------------------------------------------------------------

    def _open_file(self) -> None:
        """Create the next file of this sink (never one that exists) and begin it.

        The one system call :meth:`archive` makes, once a file; the flush syncs the
        directory, so the new name outlives a power loss before any page is acknowledged.
        """
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
        self._pieces.append(_Piece(self._fd, created=name))
        self._append(self._warcinfo(os.path.basename(name)))

    def _warcinfo(self, filename: str) -> bytes:
        fields = {
            "software": f"hashcrawl/{__version__}",
            "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            "hostname": socket.gethostname(),
            "worker": self._worker,
        }
        block = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode()
        headers = f"WARC-Filename: {_value(filename)}\r\nContent-Type: application/warc-fields\r\n"
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return self._record("warcinfo", date, headers, block)[0]

    def _piece(self) -> _Piece:
        """The piece of the current file kept for the next flush (a new one after a flush)."""
        assert self._fd is not None
        if not self._pieces or self._pieces[-1].fd != self._fd:
            self._pieces.append(_Piece(self._fd))
        return self._pieces[-1]

    def _append(self, data: bytes) -> None:
        self._piece().records.append(data)
        self._size += len(data)

    def _write(self, pieces: list[_Piece]) -> None:
        """Write each piece's records at once (one system call a file, not one a record),
        sync them, and close the files that are full. Runs in the commit's thread: the
        GIL is let go all along."""
        for number, piece in enumerate(pieces):
            try:
                data = b"".join(piece.records)
                while data:
                    data = data[os.write(piece.fd, data) :]
                if self.fsync and piece.records:
                    os.fsync(piece.fd)
                    if piece.created is not None:
                        _sync_directory(piece.created)
            except BaseException:
                for left in pieces[number:]:  # not to leak the full files' descriptors
                    if left.last:
                        os.close(left.fd)
                raise
            if piece.last:
                os.close(piece.fd)


def _sync_directory(name: str) -> None:
    directory = os.open(os.path.dirname(os.path.abspath(name)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _value(value: str) -> str:
    """A header value that cannot end its line early (control characters %-escaped)."""
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else f"%{ord(c):02X}" for c in value)


def _refers_to(first: tuple[str, str, str]) -> dict[str, str]:
    uri, date, record_id = first
    return {
        "WARC-Profile": REVISIT_PROFILE,
        "WARC-Refers-To": record_id,
        "WARC-Refers-To-Target-URI": uri,
        "WARC-Refers-To-Date": date,
    }


def _dedupable(fetch: Fetch) -> bool:
    """Whether a payload may be a revisit's: whole and not empty (every empty payload
    has one digest, and a redirect's says nothing)."""
    return bool(fetch.body) and not fetch.truncated


def fetch_of(response: Response) -> Fetch:
    """What the records of ``response`` are made of."""
    exchange = response.exchange or _exchange_of(response)
    return Fetch(
        url=response.url,
        status=response.status,
        truncated=response.truncated,
        date=exchange.started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        address=exchange.address or "",
        request_head=exchange.request_head,
        request_body=exchange.request_body,
        response_head=exchange.response_head,
        body=exchange.body,
    )


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
