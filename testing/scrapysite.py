"""A loopback site for the three spiders of docs/examples/from_scrapy, which run under
Scrapy and under hashcrawl against it (``scripts/scrapy_parity``):

- ``/books/page/N``: a paginated listing; each book links a detail page (one through a
  301, one that is gone: 404).
- ``/signin``: a login form with a CSRF token beside a search form; a good POST is
  answered ``302 -> /account`` with a session cookie, and ``/account`` and
  ``/members/N`` want that cookie.
- ``/shop/``: a catalogue of categories (paginated) and products, with links a
  CrawlSpider's rules deny (cart, reviews, page 3) and products only in a sidebar.

Every request is logged as the server saw it. ``python -m testing.scrapysite [HOST]``
serves it by hand and prints its root URL.
"""

from __future__ import annotations

import http.server
import secrets
import sys
import threading
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testing.formsite import Seen

USER, PASSWORD = "ann", "hunter2"
LISTING_PAGES, PER_PAGE = 4, 5
BOOKS = LISTING_PAGES * PER_PAGE
MEMBER_PAGES = 6
MOVED_BOOK, GONE_BOOK = 7, 999  # listed as /books/old/7 (301 to /books/item/7), and a 404
CATEGORIES = {"tools": range(1, 9), "toys": range(9, 15), "books": range(15, 19)}
SIDEBAR_ONLY = (40, 41)  # products linked from a sidebar only: restrict_css leaves them out
PER_CATEGORY_PAGE = 3
Answer = tuple[int, str, dict[str, str]]  # status, HTML, extra headers


def _page(title: str, content: str) -> str:
    return f"<html><head><title>{title}</title></head><body>{content}</body></html>"


def price(n: int) -> str:
    return f"{(n * 37) % 50 + 5}.{n % 10}9"


class ScrapySite:
    """Serves the site on ``host`` (a loopback address) at a free port, in threads."""

    def __init__(self, host: str = "127.0.0.2") -> None:
        self.sessions: set[str] = set()
        self.tokens: set[str] = set()
        self.log: list[Seen] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(_Handler):
            site = owner

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}/"

    def __enter__(self) -> ScrapySite:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> list[Seen]:
        with self.lock:
            return list(self.log)

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        url = urlsplit(path)
        parts = [p for p in url.path.split("/") if p]
        if parts == ["robots.txt"]:
            return 404, _page("Not found", ""), {}
        if parts[:1] == ["books"]:
            return self._books(parts[1:])
        if parts[:1] == ["shop"]:
            return self._shop(parts[1:])
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        return self._members(method, parts, form, headers.get("cookie", ""))

    # -- the listing ----------------------------------------------------------------------

    def _books(self, parts: list[str]) -> Answer:
        if len(parts) == 2 and parts[0] == "page" and parts[1].isdigit():
            return self._listing(int(parts[1]))
        if len(parts) == 2 and parts[0] == "old" and parts[1] == str(MOVED_BOOK):
            return 301, _page("Moved", ""), {"Location": f"/books/item/{MOVED_BOOK}"}
        if len(parts) == 2 and parts[0] == "item" and parts[1].isdigit():
            n = int(parts[1])
            if 1 <= n <= BOOKS:
                table = f"<table><tr><th>UPC</th><td>upc-{n:04d}</td></tr></table>"
                content = f'<h1>Book {n}</h1>{table}<p class="price">{price(n)}</p>'
                return 200, _page(f"Book {n}", content), {}
        return 404, _page("Not found", ""), {}

    def _listing(self, page: int) -> Answer:
        if not 1 <= page <= LISTING_PAGES:
            return 404, _page("Not found", ""), {}
        rows = []
        for n in range((page - 1) * PER_PAGE + 1, page * PER_PAGE + 1):
            href = f"/books/old/{n}" if n == MOVED_BOOK else f"/books/item/{n}"
            rows.append(
                f'<article class="book"><h3><a href="{href}">Book {n}</a></h3>'
                f'<p class="price">{price(n)}</p></article>'
            )
        if page == 2:
            rows.append(
                f'<article class="book"><h3><a href="/books/item/{GONE_BOOK}">Gone</a></h3>'
                '<p class="price">0.00</p></article>'
            )
        more = f'<li class="next"><a href="/books/page/{page + 1}">next</a></li>'
        pager = f'<ul class="pager">{more if page < LISTING_PAGES else ""}</ul>'
        return 200, _page(f"Books, page {page}", "".join(rows) + pager), {}

    # -- the login ------------------------------------------------------------------------

    def _members(self, method: str, parts: list[str], form: dict[str, str], cookie: str) -> Answer:
        if parts == ["signin"] and method == "GET":
            return self._signin_form()
        if parts == ["signin"] and method == "POST":
            with self.lock:
                token_ok = form.get("csrf") in self.tokens
            if not token_ok or (form.get("user"), form.get("password")) != (USER, PASSWORD):
                return 403, _page("Refused", ""), {}
            session = secrets.token_hex(8)
            with self.lock:
                self.sessions.add(session)
            cookie_line = f"session={session}; Path=/; HttpOnly"
            return 302, _page("Moved", ""), {"Location": "/account", "Set-Cookie": cookie_line}
        if not self.logged_in(cookie):
            return 403, _page("Log in first", ""), {}
        if parts == ["account"]:
            links = "".join(
                f'<a class="member" href="/members/{n}">page {n}</a>'
                for n in range(1, MEMBER_PAGES + 1)
            )
            return 200, _page("Account", f'<h1 class="user">{USER}</h1>{links}'), {}
        if len(parts) == 2 and parts[0] == "members" and parts[1].isdigit():
            n = int(parts[1])
            content = f'<h2>Member page {n}</h2><p class="secret">{n * 11}</p>'
            return 200, _page(f"Member page {n}", content), {}
        return 404, _page("Not found", ""), {}

    def _signin_form(self) -> Answer:
        token = secrets.token_hex(8)
        with self.lock:
            self.tokens.add(token)
        search = (
            '<form name="search" action="/search" method="get">'
            '<input name="q"><input type="submit" value="Search"></form>'
        )
        login = (
            '<form id="login" action="/signin" method="post">'
            f'<input type="hidden" name="csrf" value="{token}">'
            '<input name="user" value=""><input type="password" name="password">'
            '<input type="submit" name="go" value="Sign in"></form>'
        )
        return 200, _page("Sign in", search + login), {}

    def logged_in(self, cookie_header: str) -> bool:
        cookies = dict(
            part.strip().partition("=")[::2] for part in cookie_header.split(";") if "=" in part
        )
        with self.lock:
            return cookies.get("session") in self.sessions

    # -- the catalogue --------------------------------------------------------------------

    def _shop(self, parts: list[str]) -> Answer:
        if not parts:
            links = "".join(f'<a href="/shop/category/{c}">{c}</a>' for c in CATEGORIES)
            extra = '<a href="/shop/about">about</a><a href="/shop/cart?add=1">cart</a>'
            return 200, _page("Shop", f"<nav>{links}{extra}</nav>"), {}
        if parts[0] == "category" and len(parts) in (2, 4) and parts[1] in CATEGORIES:
            page = int(parts[3]) if len(parts) == 4 and parts[3].isdigit() else 1
            return self._category(parts[1], page)
        if parts[0] == "product" and len(parts) >= 2 and parts[1].isdigit():
            n = int(parts[1])
            if len(parts) == 3 and parts[2] == "reviews":
                return 200, _page(f"Reviews of {n}", "<p>Great.</p>"), {}
            content = (
                f'<h1>Product {n}</h1><span class="price">{price(n)}</span>'
                f'<a href="/shop/product/{n}/reviews">reviews</a>'
                f'<a href="/shop/cart?add={n}">add to cart</a>'
            )
            return 200, _page(f"Product {n}", content), {}
        if parts == ["about"]:
            return 200, _page("About", "<p>A shop.</p>"), {}
        if parts == ["cart"]:
            return 200, _page("Cart", "<p>Added.</p>"), {}
        return 404, _page("Not found", ""), {}

    def _category(self, name: str, page: int) -> Answer:
        products = list(CATEGORIES[name])
        start = (page - 1) * PER_CATEGORY_PAGE
        shown = products[start : start + PER_CATEGORY_PAGE]
        if not shown:
            return 404, _page("Not found", ""), {}
        items = "".join(f'<a href="/shop/product/{n}">Product {n}</a>' for n in shown)
        pager = ""
        if start + PER_CATEGORY_PAGE < len(products):
            pager = f'<a class="next" href="/shop/category/{name}/page/{page + 1}">next</a>'
        sidebar = "".join(f'<a href="/shop/product/{n}">Featured {n}</a>' for n in SIDEBAR_ONLY)
        content = (
            f'<div class="products">{items}</div><div class="pager">{pager}</div>'
            f'<aside class="sidebar">{sidebar}</aside><a href="/shop/">home</a>'
        )
        return 200, _page(f"{name}, page {page}", content), {}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: ScrapySite

    def log_message(self, *_: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, text, extra = self.site.answer(self.command, self.path, headers, body)
        data = text.encode("utf-8")
        with self.site.lock:
            self.site.log.append(Seen(self.command, self.path, headers, body, status))
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve


if __name__ == "__main__":
    with ScrapySite(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.2") as site:
        print(site.root, flush=True)
        threading.Event().wait()
