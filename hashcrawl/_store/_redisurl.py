"""Redis URLs: parsing, validation, TLS, and the password-free form used in messages.

A password in a URL may hold any character. In ``redis://`` and ``rediss://`` URLs the
user information runs to the *last* ``@``, so a raw ``#``, ``/``, ``?``, ``@`` or ``:``
in a password needs no escaping (a ``%`` does: it starts a percent-escape). Whatever
is shown in a message masks everything before that last ``@``.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]`` names a
primary through the Sentinels that watch it, the convention Redis-Sentinel-Url defined
and RedisVL and Prefect follow: sentinels on port 26379 unless given, IPv6 hosts in
brackets; the user and password are the primary's (and its replicas'), not the
sentinels'.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import attrs

from hashcrawl._exceptions import ConfigError, InvalidURL

#: The environment variable that names the Redis server when ``--redis`` is not given.
ENV_VAR = "HASHCRAWL_REDIS"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,15}")
_PASSWORD_PARAM = re.compile(r"((?:^|[?&;])(?:password|pass)=).*", re.IGNORECASE | re.DOTALL)
_CRAWL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_SENTINEL_MEMBER = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+))(?::(?P<port>[^:]*))?"
)
SENTINEL_PORT = 26379
MAX_SENTINELS = 16  # more is a mistake: a Sentinel deployment has 3 or 5
_MASK = "***"
_SSL_SOURCE = re.compile(r"\.?\s*\(_ssl\.c:\d+\)\.?$")


@attrs.frozen(repr=False)
class RedisURL:
    """Where the shared store is: a parsed ``redis://``, ``rediss://``, ``redis+unix://``
    or ``redis+sentinel://`` URL.

    ``sentinels`` and ``service`` are a ``redis+sentinel://`` URL's: the sentinels to ask
    for the primary of ``service``. ``ca_file`` names the PEM file of the CA that signed
    a ``rediss://`` server's certificate, when it is not one the system trusts.
    """

    scheme: str
    host: str | None = None
    port: int = 6379
    path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = attrs.field(default=None, eq=False)
    ca_file: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str | None = None

    @classmethod
    def parse(cls, url: str, *, name: str = "--redis") -> RedisURL:
        """Parse and check a Redis URL; messages name it as ``name`` (the flag, or the
        Python parameter).

        Raises:
            InvalidURL: the URL has the wrong scheme, no host or socket path, or a bad port or db.
        """
        scheme, sep, rest = url.partition("://")
        if sep and scheme == "redis+unix":
            return cls._parse_unix(url, name)
        if sep and scheme == "redis+sentinel":
            return cls._parse_sentinel(url, name)
        if not sep or scheme not in ("redis", "rediss"):
            raise InvalidURL(
                f"{name} must be redis://, rediss://, redis+unix:// or redis+sentinel://, "
                f"got {_shown(url)}"
            )
        userinfo, _, location = rest.rpartition("@")
        try:
            parts = urlsplit(f"{scheme}://{location}")
        except ValueError:
            raise InvalidURL(f"{name} URL cannot be parsed: {_shown(url)}") from None
        try:
            port = parts.port
        except ValueError:
            raise InvalidURL(f"{name} URL has a bad port: {_shown(url)}") from None
        if not parts.hostname:
            raise InvalidURL(f"{name} URL has no host: {_shown(url)}")
        username, colon, password = userinfo.partition(":")
        return cls(
            scheme=scheme,
            host=parts.hostname,
            port=port or 6379,
            db=_db(parts.path.lstrip("/") or "0", url, name),
            username=unquote(username) if username else None,
            password=unquote(password) if colon and password else None,
        )

    @classmethod
    def _parse_unix(cls, url: str, name: str) -> RedisURL:
        # User information, if any, runs to the last "@" before the absolute path; the
        # query is everything after the path's first "?", so a raw "#" stays in it.
        rest = url[len("redis+unix://") :]
        if not rest:
            raise InvalidURL(f"{name} redis+unix:// URL has no socket path")
        split = 0 if rest.startswith("/") else rest.rfind("@/") + 1
        if split == 0 and not rest.startswith("/"):
            raise InvalidURL(
                f"{name} redis+unix:// URL needs an absolute socket path: {_shown(url)}"
            )
        userinfo = rest[: max(split - 1, 0)]
        path, _, query_text = rest[split:].partition("?")
        if userinfo and "@" in path:
            # A password holding "@/" would otherwise end early, and its rest be shown
            # as part of the path.
            raise InvalidURL(
                f"{name} redis+unix:// URL with user information must have no '@' in its "
                f"socket path: {_shown(url)}"
            )
        query = {k: v[-1] for k, v in parse_qs(query_text).items()}
        username, _, password = userinfo.partition(":")
        return cls(
            scheme="redis+unix",
            path=unquote(path),
            db=_db(query.get("db", "0"), url, name),
            username=unquote(username) if username else None,
            password=unquote(password) or query.get("password") or query.get("pass") or None,
        )

    @classmethod
    def _parse_sentinel(cls, url: str, name: str) -> RedisURL:
        # User information runs to the last "@", as in redis:// URLs; the members run to
        # the first "/" after it. urlsplit cannot take a list of hosts (nor IPv6 ones).
        userinfo, _, location = url[len("redis+sentinel://") :].rpartition("@")
        if "?" in location or "#" in location:
            raise InvalidURL(
                f"{name} redis+sentinel:// URL takes no query or fragment: {_shown(url)}"
            )
        members, slash, path = location.partition("/")
        service, _, db = path.partition("/")
        if not slash or not service:
            raise InvalidURL(
                f"{name} redis+sentinel:// URL needs the service name after the sentinels "
                f"(redis+sentinel://host:26379/mymaster): {_shown(url)}"
            )
        if not _SERVICE.fullmatch(service):
            raise InvalidURL(
                f"{name} redis+sentinel:// service name must be 1-128 letters, digits, '.', "
                f"'_', ':' or '-': {_shown(url)}"
            )
        if "/" in db:
            raise InvalidURL(
                f"{name} redis+sentinel:// URL has a path past /service/db: {_shown(url)}"
            )
        username, colon, password = userinfo.partition(":")
        return cls(
            scheme="redis+sentinel",
            port=0,
            db=_db(db or "0", url, name),
            username=unquote(username) if username else None,
            password=unquote(password) if colon and password else None,
            sentinels=_sentinel_members(members, url, name),
            service=service,
        )

    @classmethod
    def from_options(
        cls,
        url: str | None,
        *,
        password_file: str | None = None,
        ca_file: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> RedisURL:
        """The Redis URL of ``--redis`` (else ``$HASHCRAWL_REDIS``), its password and CA.

        Args:
            url: the ``--redis`` flag's value, or None to read ``$HASHCRAWL_REDIS``.
            password_file: a file whose first line is the password (``--redis-password-file``).
            ca_file: a PEM file of CA certificates for ``rediss://`` (``--redis-ca``).

        Raises:
            ConfigError: no URL at all, a bad URL, an unreadable file, a password given
                both in the URL and in a file, or a CA file for a URL without TLS.
        """
        text = url if url is not None else environ.get(ENV_VAR)
        if not text:
            raise ConfigError(f"--redis URL is required: give the flag or set ${ENV_VAR}")
        parsed = cls.parse(text)
        if password_file is not None:
            if parsed.password is not None:
                raise ConfigError(
                    "--redis-password-file given, but the Redis URL has a password too; "
                    "keep one of them"
                )
            parsed = attrs.evolve(parsed, password=_password_in(password_file))
        if ca_file is not None:
            if parsed.scheme != "rediss":
                raise ConfigError(f"--redis-ca needs a rediss:// URL, got {parsed.redacted()!r}")
            parsed = attrs.evolve(parsed, ca_file=_checked_ca(ca_file))
        return parsed

    def redacted(self) -> str:
        """The URL as it may appear in messages, logs and status: no password."""
        if self.scheme == "redis+unix":
            return f"redis+unix://{quote(self.path or '')}?db={self.db}"
        auth = f"{_MASK}@" if self.username or self.password else ""
        if self.scheme == "redis+sentinel":
            return f"redis+sentinel://{auth}{self.members()}/{self.service}/{self.db}"
        # Everything before the "@" is masked, the user name too: one may be the password.
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{self.scheme}://{auth}{host}:{self.port}/{self.db}"

    def explained(self, reason: str) -> str:
        """Why a connection to this server failed, for a message: no password in it, and
        a hint when a ``rediss://`` server's certificate was refused."""
        if self.password:
            for form in sorted(_forms(self.password), key=len, reverse=True):
                reason = reason.replace(form, _MASK)
        if self.scheme == "rediss" and "CERTIFICATE_VERIFY_FAILED" in reason:
            hint = "the CA in --redis-ca" if self.ca_file else "a CA this machine trusts"
            why = _SSL_SOURCE.sub("", reason.rpartition("certificate verify failed: ")[2])
            reason = (
                f"TLS certificate refused ({why}); the server's certificate must be "
                f"signed by {hint} and name {self.host!r}"
            )
        elif self.scheme == "redis+sentinel":
            return reason  # the primary's address, if any, is in the reason itself
        elif "Authentication required" in reason and not self.password:
            form = (
                "redis+unix://:PASSWORD@/path/to/socket?db=N"
                if self.scheme == "redis+unix"
                else f"{self.scheme}://:PASSWORD@host:port/db"
            )
            reason += (
                f" The server wants a password: give it in the URL ({form}), in ${ENV_VAR} "
                "(kept out of ps), or with --redis-password-file FILE."
            )
        elif "Connection refused" in reason or "No such file or directory" in reason:
            where = self.path if self.scheme == "redis+unix" else f"{self.host}:{self.port}"
            reason += f" Is a Redis server running at {where}?"
        return reason

    def members(self) -> str:
        """A ``redis+sentinel://`` URL's sentinels as ``host:port,...`` (IPv6 in brackets)."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`redis.Redis` naming this server (for a
        ``redis+sentinel://`` URL, all but the host and port, which the sentinels give).

        ``rediss://`` verifies the server's certificate and host name. redis-py checks
        host names by default only since 6.0, so both are set here, for every version.
        """
        kwargs: dict[str, Any] = {"db": self.db, "password": self.password}
        if self.scheme == "redis+unix":
            kwargs["unix_socket_path"] = self.path
            return kwargs
        if self.scheme == "redis+sentinel":
            kwargs["username"] = self.username
            return kwargs
        kwargs.update(host=self.host, port=self.port, username=self.username)
        kwargs["ssl"] = self.scheme == "rediss"
        if kwargs["ssl"]:
            kwargs.update(ssl_cert_reqs="required", ssl_check_hostname=True)
            kwargs["ssl_ca_certs"] = self.ca_file
        return kwargs

    def __repr__(self) -> str:
        return f"RedisURL({self.redacted()!r})"

    __str__ = redacted


def check_crawl_name(name: str, *, called: str = "--crawl") -> str:
    """Return ``name`` if it can name a crawl's keys, else raise ConfigError naming it
    as ``called`` (the flag, or the Python parameter)."""
    if not _CRAWL_NAME.fullmatch(name):
        raise ConfigError(
            f"{called} must be 1-64 letters, digits, '.', '_' or '-' starting with a letter "
            f"or digit, got {name!r}"
        )
    return name


def _db(text: str, url: str, name: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise InvalidURL(f"{name} URL has a bad database number: {_shown(url)}")
    return int(text)


def _sentinel_members(text: str, url: str, name: str) -> tuple[tuple[str, int], ...]:
    """``host[:port],...`` as (host, port) pairs, port 26379 where none is given."""
    if not text:
        raise InvalidURL(f"{name} redis+sentinel:// URL names no sentinel: {_shown(url)}")
    members = text.split(",")
    if len(members) > MAX_SENTINELS:
        raise InvalidURL(
            f"{name} redis+sentinel:// URL names {len(members)} sentinels, at most "
            f"{MAX_SENTINELS}: {_shown(url)}"
        )
    found = []
    for member in members:
        parts = _SENTINEL_MEMBER.fullmatch(member)
        if parts is None:
            raise InvalidURL(
                f"{name} redis+sentinel:// URL has a bad sentinel {member[:100]!r} "
                f"(host:port, [IPv6]:port): {_shown(url)}"
            )
        port = parts["port"]
        if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise InvalidURL(
                f"{name} redis+sentinel:// URL has a bad port in {member[:100]!r}: {_shown(url)}"
            )
        found.append((parts["v6"] or parts["host"], int(port) if port else SENTINEL_PORT))
    return tuple(found)


def _password_in(path: str) -> str:
    """The first line of ``path``, without its line ending."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError(f"--redis-password-file {path!r} cannot be read: {reason}") from None
    if not lines or not lines[0]:
        raise ConfigError(
            f"--redis-password-file {path!r} must hold the password on its first line"
        )
    return lines[0]


def _checked_ca(path: str) -> str:
    """``path`` if it holds CA certificates that Python's ssl module can load."""
    try:
        ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or "no PEM certificate in it"
        raise ConfigError(f"--redis-ca {path!r} cannot be used: {reason}") from None
    return path


def _forms(password: str) -> set[str]:
    """The password as it may be written: raw, percent-encoded, or escaped by repr()."""
    forms = {password, quote(password, safe=""), quote(password), quote(password, safe="*")}
    forms |= {repr(form)[1:-1] for form in list(forms)}
    return {form for form in forms if form}


def masked(text: str, given: Iterable[str]) -> str:
    """``text`` without the user information of any URL among ``given``, nor any
    ``password=`` value there, in every form a message may quote it.

    ``given`` is what the user typed (the command line, ``$HASHCRAWL_REDIS``): a message
    may quote an argument put in the wrong place.
    """
    secrets = set()
    for value in given:
        start, end = value.find("://"), value.rfind("@")
        if start >= 0 and start + 3 < end:
            secrets.add(value[start + 3 : end])
        found = _PASSWORD_PARAM.search(value)
        if found:
            secrets.add(value[found.end(1) :])
    forms = {form for secret in secrets for form in _forms(secret)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, _MASK)
    return text


def _shown(url: str) -> str:
    """The URL for an error message: everything before its last "@" masked, and any
    password parameter masked to the end."""
    head, at, tail = url.rpartition("@")
    if at:
        scheme, sep, _ = head.partition("://")
        prefix = f"{scheme}://" if sep and _SCHEME.fullmatch(scheme) else ""
        url = f"{prefix}{_MASK}@{tail}"
    url = _PASSWORD_PARAM.sub(r"\1" + _MASK, url)
    return repr(url[:200])
