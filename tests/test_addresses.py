"""Tests for hashcrawl._web._addresses: which addresses a worker may connect to."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hashcrawl._exceptions import ConfigError
from hashcrawl._web._addresses import (
    LOOK_UPS,
    AddressPolicy,
    SubmitCheck,
    literal_address,
    parse_net,
    url_refusal,
)

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


def _six_to_four(v4: ipaddress.IPv4Address, rest: int) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | rest))


EMBEDDINGS = {
    "IPv4-mapped": lambda v4, rest: f"::ffff:{v4}",
    "IPv4-compatible": lambda v4, rest: f"::{v4}",
    "6to4": _six_to_four,
    "NAT64": lambda v4, rest: f"64:ff9b::{v4}",
}


@pytest.mark.parametrize("form", sorted(EMBEDDINGS))
@given(v4=st.ip_addresses(v=4), rest=st.integers(0, 2**80 - 1))
def test_an_ipv6_form_embedding_an_ipv4_address_is_judged_as_that_address(
    form: str, v4: ipaddress.IPv4Address, rest: int
) -> None:
    """6to4, NAT64, IPv4-compatible and IPv4-mapped forms are refused or allowed exactly
    as the IPv4 address they carry, by default and under an allow of that address."""
    assume(form != "IPv4-compatible" or int(v4) > 1)  # :: and ::1 are IPv6's own
    wrapped = EMBEDDINGS[form](v4, rest)
    assert AddressPolicy().allows(wrapped) == AddressPolicy().allows(str(v4))
    assert AddressPolicy.of([str(v4)]).allows(wrapped)


@pytest.mark.parametrize(
    "address",
    [
        "2002:7f00:1::",
        "2002:a9fe:a9fe:1:2:3:4:5",
        "64:ff9b::7f00:1",
        "64:ff9b::169.254.169.254",
        "::127.0.0.1",
        "::169.254.169.254",
        "64:ff9b:1::a9fe:a9fe",
    ],
)
def test_loopback_and_metadata_addresses_in_ipv6_clothing_are_refused(address: str) -> None:
    """127.0.0.1 and 169.254.169.254 inside 6to4, NAT64 (well-known and local-use) and
    IPv4-compatible forms are refused, in a URL as in a connection."""
    assert not AddressPolicy().allows(address)
    refusal = url_refusal(f"http://[{address}]/", AddressPolicy())
    assert refusal is not None and "not a public address" in refusal


def test_a_submission_looks_up_its_first_names_only() -> None:
    """Past its look-ups a submission judges IP literals only: ``localhost`` is refused
    while a look-up is left and let through once they are spent (the workers still check
    every address they connect to); the default is LOOK_UPS names."""
    policy = AddressPolicy.of()
    assert SubmitCheck(policy).look_ups == LOOK_UPS
    assert SubmitCheck(policy, look_ups=1).refusal("http://localhost/") is not None
    spent = SubmitCheck(policy, look_ups=1)
    assert spent.refusal("http://a.invalid/") is None  # does not resolve: not refused here
    assert spent.refusal("http://localhost/") is None
    assert spent.refusal("http://127.0.0.1/") is not None  # a literal is always judged
