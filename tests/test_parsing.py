"""The default parse in a process of its own (``_web/_parsing``, off by default): the
same page as parsing on the loop gives, and a dead child costs nothing but the speed."""

from __future__ import annotations

import signal

import trio

from hashcrawl._web._html import parse_html
from hashcrawl._web._parsing import Parser

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
