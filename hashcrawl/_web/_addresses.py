"""Which network addresses a worker may connect to: public ones, and those allowed.

By default only addresses that ``ipaddress`` calls global are reachable: loopback,
RFC 1918 private, link-local (169.254.0.0/16, the cloud metadata service), CGNAT
(100.64.0.0/10), unique-local IPv6, multicast, reserved and unspecified addresses are
refused, and an IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:10.0.0.1``,
6to4, NAT64's ``64:ff9b::/96``, IPv4-compatible ``::10.0.0.1``) is judged as that IPv4
address (see :func:`embedded_ipv4`). ``allow_nets`` opens given networks;
``allow_private`` opens all.

The decision is pure; :mod:`hashcrawl._web._fetch` applies it to the address each connection
actually goes to, after resolving, so that DNS and redirects cannot get round it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import attrs

from hashcrawl._core._nets import Network as Network
from hashcrawl._core._nets import parse_net as parse_net

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_HINT = "allow it with --allow-net CIDR or --allow-private"
PYTHON_ALLOW_HINT = "allow it with allow_nets=['CIDR'] or allow_private=True"
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: local use, not global
LOOK_UPS = 64  # host names one submission resolves at most; past them, IP literals only


@attrs.frozen
class AddressPolicy:
    """The addresses one worker may connect to.

    Args:
        nets: networks allowed beyond the public internet.
        private: allow every address.
    """

    nets: tuple[Network, ...] = ()
    private: bool = False
    _seen: dict[str, bool] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def of(cls, allow_nets: Iterable[str] = (), allow_private: bool = False) -> AddressPolicy:
        """The policy for the ``allow_nets`` and ``allow_private`` settings.

        Raises:
            ConfigError: an entry of ``allow_nets`` is not a network.
        """
        return cls(tuple(parse_net(net) for net in allow_nets), allow_private)

    def allows(self, address: str) -> bool:
        """Whether a connection to ``address`` (a literal IP, no brackets) may be made."""
        known = self._seen.get(address)
        if known is None:
            known = self._seen[address] = self._allows(ipaddress.ip_address(address))
            if len(self._seen) > 4096:  # a crawl of many hosts: keep the cache small
                self._seen.clear()
        return known

    def _allows(self, ip: Address) -> bool:
        if self.private:
            return True
        if any(ip in net for net in self.nets):
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            carried = embedded_ipv4(ip)
            if carried is not None:
                return self._allows(carried)
            if ip in NAT64_LOCAL:  # an operator's own NAT64, to its own networks
                return False
        return ip.is_global and not ip.is_multicast

    def refusal(self, host: str, addresses: list[str], hint: str = ALLOW_HINT) -> str:
        """The reason given when none of ``host``'s addresses may be reached."""
        shown = host if addresses == [host] else f"{host} ({', '.join(addresses[:3])})"
        return f"{shown} is not a public address; {hint}"


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, which is where a packet to it goes.

    IPv4-mapped (``::ffff:a.b.c.d``), 6to4 (``2002:AABB:CCDD::/48``), NAT64's
    well-known prefix (``64:ff9b::a.b.c.d``) and the deprecated IPv4-compatible form
    (``::a.b.c.d``; ``::`` and ``::1`` are IPv6's own) all do, and ``ipaddress``
    calls every form but the mapped one global, whatever IPv4 address is inside.
    """
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in NAT64_WELL_KNOWN or (int(ip) >> 32 == 0 and int(ip) > 1):
        return low
    return None


def literal_address(host: str) -> str | None:
    """Return ``host`` as an IP address if it is one ("[::1]" gives "::1"), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to, blocking (for the CLI); [] if it does not."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def url_refusal(
    canonical_url: str, policy: AddressPolicy, *, look_up: bool = True, hint: str = ALLOW_HINT
) -> str | None:
    """Why a worker under ``policy`` would refuse ``canonical_url``, or None.

    The CLI asks before it submits, so that a private start URL is an error at once
    rather than a dead letter later. A name that does not resolve is not refused here:
    the fetch will fail and say so.

    Args:
        look_up: resolve host names too (blocking); else judge IP literals only.
        hint: how the refusal says to allow it (the CLI's flags by default).
    """
    host = urlsplit(canonical_url).hostname or ""
    literal = literal_address(host)
    addresses = [literal] if literal is not None else resolve(host) if look_up else []
    if addresses and not any(policy.allows(address) for address in addresses):
        return policy.refusal(host, addresses, hint)
    return None


@attrs.define
class SubmitCheck:
    """The address rule as a submission applies it, the same from the CLI and Python.

    IP literals are always judged; host names are resolved for the first
    ``LOOK_UPS`` distinct ones only, so that a list of a million URLs is not a million
    DNS lookups (the workers check every address they connect to anyway).

    Args:
        policy: the addresses allowed.
        hint: how a refusal says to allow it (the CLI's flags, or Python's names).
    """

    policy: AddressPolicy
    hint: str = ALLOW_HINT
    look_ups: int = LOOK_UPS
    _hosts: dict[str, str | None] = attrs.field(factory=dict, repr=False)

    def refusal(self, canonical_url: str) -> str | None:
        """Why ``canonical_url`` is refused, or None."""
        host = urlsplit(canonical_url).hostname or ""
        if host in self._hosts:
            return self._hosts[host]
        look_up = literal_address(host) is None and self.look_ups > 0
        self.look_ups -= look_up
        why = url_refusal(canonical_url, self.policy, look_up=look_up, hint=self.hint)
        if len(self._hosts) < 10_000:  # bounded: a long list of hosts is judged each time
            self._hosts[host] = why
        return why
