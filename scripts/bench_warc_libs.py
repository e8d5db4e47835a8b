"""Records per second for one request/response pair, warcio against FastWARC.

Each writes the same pair (a 20 KiB HTML page, its headers, its request) as two gzip
members with both digests, the way WarcSink writes them, at gzip levels 6 and 1; the
floor is the two digests and the gzip alone. Rates are per CPU second of this process
(the machine is shared, so wall time would count other processes' turns); read ratios.

    .venv/bin/python -m pip install fastwarc  # for this script only
    nice -n 10 .venv/bin/python scripts/bench_warc_libs.py
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import random
import time
import uuid
import zlib

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
    b"Content-Length: 20480\r\nServer: bench\r\n\r\n"
)
REQUEST = b"GET /page HTTP/1.1\r\nHost: example.test\r\nUser-Agent: hashcrawl/0.1\r\n\r\n"
_WORDS = [b"crawl", b"page", b"host", b"ring", b"lease", b"archive", b"record", b"digest"]
_RANDOM = random.Random(1)
BODY = b"".join(
    b"<p>" + b" ".join(_RANDOM.choices(_WORDS, k=12)) + b" <a href='/%d'>x</a></p>\n" % i
    for i in range(400)
)[:20480]
PAIRS = 1000
ROUNDS = 3


def warcio_pairs(level: int) -> bytes:
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(io.BytesIO(), gzip=False, warc_version="1.1")
    for _ in range(PAIRS):
        for kind, block in (("response", HEAD + BODY), ("request", REQUEST)):
            record = writer.create_warc_record(
                "http://example.test/page", kind, payload=io.BytesIO(block), length=len(block)
            )
            plain = io.BytesIO()
            writer.out = plain
            writer.write_record(record)
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            out.write(gz.compress(plain.getvalue()) + gz.flush())
    return out.getvalue()


def warcio_own_gzip() -> bytes:
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True, warc_version="1.1")  # its own level 9
    for _ in range(PAIRS):
        for kind, block in (("response", HEAD + BODY), ("request", REQUEST)):
            record = writer.create_warc_record(
                "http://example.test/page", kind, payload=io.BytesIO(block), length=len(block)
            )
            writer.write_record(record)
    return out.getvalue()


def fastwarc_pairs(level: int) -> bytes:
    from fastwarc.warc import WarcRecord, WarcRecordType

    out = io.BytesIO()
    for _ in range(PAIRS):
        for kind, block in (
            (WarcRecordType.response, HEAD + BODY),
            (WarcRecordType.request, REQUEST),
        ):
            record = WarcRecord()
            record.init_headers(kind, uuid.uuid4().urn[4:].encode())
            record.headers["WARC-Target-URI"] = "http://example.test/page"
            record.headers["Content-Type"] = "application/http; msgtype=response"
            digest = hashlib.sha1(block[len(HEAD) :] if kind == WarcRecordType.response else b"")
            record.headers["WARC-Payload-Digest"] = (
                "sha1:" + base64.b32encode(digest.digest()).decode()
            )
            record.set_bytes_content(block)
            plain = io.BytesIO()
            record.write(plain, checksum_data=True)
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            out.write(gz.compress(plain.getvalue()) + gz.flush())
    return out.getvalue()


def digest_and_gzip_only(level: int) -> bytes:
    out = io.BytesIO()
    for _ in range(PAIRS):
        for block in (HEAD + BODY, REQUEST):
            hashlib.sha1(block).digest()
            hashlib.sha1(block).digest()
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            out.write(gz.compress(block) + gz.flush())
    return out.getvalue()


def main() -> None:
    runs = {
        "floor: 2 sha1 + gzip -6, no library": lambda: digest_and_gzip_only(6),
        "warcio, its own gzip (-9)": warcio_own_gzip,
        "warcio, gzip -6 per record": lambda: warcio_pairs(6),
        "warcio, gzip -1 per record": lambda: warcio_pairs(1),
        "FastWARC, gzip -6 per record": lambda: fastwarc_pairs(6),
        "FastWARC, gzip -1 per record": lambda: fastwarc_pairs(1),
    }
    best: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for _ in range(ROUNDS):  # interleaved, the best of each kept: the load comes and goes
        for name, run in runs.items():
            start = time.process_time()  # CPU time: the busy machine's waits are left out
            sizes[name] = len(run())
            best[name] = max(best.get(name, 0.0), PAIRS / (time.process_time() - start))
    base = next(iter(best.values()))
    for name, rate in best.items():
        share = f"{rate / base:.2f} of the floor"
        print(f"{name:36} {rate:6.0f} pairs per CPU s ({share}), {sizes[name]} bytes")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
