"""The networks a setting names (``--allow-net``), parsed: no IO."""

from __future__ import annotations

import ipaddress

from hashcrawl._exceptions import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_net(text: str) -> Network:
    """Return the network ``text`` names ("10.0.0.0/8", "127.0.0.2", "fd00::/8").

    Raises:
        ConfigError: not a network, or one with host bits set ("10.0.0.5/8").
    """
    try:
        return ipaddress.ip_network(text.strip())
    except ValueError as exc:
        raise ConfigError(
            f"--allow-net must be an address or a network like 10.0.0.0/8, got {text!r} ({exc})"
        ) from None
