"""A loopback site that a Scrapy or Crawlee user's spider meets: a login form (POST, sets a
cookie), pages behind it, a search form (POST), a JSON API that wants an Accept header,
and a page that wants a bearer token. Every request is logged as the server saw it.

Run it by hand with ``python -m testing.formsite [HOST]``: it prints its root URL.
"""

from __future__ import annotations

import http.server
import json
import secrets
import sys
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

USER, PASSWORD = "ann", "hunter2"
TOKEN = "settings-only-token"
ITEMS = {1: ("Blue widget", "12.50"), 2: ("Red widget", "9.99"), 3: ("Green gadget", "30.00")}
PAGES = 12  # pages behind the login, /page/0 ... /page/11


@attrs.frozen
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def cookie(self) -> str:
        return self.headers.get("cookie", "")


class FormSite:
    """Serves the site on ``host`` (a loopback address) at a free port, in threads."""

    def __init__(self, host: str = "127.0.0.2", *, pages: int = PAGES) -> None:
        self.pages = pages
        self.sessions: set[str] = set()
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

    def __enter__(self) -> FormSite:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> list[Seen]:
        with self.lock:
            return list(self.log)

    def logged_in(self, cookie_header: str) -> bool:
        cookies = dict(
            part.strip().partition("=")[::2] for part in cookie_header.split(";") if "=" in part
        )
        with self.lock:
            return cookies.get("session") in self.sessions

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Any:
        """(status, content type, body, extra headers) for a request."""
        url = urlsplit(path)
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        cookie = headers.get("cookie", "")
        if url.path == "/" and method == "GET":
            return 200, _HTML, _page("Welcome", '<a href="/login">log in</a>'), {}
        if url.path == "/login" and method == "POST":
            if (form.get("user"), form.get("password")) != (USER, PASSWORD):
                return 403, _HTML, _page("Wrong password", ""), {}
            session = secrets.token_hex(8)
            with self.lock:
                self.sessions.add(session)
            cookie_line = f"session={session}; Path=/; HttpOnly"
            return 200, _HTML, _page("Logged in", ""), {"Set-Cookie": cookie_line}
        if url.path == "/slow":
            time.sleep(float(query.get("s", "1")))
            return 200, _HTML, _page("Slow", ""), {}
        if url.path.startswith("/hop/") and url.path[5:].isdigit():
            n = int(url.path[5:])
            if n == 0:
                return 200, _HTML, _page(f"Landed by {method}", ""), {}
            return 302, _HTML, _page("Moved", ""), {"Location": f"/hop/{n - 1}"}
        if url.path == "/private":
            if headers.get("authorization") != f"Bearer {TOKEN}":
                return 401, _HTML, _page("Who are you?", ""), {}
            return 200, _HTML, _page("Private", "<p class=secret>42</p>"), {}
        if url.path == "/api/items" and method == "GET":
            if headers.get("accept") != "application/json":
                return 406, _HTML, _page("Ask for JSON", ""), {}
            q = query.get("q", "").lower()
            found = [
                {"id": n, "name": name, "url": f"/item/{n}"}
                for n, (name, _) in ITEMS.items()
                if q in name.lower()
            ]
            return 200, "application/json", json.dumps({"items": found}), {}
        if url.path.startswith("/item/") and method == "GET":
            n = int(url.path.rsplit("/", 1)[1]) if url.path[6:].isdigit() else 0
            if n not in ITEMS:
                return 404, _HTML, _page("No such item", ""), {}
            name, price = ITEMS[n]
            content = f'<h1 class="name">{name}</h1><p>Price: <span class="price">{price}</span>'
            return 200, _HTML, _page(name, content), {}
        if not self.logged_in(cookie):
            return 403, _HTML, _page("Log in first", ""), {}
        if url.path == "/account" and method == "GET":
            links = "".join(f'<a href="/page/{n}">page {n}</a>' for n in range(self.pages))
            return 200, _HTML, _page("Account", f'<h1 class="user">{USER}</h1>{links}'), {}
        if url.path.startswith("/page/") and method == "GET":
            return 200, _HTML, _page(f"Members page {url.path[6:]}", ""), {}
        if url.path == "/search" and method == "POST":
            q = form.get("q", "").lower()
            rows = "".join(
                f'<li><a href="/item/{n}">{name}</a></li>'
                for n, (name, _) in ITEMS.items()
                if q in name.lower()
            )
            return 200, _HTML, _page("Results", f'<ul class="results">{rows}</ul>'), {}
        return 404, _HTML, _page("Not found", ""), {}


_HTML = "text/html; charset=utf-8"


def _page(title: str, content: str) -> str:
    return f"<html><head><title>{title}</title></head><body>{content}</body></html>"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site: FormSite

    def log_message(self, *_: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, kind, text, extra = self.site.answer(self.command, self.path, headers, body)
        data = text.encode("utf-8")
        with self.site.lock:
            self.site.log.append(Seen(self.command, self.path, headers, body, status))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve


if __name__ == "__main__":
    with FormSite(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.2") as site:
        print(site.root, flush=True)
        threading.Event().wait()
