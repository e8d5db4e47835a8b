"""The default parse of large pages in a process of its own (``_spiders/_parsing``): the
same page as parsing on the loop gives, small pages kept on the loop, on by default only
where there is a second core and while one is spare, and a dead child costs nothing but
the speed."""

from __future__ import annotations

import signal

import attrs
import trio

from hashcrawl._spiders._parsing import AWAY_BYTES, Parser, Spare, cpu_ticks, least_away
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


class Machine:
    """CPU ticks as /proc would count them on a machine of ``cores``, run by hand."""

    def __init__(self, cores: int = 2) -> None:
        self.cores, self.at, self.idle, self.total, self.child = cores, 0.0, 0, 0, 0

    def run(self, seconds: float, *, idle: float, child: float = 0.0) -> None:
        """``seconds`` pass with ``idle`` cores idle and the child on ``child`` of one."""
        self.at += seconds
        self.total += int(seconds * 100 * self.cores)
        self.idle += int(seconds * 100 * idle)
        self.child += int(seconds * 100 * child)

    def ticks(self, pid: int | None) -> tuple[int, int, int]:
        return self.idle, self.total, self.child if pid is not None else 0

    def spare(self, load: float = 0.0) -> Spare:
        return Spare(ticks=self.ticks, clock=lambda: self.at, cores=self.cores, load=lambda: load)


def test_pages_go_to_the_child_only_while_a_core_is_spare_for_it() -> None:
    """A quiet machine (a core idle, or the child busy on it) sends pages away; one busy
    with other work, where the child would wait for a core, keeps them on the loop until a
    core is free again. Between two looks (every SPARE_EVERY seconds) the answer holds."""
    machine = Machine(cores=2)
    spare = machine.spare(load=0.2)
    assert spare(None)  # no interval yet: the load average, under cores - 1
    machine.run(2.0, idle=0.9)
    assert spare(None)
    machine.run(2.0, idle=0.3, child=0.6)  # the child took the idle core: still spare
    assert spare(7)
    machine.run(2.0, idle=0.0, child=0.1)  # other work came: the child waits for a core
    assert not spare(7)
    machine.run(1.0, idle=1.5)  # within the interval, the answer holds
    assert not spare(7)
    machine.run(1.0, idle=1.5)
    assert spare(7)


def test_a_busy_machine_at_the_start_keeps_pages_on_the_loop() -> None:
    """Before the first interval the load average decides: at or over cores - 1, not."""
    machine = Machine(cores=2)
    assert not machine.spare(load=9.0)(None)
    assert machine.spare(load=0.5)(None)


def test_where_cpu_time_cannot_be_read_the_size_rule_alone_decides() -> None:
    spare = Spare(ticks=lambda pid: None, load=lambda: 99.0)
    assert spare(None) and spare(1)


def test_cpu_ticks_are_read_from_proc_for_this_machine_and_a_process() -> None:
    import os

    read = cpu_ticks(os.getpid())
    assert read is not None
    idle, total, own = read
    assert 0 <= idle <= total and own >= 0
    assert cpu_ticks(2**22 + 7) is None  # no such process


async def test_a_page_is_kept_on_the_loop_while_no_core_is_spare() -> None:
    """The parser asks ``spare`` (with the child's pid once it runs) for each large page."""
    asked: list[int | None] = []
    answers = [False, True]

    def spare(pid: int | None) -> bool:
        asked.append(pid)
        return answers[min(len(asked) - 1, 1)]

    parser = Parser(least=0, spare=spare)
    body = b"<a href='/x'>x</a>"
    headers = {"content-type": "text/html"}
    url = "http://a.example/"
    response = Response(url=url, status=200, headers=headers, body=body, request=Request(url))
    await parser.prepare(response)
    assert response._parsed == [] and parser._process is None
    again = attrs.evolve(response)
    await parser.prepare(again)
    assert len(again._parsed) == 1 and parser._process is not None
    assert parser.takes(again) and asked[-1] == parser._process.pid
