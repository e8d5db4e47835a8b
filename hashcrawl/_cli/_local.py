"""``hashcrawl crawl``'s own machinery: its child workers, their start, and their verdict.

``crawl`` owns a private Redis and every worker on it, so it may do what no ``join``
may: expire the previous run's members at once, and judge from the store, once the
workers are gone, whether any start URL was fetched.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from hashcrawl._cli._logfile import say_raw
from hashcrawl._core._outcome import PARSE_FAULT
from hashcrawl._core._patterns import Patterns
from hashcrawl._core._scope import Scope
from hashcrawl._core._urls import canonicalize
from hashcrawl._exceptions import ConfigError, HashcrawlError
from hashcrawl._run._queue import stored_patterns, submit_urls, unwanted_start
from hashcrawl._store._store import Store, dead_key

log_line = "hashcrawl: {}".format
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class StoppedAtOnce(HashcrawlError):
    """A second Ctrl-C (or SIGTERM): the workers were killed and the command ends now."""


class NothingFetched(HashcrawlError):
    """Every start URL of a crawl failed; the message says why."""


def plural(count: int, noun: str) -> str:
    """'1 URL', '2 URLs'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def cores() -> int:
    """The cores this process may run on (its affinity, as a container's CPU set is)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@attrs.frozen
class Sizing:
    """How many workers ``crawl`` starts, the line that says why, and whether some of them
    will have nothing to fetch (then the line is a warning)."""

    count: int
    why: str
    idle: bool = False


def worker_count(asked: int | None, scope: Scope, *, cores: int, open_ended: bool) -> Sizing:
    """How many workers ``crawl`` starts, and why.

    ``asked`` (``--workers``) wins. Otherwise one a core, but no more than the hosts a crawl
    that stays on its hosts (``scope``: no ``--span-hosts``, no ``--allow-domain``) can
    reach, since a host has one owner and a worker more would have nothing to fetch;
    ``open_ended`` (a spider submitting its own start requests) may reach more.
    """
    reach = None if scope.span or scope.domains or open_ended else len(scope.hosts)
    if asked is None:
        count = cores if reach is None else max(1, min(cores, reach))
        if reach is not None and reach < cores:
            return Sizing(
                count,
                f"starting {plural(count, 'worker')}, one a host: the crawl stays on "
                f"{plural(reach, 'host')}, and a host has one owner at a time",
            )
        return Sizing(count, f"starting {plural(count, 'worker')}, one a core")
    if reach is not None and asked > reach:
        why = (
            f"starting {plural(asked, 'worker')} for {plural(reach, 'host')}: "
            f"{asked - reach} will have nothing to fetch, since a host has one owner at a "
            "time (that keeps its politeness exact); --span-hosts or --allow-domain lets "
            "the crawl reach more hosts"
        )
        return Sizing(asked, why, idle=True)
    return Sizing(asked, f"starting {plural(asked, 'worker')}")


def counted(count: int, noun: str) -> str:
    """'1 host', '1,024 hosts': :func:`plural` with thousands separated, for figures."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _as_child() -> None:
    """Runs in each worker process between fork and exec."""
    # The terminal sends Ctrl-C to the whole process group: the children leave it to
    # ``crawl``, which tells them once (SIGTERM) and prints one line, not one per child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        # A crawl killed outright (SIGKILL) must not leave its workers crawling on. Its
        # private Redis gets SIGTERM at the same moment and exits, so a gentle stop
        # could only wait a lease for it: they end at once, and the next run of the
        # command takes back what they held (expire_previous_members).
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def interrupts_held() -> Iterator[Callable[[], None]]:
    """Hold a Ctrl-C while ``crawl`` starts its server and workers; yield a check that
    raises KeyboardInterrupt if one came (it also runs at the end).

    Python raises KeyboardInterrupt wherever the main thread is, a destructor included:
    there it is printed as an ignored exception with a traceback, and lost. Held, it
    surfaces at a check, in plain code, and the command exits 130 with one line.
    """
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: got.append(number))

    def check() -> None:
        if got:
            raise KeyboardInterrupt

    try:
        yield check
    except Exception:
        check()  # what failed then (a server that got the same Ctrl-C) is not the news
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    check()


class Children:
    """``crawl``'s worker processes: the first signal stops them gently, a second Ctrl-C
    at once (a SIGTERM, however often it comes, is the same request to stop)."""

    def __init__(
        self,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str] | None = None,
        quiet: bool = False,
    ) -> None:
        self.commands = [list(command) for command in commands]
        self.env = env
        self.quiet = quiet  # -q: not even the line that says it is stopping
        self.processes: list[subprocess.Popen[bytes]] = []
        self.signals = 0
        self._pid = os.getpid()  # a forked child runs _on_signal too, until _as_child

    def run(self) -> list[int]:
        """Start the workers and wait for them; returns their exit statuses.

        Raises:
            StoppedAtOnce: a second signal came; the workers were killed.
        """
        previous = {
            number: signal.signal(number, self._on_signal)
            for number in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for command in self.commands:
                if self.signals:
                    break
                self.processes.append(subprocess.Popen(command, preexec_fn=_as_child, env=self.env))
            codes = [process.wait() for process in self.processes]
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        if self.signals > 1:
            # -q or not, the line that it ended without saving: an error, always said
            raise StoppedAtOnce(
                "stopped at once; run the same command again to go on where it stopped"
            )
        return codes

    @property
    def interrupted(self) -> bool:
        return self.signals > 0

    def _on_signal(self, number: int, frame: Any) -> None:
        """Count the signal and pass it on: SIGTERM to the workers first, SIGKILL after.

        Python runs this between any two bytecodes of the main thread, inside
        ``Popen.wait``'s lock too: so it calls no Popen method, takes no lock and raises
        nothing (an exception here once left that lock held, and ``wait`` hung for ever).
        ``run`` raises StoppedAtOnce once the killed workers are reaped.
        """
        if os.getpid() != self._pid:
            # A child between fork and exec (in _as_child, before it ignores SIGINT):
            # the Ctrl-C is the parent's to tell, once; the child's line would be twice.
            return
        if self.signals and number == signal.SIGTERM:
            # Only a second Ctrl-C means "now": ``timeout`` and service managers send
            # SIGTERM to the command and again to its whole group, one request twice.
            return
        self.signals += 1
        if self.signals == 1 and not self.quiet:
            line = log_line(
                "stopping: finishing requests in flight, then saving the crawl "
                "(press Ctrl-C again to quit at once)"
            )
            say_raw(line)
        number = signal.SIGTERM if self.signals == 1 else signal.SIGKILL
        for process in self.processes:
            if process.returncode is None:  # not reaped: the pid is still the worker's
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, number)


def expire_previous_members(store: Store) -> int:
    """Take every member out of the ring: on ``crawl``'s private server none can be alive.

    What they held becomes an orphan for the new workers to drain at once, instead of
    waiting out a whole lease. Returns how many there were.
    """
    _, members = store.members()
    for member in members:
        store.leave(member, {})
    return len(members)


@attrs.frozen(kw_only=True)
class Before:
    """What the crawl had done before this run, to judge this run's start URLs by."""

    fetched: int
    robots_denied: int


def check_start_patterns(urls: Sequence[str], patterns: Patterns) -> None:
    """Refuse, before anything goes in, a start URL the crawl's patterns keep out.

    Raises:
        ConfigError: the first such URL, with the pattern named.
    """
    for url in urls:
        why = unwanted_start(url, canonicalize(url), patterns)
        if why is not None:
            raise ConfigError(why)


def submit_start_urls(store: Store, urls: Sequence[str]) -> tuple[int, Before]:
    """Submit the start URLs, again if they failed before; returns (added, counts before).

    A start URL that was dead-lettered goes in again with fresh attempts. So do all of
    them when the crawl has never fetched a page and has nothing left to do (its start
    URLs were refused by robots.txt, say): the seen filter would otherwise keep them out.
    """
    check_start_patterns(urls, stored_patterns(store))
    status = store.status()
    before = Before(fetched=status["fetched"], robots_denied=status["robots_denied"])
    canonical = [canonicalize(url) for url in urls]
    dead = store.dead()
    again = [url for url in canonical if dead_key(url) in dead]
    idle = status["waiting"] + status["held"] == 0
    if before.fetched == 0 and idle and status["exists"]:
        again = canonical
    added = submit_urls(store, again, dont_filter=True)
    store.forget_dead(
        [dead_key(url) for url in again]
    )  # only once they are back in: a failed submit loses nothing
    rest = [url for url in canonical if url not in again]
    return added + submit_urls(store, rest), before


def already_complete(store: Store, added: int) -> bool:
    """Whether a crawl whose start URLs were just submitted (``added`` went in) has
    nothing to fetch: it fetched pages before, and nothing waits or is held anywhere."""
    if added:
        return False
    status = store.status()
    return bool(status["fetched"]) and status["waiting"] + status["held"] == 0


def verdict(store: Store, urls: Sequence[str], before: Before) -> None:
    """Say why, if no start URL of this run was fetched.

    Raises:
        NothingFetched: every start URL was dead-lettered, or refused by robots.txt.
    """
    canonical = [canonicalize(url) for url in urls]
    status = store.status()
    dead = store.dead()
    failed = [url for url in canonical if dead_key(url) in dead]
    fetched = status["fetched"] - before.fetched
    if canonical and len(failed) == len(canonical):
        first = failed[0]
        text = dead[dead_key(first)]
        others = f" (and {plural(len(failed) - 1, 'more start URL')})" if len(failed) > 1 else ""
        if dead_fault(text) == PARSE_FAULT:  # fetched each time: a rerun alone cannot help
            raise NothingFetched(
                f"nothing scraped: {first}{others} was fetched, but on every attempt"
                f"{dead_error(text, attempts=False)}; fix the spider, then run the same "
                "command again"
            )
        raise NothingFetched(
            f"nothing fetched: {first}{others} failed{dead_error(text)}; "
            "run the same command again to retry"
        )
    if fetched == 0 and status["robots_denied"] > before.robots_denied:
        denied = [url for url in canonical if dead_key(url) not in dead]
        raise NothingFetched(
            f"nothing fetched: robots.txt disallows {denied[0]} for this user agent"
            " (--ignore-robots fetches it anyway)"
        )


def dead_error(text: str, *, attempts: bool = True) -> str:
    """A dead letter's attempts (unless ``attempts`` is false) and last error, as part of
    one line.

    The record comes from Redis, so anything may be there: what is not a record
    hashcrawl wrote is shown as it is, clipped, with its line breaks flattened.
    """
    try:
        record = json.loads(text)
        tries = int(record.get("attempts", 0))
        error = str(record.get("error", ""))
    except (ValueError, TypeError, AttributeError, OverflowError):
        tries, error = 0, text
    times = f" after {tries} attempts" if attempts and 1 < tries < 10**6 else ""
    return f"{times}: {' '.join(error.split())[:300]}"


def dead_fault(text: str) -> str:
    """A dead letter's fault (``parse``: the spider's callback failed), or ""."""
    try:
        return str(json.loads(text).get("fault", ""))
    except (ValueError, TypeError, AttributeError):
        return ""
