"""Redis URLs: parsing, validation, and the password-free form used in messages."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from ._exceptions import ConfigError, InvalidURL

_USERINFO = re.compile(r"(//)[^/?#]*@")
_PASSWORD_PARAM = re.compile(r"((?:^|[?&;])(?:password|pass)=)[^&;#]*", re.IGNORECASE)
_CRAWL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@attrs.frozen(repr=False)
class RedisURL:
    """Where the shared store is: a parsed ``redis://``, ``rediss://`` or ``redis+unix://`` URL."""

    scheme: str
    host: str | None = None
    port: int = 6379
    path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, eq=False)

    @classmethod
    def parse(cls, url: str) -> RedisURL:
        """Parse and check a Redis URL.

        Raises:
            InvalidURL: the URL has the wrong scheme, no host or socket path, or a bad port or db.
        """
        try:
            parts = urlsplit(url)
        except ValueError:
            raise InvalidURL(f"--redis URL cannot be parsed: {_shown(url)}") from None
        try:
            parts.port  # noqa: B018  (the property raises for a bad port)
        except ValueError:
            raise InvalidURL(f"--redis URL has a bad port: {_shown(url)}") from None
        if parts.scheme == "redis+unix":
            return cls._parse_unix(parts)
        if parts.scheme not in ("redis", "rediss"):
            raise InvalidURL(
                f"--redis must be redis://, rediss:// or redis+unix://, got {_shown(url)}"
            )
        if not parts.hostname:
            raise InvalidURL(f"--redis URL has no host: {_shown(url)}")
        return cls(
            scheme=parts.scheme,
            host=parts.hostname,
            port=parts.port or 6379,
            db=_db(parts.path.lstrip("/") or "0", url),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
        )

    @classmethod
    def _parse_unix(cls, parts: Any) -> RedisURL:
        if not parts.path:
            raise InvalidURL("--redis redis+unix:// URL has no socket path")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return cls(
            scheme="redis+unix",
            path=unquote(parts.path),
            db=_db(query.get("db", "0"), "redis+unix://" + parts.path),
            password=query.get("password") or query.get("pass") or None,
        )

    def redacted(self) -> str:
        """The URL as it may appear in messages, logs and status: no password."""
        if self.scheme == "redis+unix":
            return f"redis+unix://{self.path}?db={self.db}"
        user = self.username or ""
        auth = f"{user}:***@" if self.password else (f"{user}@" if user else "")
        return f"{self.scheme}://{auth}{self.host}:{self.port}/{self.db}"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`redis.Redis` naming this server."""
        kwargs: dict[str, Any] = {"db": self.db, "password": self.password}
        if self.scheme == "redis+unix":
            kwargs["unix_socket_path"] = self.path
        else:
            kwargs.update(host=self.host, port=self.port, username=self.username)
            kwargs["ssl"] = self.scheme == "rediss"
        return kwargs

    def __repr__(self) -> str:
        return f"RedisURL({self.redacted()!r})"

    __str__ = redacted


def check_crawl_name(name: str) -> str:
    """Return ``name`` if it can name a crawl's keys, else raise ConfigError."""
    if not _CRAWL_NAME.fullmatch(name):
        raise ConfigError(
            f"--crawl must be 1-64 letters, digits, '.', '_' or '-' starting with a letter "
            f"or digit, got {name!r}"
        )
    return name


def _db(text: str, url: str) -> int:
    if not text.isdigit():
        raise InvalidURL(f"--redis URL has a bad database number: {_shown(url)}")
    return int(text)


def _shown(url: str) -> str:
    """The URL with any userinfo and password parameter masked, for an error message."""
    shown = _USERINFO.sub(r"\1***@", url)
    shown = _PASSWORD_PARAM.sub(r"\1***", shown)
    return repr(shown[:200])
