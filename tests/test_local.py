"""Tests for ``crawl``'s own machinery that need no process: how a dead letter is told, and
how many workers it starts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._cli._local import dead_error, dead_fault, worker_count
from hashcrawl._core._scope import Scope


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


@pytest.mark.parametrize(
    ("asked", "hosts", "span", "open_ended", "started", "said"),
    [
        (None, 1, False, False, 1, "one a host: the crawl stays on 1 host"),
        (None, 50, False, False, 4, "one a core"),
        (None, 3, False, False, 3, "one a host: the crawl stays on 3 hosts"),
        (None, 1, True, False, 4, "one a core"),
        (None, 1, False, True, 4, "one a core"),
        (3, 1, False, False, 3, "2 will have nothing to fetch"),
        (3, 1, True, False, 3, "starting 3 workers"),
        (2, 5, False, False, 2, "starting 2 workers"),
    ],
)
def test_crawl_starts_a_worker_a_core_but_none_without_a_host_to_own(
    asked: int | None, hosts: int, span: bool, open_ended: bool, started: int, said: str
) -> None:
    """A crawl that stays on its hosts starts no more workers than it has hosts, unless asked,
    and then it says why some will idle; one that may reach any host starts one a core."""
    scope = Scope(hosts=frozenset(f"h{i}.example" for i in range(hosts)), span=span)
    sizing = worker_count(asked, scope, cores=4, open_ended=open_ended)
    assert sizing.count == started
    assert said in sizing.why
    assert sizing.idle == ("nothing to fetch" in sizing.why)
    assert sizing.idle == (asked is not None and not span and asked > hosts)
