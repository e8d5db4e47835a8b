#!/usr/bin/env python3
"""The per-page link path, measured on the same pages: lxml + urllib against the faster parts.

For each page set it times, in one process and one after the other (CPU time, so a busy
machine slows every contender alike; read the ratios, not the milliseconds):

- ``before``: lxml's tree, then ``urljoin`` + w3lib + ``canonicalize`` for every link
  written (the path of ``parse_html`` before its fast paths, copied here);
- ``parse_html``: today's ``hashcrawl._web._html.parse_html`` (lxml, each written link
  resolved once, ada-url's join on the fast path);
- the parts alone: lxml tree and link targets; selectolax (Lexbor) tree and the same
  targets; resolving every written link with urllib, with ada-url's ``join_url``, and
  with today's ``request_url``;
- fanning ``parse_html`` out to 2 threads and to 2 processes, against 1 (wall time).

Every contender starts with the URL caches empty and sees the pages in the same order,
as a crawl would. It also checks that ada-url, joining every link, gives the URL that
urllib gives, and counts where the two part.

    .venv/bin/python scripts/bench_links.py                 # the bench site's pages
    .venv/bin/python scripts/bench_links.py --docs DIR ...  # plus a directory of HTML

Debian's javadoc and PostgreSQL docs make good one-host page sets::

    apt-get download openjdk-17-doc openjdk-17-jre-headless postgresql-doc-15
    for f in *.deb; do dpkg-deb -x "$f" root; done
    # root/usr/share/doc/openjdk-17-jre-headless/api, root/usr/share/doc/postgresql-doc-15/html
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urljoin

import ada_url
import bench_site
import lxml.html
from selectolax.lexbor import LexborHTMLParser

from hashcrawl._core import _links, _urls
from hashcrawl._core._links import link_targets, request_url, sendable
from hashcrawl._web._html import _PARSER, _base_url, decode_body, parse_html

Pages = list[tuple[bytes, str]]
_SELECT = "a, area, frame, iframe, link, meta"


def main() -> int:
    args = _parser().parse_args()
    print(f"load average {_load()}")
    sets: list[tuple[str, Pages]] = [("bench site", _bench_pages(args.bench_pages))]
    for directory in args.docs:
        sets.append((directory.name, _doc_pages(directory, args.most)))
    for name, pages in sets:
        _report(name, pages)
    print(f"load average {_load()}")
    return 0


def _report(name: str, pages: Pages) -> None:
    size = sum(len(b) for b, _ in pages) / len(pages) / 1024
    targets = [(url, list(link_targets(_lxml_tree(body)))) for body, url in pages]
    written = sum(len(t) for _, t in targets) / len(pages)
    print(f"\n## {name}: {len(pages)} pages, {size:.1f} KiB and {written:.0f} links written a page")
    rows = [
        ("before: lxml + urljoin/w3lib per link", lambda: _each_page(pages, _before)),
        ("parse_html (lxml, links once, ada-url)", lambda: _each_page(pages, _today)),
        ("lxml tree + targets, no URLs", lambda: _each_page(pages, _lxml_only)),
        ("selectolax tree + targets, no URLs", lambda: _each_page(pages, _lexbor_only)),
        ("URLs: urljoin + w3lib, every link", lambda: _each_link(targets, _urllib_url)),
        ("URLs: ada-url join_url, every link", lambda: _each_link(targets, _ada_url)),
        ("URLs: request_url, every link", lambda: _each_link(targets, request_url)),
    ]
    base = None
    print("| contender | ms/page | ratio to before |\n|---|--:|--:|")
    for label, run in rows:
        seconds = run() / len(pages) * 1000
        base = base or seconds
        print(f"| {label} | {seconds:.3f} | {seconds / base:.2f} |")
    _fan_out(pages)
    _agreement(targets)


def _each_page(pages: Pages, parse: Callable[[bytes, str], object]) -> float:
    _clear_caches()
    start = time.process_time()
    for body, url in pages:
        parse(body, url)
    return time.process_time() - start


def _each_link(targets: list[tuple[str, list[str]]], join: Callable[[str, str], object]) -> float:
    _clear_caches()
    start = time.process_time()
    for url, hrefs in targets:
        for href in hrefs:
            join(url, href)
    return time.process_time() - start


def _fan_out(pages: Pages, rounds: int = 3) -> None:
    """parse_html over every page by 1, 2 threads and 2 processes (wall time, the best of
    ``rounds`` taken in turn, since other work on the machine takes the cores at random)."""
    one = threads = procs = float("inf")
    with (
        concurrent.futures.ThreadPoolExecutor(2) as thread_pool,
        concurrent.futures.ProcessPoolExecutor(2) as process_pool,
    ):
        list(process_pool.map(_parse_star, pages[:50]))  # start-up is not what is measured
        for _ in range(rounds):
            one = min(one, _wall(lambda: [parse_html(b, u) for b, u in pages]))
            threads = min(threads, _wall(lambda: list(thread_pool.map(_parse_star, pages))))
            procs = min(
                procs, _wall(lambda: list(process_pool.map(_parse_star, pages, chunksize=16)))
            )
    print(
        f"fan-out, wall time against 1 thread ({one / len(pages) * 1000:.3f} ms/page): "
        f"2 threads {threads / one:.2f}x the time, 2 processes {procs / one:.2f}x"
    )


def _agreement(targets: list[tuple[str, list[str]]]) -> None:
    """Where ada-url joining every link would send another URL than urllib."""
    differ = total = 0
    for url, hrefs in targets:
        for href in hrefs:
            total += 1
            differ += _ada_url(url, href) != _urllib_url(url, href)
    print(f"ada-url for every link: {differ} of {total} written links would be sent otherwise")


# -- the contenders ----------------------------------------------------------------------------


def _lxml_tree(body: bytes) -> lxml.html.HtmlElement:
    return lxml.html.document_fromstring(decode_body(body, None).encode("utf-8"), parser=_PARSER)


def _before(body: bytes, url: str) -> tuple[str, ...]:
    root = _lxml_tree(body)
    base = _base_url(root, url)
    found = (u for t in link_targets(root) if (u := _urllib_url(base, t)) is not None)
    return tuple(dict.fromkeys(found))


def _today(body: bytes, url: str) -> tuple[str, ...]:
    return parse_html(body, url).links


def _parse_star(page: tuple[bytes, str]) -> tuple[str, ...]:
    return parse_html(*page).links


def _lxml_only(body: bytes, url: str) -> int:
    return sum(1 for _ in link_targets(_lxml_tree(body)))


def _lexbor_only(body: bytes, url: str) -> int:
    tree = LexborHTMLParser(decode_body(body, None))
    return sum(1 for _ in _lexbor_targets(tree))


def _lexbor_targets(tree: LexborHTMLParser) -> Iterator[str]:
    for node in tree.css(_SELECT):
        attrs = node.attributes
        tag = node.tag
        if tag in ("a", "area") and attrs.get("href"):
            yield attrs["href"] or ""
        elif tag in ("frame", "iframe") and attrs.get("src"):
            yield attrs["src"] or ""
        elif tag == "link" and attrs.get("href") and attrs.get("rel"):
            yield attrs["href"] or ""


def _urllib_url(base: str, href: str) -> str | None:
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        url = sendable(urljoin(base, href))
        _urls.canonicalize(url)
    except ValueError:
        return None
    return url


def _ada_url(base: str, href: str) -> str | None:
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        url = ada_url.join_url(base, href).partition("#")[0]
        _urls.canonicalize(url)
    except ValueError:
        return None
    return url if url.startswith(("http://", "https://")) else None


def _clear_caches() -> None:
    for cached in (_urls.canonicalize, _urls.host_key, _urls.fingerprint):
        cached.cache_clear()
    for cached in (_links._absolute_url, _links._plain_origin, _links._scheme_of):
        cached.cache_clear()


# -- the pages ---------------------------------------------------------------------------------


def _bench_pages(count: int) -> Pages:
    root = Path(tempfile.mkdtemp(prefix="hashcrawl-links-"))
    hosts = 5
    bench_site.generate(root, hosts=hosts, pages=count, port=8000)
    pages = []
    for path in sorted(root.rglob("*.html")):
        host, _, rest = str(path.relative_to(root)).partition("/")
        rest = "" if rest == "index.html" else rest
        pages.append((path.read_bytes(), f"http://{host}:8000/{rest}"))
    return pages


def _doc_pages(directory: Path, most: int) -> Pages:
    files = sorted(p for p in directory.rglob("*.html") if p.is_file())
    step = max(1, len(files) // most)
    return [
        (p.read_bytes(), f"http://127.0.0.2:8000/{p.relative_to(directory)}")
        for p in files[::step][:most]
    ]


def _wall(run: Callable[[], object]) -> float:
    _clear_caches()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=Path, nargs="*", default=[], help="directories of HTML pages")
    p.add_argument("--most", type=int, default=1000, help="pages taken from each directory")
    p.add_argument("--bench-pages", type=int, default=2000, help="pages of the bench site")
    return p


if __name__ == "__main__":
    sys.exit(main())
