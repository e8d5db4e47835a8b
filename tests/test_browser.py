"""Rendering with the real Chromium, sealed, on a loopback site of JavaScript pages,
judged from the server's log: what a render finds that a plain fetch does not, the
pace kept for every sub-request, a hostile page that reaches nothing, and no browser
left behind on any exit path (a SIGKILLed worker included).

Skipped, with the reason, where no Chromium is installed (``scripts/test`` installs
Debian's where it can: on CI they run).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

import hashcrawl
from hashcrawl import BrowserError, HttpxFetcher, Request
from hashcrawl._browser._pace import HostPace
from hashcrawl._browser._process import (
    NAMES,
    PROFILE_PREFIX,
    Seal,
    available_seal,
    group_pss_mib,
    sweep_leftovers,
)
from hashcrawl._browser._reach import Reach
from hashcrawl._browser._render import Renderer
from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, crawl_in_process, fast_settings, new_crawl_name
from testing.jssite import PAGES, SERVER_ITEMS, STEPS, JsSite, Listener

CHROMIUM = next((name for name in NAMES if shutil.which(name)), None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (scripts/test installs it)"),
]
DELAY = 0.25
TOLERANCE = 0.01  # the server's clock reads arrivals a little after the worker sends


#: Set in this process's environment: each browser it starts, and all their helpers,
#: inherit it, so the check below counts only theirs (tests elsewhere may run browsers).
MARK = ("HASHCRAWL_BROWSER_TEST", f"{os.getpid()}-{uuid.uuid4().hex}")


def live_chromium() -> set[int]:
    """The pids of the Chromium processes alive that this module's tests started (by
    their environment; zombies left out)."""
    found = set()
    mark = f"\0{MARK[0]}={MARK[1]}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, state = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2]
        if name.startswith("chromium") and state != "Z" and mark in b"\0" + _environ(entry):
            found.add(int(entry.name))
    return found


async def ended(pids: set[int]) -> set[int]:
    """Await the end of each of ``pids`` (10 s at most each); those still alive."""
    alive = set()
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            with trio.move_on_after(10):
                await trio.lowlevel.wait_readable(fd)
                continue
            alive.add(pid)
        finally:
            os.close(fd)
    return alive


def _environ(entry: Path) -> bytes:
    try:
        return (entry / "environ").read_bytes()
    except OSError:
        return b""


def group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.fixture(scope="module", autouse=True)
def no_browser_left() -> Iterator[None]:
    """After this module's tests, no Chromium they started is alive (``pgrep chromium``)."""
    os.environ[MARK[0]] = MARK[1]
    try:
        yield
        assert trio.run(ended, live_chromium()) == set()
    finally:
        del os.environ[MARK[0]]


class JsSpider(hashcrawl.Spider):
    """Items are the page's ``li.item`` texts; every link is followed, rendered with the
    page's steps when the spider renders."""

    render = False

    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        path = urlsplit(response.url).path
        for name in response.css("li.item::text").getall():
            yield {"page": path, "item": name}
        for href in response.css("a::attr(href)").getall():
            steps = STEPS.get(href, []) if self.render else []
            yield response.follow(href, render=self.render, steps=steps)


class RenderingSpider(JsSpider):
    render = True


def crawl_of(spider: type[JsSpider], server: RedisServer, directory: Path, **given: Any) -> Any:
    """The spider's crawl of a fresh site by two workers: (items, the server's log)."""
    crew = Crew(server.url, new_crawl_name(), directory)
    settings = fast_settings(spider=spider, delay=DELAY, max_attempts=1, idle=1.0, **given)
    with JsSite() as site:
        trio.run(crawl_in_process, crew, [settings, settings], [site.root + "/"])
        log = list(site.log)
    return crew.items(), log


@pytest.fixture(scope="module")
def crawls(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("browser")
    return {
        "rendered": crawl_of(RenderingSpider, shared_redis, directory, render=True),
        "plain": crawl_of(JsSpider, shared_redis, directory),
    }


def items_by_page(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for item in items:
        found.setdefault(item["page"], []).append(item["item"])
    return {page: sorted(names) for page, names in found.items()}


def test_two_rendering_workers_find_every_item_the_scripts_write(crawls: Any) -> None:
    """Rendered with steps: each page holds what its scripts, its "Load more" and its
    infinite scroll add, and the links a script wrote were crawled."""
    items, log = crawls["rendered"]
    assert items_by_page(items) == {page: sorted(names) for page, names in PAGES.items()}
    paths = [seen.path for seen in log]
    assert {"/p/1", "/p/2", "/p/3", "/app.js", "/api/more"} <= set(paths)
    assert sum(path.startswith("/api/scroll") for path in paths) == 2


def test_without_rendering_only_the_servers_items_are_found(crawls: Any) -> None:
    """The same crawl unrendered finds what the server wrote, and no script ran."""
    items, log = crawls["plain"]
    assert items_by_page(items) == {p: sorted(n) for p, n in SERVER_ITEMS.items() if n}
    assert not any(seen.path.startswith(("/p/", "/api/", "/app.js")) for seen in log)


def test_every_request_a_rendered_page_made_kept_the_hosts_delay(crawls: Any) -> None:
    """Documents, scripts and fetches of the pages alike: arrivals --delay apart."""
    _, log = crawls["rendered"]
    stamps = sorted(seen.at for seen in log)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(gaps) > 10
    assert [gap for gap in gaps if gap < DELAY - TOLERANCE] == []


@pytest.fixture
async def renderer() -> AsyncIterator[Renderer]:
    """A renderer on its own, whose fetcher may reach only 127.0.0.2."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    async with Renderer.open(fetcher, tabs=2, render_timeout=3, pace=HostPace()) as rendering:
        yield rendering
    await fetcher.aclose()


def test_the_browser_is_sealed_in_an_empty_network_namespace_here() -> None:
    """Where this runs (as CI does), the kernel lets the seal be a namespace."""
    assert available_seal() is Seal.NAMESPACE


async def test_a_hostile_page_reaches_nothing_and_the_browser_lives_on(
    renderer: Renderer,
) -> None:
    """WebSocket, beacon, EventSource, fetch, preconnect, iframe, image and STUN towards
    another loopback address, file:// twice, a popup, a download and a dialog: no
    connection or datagram reaches the listener; then a ``while (true)`` page is ended at
    its timeout, and the same browser renders the next page."""
    with Listener() as listener, JsSite(out=listener.address) as site:
        hostile = await renderer.fetch(Request(site.root + "/hostile", render=True))
        with pytest.raises(BrowserError, match="render timeout"):
            await renderer.fetch(Request(site.root + "/spin", render=True))
        after = await renderer.fetch(Request(site.root + "/script", render=True))
    assert listener.heard == []
    assert hostile.css("#done::text").get() == "hostile"
    assert hostile.render is not None
    refused = {url.split("/", 3)[3] for url, why in hostile.render.requests if "refused" in why}
    assert {"frame", "fetch", "beacon", "img.png"} <= refused
    assert after.css("li.item::text").getall() == PAGES["/script"]
    assert renderer.tabs.starts == 1


async def test_under_the_proxy_seal_too_a_hostile_page_reaches_nothing() -> None:
    """Where no namespace can be made, the dead proxy with no bypass and no UDP outside
    it closes the same ways out (measured: WebSocket, preconnect, STUN)."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    with Listener() as listener, JsSite(out=listener.address) as site:
        async with Renderer.open(fetcher, seal=Seal.PROXY, render_timeout=5) as renderer:
            hostile = await renderer.fetch(Request(site.root + "/hostile", render=True))
            assert renderer.tabs.browser is not None and renderer.tabs.browser.seal is Seal.PROXY
    await fetcher.aclose()
    assert listener.heard == []
    assert hostile.css("#done::text").get() == "hostile"


async def test_a_memory_bomb_crashes_its_renderer_not_the_browser() -> None:
    """Under the heap cap a page that hoards memory fails (its renderer dies) in bounded
    time, and the same browser renders the next page."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    with JsSite() as site:
        async with Renderer.open(fetcher, heap_mib=64, render_timeout=20) as renderer:
            with pytest.raises(BrowserError, match="crashed"):
                await renderer.fetch(Request(site.root + "/bomb", render=True))
            after = await renderer.fetch(Request(site.root + "/script", render=True))
            starts = renderer.tabs.starts
    await fetcher.aclose()
    assert after.css("li.item::text").getall() == PAGES["/script"]
    assert starts == 1


async def test_a_browser_that_dies_is_started_again_for_the_next_page(renderer: Renderer) -> None:
    """SIGKILL of the browser fails no later page: the next one starts a new browser."""
    with JsSite() as site:
        await renderer.fetch(Request(site.root + "/script", render=True))
        assert renderer.tabs.browser is not None
        os.kill(renderer.tabs.browser.pid, signal.SIGKILL)
        assert await ended({renderer.tabs.browser.pid}) == set()
        again = await renderer.fetch(
            Request(site.root + "/more", render=True, steps=STEPS["/more"])
        )
    assert again.css("li.item::text").getall() == PAGES["/more"]
    assert renderer.tabs.starts == 2


async def test_the_hosts_cookies_seed_the_page_and_what_it_sets_comes_back(
    renderer: Renderer,
) -> None:
    """The worker's cookie for the host goes with the page's own requests; the cookie
    the page sets by script comes back as a Set-Cookie of the response (for the jar)."""
    with JsSite() as site:
        request = Request(
            site.root + "/login",
            render=True,
            headers={"Cookie": "jar=from-worker"},
            steps=[{"wait_for": "#who:not(:empty)"}],
        )
        page = await renderer.fetch(request)
        api = [seen.cookie for seen in site.log if seen.path == "/api/whoami"]
    assert page.css("#who::text").get() == "you"
    assert len(api) == 1 and {"jar=from-worker", "session=by-script"} <= set(api[0].split("; "))
    back = {line.split(";")[0] for line in page.headers.get_list("set-cookie")}
    assert {"jar=from-worker", "session=by-script"} <= back


async def test_a_page_that_does_not_ask_is_fetched_without_the_browser(renderer: Renderer) -> None:
    """A plain request passes through: the browser is not even started."""
    with JsSite() as site:
        plain = await renderer.fetch(Request(site.root + "/script"))
    assert plain.css("li.item::text").getall() == [] and plain.render is None
    assert renderer.tabs.starts == 0


async def test_form_steps_upload_capture_and_call_act_in_the_real_page(tmp_path: Path) -> None:
    """fill and press reach the page's own key handler, an upload from the upload
    directory reaches its file input, a screenshot is a PNG and a pdf a PDF, and a
    call's method read the live page: all in ``response.render.results``, in order."""
    (tmp_path / "cv.txt").write_text("my cv")

    def title_of(page: Any) -> str:
        page.wait_for("#typed:not(:empty)")
        return str(page.evaluate("document.title")) + " at " + page.url.rsplit("/", 1)[1]

    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    reach = Reach(upload_dir=str(tmp_path), method={"title_of": title_of}.get)
    steps = [
        {"fill": "#q", "value": 'shoes"<b>'},
        {"press": "Enter", "selector": "#q"},
        {"set_input_files": "#f", "files": ["cv.txt"]},
        {"wait_for": "#file:not(:empty)", "timeout": 5},
        {"screenshot": "viewport"},
        {"pdf": "a4"},
        {"call": "title_of"},
    ]
    with JsSite() as site:
        async with Renderer.open(fetcher, render_timeout=20, reach=reach) as renderer:
            page = await renderer.fetch(Request(site.root + "/form", render=True, steps=steps))
    await fetcher.aclose()
    assert page.css("#typed::text").get() == 'shoes"<b> entered'
    assert page.css("#file::text").get() == "cv.txt:my cv"
    assert page.render is not None
    shot, pdf, called = page.render.results
    assert shot.startswith(b"\x89PNG\r\n") and pdf.startswith(b"%PDF-")
    assert called == "form at form"


async def test_a_page_whose_load_never_ends_is_cut_at_the_timeout_and_frees_its_slot() -> None:
    """A script that never arrives keeps the load from ending: the render timeout closes
    its tab, and with one tab the next page still renders (the slot came back)."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=60)
    with JsSite() as site:
        async with Renderer.open(fetcher, tabs=1, render_timeout=2) as renderer:
            with pytest.raises(BrowserError, match="render timeout"):
                await renderer.fetch(Request(site.root + "/never", render=True))
            with pytest.raises(BrowserError, match="render timeout"):
                await renderer.fetch(Request(site.root + "/spin", render=True))
            after = await renderer.fetch(Request(site.root + "/script", render=True))
            starts = renderer.tabs.starts
    await fetcher.aclose()
    assert after.css("li.item::text").getall() == PAGES["/script"]
    assert starts == 1


async def test_a_browser_over_its_memory_bound_is_drained_and_restarted_losing_no_page() -> None:
    """A page keeps 300 MiB alive: the browser's PSS passes --browser-max-mib, so no new
    page goes to it, the pages in it end, and a new browser renders the next ones; every
    page, before and after, is rendered whole. (The page's load is held until the bound
    is seen passed: a page that grew and ended within one measure's interval would be
    cleared before it was measured.)"""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    rendered: list[list[str]] = []
    with JsSite() as site:
        async with Renderer.open(fetcher, tabs=2, render_timeout=30) as renderer:

            async def render(path: str) -> None:
                page = await renderer.fetch(Request(site.root + path, render=True))
                rendered.append(page.css("li.item::text").getall() or page.css("p::text").getall())

            await render("/script")
            browser = renderer.tabs.browser
            assert browser is not None
            baseline = await trio.to_thread.run_sync(group_pss_mib, browser.pid)
            renderer.tabs.max_mib = baseline + 150
            async with trio.open_nursery() as nursery:
                for path in ("/grow?mib=300&held=1", "/script", "/script"):
                    nursery.start_soon(render, path)
                with trio.fail_after(25):  # within the render timeout: the page is held
                    await renderer.tabs.over.wait()
                site.release.set()
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(render, "/script")
            tabs = renderer.tabs
            assert tabs.browser is not None
            after = await trio.to_thread.run_sync(group_pss_mib, tabs.browser.pid)
    await fetcher.aclose()
    assert sorted(map(tuple, rendered)) == sorted([("300",), *[tuple(PAGES["/script"])] * 6])
    assert (tabs.starts, tabs.memory_restarts) == (2, 1)
    assert after < baseline + 150  # the new browser, three pages in, is under the bound


async def test_pages_in_background_tabs_scroll_as_the_one_in_front_does() -> None:
    """Four infinite scrolls at once, one per tab, each grown by its two scrolls (a
    background tab, given no animation frames, would fire no scroll event)."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=5)
    found: list[list[str]] = []
    with JsSite() as site:
        async with Renderer.open(fetcher, tabs=4, render_timeout=20) as renderer:

            async def scroll() -> None:
                request = Request(site.root + "/scroll", render=True, steps=STEPS["/scroll"])
                found.append((await renderer.fetch(request)).css("li.item::text").getall())

            for _ in range(2):  # new tabs, then the same tabs reused
                async with trio.open_nursery() as nursery:
                    for _ in range(4):
                        nursery.start_soon(scroll)
    await fetcher.aclose()
    assert found == [PAGES["/scroll"]] * 8


async def test_a_scroll_waits_for_the_request_it_set_off_however_slow_it_is() -> None:
    """Each of two scrolls sets off a fetch the server answers after 1.5 s: each scroll
    waits for it (no fixed wait, no wait_for), so the page holds both new items."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=10)
    with JsSite() as site:
        async with Renderer.open(fetcher, tabs=1, render_timeout=20) as renderer:
            request = Request(site.root + "/slow-scroll", render=True, steps=STEPS["/scroll"])
            page = await renderer.fetch(request)
    await fetcher.aclose()
    assert STEPS["/scroll"] == [{"scroll": "end", "times": 2}]
    assert page.css("li.item::text").getall() == PAGES["/scroll"]


async def test_a_tab_given_back_is_left_on_a_blank_page_with_its_memory_freed() -> None:
    """Once a page is rendered its tab leaves it for about:blank before the next page may
    take it: the page's scripts and heap (64 MiB kept alive by script) are gone."""
    fetcher = HttpxFetcher(allow_nets=["127.0.0.2/32"], timeout=10)
    with JsSite() as site:
        async with Renderer.open(fetcher, tabs=1, render_timeout=20) as renderer:
            page = await renderer.fetch(Request(site.root + "/grow?mib=64", render=True))
            tab = await renderer.tabs.take()  # the one tab: free once it was cleared
            try:
                left = await tab.connection.send(
                    "Runtime.evaluate",
                    {"expression": "[location.href, typeof window.kept]", "returnByValue": True},
                    tab.session,
                )
                heap = await tab.connection.send("Runtime.getHeapUsage", {}, tab.session)
            finally:
                await renderer.tabs.give_back(tab)
    await fetcher.aclose()
    assert page.css("#grown::text").get() == "64"
    assert left["result"]["value"] == ["about:blank", "undefined"]
    assert heap["usedSize"] < 16 * 1024 * 1024


KILLED = """
import sys, trio
from hashcrawl import HttpxFetcher, Request
from hashcrawl._browser._reach import Reach
from hashcrawl._browser._render import Renderer

async def main():
    async with Renderer.open(HttpxFetcher(allow_nets=["127.0.0.2/32"])) as renderer:
        await renderer.fetch(Request(sys.argv[1], render=True))
        print(renderer.tabs.browser.pid, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_a_sigkilled_worker_leaves_no_browser(browser_tmp: Path) -> None:
    """The worker's death ends its browser and all its helpers (the death signal); the
    profile it leaves is removed by the next start. (Its temporary directory is the
    test's own, ``browser_tmp``: another test's browser start would sweep it first.)"""
    with JsSite() as site:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(KILLED), site.root + "/script"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "TMPDIR": str(browser_tmp)},
        )
        assert child.stdout is not None
        line = await trio.to_thread.run_sync(child.stdout.readline)
        browser = int(line)
        before = {pid for pid in live_chromium() if group_of(pid) == browser}
        child.send_signal(signal.SIGKILL)
        await trio.to_thread.run_sync(child.wait)
        child.stdout.close()
    assert browser in before
    assert await ended(before) == set()
    # Its profile outlived it; the next start (any worker's) removes it.
    left = list(browser_tmp.glob(f"{PROFILE_PREFIX}{child.pid}-*"))
    assert len(left) == 1
    assert str(left[0]) in sweep_leftovers(str(browser_tmp))
    assert not left[0].exists()
