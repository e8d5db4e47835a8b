"""A revisit crawl judged from the revisit site's log alone (testing/revisitsite.py).

Per class of page (changing every ``fast`` or ``slow`` period, or never): how late each
change was seen and how many fetches each change detected cost. The crawler's own
lateness: the rule is replayed from the log (a page's verdicts are the versions its
fetches saw), so each revisit's interval is known, and each fetch is compared with the
fetch before plus that interval. What may come between a record's due time and its
fetch is a :class:`Bound`; the host's *idle time while a page was due* says whether the
rest was the host's pace (it was busy with the pages ahead) or the crawler being late.
Politeness: every request's arrival (robots.txt too) against ``--delay``, exactly.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Sequence

import attrs

from hashcrawl._core._revisit import Policy, Verdict
from testing.revisitsite import Hit, RevisitSite

#: The log's stamps are time.monotonic() read in the server's thread before it answers:
#: the next request leaves only once the answer has arrived and --delay has passed on
#: the same clock (a host with one request in flight is paced from its last answer), so
#: a gap under --delay by more than the clock's resolution is a real violation.
RESOLUTION = time.get_clock_info("monotonic").resolution


@attrs.frozen(kw_only=True)
class Bound:
    """What may pass between a revisit's due time (its last fetch plus its interval, by
    the log) and its request, in seconds, part by part."""

    ceil_s: float = 1.0  # the due time is rounded up to the server's next whole second
    take_s: float = 1.0  # takes run once a second (_run/_taker.TAKE_EVERY)
    beat_s: float  # the heartbeat that reports the inbox (Settings.beat_interval)
    calls_s: float = 0.5  # the answer's handling, the take, drain and read round trips
    delay_s: float  # --delay: the host's pace
    answer_s: float = 0.1  # one request's answer and turnaround at the host, loopback
    pages: int  # the host's pages: all may be due together, each waits for those ahead
    kill_s: float  # a SIGKILLed owner's lease and the heartbeat that finds it gone

    @property
    def pipeline_s(self) -> float:
        """From the due time to the owner's frontier, the host's pace aside."""
        return self.ceil_s + self.take_s + self.beat_s + self.calls_s

    @property
    def queue_s(self) -> float:
        """The host's pace: the other pages ahead of it, each a --delay and an answer."""
        return (self.pages - 1) * (self.delay_s + self.answer_s)

    def over_s(self, *, killed: bool) -> float:
        """How long a request may come after its due time."""
        return self.pipeline_s + self.queue_s + (self.kill_s if killed else 0.0)

    def describe(self) -> str:
        return (
            f"due + {self.pipeline_s:.1f} s (1 s rounding up, 1 s take, {self.beat_s:g} s "
            f"heartbeat, {self.calls_s:g} s calls) + {self.queue_s:.1f} s (the host's "
            f"{self.pages - 1} other pages ahead, {self.delay_s:g} + {self.answer_s:g} s "
            f"each); + {self.kill_s:g} s across the kill"
        )


@attrs.frozen(kw_only=True)
class Fetch:
    """One fetch of a page as the log shows it, with the rule replayed."""

    at: float
    version: int
    due: float | None  # the fetch before plus its interval (None: a first fetch)
    then: int  # the interval the rule gives the page after this fetch
    killed: bool  # a kill fell between it and the fetch before (by a kill's allowance)

    @property
    def over(self) -> float | None:
        """Seconds after its due time this fetch came."""
        return None if self.due is None else self.at - self.due


@attrs.frozen(kw_only=True)
class Change:
    """A change a page made: when, its class, and when a fetch first saw it."""

    kind: str  # "fast" or "slow"
    at: float
    seen: float | None  # the first fetch at or after it; None: not seen
    due_by: float  # when the schedule promised to have fetched the page again


def classes(site: RevisitSite, fast: float) -> list[str]:
    """Each page's class: ``fast`` (changing every ``fast`` s), ``slow``, or ``never``."""
    return [
        "never" if p.period is None else "fast" if p.period == fast else "slow" for p in site.pages
    ]


def fetches_of(
    site: RevisitSite, n: int, policy: Policy, killed: float, kill_s: float
) -> list[Fetch]:
    """Page ``n``'s fetches (200s and 304s), each with its replayed interval: a fetch's
    verdict is whether it saw another version than the fetch before."""
    out: list[Fetch] = []
    quiet = 0
    for hit in (h for h in site.hits(n) if h.status in (200, 304)):
        if not out:
            out.append(Fetch(at=hit.at, version=hit.version, due=None, then=policy.interval(0),
                             killed=False))  # fmt: skip
            continue
        before = out[-1]
        changed = hit.version != before.version
        quiet = policy.quiet_after(quiet, Verdict.CHANGED if changed else Verdict.UNCHANGED)
        across = before.at < killed + kill_s and hit.at > killed
        out.append(Fetch(at=hit.at, version=hit.version, due=before.at + before.then,
                         then=policy.interval(quiet), killed=across))  # fmt: skip
    return out


def changes_of(
    site: RevisitSite, n: int, kind: str, fetched: list[Fetch], bound: Bound, end: float
) -> list[Change]:
    """Page ``n``'s changes after its first fetch and before ``end``, less those the
    schedule need not have seen by ``end`` (the fetch before, its interval and the bound
    still running at the end)."""
    out: list[Change] = []
    for version in itertools.count(site.version(n, fetched[0].at) + 1):
        at = site.changed_at(n, version)
        if at > end:
            break
        before = [f for f in fetched if f.at < at][-1]
        after = [f for f in fetched if f.at >= at]
        due_by = before.at + before.then + bound.over_s(killed=bool(after and after[0].killed))
        if not after and due_by > end:
            break
        seen = after[0].at if after else None
        out.append(Change(kind=kind, at=at, seen=seen, due_by=due_by))
    return out


def idle_while_due(times: Sequence[float], start: float, end: float, bound: Bound) -> float:
    """The time in [start, end) the host had nothing in flight and no pace to keep: each
    gap between requests (and the window's ends) beyond a --delay and an answer."""
    inside = [t for t in times if start < t < end]
    edges = [start, *inside, end]
    busy = bound.delay_s + bound.answer_s
    first = max(0.0, edges[1] - edges[0] - busy) if len(edges) > 1 else 0.0
    rest = sum(max(0.0, b - a - busy) for a, b in itertools.pairwise(edges[1:]))
    return first + rest


def fmean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def judge(
    site: RevisitSite, policy: Policy, *, fast: float, killed: float, end: float, bound: Bound
) -> dict[str, object]:
    """Everything the acceptance reads from one run's log."""
    kinds = classes(site, fast)
    log: list[Hit] = list(site.log)
    times = sorted(hit.at for hit in log)
    fetched = {n: fetches_of(site, n, policy, killed, bound.kill_s) for n in range(len(site.pages))}
    per: dict[str, dict[str, float]] = {}
    changes: list[Change] = []
    for kind in ("fast", "slow", "never"):
        members = [n for n, k in enumerate(kinds) if k == kind and fetched[n]]
        made = [
            c
            for n in members
            if kind != "never"
            for c in changes_of(site, n, kind, fetched[n], bound, end)
        ]
        changes += made
        late = [c.seen - c.at for c in made if c.seen is not None]
        count = sum(len(fetched[n]) for n in members)
        detected = sum(
            b.version != a.version for n in members for a, b in itertools.pairwise(fetched[n])
        )
        spans = [[b.at - a.at for a, b in itertools.pairwise(fetched[n])] for n in members]
        per[kind] = {
            "made": len(made),
            "seen": len(late),
            "past_bound": sum(c.seen is None or c.seen > c.due_by for c in made),
            "late_mean": fmean(late),
            "late_max": max(late, default=0.0),
            "fetches": count,
            "detected": detected,
            "per_change": count / detected if detected else float("inf"),
            "per_page": count / max(1, len(members)),
            "first_gap": fmean([g[0] for g in spans if g]),
            "last_gap": fmean([g[-1] for g in spans if g]),
        }
    revisits = [f for fs in fetched.values() for f in fs if f.over is not None]
    calm = [f for f in revisits if not f.killed]
    idle = [
        idle_while_due(times, f.due + bound.pipeline_s, f.at, bound)
        for f in calm
        if f.due is not None and f.at > f.due + bound.pipeline_s
    ]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    pages = [hit for hit in log if hit.path.startswith("/p/") and hit.status in (200, 304)]
    seen = [c.seen - c.at for c in changes if c.seen is not None]
    return {
        "classes": per,
        "changes": changes,
        "late_mean": fmean(seen),
        "late_max": max(seen, default=0.0),
        "fetches": len(pages),
        "detected": sum(per[k]["detected"] for k in per),
        "over_max": max((f.over for f in calm if f.over is not None), default=0.0),
        "over_mean": fmean([f.over for f in calm if f.over is not None]),
        "over_max_killed": max(
            (f.over for f in revisits if f.killed and f.over is not None), default=0.0
        ),
        "past_over": sum(
            f.over is not None and f.over > bound.over_s(killed=f.killed) for f in revisits
        ),
        "idle_max": max(idle, default=0.0),
        "requests": len(times),
        "rude": sum(g < bound.delay_s - RESOLUTION for g in gaps),
        "smallest_gap": min(gaps, default=float("inf")),
        "304s": sum(hit.status == 304 for hit in pages),
        "if-none-match": sum(hit.if_none_match is not None for hit in pages),
        "if-modified-since": sum(hit.if_modified_since is not None for hit in pages),
    }
