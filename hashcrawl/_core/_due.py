"""Due pages: where a revisited URL's record lives, the entry stored for it, the entry a
revisit sends, and the figures status shows. Pure; the scripts are ``_store/lua/revisit.lua``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import attrs

from hashcrawl._core._entry import Entry
from hashcrawl._core._revisit import Fetched, Policy, Record, Verdict, after_fetch

#: Buckets of records: 2^14 keeps each bucket near 61 records at 1M URLs, under the 128
#: fields up to which Redis packs a hash (a listpack: ~2 bytes of overhead a field). The
#: default; a crawl sized for more pages (``--revisit-pages``) has more (``bucket_bits``).
BUCKET_BITS = 14
DEFAULT_PAGES = 1_000_000  # the revisited pages BUCKET_BITS is sized for
#: Records a bucket is sized for, on average: half of the 128 fields a packed hash may
#: hold, so that the fullest of many buckets (the mean plus a few standard deviations:
#: about 95 at 1M URLs in 16,384 buckets) stays packed.
PER_BUCKET = 64
MIN_BITS, MAX_BITS = 8, 24  # 256 buckets at least (tests), 16M at most (a billion pages)
_CONDITIONAL = frozenset({"if-none-match", "if-modified-since"})


def url_fingerprint(key: str) -> bytes:
    """The 8 bytes a revisited request is known by in its bucket (``Entry.key``'s
    BLAKE2b, the bytes the seen filter's fingerprint is cut from)."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).digest()[:8]


def bucket_of(fingerprint: bytes, bits: int = BUCKET_BITS) -> int:
    """The bucket of a fingerprint: its top ``bits`` bits."""
    return int.from_bytes(fingerprint[:4], "big") >> (32 - bits)


def bucket_bits(pages: int) -> int:
    """The bucket bits of a crawl sized for ``pages`` revisited pages: about
    ``PER_BUCKET`` records a bucket at most, on average (14 bits for 1M, 15 for 2M).
    Fixed once the crawl starts: a URL's bucket must not move while its record lives."""
    wanted = math.ceil(math.log2(max(1, pages) / PER_BUCKET)) if pages > PER_BUCKET else 0
    return max(MIN_BITS, min(MAX_BITS, wanted))


def stored_entry(entry: Entry) -> str:
    """The entry kept for a page's revisits: as first queued, less what belongs to one
    fetch (attempts, the suspect mark, a revisit's record and conditional headers)."""
    headers = tuple(pair for pair in entry.headers if pair[0].lower() not in _CONDITIONAL)
    return attrs.evolve(
        entry, attempts=0, suspect=False, revisit=None, headers=headers, dont_filter=False
    ).encode()


def conditional(entry: Entry, record: Record) -> Entry:
    """A revisit's entry as it is sent: the last fetch's validators as conditional
    headers, in place of any the entry held."""
    headers = tuple(pair for pair in entry.headers if pair[0].lower() not in _CONDITIONAL)
    return attrs.evolve(entry, headers=headers + record.conditional_headers())


@attrs.frozen(kw_only=True)
class Fetch:
    """One revisited page's next record, for the store's ``put``: the entry it was
    fetched from (stored for the next visit when ``first``), and what the fetch found."""

    entry: Entry
    record: Record
    verdict: Verdict
    first: bool  # the page's first fetch: its entry is stored too
    bits: int = BUCKET_BITS  # the crawl's bucket bits (``bucket_bits(--revisit-pages)``)


def judged(
    entry: Entry, fetched: Fetched, policy: Policy, now_s: int, *, bits: int = BUCKET_BITS
) -> Fetch | None:
    """What a fetch means for the page's revisits; None when it gets no record: a
    first fetch that was not a 200, a sitemap, or a request other than a plain GET
    (a form's POST is not a page to watch)."""
    if entry.sitemap or entry.method != "GET" or entry.body:
        return None
    record = None if entry.revisit is None else Record.from_hex(entry.revisit)
    if record is None and fetched.status != 200:
        return None
    after, verdict = after_fetch(record, fetched, policy=policy, now_s=now_s)
    return Fetch(entry=entry, record=after, verdict=verdict, first=record is None, bits=bits)


@attrs.frozen(kw_only=True)
class DueFigures:
    """What status shows of revisits, from the count of records by due minute."""

    due_now: int = 0  # due at or before now: waiting to be taken
    overdue: int = 0  # of those, due more than a minute ago: the takers are behind
    next_hour: int = 0  # due within the next hour
    records: int = 0  # revisited URLs

    @classmethod
    def from_histogram(
        cls, counts: Mapping[str, str], now_s: int, seconds: Mapping[str, str] | None = None
    ) -> DueFigures:
        """Read ``rvhist`` (minute -> records due in it) and ``seconds``, the current
        minute's ``rvs:M`` (second -> records due in it): a record due later in this
        minute is not due now. Fields that are not whole numbers (written by hand) are
        skipped; records of this minute with no second counted (written by an older
        version) are taken as due, as every record of the minute once was."""
        minute = now_s // 60
        due_now = overdue = next_hour = records = 0
        for field, value in counts.items():
            try:
                at, n = int(field), int(value)
            except ValueError:
                continue
            records += n
            due_now += n if at < minute else 0
            overdue += n if at < minute - 1 else 0
            next_hour += n if minute < at <= minute + 60 else 0
            if at == minute:
                due_now += n - _later_this_minute(seconds or {}, now_s % 60, n)
        return cls(due_now=due_now, overdue=overdue, next_hour=next_hour, records=records)


def _later_this_minute(seconds: Mapping[str, str], now_second: int, most: int) -> int:
    """Records due after ``now_second`` in the current minute (at most ``most``)."""
    later = 0
    for field, value in seconds.items():
        try:
            at, n = int(field), int(value)
        except ValueError:
            continue
        later += max(n, 0) if at > now_second else 0
    return min(later, most)
