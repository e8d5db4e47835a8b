"""Scrapy's documented spiders, ported the way docs/tutorial.md says, onto the loopback
site of ``testing.quotesite``.

:func:`port` is the whole port: ``import scrapy`` becomes ``import hashcrawl as scrapy``,
``from scrapy.x import A`` becomes ``from hashcrawl import A``, and the documentation's
sites (quotes.toscrape.com, example.com) become the loopback site. Nothing else changes.

The spiders of Scrapy's own documentation are read from a Scrapy checkout when one is
given (``scripts/scrapy_parity --docs DIR``; never copied into this repository):
:data:`DOCUMENTED` names each by the file and the line of its ``class`` statement at
:data:`SCRAPY_COMMIT`, and :func:`documented` cuts its code block out.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hashcrawl._spiders._spider import Spider, load_spider
from testing import quotesite
from testing.fleet import DEADLINE, REPO, Process, Processes, new_crawl_name, wait_until

SCRAPY_COMMIT = "11079cb1c85b9e75a39a7269943c69d1a975d485"  # scrapy/scrapy, 2026-08-21

#: name: (file in the Scrapy repository, line of the spider's ``class`` statement).
DOCUMENTED: dict[str, tuple[str, int]] = {
    "tutorial_quotes": ("docs/intro/tutorial.rst", 486),  # two start_urls, items
    "tutorial_next_page": ("docs/intro/tutorial.rst", 605),  # urljoin + scrapy.Request
    "tutorial_follow": ("docs/intro/tutorial.rst", 658),  # response.follow
    "tutorial_authors": ("docs/intro/tutorial.rst", 726),  # follow_all, callback by position
    "tutorial_start": ("docs/intro/tutorial.rst", 800),  # async def start(), no tag
    "spiders_h3": ("docs/topics/spiders.rst", 222),  # items and requests from one callback
    "spiders_crawl": ("docs/topics/spiders.rst", 565),  # CrawlSpider, meta["link_text"]
}

_SITES = ("https://quotes.toscrape.com/", "http://www.example.com/", "http://www.example.com")
_IMPORT = re.compile(r"^(\s*)import scrapy$", re.M)
_FROM = re.compile(r"^(\s*)from scrapy(\.\w+)* import ", re.M)


def expected(name: str) -> list[dict[str, Any]]:
    """The items spider ``name`` gives on the site (derived from its data)."""
    quotes = quotesite.quote_items()
    return {
        "tutorial_quotes": quotesite.quote_items(quotesite.QUOTES[: 2 * quotesite.PER_PAGE]),
        "tutorial_next_page": quotes,
        "tutorial_follow": quotes,
        "tutorial_authors": quotesite.author_items(),
        "tutorial_start": quotesite.quote_items(tags=False),
        "spiders_h3": [
            {"title": f"<h3>{kind} {n}</h3>"} for n in range(1, 5) for kind in ("Title", "Aside")
        ],
        "spiders_crawl": quotesite.example_item_pages(),
    }[name]


def port(source: str, site: quotesite.QuoteSite) -> str:
    """``source`` ported as the tutorial says, its sites the loopback ``site``."""
    ported = _IMPORT.sub(r"\1import hashcrawl as scrapy", source)
    return relocated(_FROM.sub(r"\1from hashcrawl import ", ported), site)


def relocated(source: str, site: quotesite.QuoteSite) -> str:
    """``source`` with the documentation's sites the loopback ``site`` (for Scrapy too)."""
    for documented in _SITES:
        source = source.replace(documented, site.root)
    return source.replace('"example.com"', f'"{site.host}"')


def load(source: str, directory: Path, name: str) -> type[Spider]:
    """The one spider class of ``source``, loaded from a file as ``--spider`` loads it."""
    path = directory / f"{name}.py"
    path.write_text(source)
    return load_spider(str(path))


def documented(checkout: Path, name: str) -> str:
    """Spider ``name``'s code block in Scrapy's docs at :data:`SCRAPY_COMMIT`, read from
    the git repository ``checkout``.

    Raises:
        ValueError: no Python code block holds a ``class`` at the line named, or the
            repository lacks the commit.
    """
    path, line = DOCUMENTED[name]
    text = _read(checkout, path).splitlines()
    start = line - 1
    while start > 0 and not text[start].startswith(".. code-block:: python"):
        start -= 1
    if not text[line - 1].lstrip().startswith("class ") or start == 0:
        raise ValueError(f"{path}:{line} is no spider's class in a Python code block")
    block = []
    for row in text[start + 1 :]:
        if row and not row.startswith(" "):
            break
        block.append(row)
    return textwrap.dedent("\n".join(block)).strip() + "\n"


def _read(checkout: Path, path: str) -> str:
    """``path`` at :data:`SCRAPY_COMMIT` in the repository ``checkout`` (a clone, or a
    bare repository).

    Raises:
        ValueError: the repository lacks that commit (or that file in it).
    """
    done = subprocess.run(
        ["git", "-C", str(checkout), "show", f"{SCRAPY_COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"{checkout} has no {path} at {SCRAPY_COMMIT}: {done.stderr.strip()}")
    return done.stdout


def fleet_items(
    redis_url: str,
    directory: Path,
    spider_file: Path,
    site: quotesite.QuoteSite,
    total: int,
    *,
    outputs: Sequence[Path] = (),
) -> Fleet:
    """``spider_file`` crawled by three ``hashcrawl join`` workers: once the site has
    answered a third of the ``total`` requests the crawl makes, the one writing items is
    stopped (SIGINT); at two thirds the next one writing is SIGKILLed and a fourth
    started in its place. Each writes a JSON Lines file of its own and every file of
    ``outputs`` (shared, as ``crawl``'s workers share theirs). The items of the workers'
    own files, a line cut by the kill left out."""
    crawl = new_crawl_name()
    flags = ["--spider", str(spider_file), "--allow-net", site.host, "--delay", "0.2",
             "--lease", "3", "--grace", "2", "--idle", "3", "-q"]  # fmt: skip
    flags += [arg for path in outputs for arg in ("-o", str(path))]
    with Processes(redis_url, crawl, directory) as workers:
        started = [workers.join(*flags) for _ in range(3)]
        stopped = _when_answered(site, max(2, total // 3), started, workers.outputs)
        stopped.signal(signal.SIGINT)
        rest = [p for p in started if p is not stopped]
        killed = _when_answered(
            site, max(3, 2 * total // 3), rest, [workers.outputs[started.index(p)] for p in rest]
        )
        killed.signal(signal.SIGKILL)
        killed.wait()
        workers.join(*flags)  # the replacement: it makes the killed one's Parquet part
        codes = [p.wait() for p in workers.started]
        items = [item for path in workers.outputs for item in _lines(path)]
    return Fleet(items, codes, stopped.label, killed.label)


class Fleet(NamedTuple):
    items: list[dict[str, Any]]
    codes: list[int]
    stopped: str
    killed: str


def _when_answered(
    site: quotesite.QuoteSite, count: int, among: list[Process], outputs: list[Path]
) -> Process:
    """The process of ``among`` that has written items (else the first), once the site
    answered ``count`` requests (or the crawl ended)."""
    wait_until(lambda: len(site.seen()) >= count or not any(p.running() for p in among),
               what=f"{count} requests")  # fmt: skip
    writing = [
        p for p, path in zip(among, outputs, strict=True) if path.exists() and path.stat().st_size
    ]
    return (writing or among)[0]


def _lines(path: Path) -> list[dict[str, Any]]:
    items = []
    for line in path.read_text().splitlines() if path.exists() else ():
        try:
            items.append(json.loads(line))
        except ValueError:  # the line a SIGKILL cut
            continue
    return items


def crawl_items(
    directory: Path, spider_file: Path, site: quotesite.QuoteSite
) -> list[dict[str, Any]]:
    """``hashcrawl crawl --spider spider_file`` on ``site``: its items."""
    output = directory / f"crawl-{spider_file.stem}.jsonl"
    subprocess.run(
        [sys.executable, "-m", "hashcrawl", "crawl", "--spider", str(spider_file), "-o",
         str(output), "--allow-net", site.host, "--delay", "0", "--state-dir",
         str(directory / f"state-{spider_file.stem}"), "-q"],
        cwd=REPO, check=True, timeout=DEADLINE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return _lines(output)
