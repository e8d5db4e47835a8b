"""Tests that nothing fails in silence, and that a refusal changes nothing.

A page the worker's own rules refuse (its address, robots.txt) is counted in ``status``
and said once per crawl and reason on standard error, naming the flag that allows it; the
Python API refuses what the command line refuses; a command or worker that is refused
leaves Redis and the disk as they were.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from hashcrawl import ConfigError, Queue, Worker
from testing.testsite import SITE_FLAGS, SITE_NETS, Resource, Site, SiteServer, generate_site
from tests.test_cli import (
    COMMAND_TIMEOUT,
    assert_ok,
    assert_one_line_error,
    at,
    crawl_keys,
    hashcrawl,
    status,
)

# -- point 1: a page the worker refuses is counted and said, once --------------------------------


def test_a_worker_says_once_why_it_refused_pages_naming_the_flag(
    redis_url: str, crawl_name: str
) -> None:
    """A worker without --allow-net, given loopback pages by a ``submit --allow-private``:
    one line on stderr naming the rule and the flag, and every page counted as failed."""
    site = generate_site(pages=3, hosts=1, seed=5, port=0)
    with SiteServer(site) as server:
        urls = [server.site.url(site.hosts[0], f"/x{i}") for i in range(3)]
        assert_ok(
            hashcrawl("submit", *at(redis_url, crawl_name), "--new", "--allow-private", *urls)
        )
        worker = hashcrawl(
            "join", *at(redis_url, crawl_name), "--idle", "0.5", "--max-attempts", "1",
            "-o", os.devnull,
        )  # fmt: skip
        requested = server.requests()
    assert worker.code == 0, worker
    told = [line for line in worker.err.splitlines() if "not a public address" in line]
    assert len(told) == 1, worker.err
    assert "--allow-net" in told[0] and "--allow-private" in told[0]
    assert "Traceback" not in worker.err
    done = status(redis_url, crawl_name)
    assert (done["failed"], done["dead"], done["fetched"]) == (3, 3, 0)
    assert requested == []


def test_queue_submit_refuses_what_submit_refuses(redis_url: str, crawl_name: str) -> None:
    """``Queue.submit()`` of a loopback URL without an allow raises the CLI's refusal
    (in Python's words) and writes nothing; with ``allow_nets`` it goes in."""
    url = "http://127.0.0.2:9/"
    line = assert_one_line_error(hashcrawl("submit", *at(redis_url, crawl_name), "--new", url), 2)
    with Queue(redis_url, crawl_name) as queue:
        with pytest.raises(ConfigError) as refused:
            queue.submit([url])
        reason, hint = str(refused.value).split("; ")
        assert line == f"hashcrawl: {reason}; allow it with --allow-net CIDR or --allow-private"
        assert hint == "allow it with allow_nets=['CIDR'] or allow_private=True"
        with redis.Redis.from_url(redis_url) as client:
            assert crawl_keys(client, crawl_name) == set()
        assert queue.submit([url], allow_nets=SITE_NETS) == 1


# -- point 2: a mistyped crawl name creates nothing -------------------------------------------


def test_submit_to_a_crawl_that_does_not_exist_is_refused_without_new(
    redis_url: str, crawl_name: str
) -> None:
    """``submit --crawl bokos`` (a typo) exits 2 naming the crawls there, creating nothing;
    ``--new`` starts it."""
    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", "http://a.example/"))
    typo = crawl_name + "x"
    line = assert_one_line_error(hashcrawl("submit", *at(redis_url, typo), "http://a.example/"), 2)
    assert f"no crawl named {typo!r}" in line and crawl_name in line and "--new" in line
    with redis.Redis.from_url(redis_url) as client:
        assert crawl_keys(client, typo) == set()
    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "http://a.example/2"))
    assert status(redis_url, crawl_name)["seen"] == 2


def test_clear_of_a_crawl_that_does_not_exist_is_refused(redis_url: str, crawl_name: str) -> None:
    """``clear --crawl bokos`` exits 2 naming the crawls there, not "deleted 0 keys"."""
    line = assert_one_line_error(hashcrawl("clear", *at(redis_url, crawl_name), "--yes"), 2)
    assert f"no crawl named {crawl_name!r}" in line


def test_clear_without_yes_and_no_terminal_is_refused_and_deletes_nothing(
    redis_url: str, crawl_name: str
) -> None:
    """``clear`` with no terminal to ask on refuses without --yes, and keeps every key."""
    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", "http://a.example/"))
    line = assert_one_line_error(hashcrawl("clear", *at(redis_url, crawl_name), stdin=""), 2)
    assert "--yes" in line
    assert status(redis_url, crawl_name)["seen"] == 1
    assert assert_ok(hashcrawl("clear", *at(redis_url, crawl_name), "--yes")).startswith("deleted")


def test_clear_asks_on_a_terminal_and_deletes_only_on_yes(redis_url: str, crawl_name: str) -> None:
    """On a terminal, ``clear`` names the crawl and what it holds, and deletes on "y"."""
    import pty

    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", "http://a.example/"))
    for answer, kept in ((b"n\n", True), (b"y\n", False)):
        parent, child = pty.openpty()
        args = [sys.executable, "-m", "hashcrawl", "clear", *at(redis_url, crawl_name)]
        with subprocess.Popen(args, stdin=child, stdout=subprocess.PIPE, stderr=child) as process:
            os.close(child)
            asked = b""
            while b"[y/N]" not in asked:
                asked += os.read(parent, 1024)
            os.write(parent, answer)
            out, _ = process.communicate(timeout=COMMAND_TIMEOUT)
        os.close(parent)
        assert crawl_name.encode() in asked
        assert process.returncode == (2 if kept else 0)
        with redis.Redis.from_url(redis_url) as client:
            assert bool(crawl_keys(client, crawl_name)) == kept
    assert out.decode().startswith("deleted")


# -- point 3: a refused worker leaves nothing behind -------------------------------------------


def _loopback_spider(path: Path, url: str) -> Path:
    path.write_text(
        f"import hashcrawl\n\nclass Local(hashcrawl.Spider):\n    start_urls = [{url!r}]\n"
    )
    return path


def test_a_join_refused_for_its_address_rule_records_nothing_and_creates_no_file(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """A ``join --spider`` whose start URL is loopback, without --allow-net: one line in
    the command line's words, no settings recorded, no -o file; the corrected run with
    another --delay is then not refused for disagreeing."""
    spider = _loopback_spider(tmp_path / "local.py", "http://127.0.0.2:9/")
    output = tmp_path / "items.jsonl"
    flags = [*at(redis_url, crawl_name), "--spider", str(spider), "-o", str(output)]
    line = assert_one_line_error(hashcrawl("join", *flags, "--delay", "3"), 2)
    assert "--allow-net" in line and "allow_nets" not in line
    assert not output.exists()
    with redis.Redis.from_url(redis_url) as client:
        assert crawl_keys(client, crawl_name) == set()
    fixed = hashcrawl("join", *flags, "--delay", "0.1", "--idle", "0.5", "--max-attempts", "1",
                      "--allow-net", "127.0.0.2")  # fmt: skip
    assert fixed.code == 0, fixed
    assert status(redis_url, crawl_name)["settings"]["delay"] == 0.1


def test_a_join_refused_for_disagreeing_settings_leaves_no_output_file(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """A join whose --delay differs from the crawl's is refused (exit 2) and its -o file,
    new and empty, is gone again; one that was there before is left as it was."""
    assert_ok(hashcrawl("submit", *at(redis_url, crawl_name), "--new", "http://a.example/"))
    assert_ok(hashcrawl("configure", *at(redis_url, crawl_name), "--delay", "2"))
    new, old = tmp_path / "new.jsonl", tmp_path / "old.jsonl"
    old.write_text("")
    for output in (new, old):
        result = hashcrawl("join", *at(redis_url, crawl_name), "--delay", "3", "-o", str(output))
        assert "disagrees" in assert_one_line_error(result, 2)
    assert not new.exists()
    assert old.exists()


def test_a_crawl_refused_after_its_checks_leaves_no_output_file(tmp_path: Path) -> None:
    """``crawl --shards 2`` is refused once its private Redis is up: no -o file is left."""
    output = tmp_path / "items.jsonl"
    result = hashcrawl(
        "crawl", "--shards", "2", "-o", str(output), "--state-dir", str(tmp_path / "state"),
        "http://a.example/",
    )  # fmt: skip
    assert "--shards" in assert_one_line_error(result, 2)
    assert not output.exists()


def test_a_python_worker_says_why_it_refused_pages(
    redis_url: str, crawl_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``Worker`` without ``allow_nets`` given loopback pages does not end in silence:
    one warning names the rule and Python's setting, and the pages count as failed."""
    with SiteServer(generate_site(pages=2, hosts=1, seed=6, port=0)) as server:
        with Queue(redis_url, crawl_name) as queue:
            queue.submit([server.site.root], allow_private=True)
        worker = Worker(redis_url, crawl_name, idle=0.3, max_attempts=1, sink=[])
        with caplog.at_level("WARNING", logger="hashcrawl.notices"):
            worker.run_sync()
    told = [r.getMessage() for r in caplog.records if r.name == "hashcrawl.notices"]
    assert len(told) == 1 and "not a public address" in told[0], told
    assert "allow_nets=" in told[0]
    assert worker.tally.failed == 1


def test_a_worker_refused_for_its_address_rule_records_no_settings(
    redis_url: str, crawl_name: str
) -> None:
    """``Worker(...)`` whose spider starts at loopback without ``allow_nets`` raises
    before it records its ``delay``."""
    import hashcrawl

    class Local(hashcrawl.Spider):
        start_urls = ["http://127.0.0.2:9/"]

    worker = Worker(redis_url, crawl_name, spider=Local, delay=3.0)
    with pytest.raises(ConfigError, match="allow_nets"):
        worker.run_sync()
    with redis.Redis.from_url(redis_url) as client:
        assert crawl_keys(client, crawl_name) == set()


# -- point 4: robots.txt exclusions are counted ------------------------------------------------


def _site_with_private_pages() -> Site:
    """One host whose robots.txt disallows /private/, linked from two pages."""
    host = "127.0.0.2"
    page = "<html><title>{}</title>{}</html>".format
    link = '<a href="{}">x</a>'.format
    resources = {
        (host, "/robots.txt"): Resource(200, "text/plain", "User-agent: *\nDisallow: /private/\n"),
        (host, "/"): Resource(
            200, "text/html", page("home", link("/a") + link("/private/1") + link("/private/2"))
        ),
        (host, "/a"): Resource(200, "text/html", page("a", link("/private/1"))),
    }
    return Site(port=0, hosts=(host,), resources=resources, crawl_delays={})


def test_links_robots_txt_disallows_are_counted_once_each(tmp_path: Path) -> None:
    """Two disallowed URLs, one linked twice: robots_denied is 2, neither is requested,
    and the worker says once that robots.txt kept pages out, naming --ignore-robots."""
    state = tmp_path / "state"
    with SiteServer(_site_with_private_pages()) as server:
        result = hashcrawl(
            "crawl", server.site.root, "--state-dir", str(state), "--workers", "1",
            "--idle", "0.5", "--delay", "0.01", "-o", str(tmp_path / "items.jsonl"), *SITE_FLAGS,
        )  # fmt: skip
        paths = sorted(r.path for r in server.requests())
    assert result.code == 0, result
    assert paths == ["/", "/a", "/robots.txt"]
    told = [line for line in result.err.splitlines() if "robots.txt" in line]
    assert len(told) == 1 and "--ignore-robots" in told[0], result.err
    done = json.loads(
        assert_ok(hashcrawl("status", "--state-dir", str(state), "--crawl", "default", "--json"))
    )
    assert done["robots_denied"] == 2


# -- a body cut at --max-body is said too --------------------------------------------------


def test_a_body_cut_at_max_body_is_said_once_naming_the_flag(tmp_path: Path) -> None:
    """Two pages longer than --max-body: both are kept (cut), and one line says so."""
    host = "127.0.0.2"
    big = "<html><title>big</title>" + "x" * 5000 + "</html>"
    resources = {
        (host, "/"): Resource(200, "text/html", '<a href="/b">b</a>' + big),
        (host, "/b"): Resource(200, "text/html", big),
    }
    site = Site(port=0, hosts=(host,), resources=resources, crawl_delays={})
    items = tmp_path / "items.jsonl"
    with SiteServer(site) as server:
        result = hashcrawl(
            "crawl", server.site.root, "--state-dir", str(tmp_path / "state"), "--workers", "1",
            "--idle", "0.5", "--delay", "0.01", "--max-body", "1000", "-o", str(items),
            *SITE_FLAGS,
        )  # fmt: skip
    assert result.code == 0, result
    told = [line for line in result.err.splitlines() if "--max-body" in line]
    assert len(told) == 1 and "1,000 bytes" in told[0], result.err
    assert len(items.read_text().splitlines()) == 2


# -- --accept-regex / --reject-regex: links refused are counted and said -------------------


def _site_with_sections() -> Site:
    """A root linking /docs/a, /docs/b.pdf (twice) and /blog/c; /docs/a links /docs/b.pdf."""
    host = "127.0.0.2"
    page = "text/html"
    links = '<a href="/docs/a">a</a><a href="/docs/b.pdf">b</a><a href="/blog/c">c</a>'
    resources = {
        (host, "/"): Resource(200, page, links + '<a href="/docs/b.pdf">b again</a>'),
        (host, "/docs/a"): Resource(200, page, '<a href="/docs/b.pdf">b</a>'),
        (host, "/docs/b.pdf"): Resource(200, "application/pdf", "%PDF"),
        (host, "/blog/c"): Resource(200, page, "c"),
    }
    return Site(port=0, hosts=(host,), resources=resources, crawl_delays={})


def test_links_the_patterns_refuse_are_not_fetched_counted_once_and_said(tmp_path: Path) -> None:
    """--accept-regex '/docs/|/$' --reject-regex '\\.pdf$': only / and /docs/a are
    fetched; the two refused URLs count once each, and each pattern is said once with
    its flag."""
    state = tmp_path / "state"
    patterns = ("--accept-regex", "/docs/|/$", "--reject-regex", r"\.pdf$")
    with SiteServer(_site_with_sections()) as server:
        result = hashcrawl(
            "crawl", server.site.root, "--state-dir", str(state), "--workers", "1",
            "--idle", "0.5", "--delay", "0.01", "-o", str(tmp_path / "items.jsonl"),
            *patterns, *SITE_FLAGS,
        )  # fmt: skip
        paths = sorted(r.path for r in server.requests())
    assert result.code == 0, result
    assert paths == ["/", "/docs/a", "/robots.txt"]
    accept = [line for line in result.err.splitlines() if "--accept-regex" in line]
    reject = [line for line in result.err.splitlines() if "--reject-regex" in line]
    assert len(accept) == 1 and "/blog/c does not match" in accept[0], result.err
    assert len(reject) == 1 and "b.pdf matches" in reject[0], result.err
    at_state = ("--state-dir", str(state), "--crawl", "default")
    done = json.loads(assert_ok(hashcrawl("status", *at_state, "--json")))
    assert done["pattern_refused"] == 2


def test_a_start_url_the_crawls_patterns_refuse_is_refused_and_nothing_written(
    redis_url: str, crawl_name: str
) -> None:
    """A crawl configured with --reject-regex: ``submit`` of a URL it matches says so in
    one line naming the pattern and writes nothing; ``Queue.submit`` refuses the same."""
    crawl = at(redis_url, crawl_name)
    assert_ok(hashcrawl("submit", *crawl, "--new", "http://a.example/"))
    assert_ok(hashcrawl("configure", *crawl, "--reject-regex", "/private/"))
    client = redis.Redis.from_url(redis_url)
    keys = {key: client.dump(key) for key in crawl_keys(client, crawl_name)}
    url = "http://a.example/private/x"
    said = assert_one_line_error(hashcrawl("submit", *crawl, url), 2)
    assert "--reject-regex '/private/'" in said and "not submitted" in said
    with Queue(redis_url, crawl_name) as queue, pytest.raises(ConfigError, match="/private/"):
        queue.submit(["http://b.example/", url])  # checked whole: the first is not in either
    assert {key: client.dump(key) for key in crawl_keys(client, crawl_name)} == keys


def test_a_crawl_whose_start_url_its_patterns_refuse_writes_nothing(tmp_path: Path) -> None:
    """``crawl URL --reject-regex`` matching URL: one line naming the pattern, exit 2, and
    neither a state directory nor an -o file."""
    state, items = tmp_path / "state", tmp_path / "items.jsonl"
    result = hashcrawl(
        "crawl", "http://127.0.0.2:9/x", "--reject-regex", "/x$", "--allow-private",
        "--state-dir", str(state), "-o", str(items),
    )  # fmt: skip
    assert "--reject-regex '/x$'" in assert_one_line_error(result, 2)
    assert not state.exists() and not items.exists()
