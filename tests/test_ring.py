"""The ring: who owns a host, and what it remembers of its answers."""

from __future__ import annotations

from uhashring import HashRing

from hashcrawl._core import _ring
from hashcrawl._core._ring import Ring


def test_a_remembered_owner_is_the_one_the_ketama_ring_names() -> None:
    """Asked twice, a ring names the owner uhashring's ketama ring names."""
    members = ("w1", "w2", "w3")
    ring, ketama = Ring.of(7, members), HashRing(nodes=list(members), hash_fn="ketama")
    hosts = [f"h{i}.test" for i in range(300)]
    first = [ring.owner_of(h) for h in hosts]
    assert first == [ring.owner_of(h) for h in hosts]
    assert first == [ketama.get_node(h) for h in hosts]
    assert set(first) == set(members)


def test_a_ring_remembers_a_bounded_number_of_owners() -> None:
    """Past OWNERS_REMEMBERED hosts the memory starts over, and answers stay right."""
    owners = _ring._Owners(HashRing(nodes=["w1", "w2"], hash_fn="ketama"), {"w1": "w1", "w2": "w2"})
    limit = _ring.OWNERS_REMEMBERED
    for i in range(limit + 5):
        owners.owner_of(f"h{i}.test")
    assert len(owners._owners) <= limit
    assert owners.owner_of("h0.test") == HashRing(nodes=["w1", "w2"], hash_fn="ketama").get_node(
        "h0.test"
    )


def test_an_empty_ring_names_no_owner() -> None:
    """With nobody alive, no host has an owner."""
    assert Ring.of(1, ()).owner_of("a.test") is None


def test_a_join_or_a_leave_moves_about_one_nth_of_the_hosts_and_no_others() -> None:
    """When one of N workers joins or leaves, about 1/N of the hosts change owners (within
    half of it at these sizes), and every host that moves goes to the joiner or comes
    from the leaver: no host moves between two workers that stayed."""
    hosts = [f"site{i}.example.com" for i in range(5_000)]
    for n in (3, 10, 50):
        members = [f"crawler-{n}-{i:04x}" for i in range(n)]
        before = [Ring.of(1, members).owner_of(h) for h in hosts]
        joined = [Ring.of(2, [*members, "joiner"]).owner_of(h) for h in hosts]
        left = [Ring.of(2, members[1:]).owner_of(h) for h in hosts]
        to_joiner = [now for was, now in zip(before, joined, strict=True) if was != now]
        from_leaver = [was for was, now in zip(before, left, strict=True) if was != now]
        assert set(to_joiner) == {"joiner"}
        assert set(from_leaver) == {members[0]}
        assert 1 / 2 < len(to_joiner) / len(hosts) * (n + 1) < 3 / 2
        assert 1 / 2 < len(from_leaver) / len(hosts) * n < 3 / 2


def test_a_named_members_incarnations_own_the_same_hosts() -> None:
    """The ring goes by names: ``NAME~TOKEN`` has NAME's place, so a worker that takes
    its predecessor's place (a new token) moves no host, to it or away from anyone."""
    hosts = [f"h{i}.test" for i in range(2000)]
    before = Ring.of(1, ("a~1f2e", "b-host-7-99", "c~0a0a"))
    after = Ring.of(2, ("a~77aa", "b-host-7-99", "c~0a0a"))
    by_names = Ring.of(3, ("a", "b-host-7-99", "c"))
    renamed = {"a~1f2e": "a~77aa"}
    for host in hosts:
        old = before.owner_of(host)
        assert after.owner_of(host) == renamed.get(old, old)
        assert _ring.name_of(after.owner_of(host) or "") == by_names.owner_of(host)
    assert {before.owner_of(h) for h in hosts} == set(before.members)


def test_a_member_id_without_a_token_is_its_own_name() -> None:
    assert _ring.name_of("host-12-ab01") == "host-12-ab01"
    assert _ring.name_of("crawler-3~5e1d") == "crawler-3"
