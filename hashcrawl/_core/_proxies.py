"""Which proxy of a pool a host goes through: sticky by a stable hash, moved on failure.

A host's owner paces it, so one proxy per host keeps the host's requests on one path
(and one exit address) while its owner holds it: the proxy is the host's stable hash
over the pool, plus how many times the host was moved on (a connection error, a 407,
a status the operator listed). A new owner starts again from the hash. Pure: the
fetcher asks and tells; nothing here touches the network.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from urllib.parse import unquote, urlsplit

import attrs

from hashcrawl._exceptions import ConfigError

SCHEMES = ("http", "https")  # what httpcore's HTTP proxy speaks to the proxy itself
MAX_PROXY_URL = 2048  # the longest proxy URL a request may carry
MAX_MOVED = 65_536  # hosts whose move is remembered; the oldest are forgotten first


@attrs.frozen(kw_only=True)
class Proxy:
    """A forward proxy: where it is, and its credentials (never shown, never stored)."""

    scheme: str
    host: str
    port: int
    username: str = attrs.field(default="", repr=False)
    password: str = attrs.field(default="", repr=False)

    @classmethod
    def parse(cls, url: str) -> Proxy:
        """The proxy at ``url`` (``http://[user:password@]host[:port]``).

        Raises:
            ConfigError: not such a URL; the message never repeats a password.
        """
        if not isinstance(url, str) or len(url) > MAX_PROXY_URL or not url.isascii():
            raise ConfigError(f"proxy: expected an ASCII URL up to {MAX_PROXY_URL} characters")
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError:
            raise ConfigError(f"proxy {_hidden(url)!r}: not a URL with a valid port") from None
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ConfigError(
                f"proxy {_hidden(url)!r}: expected http://host:port or https://host:port"
            )
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ConfigError(f"proxy {_hidden(url)!r}: a proxy URL has no path or query")
        default = 80 if parts.scheme == "http" else 443
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        return cls(
            scheme=parts.scheme, host=parts.hostname, port=port or default,
            username=user, password=password,
        )  # fmt: skip

    @classmethod
    def of_request(cls, url: str) -> Proxy:
        """A request's own proxy (``Request(proxy=...)``, ``meta["proxy"]``): as
        :meth:`parse`, and without credentials, since a request's proxy goes to Redis
        (they belong in ``--proxy``, whose credentials a request naming the same host
        and port is sent with).

        Raises:
            ConfigError: malformed, or it carries credentials.
        """
        proxy = cls.parse(url)
        if proxy.username or proxy.password:
            raise ConfigError(
                f"its proxy {proxy.shown} carries credentials, which a request's proxy (kept "
                f"in Redis) may not; give them with --proxy {proxy.shown} (the worker's pool)"
            )
        return proxy

    @property
    def shown(self) -> str:
        """The proxy as messages and logs show it: no credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def place(self) -> tuple[str, str, int]:
        """Where the proxy is, credentials aside: a request's proxy of the pool's place
        is sent with the pool's credentials."""
        return (self.scheme, self.host, self.port)


def _hidden(url: str) -> str:
    """``url`` with anything before an ``@`` (credentials) replaced, cut to 200 characters."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return (scheme + sep + rest)[:200]


def stable_index(host: str, size: int) -> int:
    """``host``'s place in a pool of ``size``: the same in every worker and every run."""
    digest = hashlib.blake2b(host.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % size


@attrs.define
class ProxyChoice:
    """Which of ``size`` proxies each host goes through, and the moves failures made."""

    size: int
    _moved: OrderedDict[str, int] = attrs.field(factory=OrderedDict, repr=False)

    def index(self, host: str) -> int:
        """The proxy ``host`` goes through now."""
        return (stable_index(host, self.size) + self._moved.get(host, 0)) % self.size

    def failed(self, host: str, index: int) -> int:
        """``host`` failed through proxy ``index``: the proxy it goes through next.

        Only a failure through the host's current proxy moves it, so requests in
        flight through the old one that fail afterwards do not move it twice.
        """
        if self.size > 1 and index == self.index(host):
            self._moved[host] = self._moved.get(host, 0) + 1
            self._moved.move_to_end(host)
            if len(self._moved) > MAX_MOVED:
                self._moved.popitem(last=False)
        return self.index(host)
