"""Tests of the generated test site, its logging server and the judge."""

from __future__ import annotations

import http.client
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from testing.testsite import (
    ROBOTS_PATH,
    Request,
    Site,
    SiteServer,
    generate_site,
    judge,
    read_log,
)


@pytest.fixture(scope="module")
def site() -> Site:
    return generate_site(pages=100, hosts=5, seed=7, port=8123)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SiteServer]:
    site = generate_site(pages=100, hosts=5, seed=7, port=0)
    with SiteServer(site, log_path=tmp_path / "requests.jsonl") as server:
        yield server


def _html_pages(site: Site) -> set[str]:
    return {
        site.url(host, path)
        for (host, path), resource in site.resources.items()
        if resource.status == 200 and resource.content_type.startswith("text/html")
    }


def _urls_under(urls: set[str] | frozenset[str], prefix: str) -> set[str]:
    return {url for url in urls if urlsplit(url).path.startswith(prefix)}


def _request(site: Site, url: str, at: float) -> Request:
    parts = urlsplit(url)
    return Request(
        time=at,
        host=parts.hostname or "",
        port=site.port,
        path=parts.path,
        status=200,
        user_agent="test",
    )


# --- the site -----------------------------------------------------------------------------


def test_same_seed_generates_the_same_site() -> None:
    """Generation is deterministic for a seed and differs between seeds."""
    first, again = (generate_site(pages=100, hosts=5, seed=1, port=9000) for _ in range(2))
    other = generate_site(pages=100, hosts=5, seed=2, port=9000)
    assert first.resources == again.resources
    assert first.expected() == again.expected()
    assert first.resources != other.resources


def test_hosts_are_consecutive_loopback_addresses(site: Site) -> None:
    """Hosts are 127.0.0.2 onwards, and the root is the first host's /."""
    assert site.hosts == ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6")
    assert site.root == "http://127.0.0.2:8123/"


def test_expected_contains_the_root_and_every_allowed_page(site: Site) -> None:
    """Every HTML page robots.txt allows is reachable from the root."""
    allowed = {url for url in _html_pages(site) if not site.disallows(url)}
    assert site.root in site.expected()
    assert allowed <= site.expected()


def test_expected_excludes_forbidden_pages_and_robots_txt(site: Site) -> None:
    """Linked /private/ pages on guarded hosts are forbidden, never expected."""
    assert site.forbidden()
    assert not site.forbidden() & site.expected()
    assert all(site.disallows(url) for url in site.forbidden())
    assert _urls_under(site.forbidden(), "/private/") == site.forbidden()
    assert not _urls_under(site.expected(), ROBOTS_PATH)


def test_private_pages_on_unguarded_hosts_are_expected(site: Site) -> None:
    """/private/ is only off limits where robots.txt says so."""
    assert _urls_under(site.expected(), "/private/")


def test_expected_urls_are_canonical(site: Site) -> None:
    """Expected URLs have the site's port and no fragment."""
    prefixes = tuple(f"http://{host}:8123/" for host in site.hosts)
    assert all(url.startswith(prefixes) and "#" not in url for url in site.expected())


def test_redirects_dead_links_and_files_are_expected(site: Site) -> None:
    """Redirect sources, 404 links and non-HTML files are all fetched URLs."""
    expected = site.expected()
    statuses = {site.response_for(*_key(url))[0] for url in _urls_under(expected, "/r/")}
    assert statuses == {301, 302}
    assert _urls_under(expected, "/gone/")
    assert {site.response_for(*_key(url))[0] for url in _urls_under(expected, "/gone/")} == {404}
    types = {site.response_for(*_key(url))[1]["Content-Type"] for url in expected}
    assert {"application/pdf", "text/plain; charset=utf-8"} <= types


def test_redirect_targets_are_expected(site: Site) -> None:
    """Each redirect's target is fetched too."""
    for url in _urls_under(site.expected(), "/r/"):
        location = site.response_for(*_key(url))[1]["Location"]
        assert httpx.URL(url).join(location) in {httpx.URL(u) for u in site.expected()}


def test_links_come_in_every_spelling(site: Site) -> None:
    """Pages use relative, absolute, fragment, mailto, javascript links and <base href>."""
    bodies = "".join(site.response_for(*_key(url))[2].decode() for url in _html_pages(site))
    for spelling in (
        'href="../',
        'href="http://127.0.0.',
        'href="//127.0.0.',
        "#sec",
        "mailto:",
        "javascript:",
        "<base href=",
    ):
        assert spelling in bodies


def test_robots_policies_cover_every_kind(site: Site) -> None:
    """Some hosts disallow /private/, some lack robots.txt, one sets a small Crawl-delay."""
    statuses = [site.response_for(host, ROBOTS_PATH)[0] for host in site.hosts]
    assert 200 in statuses and 404 in statuses
    assert len(site.crawl_delays) == 1
    host = next(iter(site.crawl_delays))
    assert b"Crawl-delay: 0.05" in site.response_for(host, ROBOTS_PATH)[2]


def test_pages_are_small_with_unique_titles(site: Site) -> None:
    """Pages are 1-3 KB and no two share a title."""
    bodies = [site.response_for(*_key(url))[2] for url in _html_pages(site)]
    titles = [body.split(b"<title>")[1].split(b"</title>")[0] for body in bodies]
    assert len(set(titles)) == len(titles)
    assert all(900 < len(body) < 3500 for body in bodies)


def test_generate_site_needs_a_page_per_host() -> None:
    """Fewer pages than hosts is refused, naming the parameter."""
    with pytest.raises(ValueError, match="pages must be at least hosts"):
        generate_site(pages=3, hosts=5, seed=1, port=0)


def _key(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.path


# --- the server ---------------------------------------------------------------------------


def test_server_chooses_one_free_port_for_all_hosts(server: SiteServer) -> None:
    """A site generated with port 0 is served on a real port, shown by server.site."""
    assert server.site.port != 0
    assert server.site.root == f"http://127.0.0.2:{server.site.port}/"


def test_server_answers_every_expected_url_with_its_status(server: SiteServer) -> None:
    """Each expected URL gets the site's status, headers and body, with Content-Length."""
    site = server.site
    with httpx.Client(headers={"User-Agent": "judge-test"}) as client:
        for url in sorted(site.expected()):
            response = client.get(url)
            status, headers, body = site.response_for(*_key(url))
            assert (response.status_code, response.content) == (status, body)
            assert response.headers["Content-Length"] == str(len(body))
            assert response.headers.get("Location") == headers.get("Location")


def test_server_logs_every_request(server: SiteServer) -> None:
    """Robots.txt, pages, redirects and 404s are all logged with host, path, status and UA."""
    site = server.site
    urls = [site.url(host, ROBOTS_PATH) for host in site.hosts] + sorted(site.expected())
    with httpx.Client(headers={"User-Agent": "judge-test"}) as client:
        statuses = [client.get(url).status_code for url in urls]
    log = server.requests()
    assert [record.url for record in log] == urls
    assert [record.status for record in log] == statuses
    assert {record.user_agent for record in log} == {"judge-test"}
    assert all(a.time <= b.time for a, b in itertools.pairwise(log))


def test_server_appends_the_log_as_json_lines(server: SiteServer, tmp_path: Path) -> None:
    """The log file holds the same records as the in-memory log."""
    with httpx.Client() as client:
        client.get(server.site.root)
        client.get(server.site.url("127.0.0.3", ROBOTS_PATH))
    assert read_log(tmp_path / "requests.jsonl") == server.requests()
    assert len(server.requests()) == 2


def test_server_keeps_connections_alive(server: SiteServer) -> None:
    """Two requests travel over one HTTP/1.1 connection."""
    connection = http.client.HTTPConnection("127.0.0.2", server.site.port)
    try:
        for _ in range(2):
            connection.request("GET", "/")
            connection.getresponse().read()
            assert connection.sock is not None  # the server did not close it
    finally:
        connection.close()


def test_server_stops_while_a_client_holds_a_connection() -> None:
    """stop() ends idle keep-alive connections instead of waiting for the client."""
    site = generate_site(pages=10, hosts=2, seed=1, port=0)
    with httpx.Client() as client:
        with SiteServer(site) as server:
            client.get(server.site.root)
        assert server.wait_for_requests(1, timeout=0)


def test_wait_for_requests_returns_when_enough_are_logged(server: SiteServer) -> None:
    """wait_for_requests reports False before the count is reached and True after."""
    assert not server.wait_for_requests(1, timeout=0)
    with httpx.Client() as client:
        client.get(server.site.root)
    assert server.wait_for_requests(1, timeout=0)


# --- the judge ----------------------------------------------------------------------------


def test_judge_counts_duplicates_and_too_close_pairs(site: Site) -> None:
    """Repeats count beyond the first; robots.txt counts for spacing but not as a duplicate."""
    page = site.url("127.0.0.2", "/")
    robots = site.url("127.0.0.2", ROBOTS_PATH)
    log = [
        _request(site, robots, 0.0),
        _request(site, robots, 0.05),
        _request(site, page, 0.20),
        _request(site, page, 0.28),
        _request(site, page, 1.0),
        _request(site, site.url("127.0.0.3", "/"), 0.21),
    ]
    verdict = judge(site, log, [], delay=0.1)
    assert verdict.duplicates == 2
    assert verdict.too_close == 2
    assert verdict.min_gap["127.0.0.2"] == pytest.approx(0.05)
    assert "127.0.0.3" not in verdict.min_gap
    assert verdict.robots_fetches_per_host == 2


def test_judge_honours_a_crawl_delay_longer_than_the_delay(site: Site) -> None:
    """A gap that passes the crawl's delay but not the host's Crawl-delay is too close."""
    host = next(iter(site.crawl_delays))
    log = [_request(site, site.url(host, "/"), 0.0), _request(site, site.url(host, "/"), 0.03)]
    assert judge(site, log, [], delay=0.01).too_close == 1
    assert judge(site, log, [], delay=0.01, tolerance=0.03).too_close == 0


def test_judge_spots_a_forbidden_fetch(site: Site) -> None:
    """A request for a URL robots.txt disallows is reported."""
    forbidden = min(site.forbidden())
    verdict = judge(site, [_request(site, forbidden, 0.0)], [], delay=0.1)
    assert verdict.forbidden_fetched == (forbidden,)
    assert verdict.unexpected == (forbidden,)


def test_judge_passes_a_perfect_crawl(site: Site, tmp_path: Path) -> None:
    """Every expected URL requested once, spaced out, and written once: nothing to report."""
    urls = sorted(site.expected())
    log = [_request(site, url, float(n)) for n, url in enumerate(urls)]
    output = tmp_path / "items.jsonl"
    output.write_text("".join(json.dumps({"url": url, "status": 200}) + "\n" for url in urls))
    verdict = judge(site, log, [output, tmp_path / "never-written.jsonl"], delay=0.1)
    assert (verdict.expected, verdict.fetched, verdict.output_items) == (len(urls),) * 3
    assert verdict.missing == verdict.missing_from_output == verdict.forbidden_fetched == ()
    assert (verdict.duplicates, verdict.too_close, verdict.bad_output_lines) == (0, 0, 0)


def test_judge_reports_missing_urls_and_output(site: Site, tmp_path: Path) -> None:
    """An expected URL never requested, and one never written, are both named."""
    urls = sorted(site.expected())
    log = [_request(site, url, float(n)) for n, url in enumerate(urls[1:])]
    output = tmp_path / "items.jsonl"
    lines = [json.dumps({"url": url}) for url in urls[:-1]] + ['{"url": "http://cut']
    output.write_text("\n".join(lines))
    verdict = judge(site, log, [output], delay=0.1)
    assert verdict.missing == (urls[0],)
    assert verdict.missing_from_output == (urls[-1],)
    assert verdict.bad_output_lines == 1


def test_verdict_lines_name_each_figure(site: Site) -> None:
    """The human-readable lines carry every figure the practice run checks."""
    text = "\n".join(judge(site, [], [], delay=0.1).lines())
    for label in (
        "expected URLs",
        "missing",
        "duplicate",
        "too-close",
        "forbidden",
        "robots.txt",
        "output items",
        "missing from output",
    ):
        assert label in text


def test_logged_time_is_when_the_request_arrived(server: SiteServer) -> None:
    """A request's time falls between the client sending it and reading the answer."""
    connection = http.client.HTTPConnection("127.0.0.4", server.site.port)
    try:
        connection.connect()
        before = time.time()
        connection.request("GET", "/")
        connection.getresponse().read()
        after = time.time()
    finally:
        connection.close()
    (record,) = server.requests()
    assert before <= record.time <= after


def test_the_server_names_the_process_that_sent_each_request(tmp_path: Path) -> None:
    """With who=True each request is logged with its sender's pid (two child processes on
    one host: each request under its own child's pid, in the log file too); without it,
    none."""
    site = generate_site(pages=10, hosts=1, seed=7, port=0)
    fetch = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1]).read()"
    with SiteServer(site, log_path=tmp_path / "requests.jsonl", who=True) as server:
        children = [
            subprocess.Popen([sys.executable, "-c", fetch, server.site.root + path])
            for path in ("/", ROBOTS_PATH)
        ]
        assert [child.wait() for child in children] == [0, 0]
        logged = {request.path: request.pid for request in server.requests()}
    assert logged == {"/": children[0].pid, ROBOTS_PATH: children[1].pid}
    from_file = {request.path: request.pid for request in read_log(tmp_path / "requests.jsonl")}
    assert from_file == logged
    with SiteServer(site) as server:
        assert subprocess.run([sys.executable, "-c", fetch, server.site.root]).returncode == 0
        assert [request.pid for request in server.requests()] == [None]
