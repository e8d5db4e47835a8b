"""Entries: what travels through Redis, and what hashcrawl does with what it cannot read."""

import contextlib
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hashcrawl._core._entry import MAX_ENTRY_BYTES, MAX_RULE, MAX_TIMEOUT, BadEntry, Entry
from tests.strategies import stream_payloads

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


def test_a_full_request_survives_encoding():
    """Method, headers, a text or binary body, timeout and redirect limit come back."""
    for body in (b"q=blue+widget&page=2", b"\xff\x00binary"):
        entry = Entry(
            url="http://a.example/search",
            method="POST",
            headers=(("Content-Type", "application/x-www-form-urlencoded"), ("X-A", "b")),
            body=body,
            timeout=2.5,
            max_redirects=0,
        )
        assert Entry.decode(entry.encode()) == entry


def test_a_form_body_travels_as_text_and_a_binary_one_as_base64():
    """A UTF-8 body is stored as it is (compact); other bytes in base64."""
    text = Entry(url="http://a.example/", method="POST", body=b"q=1").encode()
    assert text == '{"u":"http://a.example/","M":"POST","B":"q=1"}'
    assert Entry(url="http://a.example/", body=b"\xff").encode().endswith('"Y":"/w=="}')


def test_a_plain_get_is_known_by_its_canonical_url_and_a_post_by_its_body_too():
    """GET without body keeps the old fingerprint key; method and body change it."""
    get = Entry(url="http://a.example/s?b=2&a=1")
    assert get.key == get.canonical == "http://a.example/s?a=1&b=2"
    posts = {Entry(url=get.url, method="POST", body=b).key for b in (b"", b"q=1", b"q=2")}
    assert len(posts) == 3 and get.key not in posts
    assert (
        Entry(url=get.url, method="POST", body=b"q=1").key
        == Entry(url="http://a.example/s?a=1&b=2", method="POST", body=b"q=1").key
    )


def test_a_posts_key_is_the_same_in_every_release_a_crawl_is_resumed_with():
    """The keys are what the crawl's seen filter holds in Redis and its dead letters are
    named by: a key that changed between releases would have a resumed crawl fetch
    every POST again and lose track of its dead ones. The form is pinned here."""
    post = Entry(url="http://a.example/s?b=2&a=1", method="POST", body=b"q=1")
    assert post.key == (
        "POST http://a.example/s?a=1&b=2 " + hashlib.blake2b(b"q=1", digest_size=16).hexdigest()
    )
    assert post.key == "POST http://a.example/s?a=1&b=2 " + "3eb3cd1978c7f6f6c644377e66972a9c"


def test_default_fields_are_left_out_of_the_encoding():
    """A plain entry is just its URL, so a stream entry stays small."""
    assert Entry(url="http://a.example/").encode() == '{"u":"http://a.example/"}'


@given(st.text() | st.none())
def test_no_text_makes_decode_raise_anything_but_bad_entry(text):
    """Arbitrary text either decodes or raises BadEntry: nothing else escapes."""
    with contextlib.suppress(BadEntry):
        Entry.decode(text)


@given(
    st.dictionaries(
        st.sampled_from(
            ["u", "d", "p", "a", "m", "c", "f", "s", "x", "M", "H", "B", "Y", "t", "r"]
        ),
        json_values,
    )
)
def test_no_json_object_makes_decode_raise_anything_but_bad_entry(doc):
    """JSON objects with any mix of known keys and values decode or raise BadEntry."""
    try:
        entry = Entry.decode(json.dumps(doc))
    except BadEntry:
        return
    assert isinstance(entry.url, str)
    assert isinstance(entry.depth, int) and isinstance(entry.priority, int)


@given(st.text(), json_values, st.booleans())
def test_a_url_and_depth_alone_are_read_as_among_other_fields(url, depth, ascii_only):
    """A followed link's entry (its URL and depth, the entry read most) decodes as the same
    fields beside a default priority do: the same entry, or BadEntry with the same reason."""

    def read(doc):
        try:
            return Entry.decode(json.dumps(doc, ensure_ascii=ascii_only))
        except BadEntry as exc:
            return str(exc).partition(": ")[0]  # the reason, before the payload quoted

    assert read({"u": url, "d": depth}) == read({"u": url, "d": depth, "p": 0})


@settings(max_examples=500)
@given(stream_payloads)
def test_no_bytes_in_a_stream_make_decode_raise_anything_but_bad_entry(payload):
    """Arbitrary payload bytes either decode to an entry that encodes back, or raise BadEntry."""
    try:
        entry = Entry.decode(payload)
    except BadEntry as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
        return
    assert Entry.decode(entry.encode().encode("utf-8")) == entry


def test_json_nested_5000_deep_is_a_bad_entry():
    """Nesting past what Python's parser can recurse through is BadEntry, not RecursionError."""
    deep = b'{"u":"http://a.example/","m":' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(BadEntry, match="deeper"):
        Entry.decode(deep)
    with pytest.raises(BadEntry, match="deeper"):
        Entry.decode(b"[" * 5000 + b"]" * 5000)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"u":"http://a.example/","a":-1000000000}',
        b'{"u":"http://a.example/","d":-99999}',
        b'{"u":"http://a.example/","d":1.5}',
        b'{"u":"http://a.example/","a":true}',
        b'{"u":"http://a.example/","p":1e999}',
        b'{"u":"http://a.example/","d":NaN}',
        b'{"u":"http://a.example/","m":Infinity}',
        b'{"u":"http://a.example/","f":2}',
        b'{"u":"http://a.example/","c":7}',
        b'{"u":"http://a.example/","M":"post"}',
        b'{"u":"http://a.example/","M":"PO ST"}',
        b'{"u":"http://a.example/","M":7}',
        b'{"u":"http://a.example/","H":[["X-A","1\\r\\nX-B: 2"]]}',
        b'{"u":"http://a.example/","H":[["Bad Name","v"]]}',
        b'{"u":"http://a.example/","H":[["X-A"]]}',
        b'{"u":"http://a.example/","H":{"X-A":"1"}}',
        b'{"u":"http://a.example/","H":[' + b",".join([b'["X","1"]'] * 65) + b"]}",
        b'{"u":"http://a.example/","B":"a","Y":"YQ=="}',
        b'{"u":"http://a.example/","B":7}',
        b'{"u":"http://a.example/","Y":"not base64!"}',
        b'{"u":"http://a.example/","B":"\\ud800"}',
        b'{"u":"http://a.example/","t":0}',
        b'{"u":"http://a.example/","t":3601}',
        b'{"u":"http://a.example/","t":true}',
        b'{"u":"http://a.example/","r":21}',
        b'{"u":"http://a.example/","r":1.0}',
        b'{"u":"http://a.example/\xff"}',
        b'{"u":"\\ud800"}',
        b'{"u":""}',
        b"\xff",
        None,
    ],
)
def test_out_of_range_or_mistyped_fields_are_bad_entries(payload):
    """Every field is range- and type-checked: no negative attempts, no NaN, no lone surrogates."""
    with pytest.raises(BadEntry):
        Entry.decode(payload)


def test_a_payload_over_the_size_cap_is_a_bad_entry_unparsed():
    """A payload larger than MAX_ENTRY_BYTES is refused by its length alone."""
    meta = "x" * MAX_ENTRY_BYTES
    with pytest.raises(BadEntry, match="bytes, over"):
        Entry.decode(json.dumps({"u": "http://a.example/", "m": meta}).encode())


def test_a_followed_request_whose_entry_would_outgrow_the_queue_is_refused():
    """A body that fits a Request but not an entry once encoded (base64 grows it by a
    third) is a ConfigError naming the sizes, not an entry Redis would carry."""
    from hashcrawl._exceptions import ConfigError
    from hashcrawl._web._models import Request

    request = Request("/big", method="POST", body=b"\xff" * (MAX_ENTRY_BYTES - 10))
    with pytest.raises(ConfigError, match="-byte queue entry, over the"):
        request.to_entry("http://a.example/", 1)
    small = Request("/a", method="POST", body=b"x=1").to_entry("http://a.example/", 1)
    assert small is not None and small.body == b"x=1"


def test_meta_nested_to_the_limit_is_read_and_one_level_more_is_a_bad_entry():
    """MAX_META_DEPTH lists deep is still an entry; one more is refused as too deep."""
    from hashcrawl._core._entry import MAX_META_DEPTH

    def nested(n: int) -> bytes:
        return b'{"u":"http://a.example/","m":' + b"[" * n + b"]" * n + b"}"

    assert Entry.decode(nested(MAX_META_DEPTH)).url == "http://a.example/"
    with pytest.raises(BadEntry, match="deeper"):
        Entry.decode(nested(MAX_META_DEPTH + 1))


def test_a_bad_entrys_message_quotes_the_first_120_characters_of_its_payload() -> None:
    """Enough of a hostile payload to recognise it, and no more: one short line."""
    payload = json.dumps({"x": "y" * 500})
    with pytest.raises(BadEntry, match="no url") as caught:
        Entry.decode(payload)
    assert repr(payload[:120]) in str(caught.value)
    assert repr(payload[:121]) not in str(caught.value)


def test_a_timeout_of_exactly_the_limit_is_read_and_a_little_more_is_a_bad_entry() -> None:
    url = "http://a.example/"
    assert Entry.decode(json.dumps({"u": url, "t": MAX_TIMEOUT})).timeout == MAX_TIMEOUT
    with pytest.raises(BadEntry, match="timeout"):
        Entry.decode(json.dumps({"u": url, "t": MAX_TIMEOUT + 0.5}))


def test_a_scrapy_requests_fields_survive_encoding_and_a_rule_out_of_range_is_bad() -> None:
    """Errback, cb_kwargs, statuses and the rule index come back; a rule past MAX_RULE does not."""
    for rule in (0, MAX_RULE):
        entry = Entry(
            url="http://a.example/",
            errback="on_error",
            cb_kwargs={"page": 2},
            handle_httpstatus_list=(404,),
            rule=rule,
        )
        assert Entry.decode(entry.encode()) == entry
    for rule in (-1, MAX_RULE + 1, 1.0):
        with pytest.raises(BadEntry, match="rule"):
            Entry.decode(json.dumps({"u": "http://a.example/", "R": rule}))


def test_a_request_at_the_largest_size_survives_every_mark_hashcrawl_adds() -> None:
    """A spider's request of the largest size accepted still fits an entry once it is a
    suspect at 10,000 attempts (the widest ``a`` a reader takes), and one byte more is
    refused: GROWTH is exactly the room those two fields take."""
    import attrs

    import hashcrawl
    from hashcrawl._exceptions import ConfigError

    def sized(n: int) -> hashcrawl.Request:
        bare = hashcrawl.Request("http://a.example/", method="POST", body=b"")
        overhead = len(bare.to_entry("http://a.example/", 0).encode().encode())  # type: ignore[union-attr]
        body = b"x" * (n - overhead - len(',"B":""'))
        return hashcrawl.Request("http://a.example/", method="POST", body=body)

    largest = MAX_ENTRY_BYTES - 16
    entry = sized(largest).to_entry("http://a.example/", 0)
    assert entry is not None and len(entry.encode().encode()) == largest
    marked = attrs.evolve(entry, suspect=True, attempts=10_000).encode()
    assert len(marked.encode()) == MAX_ENTRY_BYTES
    assert Entry.decode(marked).attempts == 10_000
    with pytest.raises(ConfigError, match="over the 65520 an entry holds"):
        sized(largest + 1).to_entry("http://a.example/", 0)
