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

import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from hashcrawl._web._spider import Spider, load_spider
from testing import quotesite

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
    the git repository ``checkout`` (or its work tree, if it is not one).

    Raises:
        ValueError: no Python code block holds a ``class`` at the line named.
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
    done = subprocess.run(
        ["git", f"--git-dir={checkout}", "show", f"{SCRAPY_COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return done.stdout
    return (checkout / path).read_text()
