"""Tests for ``crawl``'s own machinery that need no process: how a dead letter is told."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._cli._local import dead_error, dead_fault


def test_a_dead_letter_says_its_attempts_and_last_error() -> None:
    """A record hashcrawl wrote reads as "after N attempts: error"."""
    record = json.dumps({"error": "connection refused", "attempts": 4, "entry": "{}"})
    assert dead_error(record) == " after 4 attempts: connection refused"


@given(st.text(max_size=2000))
def test_any_dead_letter_text_is_told_on_one_short_line(text: str) -> None:
    """Whatever Redis holds for a dead letter, it becomes one line of bounded length."""
    told = dead_error(text)
    assert "\n" not in told and "\r" not in told
    assert len(told) <= 340


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from(["error", "attempts", "entry"]), JSON))
def test_a_dead_letter_record_of_any_shape_is_told_on_one_line(record: dict[str, object]) -> None:
    """A JSON record with fields of the wrong types is shown, not a crash."""
    told = dead_error(json.dumps(record))
    assert "\n" not in told and len(told) <= 340


@given(st.text(max_size=200) | JSON.map(json.dumps))
def test_a_dead_letter_of_any_shape_has_a_fault_or_none(text: str) -> None:
    """The fault read from any dead letter is a string (empty when there is none)."""
    assert isinstance(dead_fault(text), str)
