"""How a setting is declared (``_settings``): its :class:`Flag`, the parsers from a flag's
text to a value, and the checks of a value.

A parser raises ``argparse.ArgumentTypeError`` (argparse names the flag); a check raises
``ConfigError`` naming the flag by :func:`flag_name`. ``header_pairs`` reads the
``--header`` lines the parsers wrote, for the fetcher.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import attrs

from hashcrawl._core._nets import parse_net
from hashcrawl._exceptions import ConfigError

NONE = "none"


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _text(text: str) -> str:
    return text


def _pattern(text: str) -> str:
    """A URL pattern RE2 takes (``_core._patterns``: bounded in length and memory)."""
    from hashcrawl._core._patterns import compiled

    try:
        compiled(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Also accepts 'none', for a setting whose default is no limit."""

    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() == NONE else parse(text)

    return parse_or_none


def _header_line(text: str) -> str:
    """A ``Name: value`` header line, checked (the value is never repeated: a credential)."""
    from hashcrawl._core._entry import HEADER_VALUE, TOKEN

    name, colon, value = text.partition(":")
    if not colon or not TOKEN.fullmatch(name.strip()):
        raise argparse.ArgumentTypeError("expected 'Name: value', with a header name before ':'")
    if not HEADER_VALUE.fullmatch(value.strip()):
        raise argparse.ArgumentTypeError(
            f"the value of header {name.strip()} is not one line of ASCII text up to 8 KiB"
        )
    return f"{name.strip()}: {value.strip()}"


def _header_lines(value: Any) -> tuple[str, ...]:
    """``headers=`` as header lines: from a mapping, (name, value) pairs or lines."""
    from collections.abc import Mapping

    items = value.items() if isinstance(value, Mapping) else value
    lines = []
    for item in items:
        text = item if isinstance(item, str) else f"{item[0]}: {item[1]}"
        try:
            lines.append(_header_line(text))
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"--header: {exc}") from None
    return tuple(lines)


#: Where ``crawl`` hands its children the secret settings, out of sight of ``ps``.
HEADERS_ENV_VAR = "HASHCRAWL_HEADERS"
PROXIES_ENV_VAR = "HASHCRAWL_PROXIES"


def _proxy_urls(value: Any) -> tuple[str, ...]:
    """``proxies=`` as a tuple of checked proxy URLs (a password is never repeated)."""
    from hashcrawl._core._proxies import Proxy

    urls = (value,) if isinstance(value, str) else tuple(value)
    for url in urls:
        try:
            Proxy.parse(url)
        except ConfigError as exc:
            raise ConfigError(f"--proxy: {exc}") from None
    return urls


def _statuses(_: object, field: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    for status in value:
        if not 100 <= status <= 599:
            raise ConfigError(
                f"{flag_name(field)} must be HTTP statuses (100 to 599), got {status}"
            )


def header_pairs(lines: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Header lines as (name, value) pairs."""
    return tuple((name, value.strip()) for name, _, value in (x.partition(":") for x in lines))


@attrs.frozen(kw_only=True)
class Flag:
    """How a setting appears on the command line.

    Args:
        help: the flag's help text (the default is added when it is shown).
        parse: from the flag's text to the setting's value; None for a switch.
        metavar: the value's placeholder in help.
        name: the flag when it is not ``--`` and the field's name with dashes.
        negate: a switch that sets the field False (``--ignore-robots``).
        repeat: a flag given once per value of a tuple field.
        secret: never written on a child's command line (see ``_cli._flagset.write_flags``).
        crawl: one value for the whole fleet, stored with the crawl (``_crawlconfig``):
            politeness, scope, and limits whose outcome would otherwise depend on which
            worker owns a host or fetched a page.
        fixed: a crawl setting the running workers cannot take on (their connection
            pools, robots.txt rules and leases are built on it): it changes only while
            no worker is a member.
    """

    help: str
    parse: Callable[[str], Any] | None = _number
    metavar: str | None = None
    name: str | None = None
    negate: bool = False
    repeat: bool = False
    secret: bool = False
    crawl: bool = False
    fixed: bool = False


def flag_name(field: attrs.Attribute[Any]) -> str:
    flag: Flag = field.metadata["flag"]
    return flag.name or "--" + field.name.replace("_", "-")


def _positive(_: object, field: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{flag_name(field)} must be above 0, got {value}")


def _cookie_bytes(_: object, field: attrs.Attribute[Any], value: int) -> None:
    """A host's cookie jar: at least one byte, at most 64 KiB (an owner keeps 10,000)."""
    if not 1 <= value <= 65_536:
        raise ConfigError(f"{flag_name(field)} must be 1 to 65536, got {value}")


def _not_negative(_: object, field: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value < 0:
        raise ConfigError(f"{flag_name(field)} must be 0 or more, got {value}")


def _networks(_: object, field: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for net in value:
        parse_net(net)


def _user_agent(_: object, field: attrs.Attribute[Any], value: str) -> None:
    """One line of ASCII text that starts with a product token (robots.txt matches it)."""
    from hashcrawl._core._entry import HEADER_VALUE
    from hashcrawl._core._robotsrules import product_token

    if not HEADER_VALUE.fullmatch(value):
        raise ConfigError(f"{flag_name(field)} must be one line of ASCII text up to 8 KiB")
    try:
        product_token(value)
    except ConfigError:
        raise ConfigError(
            f"{flag_name(field)} must start with a product token like 'hashcrawl/0.1', "
            f"got {value[:100]!r}"
        ) from None


def _regex(_: object, field: attrs.Attribute[Any], value: str | None) -> None:
    """A pattern RE2 takes, as :func:`_pattern` checks a flag's (a keyword's too)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigError(f"{flag_name(field)} must be a string, got {type(value).__name__}")
    try:
        _pattern(value)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{flag_name(field)}: {exc}") from None


def _port(_: object, field: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and not 1 <= value <= 65535:
        raise ConfigError(f"{flag_name(field)} must be from 1 to 65535, got {value}")


def _setting(
    default: Any, help: str, *, check: Any = None, converter: Any = None, **flag: Any
) -> Any:
    return attrs.field(
        default=default,
        validator=check,
        converter=converter,
        metadata={"flag": Flag(help=help, **flag)},
    )


def _url_pattern(help: str) -> Any:
    """A crawl setting that holds one URL pattern (``--accept-regex``, ``--reject-regex``)."""
    return _setting(None, help, check=_regex, parse=_or_none(_pattern), metavar="REGEX", crawl=True)
