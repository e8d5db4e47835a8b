"""Which URLs a crawl's patterns let in: ``--accept-regex`` and ``--reject-regex``. Pure.

As in wget, each is one regular expression, searched for anywhere in a URL (anchor it
with ``^`` or ``$`` to match the whole), and a URL is followed only if it matches the
accept pattern (when there is one) and not the reject pattern. The URL matched is the
canonical one (``_urls.canonicalize``): scheme and host in lower case, default port
dropped, query sorted, so ``?b=1&a=2`` and ``?a=2&b=1`` are one URL to the patterns as
they are to the seen filter.

A pattern is a flag, so it is input from outside, and Python's ``re`` backtracks: ``(a+)+$``
against forty ``a`` takes minutes. The patterns are RE2's (google-re2, the engine of
Go's ``regexp`` and of RE2/J), which runs in time linear in the URL whatever the
pattern, and refuses at compile time what it cannot run so (backreferences,
lookaround) and a pattern whose program would pass :data:`MAX_PROGRAM_BYTES`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable

import attrs
import re2

from hashcrawl._core._entry import Entry

#: The longest pattern taken, in characters (wget sets none; a URL is at most 8 KiB here).
MAX_PATTERN = 4096
#: The memory RE2 may give one compiled pattern: past it the pattern is refused.
MAX_PROGRAM_BYTES = 1 << 20
#: Refused link URLs a worker remembers, to count each once; past them it starts again.
MAX_REMEMBERED = 100_000


class Refusal(enum.Enum):
    """Which pattern refused a URL: the flag that says so."""

    NOT_ACCEPTED = "--accept-regex"
    REJECTED = "--reject-regex"
    NO_PARENT = "--no-parent"


def compiled(pattern: str) -> Callable[[str], bool]:
    """Whether a URL matches ``pattern`` (searched anywhere in it), as RE2 runs it,
    bounded (see the module's docstring).

    Raises:
        ValueError: too long, not valid RE2 syntax, or too large a program; says which.
    """
    return _compiled(pattern)


@functools.lru_cache(maxsize=16)  # a crawl has two; a configure change makes two more
def _compiled(pattern: str) -> Callable[[str], bool]:
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a pattern is at most {MAX_PATTERN} characters, got {len(pattern)}")
    options = re2.Options()
    options.log_errors = False  # the error is raised, not also logged by RE2 in C++
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        re2.compile(pattern, options)  # for its error message, which a Set does not give
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        detail = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        raise ValueError(f"not a pattern RE2 takes ({detail[:200]})") from None
    # A set of one pattern answers only whether it matches: no submatches to find, so
    # RE2 takes its fastest engine (~1 us a URL here, against ~10 us for search()).
    matcher = re2.Set.SearchSet(options)
    matcher.Add(pattern)
    matcher.Compile()
    return lambda url: matcher.Match(url) is not None


@attrs.frozen
class Patterns:
    """A crawl's accept and reject patterns (None: no such pattern)."""

    accept: str | None = None
    reject: str | None = None

    @property
    def empty(self) -> bool:
        return self.accept is None and self.reject is None

    def refusal(self, canonical_url: str) -> Refusal | None:
        """Which pattern keeps ``canonical_url`` out, or None if both let it in."""
        if self.accept is not None and not compiled(self.accept)(canonical_url):
            return Refusal.NOT_ACCEPTED
        if self.reject is not None and compiled(self.reject)(canonical_url):
            return Refusal.REJECTED
        return None

    def said(self, url: str, refusal: Refusal) -> str:
        """Why ``url`` is not followed, naming the flag and its pattern."""
        if refusal is Refusal.NOT_ACCEPTED:
            return f"{url} does not match --accept-regex {self.accept!r}"
        return f"{url} matches --reject-regex {self.reject!r}"


@attrs.define
class Screen:
    """The links a worker's patterns keep out: each URL counted once (as robots.txt's
    are, see ``_outcome.Denied``), and the first of each refusal kept to be said."""

    remembered: set[str] = attrs.Factory(set)
    #: The first link each pattern kept out, not yet said (the driver takes them).
    unsaid: dict[Refusal, str] = attrs.Factory(dict)
    _noted: set[Refusal] = attrs.Factory(set)

    def wanted(self, follows: list[Entry], patterns: Patterns) -> tuple[list[Entry], int]:
        """The ``follows`` the patterns let in, and how many new URLs they kept out."""
        if patterns.empty:
            return follows, 0
        wanted, refused = [], 0
        for entry in follows:
            refusal = patterns.refusal(entry.canonical)
            if refusal is None:
                wanted.append(entry)
            elif self._first(entry.key):
                refused += 1
                if refusal not in self._noted:
                    self._noted.add(refusal)
                    self.unsaid[refusal] = patterns.said(entry.url, refusal)
        return wanted, refused

    def unparented(self, entries: Iterable[Entry]) -> int:
        """How many new URLs ``entries`` (follows --no-parent kept out) are; the first
        kept to be said."""
        refused = 0
        for entry in entries:
            if self._first(entry.key):
                refused += 1
                if Refusal.NO_PARENT not in self._noted:
                    self._noted.add(Refusal.NO_PARENT)
                    self.unsaid[Refusal.NO_PARENT] = (
                        f"{entry.url}: it is above every start URL's directory on its host "
                        "(--no-parent)"
                    )
        return refused

    def _first(self, key: str) -> bool:
        if key in self.remembered:
            return False
        if len(self.remembered) >= MAX_REMEMBERED:
            self.remembered.clear()
        self.remembered.add(key)
        return True
