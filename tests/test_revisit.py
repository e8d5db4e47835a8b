"""The revisit rule and record (hashcrawl/_core/_revisit.py): pure, time passed in."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._revisit import (
    DEFAULT_MAX_S,
    DEFAULT_MIN_S,
    GROW,
    MAX_ETAG,
    MAX_RECORD,
    SHRINK,
    BadRecord,
    Fetched,
    Policy,
    Record,
    Verdict,
    after_fetch,
    digest_of,
    judge,
    kept_etag,
    kept_last_modified,
)
from tests.strategies import revisit_records

ADAPTIVE = Policy.parse("adaptive", low=60, high=86_400)
NOW = 1_800_000_000


def record(**fields: object) -> Record:
    values: dict[str, object] = {"due_s": NOW, "interval_s": 600, "digest": digest_of(b"v1")}
    values.update(fields)
    return Record(**values)  # type: ignore[arg-type]


@given(revisit_records)
def test_records_survive_bytes_and_hex(fields: tuple[int, int, bytes, int, str]) -> None:
    """A record written as bytes (as Redis keeps it) or hex (as an entry) reads back equal."""
    due, interval, digest, modified, tag = fields
    rec = Record(due_s=due, interval_s=interval, digest=digest, last_modified_s=modified, etag=tag)
    assert Record.from_bytes(rec.to_bytes()) == rec
    assert Record.from_hex(rec.to_hex()) == rec
    assert len(rec.to_bytes()) <= MAX_RECORD


@given(st.binary(max_size=80))
def test_any_bytes_are_a_record_or_bad_record(data: bytes) -> None:
    """Whatever Redis holds, reading it gives a record or BadRecord, nothing else."""
    try:
        read = Record.from_bytes(data)
    except BadRecord:
        return
    assert read.to_bytes() == data


@pytest.mark.parametrize("text", [None, 7, "zz", "00" * 10, "ab" * 60])
def test_hex_that_is_no_record_is_bad(text: object) -> None:
    """An entry's V that is not a record's hex is refused with BadRecord."""
    with pytest.raises(BadRecord):
        Record.from_hex(text)


def test_the_record_budget() -> None:
    """A record is 20 bytes and its ETag: at most 42 (under 64 B a URL in Redis at 1M)."""
    assert MAX_RECORD == 20 + MAX_ETAG <= 42


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        ('"abc-123"', '"abc-123"'),
        ('W/"abc"', 'W/"abc"'),
        (None, ""),
        ("abc", ""),  # not quoted: not an ETag
        ('"' + "x" * 10_240 + '"', ""),  # 10 KB: not stored at all
        ('"' + "x" * (MAX_ETAG - 2) + '"', '"' + "x" * (MAX_ETAG - 2) + '"'),
        ('"' + "x" * (MAX_ETAG - 1) + '"', ""),
        ('"a\r\nX-Injected: 1"', ""),
    ],
)
def test_etags_are_kept_only_whole_and_short(header: str | None, kept: str) -> None:
    """An ETag is kept only if it is one, of visible ASCII and at most MAX_ETAG bytes."""
    assert kept_etag(header) == kept


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784111777),
        ("yesterday", 0),
        (None, 0),
        ("Sun, 06 Nov 1994 08:49:37", 0),  # no zone: not an HTTP date
        ("x" * 10_000, 0),
    ],
)
def test_last_modified_is_kept_only_as_an_http_date(header: str | None, seconds: int) -> None:
    """Last-Modified is stored as seconds only when it is an HTTP date."""
    assert kept_last_modified(header) == seconds


def test_conditional_headers_send_back_the_validators() -> None:
    """The next fetch carries If-None-Match and If-Modified-Since from the last one."""
    rec = record(etag='"v1"', last_modified_s=784111777)
    assert rec.conditional_headers() == (
        ("If-None-Match", '"v1"'),
        ("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT"),
    )
    assert record().conditional_headers() == ()


@pytest.mark.parametrize(
    ("status", "body", "verdict"),
    [
        (304, b"", Verdict.UNCHANGED),
        (200, b"v1", Verdict.UNCHANGED),
        (200, b"v2", Verdict.CHANGED),
        (404, b"v2", Verdict.UNKNOWN),
        (500, b"", Verdict.UNKNOWN),
    ],
)
def test_judge(status: int, body: bytes, verdict: Verdict) -> None:
    """A 304 or a 200 with the same digest is unchanged; another 200 changed; else unknown."""
    assert judge(record(), status, digest_of(body)) is verdict


def test_a_first_fetch_is_no_change() -> None:
    """With no record to compare, a fetch says nothing about change."""
    assert judge(None, 200, digest_of(b"x")) is Verdict.UNKNOWN


def test_adaptive_interval_shrinks_on_change_and_grows_when_unchanged() -> None:
    """Changed: times SHRINK; unchanged: times GROW; unknown: kept."""
    assert ADAPTIVE.next_interval(1000, Verdict.CHANGED) == round(1000 * SHRINK)
    assert ADAPTIVE.next_interval(1000, Verdict.UNCHANGED) == round(1000 * GROW)
    assert ADAPTIVE.next_interval(1000, Verdict.UNKNOWN) == 1000


@given(st.integers(60, 86_400), st.lists(st.sampled_from(list(Verdict)), max_size=60))
def test_adaptive_interval_stays_within_its_bounds(start: int, verdicts: list[Verdict]) -> None:
    """However a page behaves, its interval stays in [--revisit-min, --revisit-max]."""
    interval = start
    for verdict in verdicts:
        interval = ADAPTIVE.next_interval(interval, verdict)
        assert 60 <= interval <= 86_400


def test_an_unchanged_page_climbs_to_the_maximum() -> None:
    """A page never changing reaches --revisit-max, and stays there."""
    interval = ADAPTIVE.first_interval()
    for _ in range(60):
        interval = ADAPTIVE.next_interval(interval, Verdict.UNCHANGED)
    assert interval == 86_400


def test_a_fixed_interval_never_moves() -> None:
    """--revisit S: every page comes back S seconds after each fetch, changed or not."""
    fixed = Policy.parse("3600")
    assert not fixed.adaptive
    assert fixed.first_interval() == 3600
    assert {fixed.next_interval(3600, v) for v in Verdict} == {3600}


@pytest.mark.parametrize(
    ("text", "low", "high", "names"),
    [
        ("soon", DEFAULT_MIN_S, DEFAULT_MAX_S, "--revisit "),
        ("0", DEFAULT_MIN_S, DEFAULT_MAX_S, "--revisit "),
        ("adaptive", 0, DEFAULT_MAX_S, "--revisit-min"),
        ("adaptive", 60, 10**9, "--revisit-max"),
        ("adaptive", 7200, 3600, "--revisit-min (7200) must not exceed --revisit-max"),
    ],
)
def test_bad_settings_are_one_line_naming_the_flag(
    text: str, low: int, high: int, names: str
) -> None:
    """A bad --revisit, --revisit-min or --revisit-max is a one-line error naming it."""
    with pytest.raises(ValueError, match=re.escape(names)) as caught:
        Policy.parse(text, low=low, high=high)
    assert "\n" not in str(caught.value)


def test_a_first_fetch_starts_at_the_shortest_interval() -> None:
    """A new page is due --revisit-min after its first fetch, with its validators kept."""
    fetched = Fetched(
        status=200, body=b"v1", etag='"e1"', last_modified="Sun, 06 Nov 1994 08:49:37 GMT"
    )
    rec, verdict = after_fetch(None, fetched, policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.UNKNOWN
    assert rec == Record(
        due_s=NOW + 60,
        interval_s=60,
        digest=digest_of(b"v1"),
        last_modified_s=784111777,
        etag='"e1"',
    )


def test_a_304_keeps_the_digest_and_grows_the_interval() -> None:
    """A 304 is unchanged: the digest stays, the validators stay unless new ones came."""
    old = record(etag='"e1"', last_modified_s=784111777)
    rec, verdict = after_fetch(old, Fetched(status=304), policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.UNCHANGED
    assert (rec.digest, rec.etag, rec.last_modified_s) == (old.digest, '"e1"', 784111777)
    assert rec.interval_s == round(600 * GROW) and rec.due_s == NOW + rec.interval_s


def test_a_changed_200_replaces_the_validators_and_shrinks() -> None:
    """A 200 with new content is a change: new digest, new (or no) validators, shorter."""
    old = record(etag='"e1"')
    rec, verdict = after_fetch(old, Fetched(status=200, body=b"v2"), policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.CHANGED
    assert (rec.digest, rec.etag, rec.interval_s) == (digest_of(b"v2"), "", round(600 * SHRINK))


def test_a_failed_fetch_keeps_the_record_but_its_due_time() -> None:
    """An error says nothing: same interval and validators, due an interval from now."""
    old = record(etag='"e1"')
    rec, verdict = after_fetch(old, Fetched(status=503), policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.UNKNOWN
    assert rec == Record(due_s=NOW + 600, interval_s=600, digest=old.digest, etag='"e1"')


def test_short_intervals_move_too() -> None:
    """A 2 s interval still grows and shrinks: by at least a second each time."""
    short = Policy.parse("adaptive", low=1, high=10)
    assert short.next_interval(2, Verdict.UNCHANGED) == 3
    assert short.next_interval(2, Verdict.CHANGED) == 1
