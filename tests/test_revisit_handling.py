"""A worker's handler with --revisit (hashcrawl/_run/_handler.py): what a revisit's
response comes to, and the conditional request an owner sends for it."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._core._due import conditional
from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Held
from hashcrawl._core._outcome import Kind
from hashcrawl._core._parts import Clock
from hashcrawl._core._revisit import Record, Verdict, digest_of
from hashcrawl._core._settings import Settings, revisit_policy
from hashcrawl._run._callbacks import unix_now
from hashcrawl._run._handler import Handler, Origin
from hashcrawl._web._models import Request, Response

SETTINGS = Settings(revisit="adaptive", revisit_min=60, revisit_max=86_400)
URL = "http://a.test/p"
PAGE = b"<title>p</title><a href='/q'>q</a>"


def held(entry: Entry) -> Held:
    return Held("1-0", entry, "a.test")


def revisit(etag: str = '"e1"') -> Entry:
    record = Record(due_s=1, quiet_s=3600, digest=digest_of(PAGE), etag=etag)
    return Entry(url=URL, dont_filter=True, revisit=record.to_hex())


def response(status: int, body: bytes = PAGE, **headers: str) -> Response:
    return Response(URL, status, {"content-type": "text/html", **headers}, body, Request(URL))


async def test_without_revisit_nothing_changes() -> None:
    """With no policy an outcome carries no record, as before the flag existed."""
    outcome = await Handler().handle(held(Entry(url=URL)), response(200), Origin("w1"))
    assert outcome.kind is Kind.DONE and outcome.revisit is None and outcome.items


async def test_a_first_fetch_gets_a_record_and_its_item() -> None:
    """A page's first 200 is parsed as ever, and brings its first record, validators kept."""
    handler = Handler(settings=SETTINGS)
    got = await handler.handle(held(Entry(url=URL)), response(200, etag='"e1"'), Origin("w1"))
    assert got.kind is Kind.DONE and len(got.items) == 1 and got.follows
    assert got.revisit is not None and got.revisit.first
    assert (got.revisit.record.etag, got.revisit.record.quiet_s) == ('"e1"', 0)


async def test_a_first_fetch_that_failed_gets_no_record() -> None:
    """A 404 is not a page to watch: no record."""
    got = await Handler(settings=SETTINGS).handle(held(Entry(url=URL)), response(404), Origin("w1"))
    assert got.revisit is None


async def test_a_304_writes_no_item_and_follows_nothing() -> None:
    """A revisit answered 304 is unchanged: no item, no follows, a longer quiet time."""
    got = await Handler(settings=SETTINGS).handle(held(revisit()), response(304, b""), Origin("w1"))
    assert got.kind is Kind.DONE and got.items == [] and got.follows == []
    assert got.revisit is not None and got.revisit.verdict is Verdict.UNCHANGED
    assert got.revisit.record.quiet_s == 3600 + 720 and not got.revisit.first


async def test_a_200_with_the_same_content_is_unchanged() -> None:
    """A server that ignores conditional requests: the same digest is still unchanged."""
    got = await Handler(settings=SETTINGS).handle(held(revisit()), response(200), Origin("w1"))
    assert got.items == [] and got.revisit is not None
    assert got.revisit.verdict is Verdict.UNCHANGED


async def test_a_changed_page_is_parsed_and_its_quiet_time_reset() -> None:
    """New content: an item as on a first fetch, and the quiet time back to 0."""
    changed = response(200, PAGE + b"<p>new</p>")
    got = await Handler(settings=SETTINGS).handle(held(revisit()), changed, Origin("w1"))
    assert len(got.items) == 1 and got.revisit is not None
    assert (got.revisit.verdict, got.revisit.record.quiet_s) == (Verdict.CHANGED, 0)


async def test_an_overloaded_revisit_is_retried_without_a_record() -> None:
    """A 503 is retried as ever; its record waits (its requeue lease brings it back)."""
    got = await Handler(settings=SETTINGS).handle(held(revisit()), response(503), Origin("w1"))
    assert got.kind is Kind.RETRY and got.revisit is None


def test_a_revisit_is_sent_with_the_last_validators() -> None:
    """The request of a revisit carries If-None-Match, replacing any the entry held."""
    entry = revisit()
    entry = Entry(
        url=URL, revisit=entry.revisit, headers=(("If-None-Match", '"old"'), ("X-A", "1"))
    )
    assert entry.revisit is not None
    sent = Request.from_entry(conditional(entry, Record.from_hex(entry.revisit)))
    assert dict(sent.headers) == {"X-A": "1", "If-None-Match": '"e1"'}


def test_bad_revisit_settings_are_one_line_naming_the_flag() -> None:
    """A Worker's or a flag's bad --revisit is a ConfigError naming it, in one line."""
    import pytest

    from hashcrawl._exceptions import ConfigError

    cases: list[tuple[dict[str, Any], str]] = [
        ({"revisit": "soon"}, "--revisit takes whole seconds or 'adaptive'"),
        ({"revisit": "adaptive", "revisit_min": 0}, "--revisit-min must be whole seconds"),
        ({"revisit_min": 7200, "revisit_max": 3600}, "must not exceed --revisit-max"),
    ]
    for asked, named in cases:
        with pytest.raises(ConfigError, match=named) as caught:
            Settings.of(asked)
        assert "\n" not in str(caught.value)


def test_without_the_flag_there_is_no_policy() -> None:
    """The default settings revisit nothing."""
    assert revisit_policy(Settings()) is None
    assert revisit_policy(SETTINGS) is not None


async def test_due_times_come_from_the_servers_clock_not_this_machines() -> None:
    """A worker whose clock is an hour behind the server's stamps its revisits by the
    server's clock: due an interval after the fetch, as the take will judge it."""
    server_s = unix_now() + 3600.25  # the server's clock, as the session knows it
    handler = Handler(settings=SETTINGS)
    got = await handler.handle(held(Entry(url=URL)), response(200), Origin("w1"), server_s=server_s)
    assert got.revisit is not None
    assert got.revisit.record.due_s == math.ceil(server_s) + 60


@given(
    local_sent=st.floats(0, 1e6),
    rtt=st.floats(0, 5),
    skew=st.floats(-1e5, 1e5),
    at=st.floats(0, 1),
    later=st.floats(0, 100),
)
def test_the_server_clock_is_never_behind_the_server(
    local_sent: float, rtt: float, skew: float, at: float, later: float
) -> None:
    """Whatever the skew, and wherever in the exchange the server read its TIME, the
    session's server clock is never behind the server's (so a due time stamped from it
    is never early), and at most a round trip ahead."""
    clock = Clock()
    received = local_sent + rtt
    server_ms = round((local_sent + at * rtt + skew) * 1000)  # when the server answered
    clock.sample(local_sent, received, server_ms)
    local = received + later
    true_s = server_ms / 1000 + (local - (local_sent + at * rtt))
    assert true_s - 1e-3 <= clock.server_s_by(local) <= true_s + rtt + 1e-3
