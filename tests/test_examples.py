"""Every example in docs/examples runs against a real Redis and does what the docs say."""

from __future__ import annotations

import argparse
import ast
import collections
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import hashcrawl
from hashcrawl._cli._parser import build_parser
from hashcrawl._store._server import RedisServer
from testing.testsite import SITE_NETS

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
TIMEOUT = 60


def run_example(name: str, cwd: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """Run an example as a user would, in ``cwd``, and return its output lines."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def with_prefix(lines: list[str], prefix: str) -> list[str]:
    return [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]


@pytest.fixture(scope="module")
def custom_fetcher_output(
    shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> list[str]:
    """What custom_fetcher.py prints, run once for the tests that read it."""
    cwd = tmp_path_factory.mktemp("custom_fetcher")
    return run_example("custom_fetcher.py", cwd, shared_redis.url, "t" + uuid.uuid4().hex[:10])


def test_custom_fetcher_writes_one_item_per_page_it_serves(
    custom_fetcher_output: list[str],
) -> None:
    """The dict fetcher's pages, a 404 included, are each written once, on another host too."""
    assert sorted(with_prefix(custom_fetcher_output, "item ")) == [
        "200 https://example.com/ Home",
        "200 https://example.com/about About",
        "200 https://other.example/ Other",
        "404 https://example.com/gone None",
    ]


def test_custom_fetcher_is_asked_for_robots_txt_and_obeyed(
    custom_fetcher_output: list[str],
) -> None:
    """Each host's robots.txt comes through the custom fetcher, and a disallowed page is not."""
    fetched = with_prefix(custom_fetcher_output, "fetch ")
    assert collections.Counter(fetched) == dict.fromkeys(
        [
            "https://example.com/robots.txt",
            "https://example.com/",
            "https://example.com/about",
            "https://example.com/gone",
            "https://other.example/robots.txt",
            "https://other.example/",
        ],
        1,
    )
    assert fetched.index("https://example.com/robots.txt") < fetched.index("https://example.com/")


def test_examples_take_the_redis_url_from_hashcrawl_redis(tmp_path: Path, redis_url: str) -> None:
    """Without arguments, an example crawls with the Redis that $HASHCRAWL_REDIS names."""
    lines = run_example("custom_fetcher.py", tmp_path, env={"HASHCRAWL_REDIS": redis_url})
    assert len(with_prefix(lines, "item ")) == 4


def test_spider_callbacks_pass_meta_from_category_to_product(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """parse_product finds the category that parse put in each request's meta."""
    lines = run_example("spider_callbacks.py", tmp_path, redis_url, crawl_name)
    items = sorted((ast.literal_eval(line) for line in lines), key=lambda item: item["name"])
    assert items == [
        {"name": "Dune", "category": "books"},
        {"name": "Emma", "category": "books"},
        {"name": "Go", "category": "games"},
    ]


def test_login_search_api_logs_in_searches_and_reads_the_api(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """Against the form site: one login POST, two search POSTs sent with its cookie, one
    JSON API call with its Accept header, and the items that css() and json() found."""
    from testing.formsite import FormSite

    with FormSite() as site:
        lines = run_example(
            "login_search_api.py", tmp_path, site.root, redis_url, crawl_name, *SITE_NETS
        )
        seen = site.seen()
    assert [ast.literal_eval(line) for line in lines] == [
        {"from": "api", "name": "Blue widget"},
        {"from": "api", "name": "Red widget"},
        {"from": "page", "name": "Blue widget", "price": 12.5},
        {"from": "page", "name": "Green gadget", "price": 30.0},
        {"from": "page", "name": "Red widget", "price": 9.99},
    ]
    posts = sorted((s.path, s.body, s.status) for s in seen if s.method == "POST")
    assert posts == [
        ("/login", b"user=ann&password=hunter2", 200),
        ("/search", b"q=gadget", 200),
        ("/search", b"q=widget", 200),
    ]
    assert all("session=" in s.cookie for s in seen if s.path == "/search")
    api = [(s.headers.get("accept"), s.status) for s in seen if s.path.startswith("/api/")]
    assert api == [("application/json", 200)]


def test_sqlite_sink_keeps_one_row_per_url_when_a_page_is_delivered_twice(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """The start page, crawled twice, is upserted: one row, written twice; others once."""
    lines = run_example("sqlite_sink.py", tmp_path, redis_url, crawl_name)
    assert lines == [
        "https://example.com/ Home 200 2",
        "https://example.com/a A 200 1",
        "https://example.com/b B 200 1",
    ]
    with sqlite3.connect(tmp_path / "pages.sqlite") as db:
        rows = db.execute("SELECT url, times FROM pages ORDER BY url").fetchall()
    assert rows == [
        ("https://example.com/", 2),
        ("https://example.com/a", 1),
        ("https://example.com/b", 1),
    ]


def test_queue_feeds_a_running_worker_and_leaves_out_urls_seen_before(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """Both batches are crawled while the worker runs; the URL in both is crawled once."""
    lines = run_example("feed_with_queue.py", tmp_path, redis_url, crawl_name)
    assert lines[:2] == ["submitted 2 new of 2", "submitted 2 new of 3"]
    assert "status: {'seen': 4, 'fetched': 4, 'ended': True}" in lines
    assert sorted(with_prefix(lines, "crawled ")) == [
        "https://blog.example/1",
        "https://news.example/1",
        "https://news.example/2",
        "https://news.example/3",
    ]


def test_two_processes_write_each_page_once_between_them(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """Two worker processes share the hosts, and the 100 pages give exactly 100 items."""
    lines = run_example("two_processes.py", tmp_path, redis_url, crawl_name)
    assert lines[0] == "items: 100 pages: 100 of 100"
    per_worker = ast.literal_eval(lines[1].removeprefix("per worker: "))
    assert len(per_worker) == 2 and sum(per_worker) == 100


# --- the docs around the examples ---------------------------------------------------------

DOCS = EXAMPLES.parent


def python_blocks(doc: str) -> list[str]:
    """The ```python blocks of a page of docs/, in order."""
    text = (DOCS / doc).read_text()
    return [block.split("\n```", 1)[0] for block in text.split("```python\n")[1:]]


def test_api_reference_has_a_section_for_every_public_name() -> None:
    """Each name in hashcrawl.__all__ has its own heading in docs/api.md."""
    headings = {
        line.strip("# `").split("`")[0]
        for line in (DOCS / "api.md").read_text().splitlines()
        if line.startswith("#")
    }
    assert set(hashcrawl.__all__) - headings == set()


def test_api_reference_lists_every_command_and_flag() -> None:
    """Every subcommand of the CLI has a heading, and every flag of each is in docs/api.md."""
    text = (DOCS / "api.md").read_text()
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        assert f"### `hashcrawl {name}`" in text
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue  # a hidden flag (join --child) is not for people
            for flag in action.option_strings:
                assert f"`{flag}" in text, (name, flag)


def test_every_python_block_in_the_docs_compiles() -> None:
    """The tutorial's and the reference's Python snippets are valid Python."""
    for doc in ("tutorial.md", "api.md"):
        for block in python_blocks(doc):
            compile(block, doc, "exec")


def test_api_reference_snippets_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's snippets that need no Redis run, their assertions included."""
    monkeypatch.chdir(tmp_path)
    for block in python_blocks("api.md"):
        if "redis://" not in block:
            exec(block, {"hashcrawl": hashcrawl})


@pytest.mark.parametrize(
    ("name", "items"), [("books.py", 21), ("login.py", 7), ("catalogue.py", 16)]
)
def test_a_scrapy_port_runs_with_hashcrawl_crawl_as_the_tutorial_says(
    tmp_path: Path, name: str, items: int
) -> None:
    """``hashcrawl crawl --spider from_scrapy/NAME`` (two workers) gives the port's items;
    tests/test_scrapy_ports.py checks what they are."""
    from testing.scrapysite import ScrapySite

    with ScrapySite() as site:
        done = subprocess.run(
            [sys.executable, "-m", "hashcrawl", "crawl", "--spider",
             str(EXAMPLES / "from_scrapy" / name), "-o", "items.jsonl", "--workers", "2",
             "--allow-net", "127.0.0.2", "--delay", "0.02", "--idle", "0.5"],
            cwd=tmp_path,
            env={**os.environ, "DEMO_SITE": site.root},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "items.jsonl").read_text().splitlines()) == items


@pytest.mark.skipif(
    not any(map(shutil.which, ("chromium", "chromium-browser"))),
    reason="no Chromium on PATH (scripts/test installs it)",
)
def test_rendered_pages_reads_what_scripts_and_load_more_wrote(
    tmp_path: Path, redis_url: str, crawl_name: str
) -> None:
    """Against the JS site: the items its scripts write and "Load more" appends, and the
    evaluate step's count on response.render."""
    from testing.jssite import JsSite

    with JsSite() as site:
        lines = run_example(
            "rendered_pages.py", tmp_path, site.root + "/", redis_url, crawl_name, *SITE_NETS
        )
        paths = {seen.path for seen in site.log}
    assert [ast.literal_eval(line) for line in lines] == [
        {"page": "more", "counted": 4},
        {"page": "more", "item": "more-1"},
        {"page": "more", "item": "more-2"},
        {"page": "more", "item": "more-3"},
        {"page": "more", "item": "more-4"},
        {"page": "script", "item": "app-js"},
        {"page": "script", "item": "script-1"},
        {"page": "script", "item": "script-2"},
    ]
    assert {"/app.js", "/api/more"} <= paths
