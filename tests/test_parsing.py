"""The default parse of large pages in a process of its own (``_spiders/_parsing``): the
same page as parsing on the loop gives, small pages kept on the loop, on by default only
where there is a second core, and a dead child costs nothing but the speed."""

from __future__ import annotations

import signal

import attrs
import trio

from hashcrawl._spiders._parsing import AWAY_BYTES, Parser, least_away
from hashcrawl._web._html import parse_html
from hashcrawl._web._models import Request, Response

PAGES = [
    (b"<title> A  page </title><a href='/x'>x</a><a href='y#f'>y</a><a href='/x'>again</a>", None),
    (b"<base href='http://b.example/dir/'><a href='z'>z</a><link rel=canonical href='/c'>", None),
    (
        "<title>caf\u00e9</title><a href='/\u00e9'>e</a>".encode("latin-1"),
        "text/html; charset=latin-1",
    ),
    (b"", None),
    (b"<a href='/1'>1</a><a href='/2'>2</a><a href='/3'>3</a>", None),
]


def fields(page):
    return (page.title, page.links, page.canonical, page.dropped, page.base)


async def test_pages_parsed_in_the_child_are_the_pages_parsed_here() -> None:
    """Title, links (resolved, unique, capped), canonical link, dropped count and base:
    as parse_html on the loop gives them."""
    parser = Parser()
    for max_links in (None, 2):
        for body, content_type in PAGES:
            url = "http://a.example/p/q.html"
            here = parse_html(body, url, content_type=content_type, max_links=max_links)
            there = await parser.parse(body, url, content_type, max_links)
            assert there is not None and fields(there) == fields(here)
    assert not parser.broken


async def test_many_pages_at_once_each_get_their_own_answer() -> None:
    parser = Parser()
    got: dict[int, tuple[str, ...]] = {}

    async def one(n: int) -> None:
        page = await parser.parse(f"<a href='/{n}'>x</a>".encode(), "http://a.example/", None, None)
        assert page is not None
        got[n] = page.links

    async with trio.open_nursery() as nursery:
        for n in range(50):
            nursery.start_soon(one, n)
    assert got == {n: (f"http://a.example/{n}",) for n in range(50)}


async def test_a_dead_child_leaves_the_pages_to_the_loop() -> None:
    """Killed, the child answers no more: parse returns None (the handler parses on the
    loop, as without it) and does not start another."""
    parser = Parser()
    assert await parser.parse(b"<a href='/x'>x</a>", "http://a.example/", None, None) is not None
    assert parser._process is not None
    parser._process.send_signal(signal.SIGKILL)
    with trio.fail_after(20):  # the reader task sees the pipe end and wakes the page
        assert await parser.parse(b"<a href='/y'>y</a>", "http://a.example/", None, None) is None
    assert parser.broken
    assert await parser.parse(b"<a href='/z'>z</a>", "http://a.example/", None, None) is None


def test_large_pages_go_to_the_child_by_default_where_a_second_core_is() -> None:
    """By default pages of AWAY_BYTES or more, with two cores or more; none on one core;
    the variable sends every page ("1") or none ("0"), whatever the cores."""
    assert least_away("", cores=2) == least_away("", cores=64) == AWAY_BYTES
    assert least_away("", cores=1) is None
    assert least_away("1", cores=1) == least_away("1", cores=8) == 0
    assert least_away("0", cores=8) is None


async def test_only_a_page_of_the_least_size_is_parsed_in_the_child() -> None:
    """A page one byte short of the least is left to the loop (and starts no child); one
    of the least is parsed there, as the loop would parse it."""
    parser = Parser(least=4096)
    link = b"<a href='/x'>x</a>"
    short = link + b" " * (4095 - len(link))
    url = "http://a.example/"
    headers = {"content-type": "text/html"}
    response = Response(url=url, status=200, headers=headers, body=short, request=Request(url))
    await parser.prepare(response)
    assert response._parsed == [] and parser._process is None
    whole = attrs.evolve(response, body=short + b" ")
    await parser.prepare(whole)
    assert [fields(page) for page in whole._parsed] == [fields(parse_html(whole.body, whole.url))]
