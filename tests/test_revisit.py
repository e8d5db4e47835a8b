"""The revisit rule and record (hashcrawl/_core/_revisit.py): pure, time passed in."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._revisit import (
    DEFAULT_MAX_S,
    DEFAULT_MIN_S,
    LONGEST_S,
    MAX_ETAG,
    MAX_QUIET_S,
    MAX_RECORD,
    SHARE,
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
    values: dict[str, object] = {"due_s": NOW, "quiet_s": 600, "digest": digest_of(b"v1")}
    values.update(fields)
    return Record(**values)  # type: ignore[arg-type]


@given(revisit_records)
def test_records_survive_bytes_and_hex(fields: tuple[int, int, bytes, int, str]) -> None:
    """A record written as bytes (as Redis keeps it) or hex (as an entry) reads back equal."""
    due, quiet, digest, modified, tag = fields
    rec = Record(due_s=due, quiet_s=quiet, digest=digest, last_modified_s=modified, etag=tag)
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


def test_the_interval_is_a_share_of_the_quiet_time_within_the_bounds() -> None:
    """Adaptive: SHARE of the time the page has been seen unchanged, in [min, max]."""
    assert ADAPTIVE.interval(0) == 60
    assert ADAPTIVE.interval(300) == 60  # a fifth of 5 minutes: still the minimum
    assert ADAPTIVE.interval(3600) == round(3600 * SHARE) == 720
    assert ADAPTIVE.interval(10**8) == 86_400


def test_a_change_resets_the_quiet_time_and_no_change_adds_the_interval_waited() -> None:
    """Changed: quiet 0; unchanged: plus the interval the page was due after; unknown: kept."""
    assert ADAPTIVE.quiet_after(3600, Verdict.CHANGED) == 0
    assert ADAPTIVE.quiet_after(3600, Verdict.UNCHANGED) == 3600 + 720
    assert ADAPTIVE.quiet_after(3600, Verdict.UNKNOWN) == 3600


@given(st.integers(0, MAX_QUIET_S), st.lists(st.sampled_from(list(Verdict)), max_size=60))
def test_adaptive_interval_stays_within_its_bounds(start: int, verdicts: list[Verdict]) -> None:
    """However a page behaves, its interval stays in [--revisit-min, --revisit-max] and
    never past the larger of the minimum and SHARE of its quiet time."""
    quiet = start
    for verdict in verdicts:
        quiet = ADAPTIVE.quiet_after(quiet, verdict)
        interval = ADAPTIVE.interval(quiet)
        assert 60 <= interval <= 86_400 and 0 <= quiet <= MAX_QUIET_S
        assert interval <= max(60, quiet * SHARE + 0.5)


def test_a_changed_page_stays_at_the_minimum_for_five_of_them() -> None:
    """After a change the page is fetched --revisit-min apart until it has been quiet for
    5 x --revisit-min; then its interval grows by SHARE a fetch."""
    quiet, intervals = 0, []
    for _ in range(9):
        intervals.append(ADAPTIVE.interval(quiet))
        quiet = ADAPTIVE.quiet_after(quiet, Verdict.UNCHANGED)
    assert intervals == [60, 60, 60, 60, 60, 60, 72, 86, 104]


def test_an_unchanged_page_climbs_to_the_maximum() -> None:
    """A page never changing reaches --revisit-max, and stays there."""
    quiet = 0
    for _ in range(80):
        quiet = ADAPTIVE.quiet_after(quiet, Verdict.UNCHANGED)
    assert ADAPTIVE.interval(quiet) == 86_400
    assert ADAPTIVE.interval(ADAPTIVE.quiet_after(quiet, Verdict.UNCHANGED)) == 86_400


def test_a_fixed_interval_never_moves() -> None:
    """--revisit S: every page comes back S seconds after each fetch, changed or not."""
    fixed = Policy.parse("3600")
    assert not fixed.adaptive
    assert fixed.first_interval() == 3600
    assert {fixed.interval(fixed.quiet_after(q, v)) for v in Verdict for q in (0, 10**6)} == {3600}


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
        quiet_s=0,
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
    assert rec.quiet_s == 600 + 120 and rec.due_s == NOW + round(720 * SHARE)


def test_a_changed_200_replaces_the_validators_and_resets() -> None:
    """A 200 with new content is a change: new digest, new (or no) validators, quiet 0."""
    old = record(etag='"e1"')
    rec, verdict = after_fetch(old, Fetched(status=200, body=b"v2"), policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.CHANGED
    assert (rec.digest, rec.etag, rec.quiet_s) == (digest_of(b"v2"), "", 0)
    assert rec.due_s == NOW + 60


def test_a_failed_fetch_keeps_the_record_but_its_due_time() -> None:
    """An error says nothing: same quiet time and validators, due an interval from now."""
    old = record(etag='"e1"', quiet_s=3600)
    rec, verdict = after_fetch(old, Fetched(status=503), policy=ADAPTIVE, now_s=NOW)
    assert verdict is Verdict.UNKNOWN
    assert rec == Record(due_s=NOW + 720, quiet_s=3600, digest=old.digest, etag='"e1"')


def test_short_intervals_move_too() -> None:
    """With a 1 s minimum a quiet page still climbs: its quiet time grows by at least
    the interval waited, a second."""
    short = Policy.parse("adaptive", low=1, high=10)
    quiet = 0
    for _ in range(40):
        quiet = short.quiet_after(quiet, Verdict.UNCHANGED)
    assert short.interval(quiet) == 10
    assert short.interval(short.quiet_after(quiet, Verdict.CHANGED)) == 1


def test_a_record_past_the_longest_quiet_time_is_bad() -> None:
    """A quiet time no rule could have written is a record hashcrawl did not write."""
    with pytest.raises(BadRecord, match="quiet time"):
        Record.from_bytes(record(quiet_s=MAX_QUIET_S + 1).to_bytes())


def test_the_bounds_reach_a_year_and_the_record_its_longest_etag() -> None:
    """A year is the longest interval a flag takes; a record with the longest ETag kept
    reads back (both ends of the ranges hold)."""
    assert Policy.parse(str(LONGEST_S)).low == LONGEST_S
    with pytest.raises(ValueError, match="--revisit "):
        Policy.parse(str(LONGEST_S + 1))
    longest = record(etag='"' + "e" * (MAX_ETAG - 2) + '"')
    assert len(longest.to_bytes()) == MAX_RECORD
    assert Record.from_bytes(longest.to_bytes()) == longest


def test_a_last_modified_past_what_four_bytes_hold_is_not_kept() -> None:
    """The last second a u32 holds (2106) is kept; the next is not (it would not pack)."""
    assert kept_last_modified("Sun, 07 Feb 2106 06:28:15 GMT") == 2**32 - 1
    assert kept_last_modified("Sun, 07 Feb 2106 06:28:16 GMT") == 0
