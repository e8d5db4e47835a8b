"""Deliberate bugs, switched on by name, for the simulations to show they catch them.

Each name turns on one small wrong step in the coordination code; the switches sit where
docs/simulation.md says. Only the tests add to this set:

- ``ack_before_write``: commit (acknowledge) a batch before writing its items;
- ``reclaim_live``: a heartbeat expires members without checking they fell silent;
- ``skip_seen_filter``: links are queued without passing the seen filter;
- ``drop_pace``: a handoff leaves the hosts' pacing state behind;
- ``send_unchecked``: the trio driver sends a request without asking the session, right
  before it leaves, whether it still may (``Driver.may_send``). The simulation does not
  model the time between that check and the socket; tests/test_politeness.py's
  stale-request test catches it, and so does the simulation, whose fetcher holds a
  request before it leaves;
- ``newest_as_settled``: a heartbeat's newest epoch is taken for the settled one (the
  one every member has applied), so a gained host is fetched before its previous
  owner let go of it;
- ``wide_fresh_window``: a worker may start requests for a whole lease after its last
  answered heartbeat, not only for a quarter of it;
- ``send_stale``: the session's check right before a request leaves
  (``Session.may_send``) forgets freshness and asks only who owns the host. Unlike
  ``send_unchecked`` (the trio driver does not ask at all), this is a wrong decision in
  the core, made for every driver.
"""

from __future__ import annotations

FAULTS: set[str] = set()
