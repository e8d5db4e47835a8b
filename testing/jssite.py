"""A loopback site whose pages are built by JavaScript, and a listener that must hear
nothing: what the browser tests render and judge from.

Pages (``PAGES`` lists what each holds once rendered, ``SERVER_ITEMS`` what the server
sends without a browser):

- ``/``: links to the others, one item written by the server.
- ``/script``: items written by an inline script and by ``/app.js``.
- ``/more``: two items, and a "Load more" button that appends two more by ``fetch``.
- ``/scroll``: one item; each scroll to the end appends one more by ``fetch``.
- ``/slow-scroll``: the same, its ``fetch`` answered after ``SLOW`` seconds.
- ``/links``: links added by script to ``/p/1`` ... ``/p/3``.
- ``/hostile``: a page that tries every way out to the :class:`Listener`'s address.
- ``/spin``: ``while (true) {}``; ``/bomb``: a script that takes memory until it dies.
- ``/never``: a page whose script never arrives (its load never ends).
- ``/form``: a field that answers Enter, a file input that shows the file it got.
- ``/grow?mib=N``: a page whose script keeps N MiB alive in its heap; with ``&held=1``
  its load then waits on ``/held.js`` until :attr:`JsSite.release` is set (the memory is
  alive for as long as a test needs it measured).

Every request is logged as the server saw it (path, and the time it arrived).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from typing import Any

import attrs

ITEM = '<li class="item">{}</li>'
INDEX = """<!doctype html><html><head><title>JS site</title></head><body>
<a href="/script">script</a> <a href="/more">more</a> <a href="/scroll">scroll</a>
<a href="/links">links</a><ul><li class="item">server-0</li></ul></body></html>"""
SCRIPT = """<!doctype html><html><head><title>script</title></head><body><ul id="items"></ul>
<script>for (const n of [1, 2]) {
  const li = document.createElement("li"); li.className = "item";
  li.textContent = "script-" + n; document.getElementById("items").appendChild(li);
}</script><script src="/app.js"></script></body></html>"""
APP_JS = """{ const li = document.createElement("li"); li.className = "item";
  li.textContent = "app-js"; document.getElementById("items").appendChild(li); }"""
MORE = """<!doctype html><html><head><title>more</title></head><body><ul id="items">
<li class="item">more-1</li><li class="item">more-2</li></ul>
<button id="more" onclick="fetch('/api/more').then(r => r.json()).then(names => {

  for (const name of names) { const li = document.createElement('li'); li.className = 'item';
    li.textContent = name; document.getElementById('items').appendChild(li); }
  })">Load more</button>
</body></html>"""
SCROLL = """<!doctype html><html><head><title>scroll</title></head><body>
<ul id="items"><li class="item" style="height:2000px">scroll-0</li></ul><script>
let n = 0; window.addEventListener("scroll", () => {
  if (window.innerHeight + window.scrollY < document.body.offsetHeight - 10) return;
  fetch("/api/scroll?n=" + (++n) + "%s").then(r => r.text()).then(name => {
    const li = document.createElement("li"); li.className = "item"; li.style.height = "2000px";
    li.textContent = name; document.getElementById("items").appendChild(li); });
});</script></body></html>"""
LINKS = """<!doctype html><html><head><title>links</title></head><body><div id="nav"></div>
<script>for (const n of [1, 2, 3]) { const a = document.createElement("a");
  a.href = "/p/" + n; a.textContent = "p" + n; document.getElementById("nav").appendChild(a); }
</script></body></html>"""
# Sets a cookie by script, then asks the API (which sees it, and the worker's).
LOGIN = """<!doctype html><html><body><p id="who"></p><script>
document.cookie = "session=by-script; path=/";
fetch("/api/whoami").then(r => r.text())
  .then(t => { document.getElementById("who").textContent = t; });
</script></body></html>"""
BOMB = """<!doctype html><html><body><script>
const hoard = []; while (true) { hoard.push(new Array(1000000).fill(hoard.length)); }
</script></body></html>"""
SPIN = "<!doctype html><html><body><script>while (true) {}</script></body></html>"
HOSTILE = """<!doctype html><html><head><title>hostile</title>
<link rel="preconnect" href="http://{out}/"><link rel="stylesheet" href="http://{out}/s.css">
</head><body><p id="done">hostile</p>
<img src="http://{out}/img.png"><iframe src="http://{out}/frame"></iframe>
<iframe src="file:///etc/passwd"></iframe>
<script>
try {{ new WebSocket("ws://{out}/ws"); }} catch (e) {{}}
try {{ navigator.sendBeacon("http://{out}/beacon", "x"); }} catch (e) {{}}
try {{ new EventSource("http://{out}/events"); }} catch (e) {{}}
fetch("http://{out}/fetch").catch(() => {{}});
fetch("file:///etc/passwd").catch(() => {{}});
try {{ const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:{out}"}}]}});
  pc.createDataChannel("x"); pc.createOffer().then(o => pc.setLocalDescription(o));
}} catch (e) {{}}
window.open("http://{out}/popup");
const a = document.createElement("a"); a.href = "/download"; a.download = "x.bin"; a.click();
alert("hostile");
</script></body></html>"""
NEVER = """<!doctype html><html><body><p id="n">never</p><script src="/never.js"></script>
</body></html>"""
FORM = """<!doctype html><html><head><title>form</title></head><body>
<input id="q"><p id="typed"></p><input id="f" type="file"><p id="file"></p><script>
document.getElementById("q").addEventListener("keydown", e => { if (e.key === "Enter")
  document.getElementById("typed").textContent = e.target.value + " entered"; });
document.getElementById("f").addEventListener("change", e => { const f = e.target.files[0];
  f.text().then(t => { document.getElementById("file").textContent = f.name + ":" + t; }); });
</script></body></html>"""
GROW = """<!doctype html><html><body><p id="grown"></p><script>
window.kept = []; for (let i = 0; i < %d; i++) window.kept.push(new Float64Array(131072).fill(i));
document.getElementById("grown").textContent = String(window.kept.length);
</script>%s</body></html>"""
HELD = '<script src="/held.js"></script>'
#: What each page holds once rendered with its steps (``STEPS``).
PAGES = {
    "/": ["server-0"],
    "/script": ["script-1", "script-2", "app-js"],
    "/more": ["more-1", "more-2", "more-3", "more-4"],
    "/scroll": ["scroll-0", "scroll-1", "scroll-2"],
}
SERVER_ITEMS = {
    "/": ["server-0"],
    "/script": [],
    "/more": ["more-1", "more-2"],
    "/scroll": ["scroll-0"],
}
STEPS: dict[str, list[dict[str, Any]]] = {
    "/more": [{"click": "#more"}, {"wait_for": "#items li:nth-child(4)", "timeout": 10}],
    # A scroll waits for the requests it set off: no wait_for needed between two.
    "/scroll": [{"scroll": "end", "times": 2}],
}
SLOW = 1.5  # seconds /slow-scroll's fetch takes (longer than a fixed one-second wait)


@attrs.frozen
class Seen:
    """One request as the server saw it."""

    path: str
    at: float  # time.monotonic() when it arrived
    cookie: str = ""


class JsSite:
    """Serves the site on ``host`` at a free port, in threads; ``out`` is the address
    (host:port) that the hostile page tries to reach."""

    def __init__(self, host: str = "127.0.0.2", out: str = "127.0.0.3:9") -> None:
        self.log: list[Seen] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()  # ends what /never.js holds
        self.release = threading.Event()  # ends what /held.js holds
        self.out = out
        owner = self

        class Handler(_Handler):
            site = owner

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        host, port = self.server.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def paths(self) -> list[str]:
        with self.lock:
            return [seen.path for seen in self.log]

    def __enter__(self) -> JsSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    site: JsSite

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.site.lock:
            self.site.log.append(Seen(self.path, time.monotonic(), self.headers.get("cookie", "")))
        page, kind = self._page()
        if page is None:
            self.send_error(404)
            return
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _page(self) -> tuple[str | None, str]:
        path, _, query = self.path.partition("?")
        html = "text/html; charset=utf-8"
        fixed = {
            "/": INDEX,
            "/script": SCRIPT,
            "/more": MORE,
            "/scroll": SCROLL % "",
            "/slow-scroll": SCROLL % "&slow=1",
            "/links": LINKS,
        }
        if path in fixed:
            return fixed[path], html
        if path == "/app.js":
            return APP_JS, "text/javascript"
        if path == "/api/more":
            return json.dumps(["more-3", "more-4"]), "application/json"
        if path == "/api/scroll":
            n, _, slow = query.removeprefix("n=").partition("&")
            if slow and self.site.closing.wait(SLOW):  # the server's answer is slow
                return None, "text/plain"
            return f"scroll-{n}", "text/plain"
        if path.startswith("/p/"):
            return f"<!doctype html><html><body><p>{path}</p></body></html>", html
        if path == "/login":
            return LOGIN, html
        if path == "/api/whoami":
            return "you", "text/plain"
        if path == "/spin":
            return SPIN, html
        if path == "/bomb":
            return BOMB, html
        if path == "/hostile":
            return HOSTILE.format(out=self.site.out), html
        if path == "/never":
            return NEVER, html
        if path == "/never.js":
            self.site.closing.wait(120)
            return "", "text/javascript"
        if path == "/form":
            return FORM, html
        if path == "/grow":
            mib = min(int(query.partition("=")[2].partition("&")[0] or 0), 1024)
            return GROW % (mib, HELD if "held=1" in query else ""), html
        if path == "/held.js":
            self.site.release.wait(120)
            return "", "text/javascript"
        if path == "/download":
            return "binary", "application/octet-stream"
        return None, html


class Listener:
    """A TCP and a UDP socket on ``host``: every connection or datagram is counted (a
    sealed browser must cause none)."""

    def __init__(self, host: str = "127.0.0.3") -> None:
        self.tcp = socket.create_server((host, 0))
        port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((host, port))
        self.address = f"{host}:{port}"
        self.heard: list[str] = []
        self._threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.tcp.accept()
            except OSError:
                return
            self.heard.append(f"tcp from {peer}")
            conn.close()

    def _receive(self) -> None:
        while True:
            try:
                _, peer = self.udp.recvfrom(2048)
            except OSError:
                return
            self.heard.append(f"udp from {peer}")

    def __enter__(self) -> Listener:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in (self.tcp, self.udp):
            sock.shutdown(socket.SHUT_RDWR) if sock is self.tcp else None
            sock.close()
