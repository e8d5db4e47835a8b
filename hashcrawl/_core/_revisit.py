"""Revisits: the adaptive interval rule and the per-URL record, pure (time comes in).

docs/design.md ("Revisits") says where the records live and who turns a due one into an
entry; this module decides what a fetch means for the page's next visit, and writes and
reads the record in the binary form Redis keeps (at most ``MAX_RECORD`` bytes).
"""

from __future__ import annotations

import email.utils
import enum
import hashlib
import re
import struct

import attrs

from hashcrawl._exceptions import HashcrawlError

#: The adaptive rule: a page's next interval is this share of its *quiet time* (how long
#: its fetches have found it unchanged), within [--revisit-min, --revisit-max]. So an
#: interval is never longer than --revisit-min or a fifth of the time the page has been
#: seen unchanged, whichever is longer: a page that changed a minute ago is not left for
#: an hour. 0.2 is Squid's default lm-factor (RFC 9111 4.2.2's heuristic freshness names
#: 10% as typical); past the minimum, a quiet page's interval grows by 20% a fetch,
#: Nutch's INC_RATE. A change resets the quiet time, so there is no walk to oscillate
#: (Nutch warns that its two-way rates are unstable above 0.4): the interval is a
#: function of the quiet time alone. After a change a page stays at --revisit-min until
#: it has been quiet for 1/SHARE = 5 of them, so a page changing at least that often is
#: fetched as a fixed --revisit-min would fetch it; a slower page's change is seen
#: within about a fifth of the time since its last.
SHARE = 0.2
DEFAULT_MIN_S = 60  # StormCrawler's lower bound, and no more than a minute stale
DEFAULT_MAX_S = 14 * 86_400  # StormCrawler's upper bound
LONGEST_S = 365 * 86_400  # the largest interval a flag may ask for
SHORTEST_S = 1  # the smallest: a test's; --delay still paces every host
#: The longest ETag kept. A longer one is not stored at all: a cut ETag never matches,
#: so the page is revalidated by Last-Modified and its digest instead.
MAX_ETAG = 22
_HEAD = struct.Struct(">II8sI")  # due_s, quiet_s, digest, last_modified_s
MAX_RECORD = _HEAD.size + MAX_ETAG
#: The longest quiet time a record holds: past LONGEST_S / SHARE the interval is the
#: longest a flag may ask for anyway.
MAX_QUIET_S = round(LONGEST_S / SHARE)
#: An ETag worth sending back: an opaque tag, optionally weak, of visible ASCII.
_ETAG = re.compile(r'(W/)?"[\x21\x23-\x7e]*"', re.ASCII)
_U32 = 2**32 - 1


class BadRecord(HashcrawlError, ValueError):
    """A revisit record that hashcrawl did not write, or cannot read."""


class Verdict(enum.Enum):
    """What a fetch says about a page since its last one."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    UNKNOWN = "unknown"  # an error, a 404, a redirect: no signal either way


@attrs.frozen(kw_only=True)
class Policy:
    """A crawl's revisit setting: a fixed interval (``low == high``) or adaptive bounds."""

    low: int
    high: int
    adaptive: bool

    @classmethod
    def parse(cls, text: str, *, low: int = DEFAULT_MIN_S, high: int = DEFAULT_MAX_S) -> Policy:
        """The policy of ``--revisit TEXT`` (seconds, or ``adaptive`` within its bounds).

        Raises:
            ValueError: one line naming the flag, the rule and the value.
        """
        _check_bound("--revisit-min", low)
        _check_bound("--revisit-max", high)
        if low > high:
            raise ValueError(f"--revisit-min ({low}) must not exceed --revisit-max ({high})")
        if text.strip().lower() == "adaptive":
            return cls(low=low, high=high, adaptive=True)
        try:
            seconds = int(text)
        except ValueError:
            raise ValueError(
                f"--revisit takes whole seconds or 'adaptive', not {text[:40]!r}"
            ) from None
        _check_bound("--revisit", seconds)
        return cls(low=seconds, high=seconds, adaptive=False)

    def first_interval(self) -> int:
        """A new page's interval: the shortest, until its fetches show it quiet."""
        return self.low

    def interval(self, quiet_s: int) -> int:
        """The interval of a page seen unchanged for ``quiet_s`` seconds: fixed, or
        ``SHARE`` of its quiet time within the bounds."""
        if not self.adaptive:
            return self.low
        return max(self.low, min(self.high, round(quiet_s * SHARE)))

    def quiet_after(self, quiet_s: int, verdict: Verdict) -> int:
        """The quiet time after a fetch judged ``verdict``, of a page that was due
        ``interval(quiet_s)`` after the fetch before.

        Changed: 0. Unchanged: the interval waited is added (the time since the fetch
        before, less any lateness, so the quiet time errs short and the interval with
        it). Unknown (an error, a 404, a redirect): kept.
        """
        if verdict is Verdict.CHANGED:
            return 0
        if verdict is Verdict.UNCHANGED:
            return min(MAX_QUIET_S, quiet_s + self.interval(quiet_s))
        return min(MAX_QUIET_S, quiet_s)


def _check_bound(flag: str, seconds: int) -> None:
    if not SHORTEST_S <= seconds <= LONGEST_S:
        raise ValueError(
            f"{flag} must be whole seconds in [{SHORTEST_S}, {LONGEST_S}], not {seconds}"
        )


@attrs.frozen(kw_only=True)
class Record:
    """What a revisited URL keeps between fetches, as stored in its bucket."""

    due_s: int
    quiet_s: int  # seconds its fetches have found it unchanged (Policy.quiet_after)
    digest: bytes = b"\0" * 8
    last_modified_s: int = 0  # 0: the server sent none (or none worth keeping)
    etag: str = ""  # "": none, or one longer than MAX_ETAG

    def to_bytes(self) -> bytes:
        """The record as Redis keeps it: 20 bytes and the ETag."""
        head = _HEAD.pack(self.due_s, self.quiet_s, self.digest, self.last_modified_s)
        return head + self.etag.encode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes) -> Record:
        """Read a stored record back, checking everything.

        Raises:
            BadRecord: not a record this module wrote (a short, long or garbled value).
        """
        if not _HEAD.size <= len(data) <= MAX_RECORD:
            raise BadRecord(f"revisit record is {len(data)} bytes, not {_HEAD.size}-{MAX_RECORD}")
        due, quiet, digest, modified = _HEAD.unpack_from(data)
        etag = data[_HEAD.size :].decode("ascii", "replace")
        if etag and not _ETAG.fullmatch(etag):
            raise BadRecord(f"revisit record holds no ETag: {etag!r}")
        if quiet > MAX_QUIET_S:
            raise BadRecord(f"revisit record's quiet time {quiet} s is out of range")
        return cls(due_s=due, quiet_s=quiet, digest=digest, last_modified_s=modified, etag=etag)

    def to_hex(self) -> str:
        """The record as an entry carries it (``V``): JSON cannot hold bytes."""
        return self.to_bytes().hex()

    @classmethod
    def from_hex(cls, text: object) -> Record:
        """Raises:
        BadRecord: not the hex of a record."""
        if not isinstance(text, str) or len(text) > 2 * MAX_RECORD:
            raise BadRecord("revisit record is not hex text of a record")
        try:
            return cls.from_bytes(bytes.fromhex(text))
        except ValueError as exc:
            raise BadRecord(f"revisit record is not hex of a record ({exc})") from None

    def conditional_headers(self) -> tuple[tuple[str, str], ...]:
        """The headers that make the next fetch conditional on this one's validators."""
        headers: list[tuple[str, str]] = []
        if self.etag:
            headers.append(("If-None-Match", self.etag))
        if self.last_modified_s:
            when = email.utils.formatdate(self.last_modified_s, usegmt=True)
            headers.append(("If-Modified-Since", when))
        return tuple(headers)


def digest_of(body: bytes) -> bytes:
    """The content digest a page's record keeps: 8 bytes, so a change is missed with
    probability 2^-64 per fetch."""
    return hashlib.blake2b(body, digest_size=8).digest()


def kept_etag(header: str | None) -> str:
    """The ETag worth storing from a response's header: "" if missing, malformed or
    longer than ``MAX_ETAG`` (a 10 KB ETag costs what a missing one does)."""
    if header is None or len(header) > MAX_ETAG:
        return ""
    return header if _ETAG.fullmatch(header) else ""


def kept_last_modified(header: str | None) -> int:
    """Server seconds of a Last-Modified header worth storing; 0 for none or nonsense."""
    if header is None or len(header) > 64:
        return 0
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0
    if when.tzinfo is None:
        return 0
    seconds = int(when.timestamp())
    return seconds if 0 < seconds <= _U32 else 0


def judge(record: Record | None, status: int, digest: bytes) -> Verdict:
    """Whether a fetch with ``status`` (and body ``digest``) found the page changed."""
    if status == 304:
        return Verdict.UNCHANGED if record is not None else Verdict.UNKNOWN
    if status != 200:
        return Verdict.UNKNOWN
    if record is None:
        return Verdict.UNKNOWN  # a first fetch: nothing to compare with
    return Verdict.UNCHANGED if digest == record.digest else Verdict.CHANGED


@attrs.frozen(kw_only=True)
class Fetched:
    """What a fetch of a revisited (or first fetched) page reported."""

    status: int
    body: bytes = b""
    etag: str | None = None  # the ETag header, as received
    last_modified: str | None = None  # the Last-Modified header, as received


def after_fetch(
    record: Record | None, fetched: Fetched, *, policy: Policy, now_s: int
) -> tuple[Record, Verdict]:
    """The page's next record and the fetch's verdict.

    ``record`` is the one the fetch was made from (None for a page's first fetch);
    ``now_s`` is the server's clock when the fetch ended. A 304 keeps the stored digest
    and takes any validators it carries; a 200 replaces all three.
    """
    digest = digest_of(fetched.body)
    verdict = judge(record, fetched.status, digest)
    quiet = 0 if record is None else policy.quiet_after(record.quiet_s, verdict)
    interval = policy.interval(quiet)
    etag, modified = kept_etag(fetched.etag), kept_last_modified(fetched.last_modified)
    if fetched.status == 200:
        kept = (digest, modified, etag)
    elif record is not None:
        kept = (record.digest, modified or record.last_modified_s, etag or record.etag)
    else:
        kept = (b"\0" * 8, 0, "")
    due = min(_U32, now_s + interval)
    record = Record(due_s=due, quiet_s=quiet, digest=kept[0], last_modified_s=kept[1], etag=kept[2])
    return record, verdict
