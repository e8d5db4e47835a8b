"""Which URLs a crawl of a static site should request, and how two crawls' page sets differ.

A directory of files is served by `FileServer` (Python's http.server, every request target
logged as received). `written_links` reads the served HTML files with the standard library's
own parser, not hashcrawl's, and records every URL a page writes and how it writes it (an
`<a href>`, a `<frame src>`, a stylesheet...). From that, `expected_pages` is what a crawler
that follows page links as wget does must request, and `compare` explains each difference
between two crawls' request sets: scripts/realsite compares hashcrawl with `wget -r`, and the
test suite compares it with `expected_pages` of a small generated site.
"""

from __future__ import annotations

import collections
import functools
import http.server
import mimetypes
import re
import threading
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, unquote, urldefrag, urljoin, urlsplit

import attrs

# How a page can write a URL. The first group are links to pages (what wget recurses into
# and hashcrawl follows); the rest are requisites of the page (wget fetches them too).
PAGE_KINDS = frozenset({"a", "area", "frame", "iframe", "refresh", "link-next", "link-prev"})
_FOLLOWED_RELS = {"next": "link-next", "prev": "link-prev", "previous": "link-prev",
                  "alternate": "link-alternate"}  # fmt: skip
PAGE_KINDS |= {"link-alternate"}
_SOURCES = {"img": "src", "script": "src", "embed": "src", "source": "src", "input": "src",
            "audio": "src", "video": "src", "object": "data"}  # fmt: skip
_CSS_URL = re.compile(r"""url\(([^)]*)\)|@import\s+['"]([^'"]*)['"]""")
# What WHATWG URL percent-encodes in a path or query; everything else is sent as written.
_SAFE = "!$&'()*+,;=:@/?%-._~[]|^{}\\"


@attrs.frozen
class Logged:
    """One request as the file server received it."""

    target: str
    status: int


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = code.value if isinstance(code, http.HTTPStatus) else int(str(code))
        self.server.owner.record(Logged(self.path, status))

    def log_message(self, format: str, *args: Any) -> None:
        """Silence: FileServer keeps its own log."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: FileServer


class FileServer:
    """Serves `root` on `host`, recording every request target exactly as it arrived."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        handler = functools.partial(_Handler, directory=str(root))
        self._server = _Server((host, 0), handler)
        self._server.owner = self
        self._lock = threading.Lock()
        self._log: list[Logged] = []
        self.root = root
        self.base = f"http://{host}:{self._server.server_address[1]}"

    def record(self, logged: Logged) -> None:
        with self._lock:
            self._log.append(logged)

    def requests(self) -> list[Logged]:
        with self._lock:
            return list(self._log)

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()


def pages_requested(log: Iterable[Logged]) -> set[str]:
    """The request targets of a crawl, robots.txt and sitemaps left out."""
    return {r.target for r in log if r.target not in ("/robots.txt", "/sitemap.xml")}


# --- what the pages write ---------------------------------------------------------------------


class _Refs(HTMLParser):
    """Every URL-bearing attribute of a page, as (kind, value), and its <base href>."""

    def __init__(self) -> None:
        super().__init__()
        self.base: str | None = None
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {name: value for name, value in attrs if value is not None}
        if tag == "base" and self.base is None and "href" in a:
            self.base = a["href"]
        elif tag in ("a", "area") and "href" in a:
            self.refs.append((tag, a["href"]))
        elif tag in ("frame", "iframe") and "src" in a:
            self.refs.append((tag, a["src"]))
        elif tag == "link" and "href" in a:
            rels = a.get("rel", "").lower().split()
            kinds = [_FOLLOWED_RELS[r] for r in rels if r in _FOLLOWED_RELS]
            self.refs.append((kinds[0] if kinds else "link-" + "-".join(rels), a["href"]))
        elif tag == "meta" and a.get("http-equiv", "").lower() == "refresh":
            _, _, rest = a.get("content", "").partition(";")
            url = rest.strip()
            if url.lower().startswith("url="):
                self.refs.append(("refresh", url[4:].strip().strip("'\"")))
        elif tag in _SOURCES and _SOURCES[tag] in a:
            self.refs.append((tag, a[_SOURCES[tag]]))


def sent_form(base: str, href: str) -> str | None:
    """The URL a browser requests for `href` on a page at `base`; None if not http(s)."""
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    url = urldefrag(urljoin(base, href)).url
    if urlsplit(url).scheme not in ("http", "https"):
        return None
    return quote(url, safe=_SAFE + "#")


def _is_html(file: Path) -> bool:
    """Whether the server sends `file` as HTML or XHTML (by its name, as http.server does)."""
    return mimetypes.guess_type(file.name)[0] in ("text/html", "application/xhtml+xml")


def _file_of(root: Path, target: str) -> Path | None:
    path = root / unquote(urlsplit(target).path).lstrip("/")
    if path.is_dir():
        path = path / "index.html"
    return path if path.is_file() else None


def written_links(root: Path, base: str) -> dict[str, set[str]]:
    """Every URL (as a request target on `base`) that some served HTML file writes, with the
    kinds of reference that write it. Links to other hosts are left out."""
    written: dict[str, set[str]] = collections.defaultdict(set)
    for file in sorted(f for f in root.rglob("*") if _is_html(f)):
        page = base + "/" + quote(str(file.relative_to(root)))
        for kind, url in _refs_of(file, page):
            if url.startswith(base + "/"):
                written[url.removeprefix(base)].add(kind)
    return dict(written)


def stylesheet_links(root: Path, base: str) -> dict[str, set[str]]:
    """Every URL a served stylesheet names (``url(...)``, ``@import``), as "css" references."""
    written: dict[str, set[str]] = collections.defaultdict(set)
    for file in sorted(root.rglob("*.css")):
        sheet = base + "/" + quote(str(file.relative_to(root)))
        text = file.read_bytes().decode("utf-8", errors="replace")
        for match in _CSS_URL.finditer(text):
            url = sent_form(sheet, (match.group(1) or match.group(2)).strip("'\" "))
            if url is not None and url.startswith(base + "/"):
                written[url.removeprefix(base)].add("css")
    return dict(written)


def _refs_of(file: Path, page: str) -> list[tuple[str, str]]:
    parser = _Refs()
    parser.feed(file.read_bytes().decode("utf-8", errors="replace"))
    parser.close()
    base = urljoin(page, parser.base) if parser.base else page
    found = [(kind, sent_form(base, href)) for kind, href in parser.refs]
    return [(kind, url) for kind, url in found if url is not None]


def expected_pages(root: Path, base: str, start: str = "/") -> set[str]:
    """The request targets a crawler following page links (not requisites) reaches."""
    seen, queue = {start}, collections.deque([start])
    while queue:
        target = queue.popleft()
        file = _file_of(root, target)
        if file is None or not _is_html(file):
            continue
        for kind, url in _refs_of(file, base + target):
            link = url.removeprefix(base)
            if kind in PAGE_KINDS and url.startswith(base + "/") and link not in seen:
                seen.add(link)
                queue.append(link)
    return seen


# --- comparing two crawls -------------------------------------------------------------------


@attrs.frozen
class Comparison:
    """Two crawls' page sets, each difference explained, and what is wrong.

    `explained` maps a URL only one side requested to (side, reason), side "ours" or
    "theirs". `missed` are page links they followed and we did not; `unwritten` are URLs
    we requested that no page writes.
    """

    ours: frozenset[str]
    theirs: frozenset[str]
    explained: Mapping[str, tuple[str, str]]
    missed: frozenset[str]
    unwritten: frozenset[str]

    @property
    def ok(self) -> bool:
        return not self.missed and not self.unwritten

    def lines(self, ours: str = "hashcrawl", theirs: str = "wget") -> list[str]:
        names = {"ours": ours, "theirs": theirs}
        out = [
            f"{ours}: {len(self.ours)} URLs requested; {theirs}: {len(self.theirs)}",
            f"both: {len(self.ours & self.theirs)}; only {ours}: {len(self.ours - self.theirs)}"
            f"; only {theirs}: {len(self.theirs - self.ours)}",
        ]
        reasons = collections.Counter(self.explained.values())
        for (side, reason), count in sorted(reasons.items(), key=lambda pair: -pair[1]):
            urls = sorted(u for u, r in self.explained.items() if r == (side, reason))
            out.append(f"  {count:6d} only {names[side]}: {reason}; e.g. {', '.join(urls[:3])}")
        for url in sorted(self.missed)[:20]:
            out.append(f"MISSED: {theirs} fetched {url}, a page link; {ours} did not")
        for url in sorted(self.unwritten)[:20]:
            out.append(f"UNWRITTEN: {ours} requested {url}, which no page writes")
        return out


def compare(
    ours: set[str], theirs: set[str], written: Mapping[str, set[str]], start: str = "/"
) -> Comparison:
    """Compare our crawl's request targets with theirs, given what the pages write."""
    explained: dict[str, tuple[str, str]] = {}
    missed, unwritten = set(), set()
    for url in theirs - ours:
        kinds = written.get(url, set())
        if kinds & PAGE_KINDS:
            missed.add(url)
        elif kinds:
            explained[url] = ("theirs", f"a page requisite, not a page ({_kinds(kinds)})")
        else:
            explained[url] = ("theirs", "written by no page")
    for url in ours:
        if url != start and url not in written:
            unwritten.add(url)
        elif url not in theirs:
            explained[url] = ("ours", f"written as {_kinds(written.get(url, set()))}")
    return Comparison(
        frozenset(ours), frozenset(theirs), explained, frozenset(missed), frozenset(unwritten)
    )


def _kinds(kinds: set[str]) -> str:
    return ", ".join(sorted(kinds)) or "the start URL"
