"""Deliberate bugs, switched on by name, for the simulations to show they catch them.

Each name turns on one small wrong step in the coordination code; the switches sit where
docs/simulation.md says. Only the simulations' tests add to this set:

- ``ack_before_write``: commit (acknowledge) a batch before writing its items;
- ``reclaim_live``: a heartbeat expires members without checking they fell silent;
- ``skip_seen_filter``: links are queued without passing the seen filter;
- ``drop_pace``: a handoff leaves the hosts' pacing state behind.
"""

from __future__ import annotations

FAULTS: set[str] = set()
