"""What travels through Redis: one entry per request, as compact JSON.

An :class:`Entry` is made from a spider's :class:`~hashcrawl.Request` (or URL) by
``Request.to_entry``, and turned back into the request to send by
``Request.from_entry`` (in ``_web._models``): the fields both declare are copied as they
are, so a field added to both travels without another line. This module imports nothing
of the web layer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import attrs

from hashcrawl._core._proxies import MAX_PROXY_URL
from hashcrawl._core._revisit import BadRecord, Record
from hashcrawl._core._steps import BadStep, Step, steps_of
from hashcrawl._core._urls import canonical_parts
from hashcrawl._exceptions import HashcrawlError

#: The largest stream payload read as an entry; a longer one is a bad entry unread.
MAX_ENTRY_BYTES = 64 * 1024
#: What hashcrawl itself may add to an entry as it handles it: ``,"s":1`` when its holder
#: dies, and ``,"a":10000`` at the widest for its attempts. A spider's request is refused
#: past ``MAX_ENTRY_BYTES - GROWTH``, so that it can always be retried and moved.
GROWTH = 16
#: How deep ``meta`` may nest lists and objects.
MAX_META_DEPTH = 32
MAX_CALLBACK = 200
#: The largest ``cb_kwargs`` a request may carry, as compact JSON: the arguments of a
#: callback are a few ids and names, and every worker that reads the entry parses them.
MAX_CB_KWARGS = 16 * 1024
MAX_RULE = 1_000  # the highest rule index an entry may name ("R")
MAX_STATUSES = 64  # statuses one request may list for its callback ("S")
# Each number's range: wide enough for any real crawl, narrow enough that an entry written
# by hand cannot be retried for ever or slip past --max-depth.
RANGES = {
    "d": (0, 1_000_000),
    "p": (-1_000_000, 1_000_000),
    "a": (0, 10_000),
    "x": (0, 1_000),  # sitemap index depth
    "h": (0, 1_000),  # redirects that led here (more than 5 are never followed)
}
MAX_REDIRECTS = 20  # the most a request may ask to follow ("r")
MAX_TIMEOUT = 3600.0  # the longest per-request timeout ("t"), in seconds
MAX_HEADERS = 64  # headers one entry may carry ("H")
#: An HTTP method or header name: an RFC 9110 token.
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}", re.ASCII)
#: A header value: visible ASCII, spaces and tabs; no CR, LF or NUL to split a request.
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]{0,8192}", re.ASCII)
_FULL_KEYS = frozenset("MHBYtr")
# The keys whose values ``_from_doc`` checks to be integers, flags, a name or the URL: a
# plain GET's entry has no others, and without a backslash (a \ud800 escape) in its
# payload nothing in them can fail to be written again.
_SCALAR_KEYS = frozenset("udpacfsxh")
_LINK_KEYS = frozenset("ud")  # all a followed link's entry has: its URL and depth
_SCRAPY_KEYS = frozenset(
    "ekSR"
)  # errback, cb_kwargs, statuses, rule  # the keys of a full request's fields


class BadEntry(HashcrawlError, ValueError):
    """A stream entry that hashcrawl did not write, or cannot read."""


@attrs.frozen(kw_only=True)
class Entry:
    """One request waiting in, or held from, a stream.

    ``url`` is the URL to request, as the page wrote it (made fit to send);
    :attr:`canonical` is its canonical form, which dedupe and routing use.
    ``meta`` is JSON; ``callback`` and ``errback`` name spider methods; ``cb_kwargs``
    are the callback's keyword arguments (any JSON here: the spider checks them before
    the entry is fetched, so a bad one is dead-lettered with the reason);
    ``handle_httpstatus_list`` are the non-2xx statuses the callback takes; ``rule`` is
    the index of the spider's rule that led here. ``sitemap`` is 0 for a page,
    or how deep in sitemap indexes a sitemap is (1: named by robots.txt or /sitemap.xml).
    ``suspect`` marks an entry that a worker died holding: its owner records it as in
    flight before fetching it, so a page that kills workers is counted and parked dead.
    ``hops`` counts the redirects that led to this URL, so a chain can be cut off.

    ``revisit`` is a revisit's record (docs/design.md, "Revisits"), written only on
    entries the revisit script makes.

    ``method``, ``headers``, ``body``, ``timeout`` and ``max_redirects`` are a full
    request's; each is written only when it is not the default, so a plain GET's entry
    is what it was before they existed (keys M, H, B or Y, t, r).
    """

    url: str
    depth: int = 0
    priority: int = 0
    attempts: int = 0
    meta: Any = None
    callback: str | None = None
    dont_filter: bool = False
    suspect: bool = False
    sitemap: int = 0
    hops: int = 0
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    timeout: float | None = None
    max_redirects: int | None = None
    errback: str | None = None
    cb_kwargs: Any = None
    handle_httpstatus_list: tuple[int, ...] = ()
    rule: int | None = None
    revisit: str | None = None  # a revisit's record (``_revisit.Record``) in hex ("V")
    render: bool = False  # fetched in the worker's browser ("b")
    steps: tuple[Step, ...] = ()  # what to do in the rendered page ("W")
    proxy: str | None = None  # the request's own proxy, no credentials ("P")
    # Steps read back that are not steps of the list, as they were: the owner
    # dead-letters the entry with ``steps_refusal`` (the URL is known), keeping them.
    unread_steps: Any = None
    # ``canonical`` and ``host``, once asked: a follow is asked them five times or more
    # (the robots check, scope, routing, the seen cache, the fingerprint); never stored
    # or compared.
    _canonical: str | None = attrs.field(default=None, init=False, eq=False, repr=False)
    _host: str | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def steps_refusal(self) -> str | None:
        """Why this entry's steps cannot be done (they are not steps of the closed list,
        or the entry is not rendered), or None."""
        if self.unread_steps is None:
            return None
        try:
            steps_of(self.unread_steps)
        except BadStep as exc:
            return f"entry steps: {exc}"
        return "entry steps: steps need render=True"

    @property
    def key(self) -> str:
        """What dedupe and dead letters know the request by: the canonical URL of a GET
        without a body (as before full requests existed), else the method, the canonical
        URL and a digest of the body, as Scrapy's fingerprint covers them."""
        if self.method == "GET" and not self.body:
            return self.canonical
        digest = hashlib.blake2b(self.body, digest_size=16).hexdigest()
        return f"{self.method} {self.canonical} {digest}"

    @property
    def canonical(self) -> str:
        """The canonical form of ``url``, computed once.

        Raises:
            InvalidURL: ``url`` is not a crawlable http(s) URL.
        """
        canonical = self._canonical
        if canonical is None:
            canonical = self._parts()[0]
        return canonical

    @property
    def host(self) -> str:
        """The host key of ``url`` (``_urls.host_key`` of its canonical form), computed
        once, with it.

        Raises:
            InvalidURL: ``url`` is not a crawlable http(s) URL.
        """
        host = self._host
        if host is None:
            host = self._parts()[1]
        return host

    def _parts(self) -> tuple[str, str]:
        parts = canonical_parts(self.url)
        object.__setattr__(self, "_canonical", parts[0])  # frozen: a cache, not a change
        object.__setattr__(self, "_host", parts[1])
        return parts

    def encode(self) -> str:
        """The entry as the JSON text stored in the stream's ``r`` field."""
        doc: dict[str, Any] = {"u": self.url}
        for key, value, default in (
            ("d", self.depth, 0),
            ("p", self.priority, 0),
            ("a", self.attempts, 0),
            ("m", self.meta, None),
            ("c", self.callback, None),
            ("f", int(self.dont_filter), 0),
            ("s", int(self.suspect), 0),
            ("x", self.sitemap, 0),
            ("h", self.hops, 0),
            ("M", self.method, "GET"),
            ("H", [list(pair) for pair in self.headers], []),
            ("t", self.timeout, None),
            ("r", self.max_redirects, None),
            ("e", self.errback, None),
            ("k", self.cb_kwargs, None),
            ("S", list(self.handle_httpstatus_list), []),
            ("R", self.rule, None),
            ("V", self.revisit, None),
            ("b", int(self.render), 0),
            ("W", [step.to_data() for step in self.steps], []),
            ("W", self.unread_steps, None),
            ("P", self.proxy, None),
        ):
            if value != default:
                doc[key] = value
        if self.body:
            try:
                doc["B"] = self.body.decode("utf-8")  # a form or JSON body, as it is
            except UnicodeDecodeError:
                doc["Y"] = base64.b64encode(self.body).decode("ascii")
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, data: bytes | str | None) -> Entry:
        """Read an entry back from the bytes (or text) of a stream payload.

        Raises:
            BadEntry: the payload is not an entry hashcrawl wrote: not UTF-8, not JSON,
                longer than ``MAX_ENTRY_BYTES``, nested too deep, or a field of the
                wrong type or out of its range. Nothing else escapes, whatever the bytes.
        """
        doc = _document(data)
        if not isinstance(doc, dict) or not isinstance(doc.get("u"), str) or not doc["u"]:
            raise BadEntry(f"entry has no url: {_clip(data)}")
        entry = cls._from_doc(doc, data)
        if not _resendable(doc, data):
            raise BadEntry(f"entry holds text or numbers JSON cannot carry: {_clip(data)}")
        return entry

    @classmethod
    def _from_doc(cls, doc: dict[str, Any], data: bytes | str | None) -> Entry:
        if doc.keys() <= _LINK_KEYS:  # a followed link's entry: the checks below, in short
            depth = doc.get("d", 0)
            if type(depth) is int and RANGES["d"][0] <= depth <= RANGES["d"][1]:
                return cls(url=doc["u"], depth=depth)
        numbers = {key: doc.get(key, 0) for key in RANGES}
        for key, value in numbers.items():
            low, high = RANGES[key]
            if type(value) is not int or not low <= value <= high:
                raise BadEntry(
                    f"entry field {key!r} is not an integer in [{low}, {high}]: {_clip(data)}"
                )
        callback = doc.get("c")
        if not (callback is None or (isinstance(callback, str) and len(callback) <= MAX_CALLBACK)):
            raise BadEntry(f"entry callback is not a name: {_clip(data)}")
        flags = [doc.get(key, 0) for key in ("f", "s")]
        if not all(flag in (0, 1) and type(flag) in (int, bool) for flag in flags):
            raise BadEntry(f"entry flag is not 0 or 1: {_clip(data)}")
        if _depth(doc.get("m")) > MAX_META_DEPTH:
            raise BadEntry(f"entry meta nests deeper than {MAX_META_DEPTH}: {_clip(data)}")
        full = _full_request(doc, data)
        if not _SCRAPY_KEYS.isdisjoint(doc):
            full.update(_scrapy_fields(doc, data))
        if "V" in doc:
            try:
                full["revisit"] = Record.from_hex(doc["V"]).to_hex()
            except BadRecord as exc:
                raise BadEntry(f"entry revisit record: {exc}: {_clip(data)}") from None
        full.update(_rendering(doc, data))
        if "P" in doc:  # judged as the worker sends it: here, only its type and size
            if not isinstance(doc["P"], str) or len(doc["P"]) > MAX_PROXY_URL:
                raise BadEntry(f"entry proxy is not a URL up to {MAX_PROXY_URL} characters")
            full["proxy"] = doc["P"]
        return cls(
            url=doc["u"],
            depth=numbers["d"],
            priority=numbers["p"],
            attempts=numbers["a"],
            meta=doc.get("m"),
            callback=callback,
            dont_filter=bool(flags[0]),
            suspect=bool(flags[1]),
            sitemap=numbers["x"],
            hops=numbers["h"],
            **full,
        )


def too_long(text: str) -> bool:
    """Whether an entry's encoding is past what a reader takes (``MAX_ENTRY_BYTES``)."""
    return len(text) * 4 > MAX_ENTRY_BYTES and len(text.encode("utf-8")) > MAX_ENTRY_BYTES


def _full_request(doc: dict[str, Any], data: bytes | str | None) -> dict[str, Any]:
    """The method, headers, body, timeout and redirect limit of an entry, each checked."""
    full: dict[str, Any] = {}
    if _FULL_KEYS.isdisjoint(doc):  # a plain GET: nothing to check
        return full
    method = doc.get("M", "GET")
    if not (isinstance(method, str) and TOKEN.fullmatch(method) and method.isupper()):
        raise BadEntry(f"entry method is not an upper-case HTTP token: {_clip(data)}")
    full["method"] = method
    headers = doc.get("H", [])
    if not (
        isinstance(headers, list)
        and len(headers) <= MAX_HEADERS
        and all(_is_header(pair) for pair in headers)
    ):
        raise BadEntry(f"entry headers are not [name, value] pairs of HTTP text: {_clip(data)}")
    full["headers"] = tuple((name, value) for name, value in headers)
    text, packed = doc.get("B"), doc.get("Y")
    if text is not None and packed is not None:
        raise BadEntry(f"entry has two bodies: {_clip(data)}")
    if text is not None:
        if not isinstance(text, str):
            raise BadEntry(f"entry body is not text: {_clip(data)}")
        full["body"] = text.encode("utf-8", "surrogatepass")
    if packed is not None:
        try:
            full["body"] = base64.b64decode(packed, validate=True)
        except (TypeError, ValueError):
            raise BadEntry(f"entry body is not base64: {_clip(data)}") from None
    timeout = doc.get("t")
    if timeout is not None and not (type(timeout) in (int, float) and 0 < timeout <= MAX_TIMEOUT):
        raise BadEntry(f"entry timeout is not a number in (0, {MAX_TIMEOUT:g}]: {_clip(data)}")
    full["timeout"] = None if timeout is None else float(timeout)
    redirects = doc.get("r")
    if redirects is not None and not (type(redirects) is int and 0 <= redirects <= MAX_REDIRECTS):
        raise BadEntry(f"entry redirect limit is not in [0, {MAX_REDIRECTS}]: {_clip(data)}")
    full["max_redirects"] = redirects
    return full


def _scrapy_fields(doc: dict[str, Any], data: bytes | str | None) -> dict[str, Any]:
    """The errback, cb_kwargs, statuses and rule index of an entry, as far as they can be
    checked without the spider (which checks the names, the index and the arguments)."""
    errback = doc.get("e")
    if not (errback is None or (isinstance(errback, str) and len(errback) <= MAX_CALLBACK)):
        raise BadEntry(f"entry errback is not a name: {_clip(data)}")
    if _depth(doc.get("k")) > MAX_META_DEPTH:
        raise BadEntry(f"entry cb_kwargs nest deeper than {MAX_META_DEPTH}: {_clip(data)}")
    statuses = doc.get("S", [])
    if not (
        isinstance(statuses, list)
        and len(statuses) <= MAX_STATUSES
        and all(type(s) is int and 100 <= s <= 599 for s in statuses)
    ):
        raise BadEntry(f"entry statuses are not up to {MAX_STATUSES} HTTP statuses: {_clip(data)}")
    rule = doc.get("R")
    if not (rule is None or (type(rule) is int and 0 <= rule <= MAX_RULE)):
        raise BadEntry(f"entry rule is not an index in [0, {MAX_RULE}]: {_clip(data)}")
    return {
        "errback": errback,
        "cb_kwargs": doc.get("k"),
        "handle_httpstatus_list": tuple(statuses),
        "rule": rule,
    }


def _rendering(doc: dict[str, Any], data: bytes | str | None) -> dict[str, Any]:
    """Whether an entry is rendered, and its steps, each checked again as it is read."""
    if "b" not in doc and "W" not in doc:
        return {}
    if doc.get("b", 0) not in (0, 1) or type(doc.get("b", 0)) not in (int, bool):
        raise BadEntry(f"entry render flag is not 0 or 1: {_clip(data)}")
    render = bool(doc.get("b"))
    if _depth(doc.get("W")) > MAX_META_DEPTH:
        raise BadEntry(f"entry steps nest deeper than {MAX_META_DEPTH}: {_clip(data)}")
    try:
        steps = steps_of(doc.get("W", []))
    except BadStep:
        return {"render": render, "unread_steps": doc["W"]}
    if steps and not render:
        return {"render": render, "unread_steps": doc["W"]}
    return {"render": render, "steps": steps}


def _is_header(pair: Any) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and all(isinstance(part, str) for part in pair)
        and TOKEN.fullmatch(pair[0]) is not None
        and HEADER_VALUE.fullmatch(pair[1]) is not None
    )


def _document(data: bytes | str | None) -> Any:
    """The JSON value of a payload, checked for size, encoding and nesting."""
    if data is None:
        raise BadEntry("entry has no 'r' field")
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > MAX_ENTRY_BYTES:
        raise BadEntry(f"entry is {len(raw)} bytes, over {MAX_ENTRY_BYTES}: {_clip(data)}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadEntry(f"entry is not UTF-8: {_clip(data)}") from None
    try:
        return _DECODER.decode(text)
    except RecursionError:  # json's parser recurses once per level of nesting
        raise BadEntry(f"entry nests deeper than Python can parse: {_clip(data)}") from None
    except ValueError:  # also NaN/Infinity, and integers of more than 4,300 digits
        raise BadEntry(f"entry is not JSON: {_clip(data)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# One decoder for every payload: json.loads builds a new one per call when given
# parse_constant. (Both read a leading byte-order mark as not JSON.)
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _resendable(doc: dict[str, Any], data: bytes | str | None) -> bool:
    """Whether an entry read from ``data`` can be written back: lone surrogates (from
    \\ud800 escapes) and 1e999 (read as infinity) cannot."""
    unescaped = b"\\" not in data if isinstance(data, bytes) else "\\" not in (data or "")
    if unescaped and doc.keys() <= _SCALAR_KEYS:
        return True  # checked integers, flags and text without escapes: the common entry
    try:
        json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError:
        return False
    return True


def _depth(value: Any) -> int:
    """How deep ``value`` nests lists and objects (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if level > MAX_META_DEPTH:
                return level
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest - 1 if deepest else 0


def _clip(data: bytes | str | None) -> str:
    """The start of a payload, printable and short: messages stay one short line."""
    text = repr(data if data is None else data[:120])
    return text if len(text) <= 160 else text[:157] + "..."
