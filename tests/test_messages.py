"""Tests that a mistake's one line says what to do about it (issue 49, point 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hashcrawl._store._server import RedisServer
from testing.testsite import SiteServer, generate_site
from tests.test_cli import (
    SECRET,
    assert_one_line_error,
    hashcrawl,
    secret_server,  # noqa: F401 (a fixture)
)


def _load_error(tmp_path: Path, text: str) -> str:
    """The line ``crawl --spider`` says for a spider file holding ``text``, given by a
    relative path as a user types it."""
    (tmp_path / "spider.py").write_text(text)
    result = hashcrawl("crawl", "--spider", "spider.py", "--state-dir", str(tmp_path / "s"))
    return assert_one_line_error(result, 2)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_an_unported_scrapy_spider_is_told_how_to_port(in_tmp: Path) -> None:
    """``import scrapy`` without Scrapy: the line names the import to change, and where."""
    line = _load_error(in_tmp, "import scrapy\n\nclass S(scrapy.Spider):\n    name = 's'\n")
    assert "line 1: ModuleNotFoundError: No module named 'scrapy'" in line
    assert "import hashcrawl as scrapy" in line and "Coming from Scrapy" in line


def test_an_import_error_in_a_spider_names_its_line(in_tmp: Path) -> None:
    """A spider given by a relative path whose import fails: the line number is said."""
    line = _load_error(in_tmp, "import hashcrawl\n\nimport no_such_module_here\n")
    assert "--spider spider.py, line 3: ModuleNotFoundError" in line


def test_a_mistyped_crawl_under_state_dir_names_the_crawls_there(tmp_path: Path) -> None:
    """``status --state-dir DIR --crawl bokos`` lists DIR's crawls, as --redis does."""
    with SiteServer(generate_site(pages=2, hosts=1, seed=3, port=0)) as server:
        flags = ["--state-dir", str(tmp_path), "--crawl", "books", "--idle", "0.3", "-q"]
        done = hashcrawl("crawl", server.site.root, *flags, "--allow-net", "127.0.0.2")
    assert done.code == 0, done
    line = assert_one_line_error(
        hashcrawl("status", "--state-dir", str(tmp_path), "--crawl", "bokos"), 2
    )
    assert line.endswith("no crawl named 'bokos' there; crawls there: books")


def test_a_missing_redis_password_says_how_to_give_one(
    secret_server: RedisServer,  # noqa: F811 (the fixture)
) -> None:
    """A server that wants a password, given none: the line says the three ways."""
    result = hashcrawl("status", "--redis", f"redis://127.0.0.1:{secret_server.port}/0")
    line = assert_one_line_error(result, 1)
    assert "Authentication required" in line
    assert "redis://:PASSWORD@host:port/db" in line and "--redis-password-file" in line
    assert SECRET not in line


def test_configure_help_says_a_flag_left_out_changes_nothing() -> None:
    """``configure --help`` never calls hashcrawl's default what a left-out flag gives."""
    result = hashcrawl("configure", "--help")
    text = " ".join(result.out.split())
    settings = text.split("--delay S least", 1)[1]  # the settings, from --delay on
    assert "(default: " not in settings
    assert settings.split("--per-host", 1)[0].endswith(
        "(left out: unchanged; hashcrawl's default: 1.0) "
    )
