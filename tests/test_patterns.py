"""Tests for hashcrawl._core._patterns and its settings: --accept-regex and --reject-regex
decide on the canonical URL, count each refused link once, and a hostile pattern is
refused in one line or runs in time linear in the URL (RE2)."""

from __future__ import annotations

import argparse
import re
import threading

import pytest

from hashcrawl._core._entry import Entry
from hashcrawl._core._exchanges import Done
from hashcrawl._core._flags import _pattern
from hashcrawl._core._page import GiveBack, Page, Send, TakePage
from hashcrawl._core._patterns import MAX_PATTERN, Patterns, Refusal, Screen
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._store._crawlconfig import adopt, from_text, to_text
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from tests.test_page import dispatched


def test_accept_keeps_only_matching_urls_and_reject_drops_matching_ones() -> None:
    """A URL must match the accept pattern and not match the reject pattern."""
    patterns = Patterns(accept=r"/docs/", reject=r"\.pdf$")
    assert patterns.refusal("http://a.test/docs/intro") is None
    assert patterns.refusal("http://a.test/blog/") is Refusal.NOT_ACCEPTED
    assert patterns.refusal("http://a.test/docs/x.pdf") is Refusal.REJECTED


def test_patterns_see_the_canonical_url_as_the_seen_filter_does() -> None:
    """The query is sorted and the host lower-cased before matching: a link written
    ``?b=1&a=2`` on ``A.TEST`` is refused by a pattern anchored on the canonical form."""
    screen = Screen()
    entry = Entry(url="http://A.TEST/list?b=1&a=2")
    wanted, refused = screen.wanted([entry], Patterns(reject=r"^http://a\.test/list\?a=2&b=1$"))
    assert (wanted, refused) == ([], 1)


def test_a_refused_url_is_counted_once_and_each_refusal_said_once() -> None:
    """The same refused link on many pages counts once; the first of each kind is kept
    to be said, naming its flag and pattern, and only once."""
    screen = Screen()
    patterns = Patterns(accept="/keep/", reject="secret")
    links = [Entry(url="http://a.test/other"), Entry(url="http://a.test/keep/secret")]
    _, first = screen.wanted(links, patterns)
    _, again = screen.wanted(links, patterns)
    assert (first, again) == (2, 0)
    said = dict(screen.unsaid)
    assert "--accept-regex '/keep/'" in said[Refusal.NOT_ACCEPTED]
    assert "--reject-regex 'secret'" in said[Refusal.REJECTED]
    screen.unsaid.clear()
    screen.wanted([Entry(url="http://a.test/more")], patterns)
    assert screen.unsaid == {}


def test_no_patterns_let_every_link_through_untouched() -> None:
    """Without patterns the follows are returned as they are, nothing counted."""
    links = [Entry(url="http://a.test/x")]
    assert Screen().wanted(links, Patterns()) == (links, 0)


@pytest.mark.parametrize(
    "pattern, said",
    [
        (r"(a)\1", "invalid escape sequence"),  # a backreference: no linear-time engine has it
        (r"(?=x)a", "invalid perl operator"),  # lookahead
        ("(a", "missing )"),
        ("((a{100}){100}){100}", "repetition"),  # a program of millions of states
        ("a" * (MAX_PATTERN + 1), f"at most {MAX_PATTERN} characters"),
    ],
)
def test_a_hostile_or_broken_pattern_is_refused_in_one_line(pattern: str, said: str) -> None:
    """From the command line or a keyword, one line naming the flag and what is wrong."""
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(said)):
        _pattern(pattern)
    with pytest.raises(ConfigError, match="--reject-regex") as caught:
        Settings(reject_regex=pattern)
    assert "\n" not in str(caught.value) and said in str(caught.value)


def test_a_pattern_python_re_would_backtrack_on_answers_exactly() -> None:
    """``(a+)+$`` takes Python's ``re`` minutes on forty a's and a b; RE2 answers for
    a URL of 8,000 of them (its time is linear in the URL, whatever the pattern)."""
    patterns = Patterns(reject=r"(a+)+$")
    assert patterns.refusal("http://a.test/" + "a" * 8000 + "b") is None
    assert patterns.refusal("http://a.test/" + "a" * 8000) is Refusal.REJECTED


def test_a_keyword_pattern_that_is_not_text_is_refused_naming_the_flag() -> None:
    """``Worker(accept_regex=3)`` says what it expected."""
    with pytest.raises(ConfigError, match="--accept-regex must be a string"):
        Settings.of({"accept_regex": 3})


def test_patterns_and_the_page_cap_are_crawl_settings_stored_as_their_flags_text() -> None:
    """Recorded in Redis with the crawl, as --delay is, and read back the same."""
    assert {"accept_regex", "reject_regex", "max_pages_total"} <= set(CRAWL)
    for name, value in (("accept_regex", r"^https?://a\.test/"), ("max_pages_total", 100)):
        assert from_text(name, to_text(name, value)) == value
    assert from_text("reject_regex", to_text("reject_regex", None)) is None


# -- --max-pages-total: the count in Redis, and the page's step -----------------------------


def test_the_fleet_takes_exactly_the_cap_however_many_workers_ask_at_once(
    redis_url: str, crawl_name: str
) -> None:
    """Eight threads, each with its own connection, ask 40 times for one of 100 pages:
    exactly 100 are granted, and every later ask is refused."""
    stores = [Store(RedisURL.parse(redis_url), crawl_name) for _ in range(8)]
    granted: list[int] = []

    def ask(store: Store) -> None:
        granted.append(sum(store.take_page(100) for _ in range(40)))

    threads = [threading.Thread(target=ask, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 100
    assert stores[0].take_page(100) is False
    stores[0].give_back_page()  # a request that never left
    assert stores[0].take_page(100) is True
    assert stores[0].take_page(101) is True  # a raised cap (configure) gives more
    for store in stores:
        store.close()


def test_a_page_takes_one_of_the_crawls_pages_before_its_request() -> None:
    """With --max-pages-total, a page asks for one of the crawl's pages before SEND;
    granted, it is sent; refused, it waits unfetched and the worker stops."""
    session, held = dispatched(max_pages_total=5)
    page = Page(session.fetches, held, 0.0)
    assert page.next_step(0.0) == TakePage(5)
    page.answered(True, 0.0)
    assert isinstance(page.next_step(0.0), Send)
    page.not_sent(0.0)  # the gate said no as the request was written
    assert page.next_step(0.0) == GiveBack()  # the page it took goes back to the crawl
    page.answered(None, 0.0)
    assert page.next_step(0.0) == Done() and page.outcome is None
    session, held = dispatched(max_pages_total=5)
    page = Page(session.fetches, held, 0.0)
    page.next_step(0.0)
    page.answered(False, 0.0)
    assert page.next_step(0.0) == Done()  # put back: it stays in the stream, never fetched
    assert page.outcome is None
    assert session.flight.stopping and session.tally.fetched == 0


def test_without_a_crawl_cap_a_page_asks_nothing() -> None:
    """No --max-pages-total: straight to SEND, no round trip to Redis."""
    session, held = dispatched()
    assert isinstance(Page(session.fetches, held, 0.0).next_step(0.0), Send)


def test_a_worker_given_other_patterns_or_cap_than_the_crawls_is_refused(
    redis_url: str, crawl_name: str
) -> None:
    """As a disagreeing --delay is: one line naming both values and the configure
    command; a worker that gives none takes the crawl's."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        given = {"accept_regex": "/docs/", "max_pages_total": 100}
        adopt(store, Settings(**given), given)
        with pytest.raises(ConfigError) as refused:
            adopt(store, Settings(accept_regex="/blog/"), {"accept_regex": "/blog/"})
        said = str(refused.value)
        assert "--accept-regex /blog/ disagrees" in said and "--accept-regex /docs/" in said
        assert "hashcrawl configure" in said
        taken, _ = adopt(store, Settings(), {})
        assert (taken.accept_regex, taken.max_pages_total) == ("/docs/", 100)
    finally:
        store.close()
