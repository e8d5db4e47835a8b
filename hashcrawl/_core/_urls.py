"""URL canonicalization, host keys and fingerprints: the decisions dedupe and routing rest on.

Every function here is pure. A canonical URL is what ``canonicalize`` returns; the other
functions expect one, and two URLs are "the same page" exactly when their canonical
forms are equal.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
import socket
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from hashcrawl._exceptions import InvalidURL

_DEFAULT_PORTS = {"http": 80, "https": 443}
# DNS labels: 1-63 letters, digits, "-" or "_" (real hosts use "_" despite RFC 952).
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*", re.ASCII)
# The userinfo of an authority, so that no message repeats a password.
_USERINFO = re.compile(r"(//).*@", re.DOTALL)  # greedy: to the last "@", whatever precedes it
_SHOWN_CHARS = 200
#: The longest URL accepted, before and after canonicalization (Apache's request line
#: limit is 8190 bytes; browsers and CDNs refuse longer ones too).
MAX_URL_LENGTH = 8192
# An IPv4 literal as the C resolver reads it: 1-4 parts, each decimal, octal or hex.
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}", re.ASCII)
# A URL that canonicalize_url and the rules below leave as it is (but an empty path, and
# a default port): lower-case scheme and host name, a port without leading zeros, a path
# of unreserved characters and "/" only, no query, fragment, userinfo or escape. Most
# links are; w3lib's full pass costs ~15 us a URL, this one ~1.
_PLAIN_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*)"
    r"(?::(?P<port>[1-9][0-9]{0,4}))?(?P<path>/[A-Za-z0-9\-._~/]*)?",
    re.ASCII,
)
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|$)")


def canonicalize(url: str) -> str:
    """Return the canonical form of an http(s) URL, used for dedupe and routing.

    On top of w3lib's ``canonicalize_url`` (sorted query, normalized percent-escapes,
    dot segments resolved, IDNA host, no fragment), the default port is dropped, a
    trailing dot on the host is dropped, an empty path becomes "/", and an IPv4 address
    written in decimal, hex, octal or short form ("2130706433", "0x7f.1", "127.1") is
    written as four decimals ("127.0.0.1"), so that each host has one name.

    Raises:
        InvalidURL: not http(s), no host, a bad host or port, userinfo in the URL, or
            longer than ``MAX_URL_LENGTH`` characters.
    """
    return canonical_parts(url)[0]


# A link is canonicalized where it is found, and asked its host for robots, scope and
# routing: one cache holds both, and the host comes with the canonical form for free.
@functools.lru_cache(maxsize=65536)
def canonical_parts(url: str) -> tuple[str, str]:
    """``canonicalize(url)`` and its ``host_key``, made together.

    Raises:
        InvalidURL: as ``canonicalize``.
    """
    if len(url) > MAX_URL_LENGTH:
        raise _too_long(url)
    plain = _plain_parts(url)
    return plain if plain is not None else _full_parts(url)


def _full_parts(url: str) -> tuple[str, str]:
    """``canonical_parts`` by w3lib's ``canonicalize_url`` and the rules on top of it."""
    try:
        canonical = canonicalize_url(url)
    except ValueError as error:  # UnicodeError (bad IDNA) is a ValueError too
        raise _invalid("unparsable URL", url, str(error)) from None
    parts = urlsplit(canonical)
    if parts.scheme not in _DEFAULT_PORTS:
        raise _invalid("not an http(s) URL", url)
    if "@" in parts.netloc:
        # Credentials would travel through the shared queue and into logs.
        raise _invalid("URL carries credentials (user:password@)", url)
    authority = _authority(url, parts)
    canonical = urlunsplit((parts.scheme, authority, parts.path or "/", parts.query, ""))
    if len(canonical) > MAX_URL_LENGTH:  # percent-escapes can triple a URL's length
        raise _too_long(canonical)
    return canonical, authority


def _plain_parts(url: str) -> tuple[str, str] | None:
    """``canonical_parts`` of a URL in ``_PLAIN_URL``'s domain, else None (the full pass)."""
    match = _PLAIN_URL.fullmatch(url)
    if match is None:
        return None
    scheme, host, port, path = match.group("scheme", "host", "port", "path")
    if path is not None and _DOT_SEGMENT.search(path):
        return None
    if _NUMERIC_HOST.fullmatch(host) and _ipv4(host) != host:
        return None  # "127.1", "0x7f.0.0.1": written as four decimals by the full pass
    authority = host
    if port is not None and int(port) != _DEFAULT_PORTS[scheme]:
        if int(port) > 65535:
            return None  # refused, with the reason, by the full pass
        authority = f"{host}:{port}"
    return f"{scheme}://{authority}{path or '/'}", authority


# Asked of each link three times (robots, scope and routing, the seen cache) within one
# commit's time: a cache of a few commits' links makes it once, for a few MiB at most.
@functools.lru_cache(maxsize=16384)
def host_key(canonical_url: str) -> str:
    """Return the routing key of a URL: its host, plus ":port" when not the default.

    ``http://h/`` and ``https://h/`` share the key "h"; ``http://h:8080/`` is "h:8080".

    Raises:
        InvalidURL: the URL is not http(s) or has no valid host or port.
    """
    parts = _split(canonical_url)
    if parts.scheme not in _DEFAULT_PORTS:
        raise _invalid("not an http(s) URL", canonical_url)
    return _authority(canonical_url, parts)


@functools.lru_cache(maxsize=65536)  # as host_key: routing, then the seen cache
def fingerprint(canonical_url: str) -> tuple[int, int]:
    """Return two unsigned 32-bit hashes of a URL, seeds for a Bloom filter's double hashing.

    Both come from one 128-bit blake2b digest; the second is forced odd so that it is
    never zero (a zero step would probe one bit k times).
    """
    digest = hashlib.blake2b(canonical_url.encode("utf-8"), digest_size=16).digest()
    first = int.from_bytes(digest[:4], "big")
    second = int.from_bytes(digest[4:8], "big") | 1
    return first, second


def domain_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Return True when ``host`` (a host key) is, or is under, one of ``allowed``.

    An empty ``allowed`` allows every host. Matching is by whole labels, so
    "a.example.com" is under "example.com" and "badexample.com" is not.
    """
    if not allowed:
        return True
    name = _without_port(host).lower().removesuffix(".")
    return any(_is_within(name, _normal_domain(domain)) for domain in allowed)


def join_url(base: str, href: str) -> str | None:
    """Resolve ``href`` against ``base`` and return the canonical absolute URL.

    Returns None when there is nothing to crawl: an empty or fragment-only href (the
    same page), a non-http(s) scheme (mailto:, javascript:, tel:, data:, ...), or a
    result that ``canonicalize`` rejects.
    """
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        return canonicalize(urljoin(base, href))
    except ValueError:  # InvalidURL is a ValueError; urljoin raises it on bad IPv6
        return None


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError as error:
        raise _invalid("unparsable URL", url, str(error)) from None


def _authority(url: str, parts: SplitResult) -> str:
    host = _host(url, parts.hostname)
    port = _port(url, parts)
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return host
    return f"{host}:{port}"


def _host(url: str, hostname: str | None) -> str:
    if not hostname:
        raise _invalid("URL has no host", url)
    if ":" in hostname:
        return f"[{_ipv6(url, hostname)}]"
    # "example.com." names the same host as "example.com"; one form keeps one owner.
    name = hostname.lower().removesuffix(".")
    if not _HOST_NAME.fullmatch(name):
        raise _invalid("invalid host", url)
    if _NUMERIC_HOST.fullmatch(name):
        return _ipv4(name)
    return name


def _ipv4(name: str) -> str:
    """Return an IPv4 literal in dotted decimal, or ``name`` if it is not one."""
    try:
        return socket.inet_ntoa(socket.inet_aton(name))
    except OSError:  # "1.2.3.4.5", "08": not an address, so a name to look up
        return name


def _ipv6(url: str, hostname: str) -> str:
    try:
        return str(ipaddress.IPv6Address(hostname))
    except ValueError:
        raise _invalid("invalid IPv6 host", url) from None


def _port(url: str, parts: SplitResult) -> int | None:
    try:
        port = parts.port
    except ValueError:
        raise _invalid("invalid port", url) from None
    if port == 0:
        raise _invalid("invalid port (0)", url)
    return port


def _without_port(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.partition(":")[0]


def _normal_domain(domain: str) -> str:
    domain = domain.strip().strip(".").lower()
    if domain.isascii():
        return domain
    try:
        return domain.encode("idna").decode("ascii")  # the codec w3lib encodes hosts with
    except UnicodeError:
        return domain  # matches nothing, since every canonical host is ASCII


def _is_within(name: str, domain: str) -> bool:
    if _is_ip(name) or _is_ip(domain):
        return name == domain  # an address has no subdomains: 0.0.2 is not above 127.0.0.2
    return bool(domain) and (name == domain or name.endswith("." + domain))


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _too_long(url: str) -> InvalidURL:
    return InvalidURL(f"URL longer than {MAX_URL_LENGTH} characters ({len(url)}): {_shown(url)}")


def _invalid(rule: str, url: str, detail: str = "") -> InvalidURL:
    # A library's detail may quote the raw netloc, userinfo and all, or a piece of a
    # password that a raw "#" or "/" cut off: none with userinfo in the URL is shown.
    suffix = f" ({detail})" if detail and "@" not in detail + url else ""
    return InvalidURL(f"{rule}: {_shown(url)}{suffix}")


def _shown(url: str) -> str:
    """Return the URL as quoted in messages: userinfo masked, cut to a readable length."""
    masked = _USERINFO.sub(r"\1***@", url, count=1)
    if len(masked) > _SHOWN_CHARS:
        return repr(masked[:_SHOWN_CHARS] + "...")
    return repr(masked)
