"""A loopback copy of the sites Scrapy's own documentation crawls, for its spiders
(``tests/test_scrapy_contract.py``, ``scripts/scrapy_parity --docs``):

- quotes.toscrape.com's shape: ``/`` and ``/page/N/`` list quotes (``div.quote`` with
  ``span.text``, ``small.author`` then an ``(about)`` link to ``/author/Slug``, and
  ``div.tags a.tag``) ten a page, ``li.next a`` to the next; ``/tag/T/`` (and
  ``/tag/T/page/N/``) the quotes of a tag; ``/author/Slug`` an author's page
  (``h3.author-title``, ``.author-born-date``, ``.author-description``).
- example.com's pages of docs/topics/spiders.rst: ``/1.html`` .. ``/4.html`` (``<h3>``
  titles linking each other), and a catalogue of ``/category.php?id=N`` (linking items
  and a ``subsection.php`` a rule denies), ``/item.php?id=N`` (``td#item_id`` ...) and
  ``/additional.php?id=N``.

The data is generated, so a test derives the items a spider should give from it
(``quote_items``, ``author_items``...). Every request is logged as the server saw it
(``seen``), with the time it arrived. ``fail_paths`` makes paths answer 503 (the site's
own trouble, for the backoff's test). ``python -m testing.quotesite [HOST]`` serves it.
"""

from __future__ import annotations

import html
import http.server
import sys
import threading
import time
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

PER_PAGE = 10
TAGS = ("love", "life", "humor", "books", "truth")
ABOUT = "(about)"


class Author(NamedTuple):
    name: str
    born: str
    bio: str

    @property
    def slug(self) -> str:
        return self.name.replace(" ", "-").replace(".", "")


class Quote(NamedTuple):
    text: str
    author: Author
    tags: tuple[str, ...]


AUTHORS = tuple(
    Author(f"Writer {chr(65 + n)}. Number{n}", f"March {n + 1}, 18{n + 10}", f"Bio {n}, & more.")
    for n in range(7)
)
QUOTES = tuple(
    Quote(
        f"\u201cQuote {n}: it's <not> markup.\u201d",
        AUTHORS[(n * 3) % len(AUTHORS)],
        tuple(TAGS[t] for t in range(len(TAGS)) if (n + t) % 3 == 0),
    )
    for n in range(64)
)
PAGES = (len(QUOTES) + PER_PAGE - 1) // PER_PAGE
CATEGORIES = {1: (1, 2, 3), 2: (4, 5)}  # category id: its items' ids
CATALOGUE = "/category.php?id=1"  # linked from every listing's footer
Answer = tuple[int, str, dict[str, str]]


def quote_items(quotes: tuple[Quote, ...] = QUOTES, *, tags: bool = True) -> list[dict[str, Any]]:
    """The tutorial's items of ``quotes``: text, author (and tags)."""
    return [
        {"text": q.text, "author": q.author.name, **({"tags": list(q.tags)} if tags else {})}
        for q in quotes
    ]


def author_items() -> list[dict[str, str]]:
    """The tutorial AuthorSpider's items: each author quoted, once."""
    quoted = {q.author for q in QUOTES}
    return [{"name": a.name, "birthdate": a.born, "bio": a.bio} for a in AUTHORS if a in quoted]


def tagged(tag: str) -> tuple[Quote, ...]:
    return tuple(q for q in QUOTES if tag in q.tags)


def _page(title: str, content: str) -> str:
    return f"<html><head><title>{title}</title></head><body>{content}</body></html>"


def _quote_html(q: Quote) -> str:
    tags = "".join(
        f'<a class="tag" href="/tag/{t}/page/1/">{t}</a>' for t in q.tags
    )  # fmt: skip
    return (
        '<div class="quote" itemscope itemtype="http://schema.org/CreativeWork">'
        f'<span class="text" itemprop="text">{html.escape(q.text)}</span>'
        f'<span>by <small class="author" itemprop="author">{html.escape(q.author.name)}</small>'
        f'\n<a href="/author/{q.author.slug}">{ABOUT}</a></span>'
        f'<div class="tags">Tags: <meta class="keywords" content="{",".join(q.tags)}">'
        f"{tags}</div></div>"
    )


def _listing(quotes: tuple[Quote, ...], page: int, base: str) -> Answer:
    shown = quotes[(page - 1) * PER_PAGE : page * PER_PAGE]
    if not shown:
        return 404, _page("Not found", "No quotes found!"), {}
    pager = ""
    if page * PER_PAGE < len(quotes):
        pager = (
            f'<li class="next"><a href="{base}page/{page + 1}/">Next <span>&rarr;</span></a></li>'
        )
    if page > 1:
        pager = f'<li class="previous"><a href="{base}page/{page - 1}/">Previous</a></li>' + pager
    content = "".join(_quote_html(q) for q in shown) + f'<nav><ul class="pager">{pager}</ul></nav>'
    content += f'<footer><a href="{CATALOGUE}">Catalogue</a></footer>'  # spiders.rst's start
    return 200, _page("Quotes to Scrape", content), {}


class QuoteSite:
    """Serves the site on ``host`` (a loopback address) at a free port, in threads."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.log: list[Arrival] = []
        self.lock = threading.Lock()
        self.fail_paths: frozenset[str] = frozenset()
        owner = self

        class Handler(_Handler):
            site = owner

        self.server = _Server((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}/"

    @property
    def host(self) -> str:
        return str(self.server.socket.getsockname()[0])

    def __enter__(self) -> QuoteSite:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> list[Arrival]:
        with self.lock:
            return list(self.log)

    def answer(self, path: str) -> Answer:
        url = urlsplit(path)
        if url.path in self.fail_paths:
            return 503, _page("Busy", ""), {}
        parts = [p for p in url.path.split("/") if p]
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if not parts:
            return _listing(QUOTES, 1, "/")
        if parts[0] == "page" and len(parts) == 2 and parts[1].isdigit():
            return _listing(QUOTES, int(parts[1]), "/")
        if parts[0] == "tag" and len(parts) in (2, 4):
            page = int(parts[3]) if len(parts) == 4 and parts[3].isdigit() else 1
            return _listing(tagged(parts[1]), page, f"/tag/{parts[1]}/")
        if parts[0] == "author" and len(parts) == 2:
            return _author(parts[1])
        return _example(parts, query)


def _author(slug: str) -> Answer:
    found = [a for a in AUTHORS if a.slug == slug]
    if not found:
        return 404, _page("Not found", ""), {}
    a = found[0]
    content = (
        f'<div class="author-details"><h3 class="author-title">{html.escape(a.name)}    </h3>'
        f'<p><strong>Born:</strong> <span class="author-born-date">{a.born}</span></p>'
        f'<div class="author-description">\n        {html.escape(a.bio)}\n    </div></div>'
    )
    return 200, _page(a.name, content), {}


def _example(parts: list[str], query: dict[str, str]) -> Answer:
    """example.com's pages of Scrapy's spiders.rst."""
    name = parts[0] if len(parts) == 1 else ""
    if name in ("1.html", "2.html", "3.html", "4.html"):
        n = int(name[0])
        links = f'<a href="/{n % 4 + 1}.html">next</a><a href="{n}.html">self</a>'
        return 200, _page(f"Page {n}", f"<h3>Title {n}</h3><h3>Aside {n}</h3>{links}"), {}
    ident = query.get("id", "")
    if name == "category.php" and ident.isdigit() and int(ident) in CATEGORIES:
        items = "".join(
            f'<a href="/item.php?id={i}">Item {i} link</a>' for i in CATEGORIES[int(ident)]
        )
        more = f'<a href="/subsection.php?id={ident}">sub</a><a href="/category.php?id=2">2</a>'
        return 200, _page(f"Category {ident}", items + more), {}
    if name == "item.php" and ident.isdigit():
        content = (
            f'<table><tr><td id="item_id">ID: {ident}</td>'
            f'<td id="item_name">Item {ident}</td>'
            f'<td id="item_description">About item {ident}</td>'
            f'<td id="additional_data" href="/additional.php?id={ident}">more</td></tr></table>'
        )
        return 200, _page(f"Item {ident}", content), {}
    if name == "additional.php" and ident.isdigit():
        return 200, _page("More", f'<p id="additional_data">Extra {ident}</p>'), {}
    if name == "subsection.php":
        return 200, _page("Sub", '<a href="/item.php?id=99">hidden</a>'), {}
    return 404, _page("Not found", ""), {}


def example_item_pages() -> list[dict[str, Any]]:
    """The items of spiders.rst's CrawlSpider on the catalogue from ``/category.php?id=1``."""
    return [
        {
            "id": [str(i)],
            "name": f"Item {i}",
            "description": f"About item {i}",
            "link_text": f"Item {i} link",
            "additional_data": f"Extra {i}",
        }
        for ids in CATEGORIES.values()
        for i in ids
    ]


class Arrival(NamedTuple):
    """One request as the server saw it, and when (``time.monotonic``)."""

    path: str
    status: int
    at: float


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, *_: Any) -> None:
        pass  # a client killed mid-request (scrapy_parity's SIGKILL): nothing to report


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: QuoteSite

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        arrived = time.monotonic()
        status, text, extra = self.site.answer(self.path)
        data = text.encode("utf-8")
        with self.site.lock:
            self.site.log.append(Arrival(self.path, status, arrived))
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    with QuoteSite(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.2") as site:
        print(site.root, flush=True)
        threading.Event().wait()
