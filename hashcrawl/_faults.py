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
  stale-request test catches it.
"""

from __future__ import annotations

FAULTS: set[str] = set()
