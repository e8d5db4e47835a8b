"""The bridge between the settings and a command line: one flag per setting.

From the one declaration of each setting (:class:`~hashcrawl._core._settings.Settings`,
its :class:`~hashcrawl._core._flags.Flag`) come the ``join`` and ``crawl`` flags
(:func:`add_flags`), the settings a command line gives (:func:`read_flags`), the crawl
settings it gave (:func:`given_flags`), and the command line that gives a child worker
the same settings (:func:`write_flags`). The secret settings travel in the environment
(:func:`from_environment`), out of sight of ``ps``.
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from hashcrawl._core._flags import HEADERS_ENV_VAR, NONE, PROXIES_ENV_VAR, Flag, flag_name
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError


def from_environment(name: str) -> list[str]:
    """The JSON list of strings in ``$name`` ([] when unset).

    Raises:
        ConfigError: it is not such a list (its text is not repeated: credentials).
    """
    import json
    import os

    text = os.environ.get(name)
    if not text:
        return []
    try:
        lines = json.loads(text)
    except ValueError:
        lines = None
    if not (isinstance(lines, list) and all(isinstance(x, str) for x in lines)):
        raise ConfigError(f"${name} must be a JSON list of strings")
    return lines


def read_flags(args: argparse.Namespace) -> Settings:
    """The settings that :func:`add_flags`' flags gave (and the secrets' variables);
    a crawl setting not given has its default (see :func:`given_flags`)."""
    given: dict[str, Any] = {}
    for field in attrs.fields(Settings):
        value = getattr(args, field.name, field.default)
        if field.metadata["flag"].repeat:
            value = tuple(value or ())
        given[field.name] = value
    given["headers"] = (*from_environment(HEADERS_ENV_VAR), *given["headers"])
    given["proxies"] = (*from_environment(PROXIES_ENV_VAR), *given["proxies"])
    return Settings(**given)


def write_flags(settings: Settings, *, worker_only: bool = False) -> list[str]:
    """The command line that gives a child worker these settings (with
    ``worker_only``, only those that are not crawl settings: it takes the crawl's)."""
    flags: list[str] = []
    for field in attrs.fields(Settings):
        value = getattr(settings, field.name)
        if value == field.default or (worker_only and field.name in CRAWL):
            continue
        flag: Flag = field.metadata["flag"]
        name = flag_name(field)
        if flag.secret:
            continue  # handed over through the environment (HEADERS_ENV_VAR)
        if flag.parse is None:
            flags.append(name)
        elif flag.repeat:
            for each in value:
                flags += [name, str(each)]
        else:
            flags += [name, NONE if value is None else str(value)]
    return flags


def add_flags(
    parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None, *, changes: bool = False
) -> None:
    """Give ``parser`` one flag per setting (or per one of ``only``), with its default.

    A crawl setting's flag leaves no attribute when it is not given (its default is
    shown in the help), so that :func:`given_flags` can tell what the command line said.
    With ``changes`` (``configure``), a flag left out changes nothing, and its help
    says so rather than call the default what it gets.
    """
    for field in attrs.fields(Settings):
        if only is not None and field.name not in only:
            continue
        flag: Flag = field.metadata["flag"]
        name = flag_name(field)
        unset = argparse.SUPPRESS if flag.crawl else None
        if flag.parse is None:
            action = "store_false" if flag.negate else "store_true"
            switch = parser.add_argument(name, dest=field.name, action=action, help=flag.help)
            switch.default = unset if flag.crawl else switch.default
            continue
        shown = field.default
        shown = NONE if shown in (None, ()) else shown
        parser.add_argument(
            name,
            dest=field.name,
            type=flag.parse,
            metavar=flag.metavar,
            action="append" if flag.repeat else "store",
            default=unset if flag.repeat or flag.crawl else field.default,
            help=f"{flag.help} ({_default_said(shown, changes)})",
        )


def _default_said(shown: Any, changes: bool) -> str:
    return f"left out: unchanged; hashcrawl's default: {shown}" if changes else f"default: {shown}"


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The crawl settings the command line gave, by field name (checked and converted)."""
    given = {name: getattr(args, name) for name in CRAWL if hasattr(args, name)}
    settings = Settings.of({**given, **_partner(given)})
    return {name: getattr(settings, name) for name in given}


def _partner(given: dict[str, Any]) -> dict[str, Any]:
    """A lease or delay that lets one of them be checked alone: the crawl's other one
    may differ from the default, and the two are checked together against it."""
    if ("delay" in given) == ("lease" in given):
        return {}
    if "delay" in given:
        return {"lease": max(Settings().lease, 2 * given["delay"])}
    return {"delay": min(Settings().delay, given["lease"] / 2)}
