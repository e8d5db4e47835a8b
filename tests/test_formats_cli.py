"""The item formats and --log-file through the command line, on a loopback site."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import redis

from hashcrawl._store._server import RedisServer
from testing.formats import FORMATS, read_items
from testing.testsite import SITE_FLAGS, Site, SiteServer, generate_site

TIMEOUT = 300  # seconds: a hang's ceiling, never a measure of speed
KNOWN = ".jsonl, .jl, .json, .csv, .xml, .parquet, .warc.gz, .warc"


@attrs.frozen
class Ran:
    code: int
    err: str


def hashcrawl(*args: str) -> Ran:
    done = subprocess.run(
        [sys.executable, "-m", "hashcrawl", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return Ran(done.returncode, done.stderr)


@attrs.frozen
class Crawled:
    site: Site
    directory: Path
    result: Ran


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> Crawled:
    """One two-worker crawl writing every format at once, its stderr also in a log file."""
    directory = tmp_path_factory.mktemp("formats")
    site = generate_site(pages=30, hosts=3, seed=49, port=0)
    outputs = [arg for ending in FORMATS for arg in ("-o", str(directory / f"items.{ending}"))]
    flags = ["--workers", "2", "--delay", "0.02", "--idle", "1", "--span-hosts", *SITE_FLAGS]
    flags += ["--log-file", str(directory / "crawl.log"), "--state-dir", str(directory / "s")]
    with SiteServer(site) as server:
        result = hashcrawl("crawl", server.site.root, *outputs, *flags)
        return Crawled(server.site, directory, result)


@pytest.mark.parametrize("ending", FORMATS)
def test_crawl_writes_each_format_its_reader_reads(crawled: Crawled, ending: str) -> None:
    """-o items.json, .csv, .xml, .parquet (and .jsonl): each read by its standard reader
    holds one item for every page of the site."""
    assert crawled.result.code == 0, crawled.result.err
    urls = [item["url"] for item in read_items(crawled.directory / f"items.{ending}")]
    assert sorted(urls) == sorted(crawled.site.expected())


def test_log_file_holds_what_the_crawl_and_its_workers_said(crawled: Crawled) -> None:
    """Every line of the log was said on stderr, the summary and each worker's joining
    line (said by the worker processes themselves) among them."""
    log = (crawled.directory / "crawl.log").read_text().splitlines()
    said = crawled.result.err.splitlines()
    assert set(log) <= set(said)
    assert any(line.startswith("crawl default: ") for line in log), log


def test_join_with_an_unknown_ending_changes_nothing_in_redis_or_on_disk(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """-o items.txt: one line listing the endings, exit 2, no file, no key in Redis; the
    line is in the --log-file too."""
    here = tmp_path / "here"
    here.mkdir()
    result = hashcrawl(
        "join", "--redis", redis_server.url, "--crawl", "books", "--delay", "3",
        "-o", str(here / "items.txt"), "--log-file", str(here / "join.log"),
    )  # fmt: skip
    assert result.code == 2
    assert result.err.count("\n") == 1 and KNOWN in result.err
    assert (here / "join.log").read_text() == result.err
    assert sorted(p.name for p in here.iterdir()) == ["join.log"]
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.dbsize() == 0


def test_crawl_with_an_unknown_ending_starts_nothing(tmp_path: Path) -> None:
    """The same for crawl: refused before its state directory or Redis exist."""
    result = hashcrawl(
        "crawl", "http://a.example/", "-o", str(tmp_path / "items.xlsx"),
        "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    assert result.code == 2 and KNOWN in result.err
    assert list(tmp_path.iterdir()) == []


def test_parquet_output_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """Parquet output is a directory of parts: a file of that name is refused, unchanged."""
    path = tmp_path / "items.parquet"
    path.write_text("mine")
    result = hashcrawl("crawl", "http://a.example/", "-o", str(path), "--state-dir", "st")
    assert result.code == 2 and "is a file: Parquet output is a directory" in result.err
    assert path.read_text() == "mine"


def test_crawls_workers_get_the_log_file_by_its_whole_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --log-file reaches crawl's workers as the same file, whatever their
    directory."""
    from hashcrawl._cli._parser import build_parser
    from hashcrawl._cli._workers import _child_command

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["crawl", "--log-file", "crawl.log", "http://x.test/"])
    command = _child_command(args)
    assert command[command.index("--log-file") + 1] == str(tmp_path / "crawl.log")


def test_the_log_gets_whole_lines_and_what_a_signal_handler_says(tmp_path: Path) -> None:
    """A line written in pieces lands in the file as one line once it ends; a signal
    handler's bare write goes to both; the rest of a line is kept at the close."""
    from hashcrawl._cli import _logfile

    path, terminal = tmp_path / "log", tmp_path / "terminal"
    saved = sys.stderr
    with terminal.open("w") as stream:
        sys.stderr = stream
        try:
            _logfile.log_to(str(path))
            print("hashcrawl: one", end="", file=sys.stderr)
            assert path.read_text() == ""
            print(" line", file=sys.stderr)
            _logfile.say_raw("hashcrawl: stopping")
            print("unended", end="", file=sys.stderr)
            _logfile.stop_logging()
            assert sys.stderr is stream
        finally:
            sys.stderr = saved
    assert path.read_text() == "hashcrawl: one line\nhashcrawl: stopping\nunended\n"
    assert "hashcrawl: one line\n" in terminal.read_text()
    assert "hashcrawl: stopping\n" in terminal.read_text()


def test_a_log_file_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    """--log-file in a missing directory: exit 2 and one line naming the flag."""
    result = hashcrawl(
        "crawl", "http://a.example/", "--log-file", str(tmp_path / "no" / "log"),
        "--state-dir", str(tmp_path / "state"),
    )  # fmt: skip
    assert result.code == 2 and result.err.startswith("hashcrawl: --log-file cannot write")
    assert result.err.count("\n") == 1 and list(tmp_path.iterdir()) == []
