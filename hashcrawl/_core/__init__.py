"""Decisions: the session and its parts, the frontier, the ring, outcomes, scope, URLs and entries.

Nothing here does I/O: time and replies come in as arguments."""
