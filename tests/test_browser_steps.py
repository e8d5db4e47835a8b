"""A rendered request's steps are data from a closed list: checked when made, carried
through the entry, checked again when read back; and the frontier's pace of a page's
sub-requests."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import hashcrawl
from hashcrawl import ConfigError, Request
from hashcrawl._core._entry import BadEntry, Entry
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._settings import Settings
from hashcrawl._core._steps import MAX_STEPS, Action, BadStep, Step, renders, steps_of
from hashcrawl._run._handler import Handler
from hashcrawl._run._worker import Worker
from hashcrawl._spiders._spider import Calls
from tests.test_core import session_of

GOOD = [
    {"wait_for": "li.item", "timeout": 5},
    {"click": "button.more"},
    {"scroll": "end", "times": 3},
    {"wait": 0.5},
    {"evaluate": "document.title"},
    {"fill": "input[name=q]", "value": "shoes"},
    {"press": "Enter", "selector": "input[name=q]"},
    {"set_input_files": "input[type=file]", "files": ["cv.pdf", "sub/photo.png"]},
    {"screenshot": "full"},
    {"pdf": "a4"},
    {"call": "log_in"},
]


def test_every_step_of_the_closed_list_reads_back_as_written() -> None:
    """Each step's data makes a step whose data is the same (defaults filled in)."""
    steps = steps_of(GOOD)
    assert [step.action for step in steps] == list(Action)
    assert steps_of([step.to_data() for step in steps]) == steps


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"steal": "login"}, "exactly one action"),
        ({"fill": "#q"}, "fill's value is text"),
        ({"fill": "#q", "value": 3}, "fill's value is text"),
        ({"press": "F13"}, "one character or a key"),
        ({"press": "ab"}, "one character or a key"),
        ({"press": "Enter", "selector": ""}, "text of 1 to 4096"),
        ({"set_input_files": "#f", "files": ["../etc/passwd"]}, "relative, no '..'"),
        ({"set_input_files": "#f", "files": ["a/../../b"]}, "relative, no '..'"),
        ({"set_input_files": "#f", "files": ["/etc/passwd"]}, "relative, no '..'"),
        ({"set_input_files": "#f", "files": ["a\0b"]}, "relative, no '..'"),
        ({"set_input_files": "#f", "files": []}, "list of 1 to 10 paths"),
        ({"set_input_files": "#f", "files": ["a"] * 11}, "list of 1 to 10 paths"),
        ({"set_input_files": "#f", "files": "cv.pdf"}, "list of 1 to 10 paths"),
        ({"screenshot": "huge"}, "one of ['viewport', 'full']"),
        ({"pdf": "a3"}, "one of ['a4', 'letter']"),
        ({"call": "__init__"}, "a public method"),
        ({"call": "os.system"}, "a public method"),
        ({"call": 7}, "a public method"),
        ({"click": "a", "wait": 1}, "exactly one action"),
        ({"click": "a", "force": True}, "unknown options ['force']"),
        ({"click": ""}, "text of 1 to 4096"),
        ({"wait": 61}, "in [0, 60]"),
        ({"wait": "1"}, "in [0, 60]"),
        ({"scroll": "top"}, "to the 'end'"),
        ({"scroll": "end", "times": 0}, "in [1, 100]"),
        ("click", "an object"),
    ],
)
def test_a_step_outside_the_list_or_its_bounds_is_refused_naming_the_rule(
    data: Any, said: str
) -> None:
    """What is not a step of the list, in its bounds, is a BadStep saying which rule."""
    with pytest.raises(BadStep, match=said.replace("[", r"\[").replace("]", r"\]")):
        Step.of(data)


def test_more_steps_than_the_cap_are_refused() -> None:
    """A request carries at most ``MAX_STEPS`` steps."""
    with pytest.raises(BadStep, match=f"at most {MAX_STEPS}"):
        steps_of([{"wait": 0}] * (MAX_STEPS + 1))


def test_steps_need_a_rendered_request() -> None:
    """Steps without ``render=True`` would never run: refused when made."""
    with pytest.raises(ConfigError, match="steps need render=True"):
        Request("http://a.test/", steps=[{"click": "b"}])


def test_a_rendered_request_travels_through_its_entry_with_its_steps() -> None:
    """render and steps go into the entry and come back out as they were."""
    request = Request("http://a.test/p", render=True, steps=GOOD)
    entry = Entry.decode(request.to_entry("http://a.test/", 0).encode())
    back = Request.from_entry(entry)
    assert (back.render, back.steps) == (True, request.steps)


def test_a_plain_requests_entry_is_unchanged_by_rendering() -> None:
    """A request that does not render writes neither key: old entries read the same."""
    assert (
        Request("http://a.test/").to_entry("http://a.test/", 0).encode() == '{"u":"http://a.test/"}'
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"u":"http://a.test/","b":1,"W":[{"steal":"x"}]}', "entry steps: a step names"),
        ('{"u":"http://a.test/","b":1,"W":{"click":"a"}}', "entry steps: steps are a list"),
        ('{"u":"http://a.test/","W":[{"click":"a"}]}', "steps need render=True"),
    ],
)
def test_an_entry_with_an_unknown_or_bad_step_says_why_and_keeps_the_steps(
    text: str, said: str
) -> None:
    """Read back from Redis, a step outside the list leaves the entry readable (its URL
    is known, so it can be dead-lettered with the reason), its steps kept as they were."""
    entry = Entry.decode(text)
    assert entry.steps == () and entry.steps_refusal is not None and said in entry.steps_refusal
    assert Entry.decode(entry.encode()) == entry


def test_an_entry_whose_render_flag_is_not_a_flag_is_bad() -> None:
    """A render flag other than 0 or 1 is no entry hashcrawl wrote."""
    with pytest.raises(BadEntry, match="render flag is not 0 or 1"):
        Entry.decode('{"u":"http://a.test/","b":2}')


def test_the_owner_dead_letters_an_entry_with_an_unknown_step_with_its_reason() -> None:
    """Taken in by its host's owner, the entry goes to the dead letters, never fetched."""

    session = session_of()
    session.take_in([("1-0", b'{"u":"http://a.test/","b":1,"W":[{"steal":"x"}]}')])
    batch = session.commits.batch(session.ledger.next_commit(), 0.0)
    assert any("entry steps: a step names exactly one action" in str(r) for r in batch.dead)
    assert session.frontier.size == 0


class LoginSpider(hashcrawl.Spider):
    def log_in(self, page: Any) -> None:
        page.fill("#user", "me")


@pytest.mark.parametrize(
    ("step", "upload_dir", "said"),
    [
        ({"call": "closed"}, None, "call 'closed' names no method of the spider's own"),
        ({"call": "start_requests"}, None, "names no method of the spider's own"),
        ({"call": "parse"}, None, "names no method of the spider's own"),
        ({"call": "missing"}, None, "names no method of the spider's own"),
        ({"set_input_files": "#f", "files": ["a"]}, None, "needs --browser-upload-dir"),
        ({"call": "log_in"}, None, None),
        ({"set_input_files": "#f", "files": ["a"]}, "/srv/up", None),
    ],
)
def test_the_owner_refuses_a_call_of_no_own_method_and_an_upload_without_a_directory(
    step: dict[str, Any], upload_dir: str | None, said: str | None
) -> None:
    """Read from the queue, a call must name a method of the spider's own classes (not
    hashcrawl's, not parse), and an upload needs --browser-upload-dir."""
    handler = Handler(
        spider=Calls(LoginSpider()),
        settings=Settings(browser_upload_dir=upload_dir),
        name="LoginSpider",
    )
    entry = Request("http://a.test/", render=True, steps=[step]).to_entry("http://a.test/", 0)
    assert entry is not None
    why = handler.refusal(Entry.decode(entry.encode()))
    assert (why is None) if said is None else (why is not None and said in why)


def test_without_a_spider_every_call_step_is_refused() -> None:
    """A crawl with a parse function (or none) has no method a call could name."""
    entry = Request("http://a.test/", render=True, steps=[{"call": "log_in"}])
    why = Handler().refusal(Entry.decode(entry.to_entry("http://a.test/", 0).encode()))  # type: ignore[union-attr]
    assert why is not None and "names no method" in why


@pytest.mark.parametrize(
    ("host", "render", "hosts", "rendered"),
    [
        ("a.shop.test", False, "*.shop.test", True),
        ("A.Shop.Test", False, "*.shop.test,app.test", True),
        ("app.test", False, "*.shop.test, app.test", True),
        ("shop.test", False, "*.shop.test", False),
        ("other.test", False, None, False),
        ("other.test", True, None, True),
    ],
)
def test_the_crawls_settings_choose_the_hosts_whose_pages_are_rendered(
    host: str, render: bool, hosts: str | None, rendered: bool
) -> None:
    """--render renders every page, --render-hosts those of the hosts its globs match."""
    assert renders(host, render=render, hosts=hosts) is rendered


@pytest.mark.parametrize("hosts", ["", "a.test,", "a b.test", "a.test/x", ",".join("a" * 101)])
def test_a_render_hosts_pattern_that_is_no_host_glob_is_refused_in_one_line(hosts: str) -> None:
    """Empty patterns, spaces, slashes or more than 100 patterns: a ConfigError naming
    the flag."""
    with pytest.raises(ConfigError, match="--render-hosts ") as raised:
        Settings(render_hosts=hosts)
    assert "\n" not in str(raised.value)


def test_a_workers_render_choice_follows_the_crawls_settings_as_they_change() -> None:
    """Configure turns --render-hosts on under a running worker: its next page is chosen."""
    worker = Worker("redis://127.0.0.1:1", "c", render_hosts="a.test")
    assert worker._rendered("http://a.test/x") and not worker._rendered("http://b.test/x")
    worker.take_settings(attrs.evolve(worker.settings, render_hosts="b.test"))
    assert worker._rendered("http://b.test/x") and not worker._rendered("http://a.test/x")


def held(url: str) -> Held:
    entry = Entry(url=url)
    return Held("1-0", entry, entry.host)


def test_a_sub_request_waits_the_delay_after_its_pages_start_and_counts_as_a_start() -> None:
    """The page took the host at 10; its sub-request may start at 12 (delay 2), and the
    host's next page not before 14."""
    frontier = Frontier(delay=2.0, per_host=2)
    frontier.add(held("http://a.test/1"), epoch=0)
    frontier.add(held("http://a.test/2"), epoch=0)
    page = frontier.take(10.0)
    assert isinstance(page, Held)
    assert frontier.sub_request_turn("a.test", 10.5) == 12.0
    assert frontier.take(13.0) == 14.0


def test_with_one_request_per_host_a_sub_request_waits_the_delay_after_the_last_end() -> None:
    """--per-host 1 paces from the end: the document ended at 11, so 13."""
    frontier = Frontier(delay=2.0, per_host=1)
    frontier.add(held("http://a.test/1"), epoch=0)
    frontier.take(10.0)
    frontier.sub_request_ended("a.test", 11.0)
    assert frontier.sub_request_turn("a.test", 11.0) == 13.0


def test_a_sub_request_to_a_host_no_longer_owned_gets_no_turn() -> None:
    """A host revoked or gone (handed over) gives no turn: the sub-request is refused."""
    frontier = Frontier(delay=1.0, per_host=1)
    frontier.add(held("http://a.test/1"), epoch=0)
    frontier.revoke("a.test")
    assert frontier.sub_request_turn("a.test", 1.0) is None
    assert frontier.sub_request_turn("b.test", 1.0) is None
