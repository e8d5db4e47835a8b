"""Revisits in the simulation: the crawl's setting, and the invariants judged from the
web's log (the pages' changes are ``simulations/changes.py``, the store's revisit calls
through a worker's link ``crew.FaultyRevisits``, and ``verdict`` applies these to a world).

Some examples crawl with ``--revisit`` (a fixed 6 s, or adaptive between 4 and 10 s of
simulated time). Their pages that answer 200 change at known simulated times (every
5 or 15 s, or never) and serve an ETag, a Last-Modified or neither, answering 304 to a
conditional request that still matches. The takers run as every other loop's turn,
until ``TAKES_FOR`` seconds into the fault-free end (a revisiting crawl never runs out
of work by itself); then the crawl ends as any other.

The invariants, from the web's own log (every request, and when its answer was read):

- *never early*: a revisited page is fetched again no sooner than ``--revisit`` (or
  ``--revisit-min``) after the end of its previous fetch for good; a fetch sooner than
  that is allowed only as the existing duplicates are, once for each holder of it that
  died or stalled (a repeated fetch, not a revisit);
- *never lost*: a page whose revisit was due before the last take that Redis ran (its
  last answer read, plus the heartbeat latency, a second for rounding up, and the
  longest interval) was fetched again, unless it ended in the dead letters.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from simulations.web import Fetch, Web

#: setup's draw: "" is no revisits (three examples in five, as before revisits).
CHOICES = ("", "", "", "6", "adaptive")
LOW_S, HIGH_S = 4, 10  # --revisit adaptive's bounds here, in simulated seconds
TAKES_FOR = 30.0  # simulated seconds of the fault-free end that the takers keep taking
REVISITED_KINDS = ("ok", "slow", "flaky", "busy")  # pages whose final answer is a 200
EPSILON = 1e-6
#: Where crash_at_revisit strikes (crash_later's form: "before" or "after" a Store call).
CRASH_POINTS = ("before revisit_put", "after revisit_put", "after revisit_take")


def settings_of(choice: str) -> dict[str, Any]:
    """The worker settings of setup's ``revisit`` draw."""
    if not choice:
        return {}
    return {"revisit": choice, "revisit_min": LOW_S, "revisit_max": HIGH_S}


@attrs.define
class Plan:
    """One example's revisits: its setting, and what the judges need to know of it."""

    choice: str
    low: float
    high: float
    takes: list[float] = attrs.Factory(list)  # when Redis ran a take (any worker's)
    end_from: float | None = None  # when the fault-free end began

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> Plan | None:
        choice = str(settings.get("revisit") or "")
        if not choice:
            return None
        if choice == "adaptive":
            return cls(choice, float(settings["revisit_min"]), float(settings["revisit_max"]))
        return cls(choice, float(choice), float(choice))

    def taking(self, now: float, finishing: bool) -> bool:
        """Whether the takers still take: until ``TAKES_FOR`` s into the fault-free end."""
        if finishing and self.end_from is None:
            self.end_from = now
        return self.end_from is None or now < self.end_from + TAKES_FOR

    def took(self, now: float) -> None:
        self.takes.append(now)


# -- the judges ------------------------------------------------------------------------------


def revisited(web: Web) -> set[str]:
    """The pages a revisiting crawl watches: those whose answer for good is a 200."""
    return {
        url for url, page in web.pages.items() if page.kind in REVISITED_KINDS and url != web.killer
    }


def early(
    fetches: Iterable[Fetch], watched: Collection[str], low: float, excused: Mapping[str, int]
) -> list[str]:
    """A watched page is fetched for good again no sooner than ``low`` after the end of
    the fetch its visit began with, but for one repeat per holder that died or stalled."""
    problems = []
    for url, got in sorted(_finals(fetches, watched).items()):
        anchor, soon = got[0], []
        for fetch in got[1:]:
            if fetch.start >= anchor.end + low - EPSILON:
                anchor = fetch  # a revisit, due by then: the next visit begins
            else:
                soon.append(fetch)
        if len(soon) > excused.get(url, 0):
            shown = ", ".join(f"{f.worker} at {f.start:.3f}" for f in soon[:4])
            problems.append(
                f"{url} was fetched again sooner than its interval of {low:g} s {len(soon)} "
                f"times ({shown}), though holders of it died or stalled only "
                f"{excused.get(url, 0)} times"
            )
    return problems


def lost(
    fetches: Iterable[Fetch],
    watched: Collection[str],
    read: Mapping[str, float],
    dead: Collection[str],
    *,
    high: float,
    latency: float,
    last_take: float | None,
) -> list[str]:
    """A watched page whose revisit was due before the last take Redis ran was fetched
    again: due at most its last answer's reading, the heartbeat's latency (the clock's
    offset), a second (due times are rounded up) and ``high`` later."""
    if last_take is None:
        return []
    problems = []
    for url in sorted(_finals(fetches, watched)):
        if url in dead or url not in read:
            continue
        due_by = read[url] + latency + 1.0 + high
        if due_by <= last_take - EPSILON:
            problems.append(
                f"{url} was due again by {due_by:.3f} s (its last answer read at "
                f"{read[url]:.3f} s) but never fetched again, though a take ran at "
                f"{last_take:.3f} s"
            )
    return problems


def figures(fetches: Sequence[Fetch], watched: Collection[str]) -> Counter[str]:
    """What an example's revisits covered: revisits, 304s, and revisits fetched by another
    worker than the page's previous fetch (its host handed over, or its worker gone)."""
    counts: Counter[str] = Counter()
    for got in _finals(fetches, watched).values():
        counts["revisit fetches"] += len(got) - 1
        counts["revisits by another worker"] += sum(
            a.worker != b.worker for a, b in itertools.pairwise(got)
        )
    counts["304s"] += sum(f.status == 304 for f in fetches)
    counts["examples"] += 1
    return counts


def _finals(fetches: Iterable[Fetch], watched: Collection[str]) -> dict[str, list[Fetch]]:
    finals: dict[str, list[Fetch]] = defaultdict(list)
    for fetch in fetches:
        if fetch.final and fetch.url in watched:
            finals[fetch.url].append(fetch)
    for got in finals.values():
        got.sort(key=lambda f: (f.start, f.end))
    return finals
