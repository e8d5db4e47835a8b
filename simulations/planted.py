"""Entries written into a stream by hand: one at each limit of every field, and one just
past each, so that a limit moved by one, a check dropped or turned around, shows.

The limits are written here as numbers, from the entry format's documentation
(docs/design.md, "Entries"), not read from ``hashcrawl._core._entry``: a mutant that moves
one there must not move the oracle with it. ``tests/test_planted.py`` pins the catalogue
to the code as it is: every good payload decodes, every bad one is refused.

A good entry holds every field at one end of its range at once (a URL the site does not
have, so it is answered 404 and ends done, or dead where its host's robots.txt cannot be
read): a check made one tighter refuses the whole entry, and the crawl counts one bad
entry more than were planted. A bad entry is the good one with one field pushed past its
limit, so that no other check refuses it first: a check made one looser reads it, and the
crawl counts one fewer.
"""

from __future__ import annotations

import json
import struct
from typing import Any

# The documented limits (docs/design.md, "Entries").
RANGES = {
    "d": (0, 1_000_000),
    "p": (-1_000_000, 1_000_000),
    "a": (0, 10_000),
    "x": (0, 1_000),
    "h": (0, 1_000),
}
NAME = 200  # callback and errback names, in characters
NESTING = 32  # meta and cb_kwargs: lists and objects, the outermost one counted
HEADERS = 64
TOKEN = 64  # a method's or header name's characters
VALUE = 8192  # a header value's characters
STATUSES = 64
RULE = 1_000
TIMEOUT = 3600.0
REDIRECTS = 20
BYTES = 64 * 1024
# A revisit record ("V", hex): due, quiet, an 8-byte digest, last-modified, then an ETag.
RECORD = struct.Struct(">II8sI")
ETAG = 22  # characters of ETag a record keeps
QUIET = 157_680_000  # the longest quiet time, seconds: 365 days / 0.2


def nested(levels: int) -> Any:
    """Lists ``levels`` deep: ``[[]]`` is 2."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _full(url: str, *, high: bool) -> dict[str, Any]:
    """Every field at the upper (``high``) or lower end of its range."""
    end = 1 if high else 0
    doc: dict[str, Any] = {"u": url}
    for key, bounds in RANGES.items():
        if bounds[end]:  # a field at 0 is its default, and not written
            doc[key] = bounds[end]
    if high:
        doc |= {
            "m": nested(NESTING),
            "c": "c" * NAME,
            "f": 1,
            "s": 1,
            "M": "G" * TOKEN,
            # A token of 64 characters, and a value of 8,192 of every character allowed.
            "H": [["h" * TOKEN, ("\t" + "".join(map(chr, range(0x20, 0x7F))) * 100)[:VALUE]]]
            + [[f"X-{i}", "v"] for i in range(HEADERS - 1)],
            "t": TIMEOUT,
            "r": REDIRECTS,
            "e": "e" * NAME,
            "k": {"k": nested(NESTING - 1)},
            "S": [100, 599] + [200 + i for i in range(STATUSES - 2)],
            "R": RULE,
        }
    else:
        doc |= {
            "m": {},
            "c": "",
            "f": 0,
            "s": 0,
            "M": "GET",
            "H": [["A", ""]],
            "t": 0.001,
            "r": 0,
            "e": "",
            "k": [],
            "S": [100],
            "R": 0,
        }
    return doc


def record(quiet: int = 0, etag: bytes = b"", head: int = RECORD.size) -> str:
    """A revisit record's hex, as an entry carries it (``head``: its first bytes only)."""
    return (RECORD.pack(1, quiet, b"d" * 8, 0)[:head] + etag).hex()


def _text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def good(urls: list[str]) -> list[str]:
    """Three entries that hashcrawl must read, one for each of ``urls``: every field at
    its upper limit, every field at its lower, and a payload of exactly ``BYTES``."""
    high, low = _text(_full(urls[0], high=True)), _text(_full(urls[1], high=False))
    base = {"u": urls[2], "m": ""}
    pad = BYTES - len(_text(base).encode())
    return [high, low, _text({"u": urls[2], "m": "m" * pad})]


def bad(url: str) -> list[bytes | str | None]:
    """Entries hashcrawl must refuse, each with one thing wrong (``None``: a stream
    entry without the payload's field)."""
    base = _full(url, high=True)
    # A body may come as text or as base64: the base doc carries neither, so each is
    # tried alone in a good one by the pinning test, and both together here.
    past: list[dict[str, Any]] = []
    for key, (low, high) in RANGES.items():
        past += [{key: low - 1}, {key: high + 1}, {key: float(high)}, {key: True}]
    past += [
        {"m": nested(NESTING + 1)},
        {"k": {"k": nested(NESTING)}},
        {"c": "c" * (NAME + 1)},
        {"c": 5},
        {"e": "e" * (NAME + 1)},
        {"e": ["e"]},
        {"f": 2},
        {"s": -1},
        {"f": "1"},
        {"M": "G" * (TOKEN + 1)},
        {"M": "get"},
        {"M": "G T"},
        {"M": 5},
        {"H": base["H"] + [["X-last", "v"]]},
        {"H": [["h" * (TOKEN + 1), "v"]]},
        {"H": [["X Y", "v"]]},
        {"H": [["X", "v" * (VALUE + 1)]]},
        {"H": [["X", "a\r\nb"]]},
        {"H": [["X", "\x7f"]]},
        {"H": [["X", "v", "w"]]},
        {"H": [["X"]]},
        {"H": [[5, "v"]]},
        {"H": [["X", 5]]},
        {"H": {"X": "v"}},
        {"B": "b", "Y": "Yg=="},
        {"B": 5},
        {"Y": "not base64!"},
        {"t": 0},
        {"t": -1.0},
        {"t": TIMEOUT + 0.001},
        {"t": "5"},
        {"t": True},
        {"r": -1},
        {"r": REDIRECTS + 1},
        {"r": 1.0},
        {"S": base["S"] + [300]},
        {"S": [99]},
        {"S": [600]},
        {"S": [200.0]},
        {"S": "200"},
        {"R": -1},
        {"R": RULE + 1},
        {"R": 1.0},
        {"R": True},
        {"u": ""},
        {"u": 5},
        {"V": record(head=RECORD.size - 1)},
        {"V": record(etag=b'"' + b"e" * (ETAG - 1) + b'"')},  # 23 characters
        {"V": record(etag=b"e")},  # not quoted
        {"V": record(etag=b'"a b"')},
        {"V": record(quiet=QUIET + 1)},
        {"V": record()[:-1]},  # odd length
        {"V": "zz" * RECORD.size},
        {"V": 5},
    ]
    entries: list[bytes | str | None] = [_text(base | change) for change in past]
    entries += [
        None,
        "not an entry",
        '{"u": 5}',
        "[1]",
        b'{"u":"' + url.encode() + b'","m":"\xff"}',  # not UTF-8
        '{"u":"' + url + '","m":"\\ud800"}',  # a lone surrogate
        '{"u":"' + url + '","m":NaN}',
        '{"u":"' + url + '","m":1e999}',
        _text({"u": url, "m": "m" * (BYTES - len(_text({"u": url, "m": ""}).encode()) + 1)}),
    ]
    return entries
