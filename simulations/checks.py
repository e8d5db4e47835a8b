"""The invariants, as pure functions of what the server log, the sink and Redis show.

Each returns a list of violations, each one a sentence a reader can act on; an empty
list means the invariant holds. Nothing here knows how hashcrawl works inside.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping

from simulations.web import Fetch

EPSILON = 1e-6  # clock arithmetic is in float seconds


def lost(
    accepted: Iterable[str],
    queued: Collection[str],
    done: Collection[str],
    dead: Collection[str],
) -> list[str]:
    """Every accepted URL is waiting or held (queued), done (in the sink) or dead."""
    missing = sorted(u for u in accepted if u not in queued and u not in done and u not in dead)
    return [f"{url} was accepted but is neither queued, done nor dead" for url in missing]


def duplicates(fetches: Iterable[Fetch], excused: Mapping[str, int]) -> list[str]:
    """A page is fetched for good more than once only if a holder of it died or stalled:
    once, plus once for each time that happened (``excused`` counts them per URL)."""
    finals: dict[str, list[Fetch]] = defaultdict(list)
    for fetch in fetches:
        if fetch.final:
            finals[fetch.url].append(fetch)
    return [
        f"{url} was fetched {len(got)} times ({_who(got)}), though holders of it crashed, "
        f"paused or were cut off past their lease only {excused.get(url, 0)} times"
        for url, got in sorted(finals.items())
        if len(got) > 1 + excused.get(url, 0)
    ]


def politeness(fetches: Iterable[Fetch], delay_of: Callable[[str, float], float]) -> list[str]:
    """Requests to one host never overlap, and each starts ``delay`` after the last ended
    (``delay_of(host, start)``: the delay a request starting then must keep)."""
    problems = []
    for host, got in sorted(_by_host(fetches).items()):
        before = got[0]
        for after in got[1:]:
            delay = delay_of(host, after.start)
            if after.start < before.end - EPSILON:
                who = "two workers" if before.worker != after.worker else "one worker"
                problems.append(
                    f"{host}: {who} fetched at once: {_show(before)} and {_show(after)}"
                )
            elif after.start < before.end + delay - EPSILON:
                gap = after.start - before.end
                problems.append(
                    f"{host}: {gap:.3f} s between {_show(before)} and {_show(after)}, "
                    f"less than its delay of {delay:g} s"
                )
            before = max(before, after, key=_end)  # the one busy longest so far
    return problems


def accounting(outstanding: int, entries: int, planted: int = 0) -> list[str]:
    """The fleet's ``outstanding`` counter equals the entries in streams and overflow sets,
    or falls short of them by at most the ``planted`` entries written there by hand (it
    does not count those until the idle recount)."""
    if 0 <= entries - outstanding <= planted:
        return []
    by_hand = f" ({planted} of them written by hand)" if planted else ""
    return [f"'outstanding' says {outstanding} but {entries} entries are queued or parked{by_hand}"]


def fetched_counted(
    counted: Mapping[str, int], fetches: Iterable[Fetch], written: Iterable[tuple[str, str]]
) -> list[str]:
    """Each worker's count of pages fetched (``counted``, its tally: what status and the
    metrics add up) is true to the web's own log: at least the pages it wrote items for
    (each was answered to it first), at most the pages the web answered it (robots.txt
    aside)."""
    answered = Counter(f.worker for f in fetches if f.status and not f.robots)
    wrote = Counter(worker for _, worker in written)
    return [
        f"{name} counts {n} pages fetched, but wrote items for {wrote[name]} and the web "
        f"answered it {answered[name]}"
        for name, n in sorted(counted.items())
        if not wrote[name] <= n <= answered[name]
    ]


def killer(deaths: int, max_attempts: int) -> list[str]:
    """A page that kills every worker that reads it is dead-lettered after a few deaths,
    not passed from worker to worker for ever: the first member it kills makes it a
    suspect, and each one after that uses up one of its ``max_attempts``."""
    if deaths <= max_attempts + 1:
        return []
    return [
        f"the killer page killed {deaths} members, though {max_attempts + 1} deaths use up "
        f"its {max_attempts} attempts (one makes it a suspect, each later one costs one)"
    ]


def unfinished(
    accepted: Iterable[str],
    done: Collection[str],
    dead: Mapping[str, str],
    failed: Callable[[str], bool],
) -> list[str]:
    """At the end every reachable page is done, or dead because it failed or killed workers."""
    problems = []
    for url in sorted(accepted):
        if url in done:
            continue
        if url not in dead:
            problems.append(f"{url} is reachable but was never done")
        elif not failed(url) and "died" not in dead[url]:
            problems.append(f"{url} is dead although it never failed: {dead[url][:120]}")
    return problems


def _by_host(fetches: Iterable[Fetch]) -> dict[str, list[Fetch]]:
    hosts: dict[str, list[Fetch]] = defaultdict(list)
    for fetch in fetches:
        hosts[fetch.host].append(fetch)
    for got in hosts.values():
        got.sort(key=lambda f: (f.start, f.end))
    return hosts


def _end(fetch: Fetch) -> float:
    return fetch.end


def _show(fetch: Fetch) -> str:
    path = "/" + fetch.url.split("/", 3)[3]
    return f"{fetch.worker} {path} [{fetch.start:.3f}, {fetch.end:.3f}]"


def _who(got: list[Fetch]) -> str:
    return ", ".join(f"{f.worker} at {f.start:.3f}" for f in got)
