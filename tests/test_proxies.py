"""Tests for proxies: the sticky choice of a pool's proxy (``_core._proxies``), the fetcher
through real and hostile proxies (``_web._proxied``), and a worker given hostile queue
entries that name proxies."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from hypothesis import given
from hypothesis import strategies as st

from hashcrawl import ConfigError, FetchError, HttpxFetcher, Request, Response
from hashcrawl._cli._flagset import read_flags, write_flags
from hashcrawl._core._entry import BadEntry, Entry
from hashcrawl._core._proxies import Proxy, ProxyChoice, stable_index
from hashcrawl._core._settings import Settings
from hashcrawl._exceptions import Refused
from hashcrawl._run._queue import submit_entries
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from testing.fleet import Crew, fast_settings, host, make_site, page, status_of
from testing.proxies import Tinyproxy, have_tinyproxy
from testing.proxy_run import run_proxied
from testing.rawserver import RawServer, response
from testing.testsite import SITE_NETS, SiteServer

PASSWORD = "s3cr3t-pw"
needs_tinyproxy = pytest.mark.skipif(not have_tinyproxy(), reason="tinyproxy is not installed")

# -- the choice: sticky, the same everywhere, moved once per failure ---------------------------


@given(st.text(min_size=1, max_size=50), st.integers(1, 8))
def test_a_host_goes_through_the_same_proxy_in_every_worker(host: str, size: int) -> None:
    """Two workers' choices (no failures) put a host on the same proxy of the pool."""
    assert (
        ProxyChoice(size).index(host) == ProxyChoice(size).index(host) == stable_index(host, size)
    )
    assert 0 <= stable_index(host, size) < size


def test_a_failure_moves_the_host_once_to_the_next_proxy() -> None:
    """A failure through the host's proxy moves it on by one; a late failure through the
    proxy it left (a request that was in flight) moves it no further."""
    choice = ProxyChoice(3)
    first = choice.index("a.example")
    after = choice.failed("a.example", first)
    assert after == (first + 1) % 3
    assert choice.failed("a.example", first) == after
    assert choice.index("b.example") == stable_index("b.example", 3)


def test_hosts_spread_over_the_pool() -> None:
    """Fifty hosts over two proxies: each proxy gets some."""
    counts = [0, 0]
    for n in range(50):
        counts[stable_index(f"127.0.0.{n + 2}:8000", 2)] += 1
    assert min(counts) >= 10, counts


# -- credentials and malformed proxies: one line, no password ------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://user:{PASSWORD}@proxy:21",
        f"http://user:{PASSWORD}@proxy:99999",
        f"http://user:{PASSWORD}@proxy:8080/path",
        f"http://user:{PASSWORD}@:8080",
        "http://prøxy:8080",
    ],
)
def test_a_bad_proxy_setting_is_one_line_without_its_password(url: str) -> None:
    """--proxy refuses what is not http(s)://host:port, naming the flag, never the password."""
    with pytest.raises(ConfigError) as refused:
        Settings(proxies=[url])
    message = str(refused.value)
    assert message.startswith("--proxy: ") and "\n" not in message
    assert PASSWORD not in message


def test_proxy_credentials_stay_out_of_reprs_and_child_command_lines() -> None:
    """Like --header, a proxy's URL is in no repr and no child's argv."""
    settings = Settings(proxies=[f"http://user:{PASSWORD}@proxy.example:3128"])
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in " ".join(write_flags(settings))
    assert PASSWORD not in repr(Proxy.parse(settings.proxies[0]))


def test_a_crawls_children_get_the_proxies_through_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``crawl`` hands --proxy to its workers in $HASHCRAWL_PROXIES, not argv; a child
    reads back the same settings."""
    import argparse

    from hashcrawl._cli._flagset import add_flags
    from hashcrawl._cli._workers import _headers_env

    settings = Settings(proxies=[f"http://u:{PASSWORD}@p.example:3128"], proxy_retry_status=[429])
    parser = argparse.ArgumentParser()
    add_flags(parser)
    for name, value in _headers_env(settings).items():
        monkeypatch.setenv(name, value)
    assert PASSWORD not in " ".join(write_flags(settings))
    assert read_flags(parser.parse_args(write_flags(settings))) == settings


def test_a_requests_proxy_with_credentials_never_reaches_the_queue() -> None:
    """A Request (or meta['proxy']) naming a proxy with credentials is refused as it is
    made an entry: the queue in Redis would hold them."""
    for request in (
        Request("http://a.example/", proxy=f"http://u:{PASSWORD}@p.example:3128"),
        Request("http://a.example/", meta={"proxy": f"http://u:{PASSWORD}@p.example:3128"}),
    ):
        with pytest.raises(
            ConfigError, match=re.escape("--proxy http://p.example:3128")
        ) as refused:
            request.to_entry("http://a.example/", 0)
        assert PASSWORD not in str(refused.value)


def test_a_requests_proxy_travels_in_its_entry() -> None:
    """Request(proxy=...) is written to the entry and read back as the request's proxy."""
    entry = Request("http://a.example/", proxy="http://p.example:3128").to_entry("http://a/", 0)
    assert entry is not None
    again = Request.from_entry(Entry.decode(entry.encode()))
    assert again.asked_proxy == "http://p.example:3128"


@pytest.mark.parametrize("field", ["5", "null", '["http://p:1"]', '"' + "x" * 3000 + '"'])
def test_an_entry_proxy_that_is_not_a_short_text_is_a_bad_entry(field: str) -> None:
    """A hand-written entry whose proxy is not text up to 2048 characters is unread."""
    with pytest.raises(BadEntry, match="entry proxy"):
        Entry.decode('{"u":"http://a.example/","P":' + field + "}")


# -- the fetcher through hostile proxies: a FetchError or Refused, bounded ------------------


async def fetch_through(
    answer: Callable[[str], Iterable[bytes | float]],
    url: str = "http://127.0.0.3:9/x",
    **options: Any,
) -> tuple[Response | BaseException, RawServer]:
    """Fetch ``url`` through a RawServer on 127.0.0.2 acting as the proxy: the answer or error."""
    with RawServer(answer) as proxy:
        fetcher = HttpxFetcher(
            allow_nets=SITE_NETS, timeout=2.0, **{"proxies": [proxy.url()], **options}
        )
        try:
            return await fetcher.fetch(Request(url)), proxy
        except Exception as exc:  # what the worker would be handed
            return exc, proxy
        finally:
            await fetcher.aclose()


async def test_a_proxy_answering_garbage_fails_the_fetch_and_moves_the_host() -> None:
    """Bytes that are not HTTP: a FetchError naming the proxy, nothing else raised."""
    got, proxy = await fetch_through(lambda path: [b"\x00\xffnot http at all\r\n\r\n"])
    assert isinstance(got, FetchError) and not isinstance(got, Refused)
    assert f"through proxy http://127.0.0.2:{proxy.port}" in str(got)
    assert proxy.paths == ["http://127.0.0.3:9/x"]  # the request went to the proxy, as a proxy's


async def test_a_hanging_proxy_fails_the_fetch_at_the_timeout() -> None:
    """A proxy that never answers costs the fetch's timeout, then a FetchError."""
    with trio.fail_after(30):  # a bound on the test, not a figure judged
        got, _ = await fetch_through(lambda path: [3600.0])
    assert isinstance(got, FetchError)
    assert "no whole answer within the timeout (2 s)" in str(got)


async def test_a_proxy_asking_for_credentials_forever_fails_each_fetch() -> None:
    """407 on every try: each fetch fails (to be retried, then dead-lettered), said so."""
    got, _ = await fetch_through(lambda path: response(407, Proxy_Authenticate='Basic realm="x"'))
    assert isinstance(got, FetchError) and "status 407" in str(got)


async def test_a_listed_status_moves_the_host_to_the_next_proxy() -> None:
    """With --proxy-retry-status 503, a 503 through the host's proxy fails the fetch and
    moves the host to the pool's next proxy, which then answers."""
    with (
        RawServer(lambda path: response(503)) as bad,
        RawServer(lambda path: response(200, b"ok"), host="127.0.0.4") as good,
    ):
        urls = [bad.url(), good.url()]
        target = next(
            f"http://h{n}.example/" for n in range(100) if stable_index(f"h{n}.example", 2) == 0
        )
        fetcher = HttpxFetcher(allow_nets=SITE_NETS, proxies=urls, proxy_retry_status=[503])
        try:
            with pytest.raises(FetchError, match="status 503") as failed:
                await fetcher.fetch(Request(target))
            assert f"goes through {good.url().rstrip('/')} next" in str(failed.value)
            answer = await fetcher.fetch(Request(target))
        finally:
            await fetcher.aclose()
    assert (answer.status, answer.body) == (200, b"ok")
    assert (bad.paths, good.paths) == ([target], [target])


async def test_a_requests_own_proxy_is_refused_unless_allowed() -> None:
    """Without allow_request_proxy, a request naming a proxy is refused before anything is
    sent, in one line naming the flag."""
    with RawServer(lambda path: response(200)) as proxy:
        fetcher = HttpxFetcher(allow_nets=SITE_NETS)
        try:
            with pytest.raises(Refused, match="only with --allow-request-proxy"):
                await fetcher.fetch(Request("http://127.0.0.3:9/", proxy=proxy.url()))
        finally:
            await fetcher.aclose()
    assert proxy.paths == []


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ("http://10.1.2.3:3128", "proxy http://10.1.2.3:3128: 10.1.2.3 is not a public address"),
        ("http://[::ffff:169.254.169.254]:80", "is not a public address"),
        ("gopher://x", "expected http://host:port"),
        ("http://x:70000", "not a URL with a valid port"),
        ("http://u:pw@p.example:1", "carries credentials"),
        ("\x00" * 5000, "expected an ASCII URL"),
    ],
)
async def test_a_queue_entrys_hostile_proxy_is_refused_in_one_line(asked: str, said: str) -> None:
    """A proxy read from the queue that is private, malformed or carries credentials is
    Refused (not retried), one line, with allow_request_proxy."""
    fetcher = HttpxFetcher(allow_nets=SITE_NETS, allow_request_proxy=True, timeout=2.0)
    entry = Entry(url="http://127.0.0.3:9/", proxy=asked)
    try:
        with pytest.raises(Refused) as refused:
            await fetcher.fetch(Request.from_entry(entry))
    finally:
        await fetcher.aclose()
    assert said in str(refused.value) and "\n" not in str(refused.value)


# -- a real forward proxy: tinyproxy on loopback ----------------------------------------------


@needs_tinyproxy
async def test_credentials_go_to_the_proxy_and_never_to_the_site(tmp_path: Path) -> None:
    """A proxy asking for Basic credentials takes the pool's; the site sees no
    Proxy-Authorization; a request naming the same proxy without them is sent with them."""
    ok = lambda path: response(200, b"hi")  # noqa: E731
    with (
        RawServer(ok) as one,
        RawServer(ok, host="127.0.0.3") as two,
        Tinyproxy(tmp_path, credentials=("user", PASSWORD)) as proxy,
    ):
        with_credentials = proxy.url.replace("http://", f"http://user:{PASSWORD}@")
        fetcher = HttpxFetcher(
            allow_nets=[*SITE_NETS, "127.0.0.1"], proxies=[with_credentials],
            allow_request_proxy=True,
        )  # fmt: skip
        try:
            plain = await fetcher.fetch(Request(one.url("/a")))
            own = await fetcher.fetch(Request(two.url("/b"), proxy=proxy.url))
        finally:
            await fetcher.aclose()
        logged = proxy.requests()
    assert (plain.status, own.status) == (200, 200)
    assert logged == [("GET", one.url("/a")), ("GET", two.url("/b"))]
    heads = [*one.heads, *two.heads]
    assert len(heads) == 2 and not any(b"proxy-authorization" in h.lower() for h in heads)


@needs_tinyproxy
async def test_https_goes_through_a_connect_tunnel_verified_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https page through the proxy: a CONNECT in the proxy's log, the site's
    certificate checked by the worker (TLS end to end), the answer read."""
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.2").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # httpx's TLS context reads it
    with (
        RawServer(lambda path: response(200, b"tunnelled"), tls=context) as site,
        Tinyproxy(tmp_path) as proxy,
    ):
        fetcher = HttpxFetcher(allow_nets=[*SITE_NETS, "127.0.0.1"], proxies=[proxy.url])
        try:
            answer = await fetcher.fetch(Request(site.url("/s")))
        finally:
            await fetcher.aclose()
        logged = proxy.requests()
    assert (answer.status, answer.body) == (200, b"tunnelled")
    assert logged == [("CONNECT", f"127.0.0.2:{site.port}")]
    assert site.paths == ["/s"]


@needs_tinyproxy
async def test_a_proxy_at_a_refused_address_is_not_connected_to(tmp_path: Path) -> None:
    """The pool's proxy on 127.0.0.1, which the address rules do not allow: Refused,
    naming the proxy and the flags; the proxy logs no request."""
    with Tinyproxy(tmp_path) as proxy:
        fetcher = HttpxFetcher(allow_nets=SITE_NETS, proxies=[proxy.url])
        try:
            with pytest.raises(Refused, match=f"proxy {proxy.url}: 127.0.0.1 is not a public"):
                await fetcher.fetch(Request("http://127.0.0.3:9/"))
        finally:
            await fetcher.aclose()
        assert proxy.requests() == []


# -- a worker given hostile entries: no raise, each refused and counted ----------------------


async def test_a_worker_refuses_hostile_proxy_entries_and_fetches_the_rest(
    redis_url: str, crawl_name: str, tmp_path: Path
) -> None:
    """Entries naming a malformed, a private, or (without the flag) any proxy are dead
    with their reason; the worker runs on and fetches the plain page."""
    site = make_site({(host(0), "/"): page("root")})
    with SiteServer(site) as server:
        root = server.site.root
        crew = Crew(redis_url, crawl_name, tmp_path)
        entries = [
            Entry(url=root),
            Entry(url=root + "?a", proxy="http://10.0.0.1:3128"),
            Entry(url=root + "?b", proxy="not a url"),
            Entry(url=root + "?c", proxy=f"http://u:{PASSWORD}@127.0.0.5:1"),
        ]
        store = Store(RedisURL.parse(redis_url), crawl_name)
        assert submit_entries(store, entries) == 4
        settings = fast_settings(max_attempts=1, allow_request_proxy=True, idle=0.3)
        with trio.fail_after(60):
            await crew.run(crew.hire(settings))
        done = status_of(redis_url, crawl_name)
    assert (done["fetched"], done["dead"]) == (1, 3), done


# -- the acceptance run, small: two workers, two proxies, one stopped mid-crawl --------------


@pytest.mark.slow
@needs_tinyproxy
def test_a_stopped_proxys_hosts_move_and_nothing_is_missed_or_impolite(tmp_path: Path) -> None:
    """Two worker processes through two tinyproxies, the first stopped a third of the way:
    every page fetched, no gap under the delay (site's log), every request in a proxy's
    log, and the stopped proxy's hosts fetched afterwards through the other."""
    verdict = run_proxied(
        pages=150, hosts=12, workdir=tmp_path, delay=0.1, lease=4.0, idle=1.0, timeout=240.0,
        progress=lambda line: None,
    )  # fmt: skip
    assert verdict.failures() == [], verdict.lines()
    assert verdict.site.missing == () and verdict.site.too_close == 0
    assert verdict.direct == 0 and all(verdict.through)
    assert verdict.moved_hosts > 0
