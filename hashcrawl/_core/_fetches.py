"""One fetch's end, as its session counts it: failed, put back or done. No IO.

A fetch the gate let out (``_gate``) ends in one of three ways, and each frees its
host's slot once: it failed (its host is given time, the page is tried again or
dead-lettered), it was never sent or was cut short (it waits for its host's next turn,
or goes to the host's new owner), or it has an outcome to commit (counted, its sitemaps
added, and a commit made due once every slot is taken).
"""

from __future__ import annotations

from hashcrawl._core._entry import Entry
from hashcrawl._core._epochs import Epochs
from hashcrawl._core._faults import Faults
from hashcrawl._core._frontier import Frontier, Held
from hashcrawl._core._gate import Gate
from hashcrawl._core._ledger import Ledger
from hashcrawl._core._outcome import Kind, Outcome, SeenCache, failure_wait
from hashcrawl._core._parts import Clock, Flight, RobotsCache, Suspects
from hashcrawl._core._seams import CookieJars, Tally
from hashcrawl._core._settings import Current, Settings


class Fetches:
    """How one session's fetches end; what its pages (``Page``) settle with.

    Args:
        worker: the member this session is of.
        current: the settings now.
        faults: the deliberate bugs (``skip_seen_filter``).
        epochs: the rings: a host handed over meanwhile keeps no cookies here.
        frontier: the hosts, freed as each request ends.
        ledger: where outcomes wait to be committed.
        suspects: departed workers' entries in flight here.
        robots: the robots.txt rules and which hosts' sitemaps are queued.
        tally: the counts.
        flight: the fetches under way.
        gate: whether a commit is due at once (``Gate.commit_due``).
        jars: the hosts' cookies.
        taken: page requests made to each host (with --max-pages-per-host).
        seen: the links known seen, which the handler skips.
        clock: the server's clock, by which a handled page's revisit is dated.
    """

    def __init__(
        self,
        *,
        worker: str,
        current: Current,
        faults: Faults,
        epochs: Epochs,
        frontier: Frontier,
        ledger: Ledger,
        suspects: Suspects,
        robots: RobotsCache,
        tally: Tally,
        flight: Flight,
        gate: Gate,
        jars: CookieJars,
        taken: dict[str, int],
        seen: SeenCache,
        clock: Clock,
    ) -> None:
        self.id, self.current, self.faults, self.epochs = worker, current, faults, epochs
        self.frontier, self.ledger, self.suspects, self.robots = frontier, ledger, suspects, robots
        self.tally, self.flight, self.gate, self.jars = tally, flight, gate, jars
        self.taken, self.seen, self.clock = taken, seen, clock

    @property
    def settings(self) -> Settings:
        return self.current.settings

    def failed(
        self, held: Held, reason: str, *, kind: str, now: float, took: float | None = None
    ) -> Outcome:
        """A page that failed: its host is given time (1, 2, 4... s, at most a minute),
        then it is tried again, or dead-lettered once out of attempts.

        Args:
            reason: what the dead letter says if this was the last attempt.
            kind: the error as the metrics count it (see ``_metrics.error_kind``).
        """
        self.finish(held, now)
        self.tally.failed += 1
        self.tally.error(kind, took)
        return Outcome.retry(held, reason, backoff=failure_wait(held.entry.attempts))

    def finish(self, held: Held, at: float) -> None:
        """``held``'s request is over (or was never made): count its host free, once."""
        if self.flight.fetching.pop(held.eid, None) is not None:
            self.frontier.done(held.host, at)

    def put_back(self, held: Held, now: float) -> Outcome | None:
        """``held`` was not fetched after all: it waits for its host's next turn, or goes
        to the host's new owner if this worker has handed the host over meanwhile."""
        host = self.frontier.hosts.get(held.host)
        self.finish(held, host.last_end if host is not None else now)
        if host is None or host.revoked:
            return Outcome.forward(held)
        self.frontier.add(held, epoch=host.since)
        return None

    def ended(self, held: Held, outcome: Outcome | None, now: float) -> bool:
        """``held``'s fetch is over, with ``outcome`` to commit (None: put back).

        Returns whether a commit is due at once (``Gate.commit_due``).
        """
        tally = self.tally
        if outcome is not None and outcome.fault:
            tally.error(outcome.fault)
        if outcome is not None and outcome.kind is Kind.DONE:
            if outcome.found:
                tally.links(outcome.found, len(outcome.follows) + outcome.known)
            tally.links_dropped += outcome.dropped
            tally.robots_denied += outcome.denied
            tally.pattern_refused += outcome.refused
            outcome.follows.extend(self.sitemaps_of(held))
        self.finish(held, now)
        self.flight.in_flight -= 1
        self.suspects.ended(held)
        if outcome is None:
            return False
        if outcome.backoff is not None:
            self.frontier.back_off(held.host, now + outcome.backoff)
        self.ledger.add_fetched(outcome)
        return self.gate.commit_due()

    def sitemaps_of(self, held: Held) -> list[Entry]:
        """With --sitemaps, the sitemaps of a host this session has not queued yet."""
        return self.robots.sitemaps_of(held) if self.settings.sitemaps else []
