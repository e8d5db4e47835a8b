"""Settings are declared once: the flags, the checks and the child command line agree."""

from __future__ import annotations

import argparse

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._cli._flagset import add_flags, read_flags, write_flags
from hashcrawl._cli._parser import build_parser
from hashcrawl._core._flags import flag_name
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import ConfigError


def _parse(flags: list[str]) -> Settings:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return read_flags(parser.parse_args(flags))


def test_no_flags_give_the_default_settings() -> None:
    """A command line without setting flags gives exactly Settings()."""
    assert _parse([]) == Settings()


@given(
    delay=st.floats(0, 10),
    per_host=st.integers(1, 100),
    idle=st.none() | st.floats(0, 1e6),
    max_depth=st.none() | st.integers(0, 1000),
    domains=st.lists(st.from_regex(r"[a-z]{1,8}\.(com|org)", fullmatch=True), max_size=3),
    obey=st.booleans(),
    span=st.booleans(),
    sitemaps=st.booleans(),
)
def test_a_child_worker_gets_the_same_settings(
    delay: float,
    per_host: int,
    idle: float | None,
    max_depth: int | None,
    domains: list[str],
    obey: bool,
    span: bool,
    sitemaps: bool,
) -> None:
    """write_flags' command line parses back to equal settings, whatever the values."""
    settings = Settings(
        delay=delay,
        per_host=per_host,
        idle=idle,
        max_depth=max_depth,
        allow_domains=tuple(domains),
        obey_robots=obey,
        span_hosts=span,
        sitemaps=sitemaps,
    )
    assert _parse(write_flags(settings)) == settings


def test_join_and_crawl_have_a_flag_for_every_setting_with_its_default() -> None:
    """Every field of Settings is a flag of join and crawl, and its help shows a default."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("join", "crawl"):
        actions = {
            flag: action
            for action in commands.choices[command]._actions
            for flag in action.option_strings
        }
        for field in attrs.fields(Settings):
            action = actions[flag_name(field)]
            assert action.dest == field.name
            if action.nargs != 0:
                assert "(default: " in (action.help or ""), field.name


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-depth", "-1"], "--max-depth must be 0 or more, got -1"),
        (["--per-host", "0"], "--per-host must be above 0, got 0"),
        (["--max-body", "0"], "--max-body must be above 0, got 0"),
        (["--delay", "40"], "--delay must be at most half of --lease, got 40.0 and 60.0"),
    ],
)
def test_a_value_out_of_range_names_its_flag(flags: list[str], message: str) -> None:
    """A setting out of range raises ConfigError naming the flag, the rule and the value."""
    with pytest.raises(ConfigError) as caught:
        _parse(flags)
    assert str(caught.value) == message


def test_an_unknown_keyword_setting_is_named() -> None:
    """Settings.of names an unknown setting and lists the known ones."""
    known = "settings are accept_regex, allow_domains"
    with pytest.raises(ConfigError, match=f"unknown setting 'dealy'; {known}"):
        Settings.of({"dealy": 1.0})


def test_none_lifts_a_limit_on_the_command_line() -> None:
    """'none' gives no limit for a setting whose default is no limit, and for --idle."""
    settings = _parse(["--idle", "none", "--max-depth", "NONE", "--max-pages", "none"])
    assert (settings.idle, settings.max_depth, settings.max_pages) == (None, None, None)
