"""The checks and converters of :class:`~hashcrawl.Request`'s fields: each value a caller
(or a queue entry read back) gives is bounded as ``_core._entry`` bounds entries, and a bad
one is refused with a ``ConfigError`` naming the field."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from hashcrawl._core._entry import (
    HEADER_VALUE,
    MAX_CB_KWARGS,
    MAX_ENTRY_BYTES,
    MAX_HEADERS,
    MAX_REDIRECTS,
    MAX_STATUSES,
    MAX_TIMEOUT,
    TOKEN,
)
from hashcrawl._exceptions import ConfigError

Headers = tuple[tuple[str, str], ...]


def _json_meta(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise ConfigError(f"Request.meta must be JSON-serialisable, got {value!r:.80}") from None


def _headers(value: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Headers:
    """Headers as (name, value) pairs, each checked: they travel in a queue entry."""
    pairs = list(value.items() if isinstance(value, Mapping) else value or ())
    if len(pairs) > MAX_HEADERS:
        raise ConfigError(f"Request.headers: {len(pairs)} headers, over {MAX_HEADERS}")
    checked = []
    for pair in pairs:
        name, text = pair
        if not (isinstance(name, str) and TOKEN.fullmatch(name)):
            raise ConfigError(f"Request.headers: {name!r:.80} is not a header name")
        if not (isinstance(text, str) and HEADER_VALUE.fullmatch(text)):
            raise ConfigError(
                f"Request.headers: the value of {name} is not one line of ASCII text up to 8 KiB"
            )
        checked.append((name, text))
    return tuple(checked)


def _body(value: bytes | str | None) -> bytes:
    body = value.encode("utf-8") if isinstance(value, str) else bytes(value or b"")
    if len(body) > MAX_ENTRY_BYTES:
        raise ConfigError(
            f"Request.body is {len(body)} bytes; a request travels in a queue entry of at "
            f"most {MAX_ENTRY_BYTES} bytes"
        )
    return body


def _callback_name(value: Any) -> str | None:
    """A callback's (or errback's) name: given as a name, or as the spider's bound method
    (Scrapy's ``callback=self.parse_item``), since only a name can travel through Redis."""
    if value is None or isinstance(value, str):
        return value
    if inspect.ismethod(value):
        return value.__name__
    raise ConfigError(f"Request.callback must be a spider method or its name, got {value!r:.80}")


def _cb_kwargs(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"Request.cb_kwargs must be a dict of names to values, got {value!r:.80}")
    try:
        size = len(json.dumps(value, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError):
        raise ConfigError(
            f"Request.cb_kwargs must be JSON-serialisable, got {value!r:.80}"
        ) from None
    if size > MAX_CB_KWARGS:
        raise ConfigError(
            f"Request.cb_kwargs is {size} bytes as JSON, over the {MAX_CB_KWARGS} a request "
            "carries: pass an id and look the rest up"
        )


def _statuses(value: Iterable[int] | None) -> tuple[int, ...]:
    statuses = tuple(value or ())
    if len(statuses) > MAX_STATUSES or not all(
        type(s) is int and 100 <= s <= 599 for s in statuses
    ):
        raise ConfigError(
            f"Request.handle_httpstatus_list must be up to {MAX_STATUSES} HTTP statuses "
            f"(100-599), got {value!r:.80}"
        )
    return statuses


def _method(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not (isinstance(value, str) and TOKEN.fullmatch(value) and value.isupper()):
        raise ConfigError(f"Request.method must be an upper-case HTTP method, got {value!r:.40}")


def _timeout(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not 0 < value <= MAX_TIMEOUT:
        raise ConfigError(f"Request.timeout must be in (0, {MAX_TIMEOUT:g}] seconds, got {value}")


def _redirects(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and not (type(value) is int and 0 <= value <= MAX_REDIRECTS):
        raise ConfigError(f"Request.max_redirects must be in [0, {MAX_REDIRECTS}], got {value!r}")
