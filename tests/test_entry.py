"""Entries: what travels through Redis, and what hashcrawl does with what it cannot read."""

import contextlib
import json

from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._entry import BadEntry, Entry

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=10,
)


def test_an_entry_survives_encoding():
    """Every field comes back as it went in."""
    entry = Entry(
        url="http://a.example/x",
        depth=3,
        priority=-2,
        attempts=1,
        meta={"k": [1, "v"]},
        callback="parse_item",
        dont_filter=True,
        suspect=True,
    )
    assert Entry.decode(entry.encode()) == entry


def test_default_fields_are_left_out_of_the_encoding():
    """A plain entry is just its URL, so a stream entry stays small."""
    assert Entry(url="http://a.example/").encode() == '{"u":"http://a.example/"}'


@given(st.text() | st.none())
def test_no_text_makes_decode_raise_anything_but_bad_entry(text):
    """Arbitrary text either decodes or raises BadEntry: nothing else escapes."""
    with contextlib.suppress(BadEntry):
        Entry.decode(text)


@given(st.dictionaries(st.sampled_from(["u", "d", "p", "a", "m", "c", "f", "s", "x"]), json_values))
def test_no_json_object_makes_decode_raise_anything_but_bad_entry(doc):
    """JSON objects with any mix of known keys and values decode or raise BadEntry."""
    try:
        entry = Entry.decode(json.dumps(doc))
    except BadEntry:
        return
    assert isinstance(entry.url, str)
    assert isinstance(entry.depth, int) and isinstance(entry.priority, int)
