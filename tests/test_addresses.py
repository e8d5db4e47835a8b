"""Tests for hashcrawl._web._addresses: which addresses a worker may connect to."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl._exceptions import ConfigError
from hashcrawl._web._addresses import AddressPolicy, literal_address, parse_net, url_refusal

NOT_PUBLIC = [
    "127.0.0.1",
    "127.5.6.7",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.100.100.200",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fd00:ec2::254",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
]
PUBLIC = ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:1.1.1.1"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_non_public_addresses_are_refused_by_default(address: str) -> None:
    """Loopback, private, link-local, CGNAT, multicast, reserved, ULA and mapped: refused."""
    assert not AddressPolicy().allows(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address: str) -> None:
    """A global unicast address, IPv4 or IPv6 (or mapped), is reachable without a flag."""
    assert AddressPolicy().allows(address)


def test_an_allowed_network_opens_just_that_network() -> None:
    """allow_nets opens its networks and nothing next to them."""
    policy = AddressPolicy.of(["127.0.0.2", "10.20.0.0/16"])
    assert [policy.allows(a) for a in ("127.0.0.2", "127.0.0.3", "10.20.9.9", "10.21.0.1")] == [
        True,
        False,
        True,
        False,
    ]


def test_an_allowed_ipv4_network_covers_its_mapped_ipv6_form() -> None:
    """::ffff:127.0.0.2 is 127.0.0.2, for allowing as for refusing."""
    assert AddressPolicy.of(["127.0.0.2"]).allows("::ffff:127.0.0.2")


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_allow_private_allows_every_address(address: str) -> None:
    """allow_private opens everything."""
    assert AddressPolicy.of(allow_private=True).allows(address)


@pytest.mark.parametrize("text", ["10.0.0.5/8", "not-a-net", "10.0.0.0/33", ""])
def test_a_bad_network_is_a_config_error_naming_the_flag(text: str) -> None:
    """--allow-net takes an address or a network without host bits."""
    with pytest.raises(ConfigError, match="--allow-net"):
        parse_net(text)


def test_literal_addresses_are_recognised_with_or_without_brackets() -> None:
    """An IP literal is returned in its normal form; a name gives None."""
    assert [literal_address(h) for h in ("[::1]", "127.0.0.1", "example.com")] == [
        "::1",
        "127.0.0.1",
        None,
    ]


def test_a_url_refusal_names_the_host_and_the_way_to_allow_it() -> None:
    """The CLI's check of a start URL says what is wrong and which flag allows it."""
    refusal = url_refusal("http://169.254.169.254/latest/", AddressPolicy())
    assert refusal is not None
    assert "169.254.169.254 is not a public address" in refusal
    assert "--allow-net" in refusal
    assert url_refusal("http://93.184.216.34/", AddressPolicy()) is None


@given(st.ip_addresses())
def test_the_decision_for_any_address_is_a_bool_and_cached(address: object) -> None:
    """Any IPv4 or IPv6 address gets an answer, the same the second time."""
    policy = AddressPolicy()
    first = policy.allows(str(address))
    assert first is policy.allows(str(address))
