"""Tests for hashcrawl._core._frontier: per-host queues and pacing, with time passed in."""

from __future__ import annotations

from hashcrawl._core._entry import Entry
from hashcrawl._core._frontier import Frontier, Held


def held(n: int, host: str = "a.test", priority: int = 0) -> Held:
    return Held(f"{n}-0", Entry(url=f"http://{host}/{n}", priority=priority), host)


def frontier_with(*entries: Held, delay: float = 1.0, per_host: int = 1) -> Frontier:
    frontier = Frontier(delay=delay, per_host=per_host)
    for entry in entries:
        frontier.add(entry, epoch=0)
    return frontier


def test_a_host_is_not_taken_again_before_the_delay_after_its_last_request_ended() -> None:
    """With per_host 1, the next request waits for the last one's end plus the delay."""
    frontier = frontier_with(held(1), held(2), delay=1.0)
    assert frontier.take(0.0) == held(1)
    assert frontier.take(0.0) is None  # in flight: nothing else of the host may start
    frontier.done("a.test", 0.5)
    assert frontier.take(1.0) == 1.5
    assert frontier.take(1.5) == held(2)


def test_per_host_two_allows_two_requests_at_once_still_the_delay_apart() -> None:
    """With per_host 2, starts are spaced by the delay, not by the ends."""
    frontier = frontier_with(held(1), held(2), held(3), delay=0.5, per_host=2)
    assert frontier.take(0.0) == held(1)
    assert frontier.take(0.1) == 0.5
    assert frontier.take(0.5) == held(2)
    assert frontier.take(1.0) is None  # two in flight


def test_a_higher_priority_entry_of_a_host_goes_first() -> None:
    """Within a host, priority orders the queue; equal priorities keep arrival order."""
    frontier = frontier_with(held(1), held(2, priority=5), held(3), delay=0.0)
    taken = []
    for _ in range(3):
        got = frontier.take(0.0)
        assert isinstance(got, Held)
        taken.append(got.eid)
        frontier.done("a.test", 0.0)
    assert taken == ["2-0", "1-0", "3-0"]


def test_a_backed_off_host_waits_while_others_go() -> None:
    """Backoff holds one host back; another host is not held up by it."""
    frontier = frontier_with(held(1), held(2, host="b.test"), delay=0.0)
    frontier.back_off("a.test", 10.0)
    got = frontier.take(0.0)
    assert isinstance(got, Held) and got.host == "b.test"
    assert frontier.take(0.0) == 10.0


def test_a_host_not_allowed_yet_is_skipped_not_lost() -> None:
    """A host may_fetch refuses stays queued and is taken once allowed."""
    frontier = frontier_with(held(1), delay=0.0)
    assert frontier.take(0.0, lambda host: False) is None
    assert frontier.take(0.0) == held(1)


def test_a_host_refused_by_may_fetch_does_not_hold_up_the_next_host() -> None:
    """Another host ready at the same moment is taken while may_fetch refuses the first."""
    frontier = frontier_with(held(1), held(2, host="b.test"), delay=0.0)
    got = frontier.take(0.0, lambda host: host.name != "a.test")
    assert isinstance(got, Held) and got.host == "b.test"
    assert frontier.take(0.0) == held(1)


def test_a_stale_slot_of_a_revoked_host_does_not_hold_up_the_next_host() -> None:
    """The slot a revoked host left in the timeline is passed over, not taken for the end."""
    frontier = frontier_with(held(1), held(2, host="b.test"), delay=0.0)
    frontier.revoke("a.test")
    got = frontier.take(0.0)
    assert isinstance(got, Held) and got.host == "b.test"


def test_a_slot_whose_pacing_moved_does_not_hold_up_a_host_ready_behind_it() -> None:
    """A host backed off after its slot was scheduled is put later; the next one starts."""
    frontier = frontier_with(held(1), held(2), held(3, host="b.test"), held(4, host="b.test"))
    assert frontier.take(0.0) == held(1)
    assert frontier.take(0.0) == held(3, host="b.test")
    frontier.done("a.test", 0.5)  # a.test's slot: 1.5
    frontier.back_off("a.test", 5.0)  # ... which is now 5.0
    frontier.done("b.test", 1.0)  # b.test's slot: 2.0
    assert frontier.take(3.0) == held(4, host="b.test")
    assert frontier.take(3.0) == 5.0


def test_a_revoked_host_is_never_taken_and_drop_returns_its_queue() -> None:
    """After revoke nothing of the host starts; drop hands its queued entries back."""
    frontier = frontier_with(held(1), held(2), delay=0.0)
    frontier.revoke("a.test")
    assert frontier.take(0.0) is None
    assert sorted(h.eid for h in frontier.drop("a.test")) == ["1-0", "2-0"]
    assert frontier.size == 0


def test_idle_hosts_are_forgotten_only_once_their_pacing_has_run_out() -> None:
    """A host with nothing to do goes after idle_for, and not while its delay still runs."""
    frontier = frontier_with(held(1), delay=1.0)
    assert frontier.take(0.0) == held(1)
    frontier.done("a.test", 0.0)
    frontier.hosts["a.test"].paced = True
    assert frontier.evict_idle(0.5, idle_for=0.0, keep=0) == []  # its delay runs until 1.0
    assert frontier.evict_idle(5.0, idle_for=10.0, keep=10) == []
    assert frontier.evict_idle(10.0, idle_for=10.0, keep=10) == ["a.test"]


def test_size_counts_the_entries_queued_not_those_taken_or_dropped() -> None:
    """size is what the reader may still add to: queued entries only."""
    frontier = frontier_with(held(1), held(2), held(3, host="b.test"), delay=0.0)
    assert frontier.size == 3
    assert frontier.take(0.0) == held(1)
    assert frontier.size == 2
    frontier.revoke("a.test")
    assert [h.eid for h in frontier.drop("a.test")] == ["2-0"]
    assert frontier.size == 1


def test_a_host_with_work_or_state_to_hand_on_is_never_forgotten() -> None:
    """Queued, in flight, unpaced or revoked: each keeps a host, however idle the rest."""
    frontier = frontier_with(held(1), held(2, host="b.test"), held(3, host="c.test"), delay=0.0)
    for name in ("a.test", "b.test", "c.test"):
        frontier.hosts[name].paced = True
    assert frontier.take(0.0) == held(1)  # a.test: in flight
    frontier.hosts["c.test"].paced = False  # c.test: queued and unpaced
    frontier.add(held(4, host="d.test"), epoch=0)
    frontier.hosts["d.test"].paced = True
    frontier.revoke("d.test")  # d.test: queued and revoked
    assert frontier.evict_idle(100.0, idle_for=0.0, keep=0) == []
    assert set(frontier.hosts) == {"a.test", "b.test", "c.test", "d.test"}


def test_beyond_keep_idle_hosts_the_least_recently_used_go_first() -> None:
    """With more idle hosts than keep, the oldest go at once, before idle_for is up."""
    frontier = Frontier(delay=0.0, per_host=1)
    for n, name in enumerate(("a.test", "b.test", "c.test")):
        frontier.add(held(n, host=name), epoch=0)
        got = frontier.take(float(n))
        assert isinstance(got, Held)
        frontier.done(name, float(n))
        frontier.hosts[name].paced = True
    assert frontier.evict_idle(3.0, idle_for=60.0, keep=1) == ["a.test", "b.test"]
    assert list(frontier.hosts) == ["c.test"]


def test_a_hosts_own_crawl_delay_wins_over_a_shorter_setting_and_backoff_only_grows() -> None:
    """The gap is the larger of --delay and Crawl-delay; a later, shorter backoff keeps
    the longer one."""
    frontier = frontier_with(held(1), held(2), delay=1.0)
    frontier.hosts["a.test"].crawl_delay = 3.0
    assert frontier.take(0.0) == held(1)
    frontier.done("a.test", 0.0)
    assert frontier.take(0.0) == 3.0
    frontier.back_off("a.test", 10.0)
    frontier.back_off("a.test", 5.0)
    assert frontier.take(3.0) == 10.0
    frontier.done("a.test", 20.0)  # nothing of it is in flight: a late answer changes nothing
    assert frontier.take(10.0) == held(2)
