"""The simulation's hand-written entries (simulations/planted.py) are what they claim:
every good one is read, every bad one refused. The catalogue writes the limits as
numbers of its own, so a limit changed in the entry format fails here first."""

from __future__ import annotations

import json

import pytest

from hashcrawl._core._entry import BadEntry, Entry
from simulations import planted

URLS = [f"http://h0.test/planted{i}" for i in range(3)]


GOOD = planted.good(URLS)
BAD = planted.bad("http://h0.test/planted-bad")


@pytest.mark.parametrize("payload", GOOD, ids=range(len(GOOD)))
def test_every_good_entry_is_read(payload: str) -> None:
    entry = Entry.decode(payload)
    assert entry.url in URLS


def test_the_good_entries_reach_each_end_of_every_range() -> None:
    high, low, _ = (Entry.decode(p) for p in planted.good(URLS))
    assert (high.depth, high.priority, high.attempts) == (1_000_000, 1_000_000, 10_000)
    assert (high.sitemap, high.hops, high.rule, high.timeout) == (1_000, 1_000, 1_000, 3600.0)
    assert len(high.headers) == 64 and len(high.handle_httpstatus_list) == 64
    assert (low.priority, low.rule, low.max_redirects) == (-1_000_000, 0, 0)
    assert len(planted.good(URLS)[2].encode()) == 64 * 1024


@pytest.mark.parametrize("payload", BAD, ids=range(len(BAD)))
def test_every_bad_entry_is_refused(payload: bytes | str | None) -> None:
    with pytest.raises(BadEntry):
        Entry.decode(payload)


def test_each_bad_entry_differs_from_a_good_one_in_one_field() -> None:
    # The bad entries built from the good upper one: the same keys, one value changed
    # (or one key added), so no other check can refuse them first.
    good = planted._full("http://h0.test/planted-bad", high=True)

    for payload in planted.bad("http://h0.test/planted-bad"):
        try:
            doc = json.loads(payload)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if not isinstance(doc, dict) or len(doc) < len(good):
            continue
        changed = [k for k in doc if repr(doc[k]) != repr(good.get(k))]
        assert len(changed) in (1, 2), changed  # two only for a body given both ways


def test_a_revisit_record_at_the_limits_is_read() -> None:
    # Not planted in a good entry (a revisit it would schedule is no page of the site's):
    # the bad ones above are the same record one byte, one character or one second past.
    longest = planted.record(quiet=planted.QUIET, etag=b'W/"' + b"e" * (planted.ETAG - 4) + b'"')
    assert Entry.decode(json.dumps({"u": URLS[0], "V": longest})).revisit == longest
