"""Tests for hashcrawl._core._parents and --no-parent: a link is followed only at or
below a start URL's directory on its host, judged on canonical URLs; every start URL
adds its directory to the crawl's scope, at most ``MAX_PARENTS``; links refused are
counted once and never requested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashcrawl import ConfigError, Queue
from hashcrawl._core._batch import Batch
from hashcrawl._core._entry import Entry
from hashcrawl._core._outcome import Router
from hashcrawl._core._parents import FULL, directory_of, member_of, parents_from, under
from hashcrawl._core._patterns import Refusal, Screen
from hashcrawl._core._ring import Ring
from hashcrawl._core._scope import Scope
from hashcrawl._core._scope import members as scope_members
from hashcrawl._core._urls import canonicalize, host_key
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from testing.testsite import SITE_FLAGS, Resource, Site, SiteServer
from tests.test_cli import assert_ok, hashcrawl


def _allowed(starts: list[str], link: str) -> bool:
    """Whether ``link`` is under one of ``starts``' directories, as a worker judges it."""
    parents = parents_from(member_of(url) for url in starts)
    canonical = canonicalize(link)
    return under(parents, canonical, host_key(canonical))


@pytest.mark.parametrize(
    "url, directory",
    [
        ("http://h.test/a/b/page.html", "/a/b/"),
        ("http://h.test/a/b/", "/a/b/"),
        ("http://h.test/a/b", "/a/"),  # wget's: no trailing slash, b is a file
        ("http://h.test", "/"),
        ("http://h.test/a/b/?q=/x/y/", "/a/b/"),  # the query never counts
        ("http://h.test/a/./c/../b/x", "/a/b/"),  # dot segments resolved first
        ("http://h.test/%7Euser/x", "/~user/"),  # an unreserved escape decoded
        ("http://h.test/a%2Fb/x", "/a%2Fb/"),  # an escaped slash is no separator
    ],
)
def test_the_directory_of_a_url_is_its_canonical_path_to_the_last_slash(
    url: str, directory: str
) -> None:
    """As wget takes it: the path up to and including the last ``/``."""
    assert directory_of(canonicalize(url)) == ("h.test", directory)


def test_links_at_or_below_a_start_directory_pass_and_those_above_do_not() -> None:
    """Start ``/a/b/``: ``/a/b/``, ``/a/b/c/d`` pass; ``/a/``, ``/a/bc``, ``/`` do not."""
    starts = ["http://h.test/a/b/index.html"]
    for link in ("http://h.test/a/b/", "http://h.test/a/b/c/d", "https://h.test/a/b/x"):
        assert _allowed(starts, link), link
    for link in ("http://h.test/a/", "http://h.test/a/bc", "http://h.test/", "http://h.test/a"):
        assert not _allowed(starts, link), link


def test_a_link_is_judged_on_its_canonical_form() -> None:
    """Host case, a default port and ``..`` segments are undone before the test; path
    case is not (``/A/`` is another directory), and ``..`` cannot climb out."""
    starts = ["http://h.test/docs/"]
    assert _allowed(starts, "HTTP://H.TEST:80/docs/x")
    assert _allowed(starts, "http://h.test/other/../docs/x")
    assert _allowed(starts, "http://h.test/%64ocs/x")  # %64 is "d"
    assert not _allowed(starts, "http://h.test/docs/../secret")
    assert not _allowed(starts, "http://h.test/DOCS/x")
    assert not _allowed(starts, "http://h.test:8080/docs/x")  # another host key


def test_another_host_is_refused_and_each_start_adds_its_own_directory() -> None:
    """Two starts on two hosts: each host keeps to its own start's directory."""
    starts = ["http://a.test/x/", "http://b.test/y/z"]
    assert _allowed(starts, "http://a.test/x/1") and _allowed(starts, "http://b.test/y/2")
    assert not _allowed(starts, "http://a.test/y/1")
    assert not _allowed(starts, "http://c.test/x/1")


def test_a_long_hostile_link_is_judged_on_no_more_than_the_longest_directory() -> None:
    """A link of 8,000 slashes costs as many steps as the start directory has slashes."""
    starts = ["http://h.test/a/"]
    assert not _allowed(starts, "http://h.test/" + "b/" * 4000)
    assert _allowed(starts, "http://h.test/a/" + "b/" * 4000)


def test_the_router_keeps_links_above_the_start_directories_out_of_the_batch() -> None:
    """With --no-parent the batch adds only the link under ``/docs/``; the other is kept
    aside to be counted once the batch commits, once per URL."""
    stored = scope_members(hosts={"h.test"}) | {member_of("http://h.test/docs/")}
    scope = Scope.from_members(stored)
    router = Router(Ring.of(1, ["w"]), lambda w: "q:" + w, "inbox", scope, no_parent=True)
    batch = Batch(worker="w", epoch=1)
    for url in ("http://h.test/docs/a", "http://h.test/blog/b", "http://h.test/blog/b"):
        router.follow(batch, Entry(url=url))
    assert [json.loads(a[1])["u"] for a in batch.add] == ["http://h.test/docs/a"]
    screen = Screen()
    assert screen.unparented(batch.unparented) == 1
    assert "/blog/b" in screen.unsaid[Refusal.NO_PARENT]


def test_start_directories_are_recorded_and_capped_in_a_no_parent_crawl(
    redis_url: str, crawl_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each start URL adds ``dir:`` to the scope; past the cap a --no-parent crawl's
    submit is refused in one line and nothing of it is written, and one without
    --no-parent records ``dir:*`` instead (so a later --no-parent knows it cannot tell)."""
    monkeypatch.setattr("hashcrawl._run._queue.MAX_PARENTS", 2)
    store = Store(RedisURL.parse(redis_url), crawl_name)
    with Queue(redis_url, crawl=crawl_name) as queue:
        queue.submit(["http://a.example/x/1", "http://a.example/y/"])
        assert {m for m in store.scope() if m.startswith("dir:")} == {
            "dir:a.example/x/",
            "dir:a.example/y/",
        }
        store._redis.hset(store.key("settings"), "no_parent", "true")
        before = store.scope()
        with pytest.raises(ConfigError, match="--no-parent keeps at most 2 start directories"):
            queue.submit(["http://a.example/z/"])
        assert store.scope() == before and queue.status()["queued"] == 2
        store._redis.hset(store.key("settings"), "no_parent", "false")
        queue.submit(["http://a.example/z/"])
        assert FULL in store.scope() and "dir:a.example/z/" not in store.scope()
    store.close()


# -- end to end: judged from the site's log ---------------------------------------------------


def _site_with_a_parent() -> Site:
    """``/docs/guide/`` links down (``1``, ``deep/2``), across (``/docs/other``) and up
    (``/``, ``/docs/``, ``/blog/x``); every page above links back down."""
    host = "127.0.0.2"
    html = "text/html"

    def links(*paths: str) -> str:
        return "".join(f'<a href="{p}">{p}</a>' for p in paths)

    resources = {
        (host, "/"): Resource(200, html, links("/docs/guide/", "/blog/x")),
        (host, "/docs/"): Resource(200, html, links("/docs/guide/1")),
        (host, "/docs/other"): Resource(200, html, "other"),
        (host, "/blog/x"): Resource(200, html, "x"),
        (host, "/docs/guide/"): Resource(
            200, html, links("1", "deep/2", "../other", "/", "/docs/", "/blog/x", "../guide/1")
        ),
        (host, "/docs/guide/1"): Resource(200, html, links("/docs/")),
        (host, "/docs/guide/deep/2"): Resource(200, html, links("../../other")),
    }
    return Site(port=0, hosts=(host,), resources=resources, crawl_delays={})


def test_a_no_parent_crawl_never_requests_a_page_above_its_start_directory(
    tmp_path: Path,
) -> None:
    """``crawl http://H/docs/guide/ --no-parent``: the server sees the start page and the
    two under it (and robots.txt), nothing above; the four URLs above count once each in
    pattern_refused, and one line says --no-parent kept them out."""
    state = tmp_path / "state"
    with SiteServer(_site_with_a_parent()) as server:
        start = server.site.url("127.0.0.2", "/docs/guide/")
        result = hashcrawl(
            "crawl", start, "--no-parent", "--state-dir", str(state), "--workers", "1",
            "--idle", "0.5", "--delay", "0.01", "-o", str(tmp_path / "items.jsonl"),
            *SITE_FLAGS,
        )  # fmt: skip
        paths = sorted(r.path for r in server.requests())
    assert result.code == 0, result
    assert paths == ["/docs/guide/", "/docs/guide/1", "/docs/guide/deep/2", "/robots.txt"]
    told = [line for line in result.err.splitlines() if "--no-parent" in line]
    assert len(told) == 1 and "pattern_refused" in told[0], result.err
    at_state = ("--state-dir", str(state), "--crawl", "default")
    done = json.loads(assert_ok(hashcrawl("status", *at_state, "--json")))
    assert done["pattern_refused"] == 4  # /docs/other, /, /docs/, /blog/x


def test_a_start_directory_submitted_to_a_running_crawl_refuses_older_commits(
    redis_url: str, crawl_name: str
) -> None:
    """A submit of a new directory on a host already in scope grows the scope: a worker's
    commit filtered by the scope before it is refused (``rescope``), so the worker reads
    the new directory before its links are judged."""
    store = Store(RedisURL.parse(redis_url), crawl_name)
    try:
        with Queue(redis_url, crawl=crawl_name) as queue:
            queue.submit(["http://a.example/docs/"])
            store.join("w1", {})
            epoch = store.members()[0]
            before = Scope.from_members(store.scope())
            queue.submit(["http://a.example/blog/"])
        after = Scope.from_members(store.scope())
        assert after.under_parent("http://a.example/blog/x", "a.example")
        assert not before.under_parent("http://a.example/blog/x", "a.example")
        stale = store.commit(Batch(worker="w1", epoch=epoch, scope=before.version))
        assert (stale.status, stale.scope) == ("rescope", after.version)
    finally:
        store.close()
