"""The revisit script and its store (lua/revisit.lua, _store/_revisits.py) on a real
server: records written, due ones taken exactly once into the inbox, bad ones dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._due import Fetch, bucket_of, conditional, url_fingerprint
from hashcrawl._core._entry import Entry
from hashcrawl._core._revisit import (
    MAX_ETAG,
    MAX_RECORD,
    Fetched,
    Policy,
    Record,
    Verdict,
    after_fetch,
)
from hashcrawl._store._revisits import Revisits

NOW = 1_800_000_000
REQUEUE = 14 * 86_400
POLICY = Policy.parse("adaptive", low=60, high=86_400)


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis_py.Redis]:
    client = redis_py.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix(crawl_name: str) -> str:
    return f"hc:{{{crawl_name}}}:"


@pytest.fixture
def revisits(raw: Any, prefix: str) -> Revisits:
    return Revisits(lambda: raw, prefix)


def first_fetch(url: str, *, at: int = NOW, etag: str | None = '"e1"', **entry: object) -> Fetch:
    page = Entry(url=url, **entry)  # type: ignore[arg-type]
    fetched = Fetched(status=200, body=b"v1 " + url.encode(), etag=etag)
    record, verdict = after_fetch(None, fetched, policy=POLICY, now_s=at)
    return Fetch(entry=page, record=record, verdict=verdict, first=True)


def inbox(raw: Any, prefix: str) -> list[Entry]:
    return [Entry.decode(fields[b"r"]) for _, fields in raw.xrange(prefix + "inbox")]


def test_a_put_record_reads_back_and_is_counted_by_due_minute(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """put writes the record, the page's entry, its bucket's due time and its minute."""
    fetch = first_fetch("http://a.test/1")
    assert revisits.put([fetch]) == 1
    assert revisits.record_of(fetch.entry) == fetch.record
    bucket = bucket_of(url_fingerprint(fetch.entry.key))
    assert raw.zscore(prefix + "rvdue", bucket) == NOW + 60
    figures = revisits.figures(NOW)
    assert (figures.records, figures.due_now, figures.next_hour) == (1, 0, 1)


def test_a_due_record_becomes_one_inbox_entry_once(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """At its due time a record becomes one inbox entry; a second take finds nothing."""
    fetch = first_fetch("http://a.test/1", callback="parse_item", meta={"k": 1})
    revisits.put([fetch])
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 59).entries == 0
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60).entries == 1
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 61).entries == 0
    [entry] = inbox(raw, prefix)
    assert (entry.url, entry.callback, entry.meta) == ("http://a.test/1", "parse_item", {"k": 1})
    assert entry.dont_filter  # a revisit passes the seen filter
    assert entry.revisit == fetch.record.to_hex()
    assert int(raw.hget(prefix + "seenmeta", "outstanding") or 0) == 1
    moved = revisits.record_of(fetch.entry)
    assert moved is not None and moved.due_s == NOW + 60 + REQUEUE


def test_a_revisit_is_conditional_on_the_last_validators(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """The inbox entry, as the owner sends it, carries If-None-Match from the last fetch."""
    revisits.put([first_fetch("http://a.test/1")])
    revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    [entry] = inbox(raw, prefix)
    assert entry.revisit is not None
    sent = conditional(entry, Record.from_hex(entry.revisit))
    assert ("If-None-Match", '"e1"') in sent.headers


def test_the_next_fetch_writes_the_next_due_time(revisits: Revisits, raw: Any, prefix: str) -> None:
    """After a 304 the record is due its next interval on (the minimum still: the page has
    been quiet for one), its quiet time is longer, and the minute counts follow."""
    fetch = first_fetch("http://a.test/1")
    revisits.put([fetch])
    revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    [entry] = inbox(raw, prefix)
    assert entry.revisit is not None
    old = Record.from_hex(entry.revisit)
    record, verdict = after_fetch(old, Fetched(status=304), policy=POLICY, now_s=NOW + 70)
    revisits.put([Fetch(entry=entry, record=record, verdict=verdict, first=False)])
    assert revisits.record_of(fetch.entry) == record
    assert (record.due_s, record.quiet_s) == (NOW + 70 + 60, old.quiet_s + 60)
    figures = revisits.figures(NOW + 70)
    assert (figures.records, figures.next_hour) == (1, 1)
    assert raw.hget(prefix + "stats", "revisit_unchanged") == b"1"
    # The minutes' counts: the one the record left is gone, not kept at 0 (a minute a
    # record leaves would otherwise stay in the hash for good).
    assert raw.hvals(prefix + "rvhist") == [b"1"]


def test_changes_found_are_counted(revisits: Revisits, raw: Any, prefix: str) -> None:
    """A changed page raises revisit_changed, once per put."""
    fetch = first_fetch("http://a.test/1")
    changed, verdict = after_fetch(
        fetch.record, Fetched(status=200, body=b"v2"), policy=POLICY, now_s=NOW + 60
    )
    assert verdict is Verdict.CHANGED
    revisits.put([Fetch(entry=fetch.entry, record=changed, verdict=verdict, first=False)])
    assert raw.hget(prefix + "stats", "revisit_changed") == b"1"


def test_a_take_adds_at_most_its_limit_and_the_rest_stay_due(revisits: Revisits) -> None:
    """Past its limit a take leaves due records due, for the next take: none is lost."""
    revisits.put([first_fetch(f"http://a.test/{i}") for i in range(5)])
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60, most=2).entries == 2
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60, most=2).entries == 2
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60, most=2).entries == 1
    assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60, most=2).entries == 0


def test_an_unreadable_record_is_dropped_with_a_reason(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """A record written by hand that is no record is dropped and sampled, and the other
    records of its bucket are still taken."""
    fetch = first_fetch("http://a.test/1")
    revisits.put([fetch])
    bucket = bucket_of(url_fingerprint(fetch.entry.key))
    raw.hset(f"{prefix}rv:{bucket}", b"12345678", b"short")
    taken = revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    assert (taken.entries, taken.dropped) == (1, 1)
    assert raw.hexists(f"{prefix}rv:{bucket}", b"12345678") == 0
    [sample] = raw.lrange(prefix + "bad", 0, -1)
    assert b"not a record (5 bytes)" in sample
    assert raw.hget(prefix + "stats", "revisit_bad") == b"1"


def test_a_record_whose_entry_is_gone_is_dropped(revisits: Revisits, raw: Any, prefix: str) -> None:
    """A due record without its entry cannot be revisited: it is dropped, not raised."""
    fetch = first_fetch("http://a.test/1")
    revisits.put([fetch])
    fp = url_fingerprint(fetch.entry.key)
    raw.hdel(f"{prefix}rvu:{bucket_of(fp)}", fp)
    taken = revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    assert (taken.entries, taken.dropped) == (0, 1)
    assert revisits.record_of(fetch.entry) is None
    assert revisits.figures(NOW).records == 0


def test_a_hostile_entry_becomes_a_bad_entry_not_a_crash(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """An entry edited in Redis to carry its own V reaches the owner as a BadEntry."""
    fetch = first_fetch("http://a.test/1")
    revisits.put([fetch])
    fp = url_fingerprint(fetch.entry.key)
    raw.hset(f"{prefix}rvu:{bucket_of(fp)}", fp, json.dumps({"u": "http://a.test/1", "V": "zz"}))
    revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    [(_, fields)] = raw.xrange(prefix + "inbox")
    with pytest.raises(ValueError, match="revisit record"):
        Entry.decode(fields[b"r"])


def test_a_10kb_etag_is_not_stored(revisits: Revisits, raw: Any, prefix: str) -> None:
    """A server's 10 KB ETag leaves a 20-byte record: it is not kept at all."""
    fetch = first_fetch("http://a.test/1", etag='"' + "x" * 10_240 + '"')
    revisits.put([fetch])
    fp = url_fingerprint(fetch.entry.key)
    assert len(raw.hget(f"{prefix}rv:{bucket_of(fp)}", fp) or b"") == 20


def test_figures_count_due_overdue_and_next_hour(revisits: Revisits) -> None:
    """Due now counts everything due; overdue what is more than a minute late."""
    revisits.put([first_fetch(f"http://a.test/{i}", at=NOW + 600 * i) for i in range(4)])
    # due at NOW+60, +660, +1260, +1860
    figures = revisits.figures(NOW + 700)
    assert (figures.due_now, figures.overdue, figures.next_hour) == (2, 1, 2)


def test_pages_due_later_in_the_current_minute_are_not_due_now(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """Two pages due in the current minute, at its 10th and 40th second: at its 15th,
    one is due now (the minute's count said two), and both once the 40th has come."""
    assert NOW % 60 == 0
    revisits.put([first_fetch("http://a.test/1", at=NOW - 50)])  # due NOW + 10
    revisits.put([first_fetch("http://a.test/2", at=NOW - 20)])  # due NOW + 40
    assert revisits.figures(NOW + 15).due_now == 1
    assert revisits.figures(NOW + 40).due_now == 2
    assert revisits.figures(NOW - 1).due_now == 0
    # A take moves the taken record's second with its minute: nothing left behind.
    revisits.take(requeue_s=REQUEUE, now_s=NOW + 15)
    assert raw.hgetall(f"{prefix}rvs:{NOW // 60}") == {b"40": b"1"}
    assert revisits.figures(NOW + 15).due_now == 0


def test_the_script_and_the_core_agree_on_the_longest_record(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """A record with the longest ETag kept is taken; a byte more is no record."""
    longest = '"' + "e" * (MAX_ETAG - 2) + '"'
    fetch = first_fetch("http://a.test/1", etag=longest)
    assert len(fetch.record.to_bytes()) == MAX_RECORD
    revisits.put([fetch])
    bucket = bucket_of(url_fingerprint(fetch.entry.key))
    raw.hset(f"{prefix}rv:{bucket}", b"12345678", fetch.record.to_bytes() + b"x")
    taken = revisits.take(requeue_s=REQUEUE, now_s=NOW + 60)
    assert (taken.entries, taken.dropped) == (1, 1)


def test_status_and_metrics_show_the_revisit_figures(
    revisits: Revisits, redis_url: str, crawl_name: str
) -> None:
    """status and the fleet counters (/metrics) count pages, due ones and what was found."""
    from hashcrawl._store._redisurl import RedisURL
    from hashcrawl._store._store import Store

    fetch = first_fetch("http://a.test/1", at=0)  # due long ago: due now and overdue
    changed, verdict = after_fetch(
        fetch.record, Fetched(status=200, body=b"v2"), policy=POLICY, now_s=0
    )
    revisits.put([fetch, first_fetch("http://a.test/2", at=0)])
    revisits.put([Fetch(entry=fetch.entry, record=changed, verdict=verdict, first=False)])
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        shown = store.status()["revisits"]
        counters = store.fleet_counters()
    finally:
        store.close()
    assert shown == {
        "pages": 2, "due_now": 2, "overdue": 2, "due_next_hour": 0,
        "changed": 1, "unchanged": 0, "bad": 0,
    }  # fmt: skip
    assert (counters["revisit_due_now"], counters["revisit_changed"]) == (2, 1)


def test_a_stores_revisits_run_through_its_script_runner(redis_url: str, crawl_name: str) -> None:
    """Revisits.of(store) writes through the store (its replicas' WAIT, its errors)."""
    from hashcrawl._store._redisurl import RedisURL
    from hashcrawl._store._store import Store

    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        revisits = Revisits.of(store)
        fetch = first_fetch("http://a.test/1")
        assert revisits.put([fetch]) == 1
        assert revisits.record_of(fetch.entry) == fetch.record
        assert revisits.take(requeue_s=REQUEUE, now_s=NOW + 60).entries == 1
    finally:
        store.close()


def test_bucket_bits_keep_about_64_records_a_bucket() -> None:
    """--revisit-pages sizes the buckets: 14 bits for 1M pages (the default), 15 for 2M,
    within [MIN_BITS, MAX_BITS] however small or large."""
    from hashcrawl._core._due import MAX_BITS, MIN_BITS, bucket_bits

    assert (bucket_bits(1_000_000), bucket_bits(2_000_000), bucket_bits(1_500_000)) == (14, 15, 15)
    assert bucket_bits(0) == bucket_bits(1) == MIN_BITS and bucket_bits(10**12) == MAX_BITS
    for pages in (10**5, 10**6, 3 * 10**6, 10**8):
        assert pages / 2 ** bucket_bits(pages) <= 64


@given(fingerprint=st.binary(min_size=8, max_size=8), bits=st.integers(8, 24))
def test_a_fingerprints_bucket_is_its_top_bits_so_there_are_2_to_the_bits_buckets(
    fingerprint: bytes, bits: int
) -> None:
    """The bucket is the fingerprint's top ``bits`` bits: never one of more buckets than
    the crawl was sized for (each bucket is a hash and a due-time member in Redis)."""
    from hashcrawl._core._due import bucket_of

    bucket = bucket_of(fingerprint, bits)
    assert 0 <= bucket < 2**bits
    assert bucket == int.from_bytes(fingerprint, "big") >> (64 - bits)


def test_a_crawl_sized_for_more_pages_puts_records_in_its_own_buckets(
    revisits: Revisits, raw: Any, prefix: str
) -> None:
    """A Fetch judged with 15 bits lands in the bucket of the fingerprint's top 15 bits,
    and reads back, and comes due, from there."""
    from hashcrawl._core._due import judged

    page = Entry(url="http://a.test/wide")
    fetched = Fetched(status=200, body=b"v1", etag='"e1"')
    fetch = judged(page, fetched, POLICY, NOW, bits=15)
    assert fetch is not None and revisits.put([fetch]) == 1
    fp = url_fingerprint(page.key)
    assert raw.hexists(f"{prefix}rv:{bucket_of(fp, 15)}", fp)
    assert revisits.record_of(page, bits=15) == fetch.record
    assert revisits.take(requeue_s=3600, now_s=NOW + 60).entries == 1
