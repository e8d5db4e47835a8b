"""Deliberate bugs, switched on by name, for the simulations to show they catch them.

Each name turns on one small wrong step in the coordination code; the switches sit where
docs/simulation.md says. A :class:`Faults` value is passed in (``Worker(faults=...)``,
``Session(faults=...)``), never read from a global: production code only ever sees
``NO_FAULTS``, and only the tests and simulations name any:

- ``ack_before_write``: commit (acknowledge) a batch before writing its items;
- ``reclaim_live``: a heartbeat expires members without checking they fell silent;
- ``skip_seen_filter``: links are queued without passing the seen filter;
- ``drop_pace``: a handoff leaves the hosts' pacing state behind;
- ``send_unchecked``: a request is sent without asking the gate whether it still may
  leave, neither as the page hands out the step that sends it (``Page.next_step``) nor
  as the trio driver writes it (``Page.may_send``). The simulation does not
  model the time between that check and the socket; tests/test_politeness.py's
  stale-request test catches it, and so does the simulation, whose fetcher holds a
  request before it leaves;
- ``newest_as_settled``: a heartbeat's newest epoch is taken for the settled one (the
  one every member has applied), so a gained host is fetched before its previous
  owner let go of it;
- ``wide_fresh_window``: a worker may start requests for a whole lease after its last
  answered heartbeat, not only for a quarter of it;
- ``send_stale``: the gate's check right before a request leaves
  (``Gate.may_send``) forgets freshness and asks only who owns the host. Unlike
  ``send_unchecked`` (nothing asks at all), this is a wrong decision in
  the core, made for every driver;
- ``revisit_stays_due``: a revisit's take leaves the record due (its requeue lease is 0
  s), so the next take, a second later, queues the page again: duplicate revisits;
- ``revisit_put_after_ack``: a commit writes the pages' next revisit records after
  the commit that acknowledges them, not before: a worker that dies in between loses
  those pages' revisits (their records keep the take's lease, or a first fetch has none);
- ``release_unchecked``: a heartbeat's list of members behind the newest epoch is
  ignored, so a gained host is fetched as soon as the heartbeat has seen its epoch,
  before the previous owner has let go of it;
- ``release_by_settled``: the rings of the members behind are ignored, so every member
  behind holds up every host gained (the rule before the rings): a dead member stalls
  its live peers' moved hosts until its lease runs out;
- ``park_unowned``: a commit parks an entry in its host's overflow set though the ring
  it is routed by gives the host to another worker, who read ``parked`` before and never
  looks again: the entries wait unseen and the crawl stops short.

Deliberate bugs of a sharded crawl (``_run._sharding``; the simulation
``simulations.shards`` runs them):

- ``deliver_after_ack``: a page is acknowledged once its links to other shards' hosts
  are handed to those shards' drivers, before their commits have added them: a worker
  that dies in between loses them;
- ``foreign_in_source``: a link to another shard's host is committed into the page's
  own shard as well as delivered: two shards, so two owners, for one host;
- ``end_from_one_sweep``: the end of a sharded crawl is decided from each shard's last
  report alone, however far apart they came: a shard that reported idle before a link
  reached it counts as idle;
- ``deliver_by_source_ring``: links carried into a shard are routed by the ring of the
  shard the link was found in, not the destination's: the host goes to a worker its
  shard's ring does not name;
- ``skip_failover_ratchet``: a store that sees the crawl's slot move (a replica
  promoted) does not raise the epoch past those the old primary may have issued and
  lost: the next membership change reissues an epoch number with other members.

Deliberate bugs of static membership (``_run._naming``, ``_store._store``;
``tests/test_names.py`` and the simulation's named workers, ``simulations.reach``, catch
them):

- ``take_running``: a worker started under a name takes the place of the member holding
  it without watching its heartbeat: a second running worker of one name is not refused,
  and fences the first;
- ``takeover_unfenced``: a join that takes a member's place leaves that member in the
  ring, its stream no orphan: the old incarnation's heartbeats and commits are still
  accepted.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from hashcrawl._exceptions import ConfigError

KNOWN = frozenset(
    {
        "ack_before_write",
        "reclaim_live",
        "skip_seen_filter",
        "drop_pace",
        "send_unchecked",
        "newest_as_settled",
        "wide_fresh_window",
        "send_stale",
        "revisit_stays_due",
        "revisit_put_after_ack",
        "park_unowned",
        "release_unchecked",
        "release_by_settled",
        "deliver_after_ack",
        "foreign_in_source",
        "end_from_one_sweep",
        "deliver_by_source_ring",
        "skip_failover_ratchet",
        "take_running",
        "takeover_unfenced",
    }
)


@attrs.frozen
class Faults:
    """The deliberate bugs switched on, by name (none by default)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Iterable[str]) -> Faults:
        """The faults ``names`` name.

        Raises:
            ConfigError: a name is not one of ``KNOWN``.
        """
        chosen = frozenset(names)
        unknown = sorted(chosen - KNOWN)
        if unknown:
            raise ConfigError(f"no deliberate bug is called {', '.join(unknown)}: {sorted(KNOWN)}")
        return cls(chosen)

    def __contains__(self, name: str) -> bool:
        return name in self.names


NO_FAULTS = Faults()
