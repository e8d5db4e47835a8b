"""Full requests (method, headers, body, timeout, redirect limit) go through Redis to the
site as the spider wrote them; --header credentials reach the site and never Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

import hashcrawl
from hashcrawl._cli._flagset import read_flags, write_flags
from hashcrawl._core._entry import MAX_ENTRY_BYTES
from hashcrawl._exceptions import ConfigError
from hashcrawl._store._server import RedisServer
from testing.fleet import Crew, crawl_in_process, fast_settings, new_crawl_name
from testing.formsite import PASSWORD, TOKEN, USER, FormSite, Seen

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
REQUEST_TOKEN = "request-level-token"


class Shop(hashcrawl.Spider):
    def parse(self, response: hashcrawl.Response) -> Iterator[Any]:
        body = f"user={USER}&password={PASSWORD}"
        yield response.follow(
            "/login", method="POST", body=body, headers=FORM, callback="after_login"
        )

    def after_login(self, response: hashcrawl.Response) -> Iterator[Any]:
        for q in ("widget", "gadget", "widget"):  # the second widget search is a duplicate
            yield response.follow("/search", method="POST", body=f"q={q}", headers=FORM,
                                  callback="results")  # fmt: skip
        api = {"Accept": "application/json", "X-Api-Key": REQUEST_TOKEN}
        yield response.follow("/api/items?q=widget", headers=api, callback="api")
        yield response.follow("/private", callback="private")
        yield response.follow("/slow?s=2", timeout=0.3, headers=api, callback="private")
        yield response.follow("/hop/3", max_redirects=1, callback="private")
        yield response.follow("/hop/2", method="POST", body="x=1", callback="private")
        # Binary, so base64 in the entry: over the entry cap, and the page fails on it.
        yield response.follow("/big", method="POST", body=b"\xff" * (MAX_ENTRY_BYTES - 10))

    def results(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield from response.follow_all(css="ul.results a", callback="item")

    def api(self, response: hashcrawl.Response) -> Iterator[Any]:
        for found in response.json()["items"]:
            yield {"api": found["name"]}

    def item(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield {
            "name": response.css("h1.name::text").get(),
            "price": response.css(".price::text").get(),
        }

    def private(self, response: hashcrawl.Response) -> Iterator[Any]:
        yield {"page": response.title(), "secret": response.css(".secret::text").get()}


class Crawl:
    def __init__(self, seen: list[Seen], items: list[dict[str, Any]], dead: dict[str, str],
                 redis_text: bytes) -> None:  # fmt: skip
        self.seen, self.items, self.dead, self.redis_text = seen, items, dead, redis_text


def everything_in(redis_url: str, crawl: str) -> bytes:
    """Every value under the crawl's keys, concatenated: what a reader of Redis can see."""
    client = redis.Redis.from_url(redis_url)
    found = []
    for key in client.scan_iter(f"*{crawl}*"):
        kind = client.type(key)
        if kind == b"stream":
            found += [repr(e).encode() for e in client.xrange(key)]
        elif kind == b"hash":
            found += [repr(client.hgetall(key)).encode()]
        elif kind == b"string":
            found += [client.get(key) or b""]
        elif kind == b"set":
            found += [repr(client.smembers(key)).encode()]
        elif kind == b"zset":
            found += [repr(client.zrange(key, 0, -1)).encode()]
        elif kind == b"list":
            found += [repr(client.lrange(key, 0, -1)).encode()]
    return b"\n".join(found)


@pytest.fixture(scope="module")
def crawl(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    """The spider's crawl of the form site, with the bearer token as a --header."""
    crew = Crew(shared_redis.url, new_crawl_name(), tmp_path_factory.mktemp("full"))
    settings = fast_settings(
        spider=Shop, headers={"Authorization": f"Bearer {TOKEN}"}, max_attempts=1, idle=1.0
    )
    with FormSite() as site:
        trio.run(crawl_in_process, crew, [settings], [site.root])
        seen = site.seen()
    with hashcrawl.Queue(crew.redis_url, crew.crawl) as queue:
        dead = queue.dead()
    return Crawl(seen, crew.items(), dead, everything_in(crew.redis_url, crew.crawl))


def test_posts_reach_the_site_with_their_bodies_and_duplicates_are_filtered(crawl: Crawl) -> None:
    """The login and each distinct search were POSTed once, bodies as written."""
    posts = sorted((s.path, s.body) for s in crawl.seen if s.method == "POST")
    assert posts == [
        ("/hop/2", b"x=1"),
        ("/login", f"user={USER}&password={PASSWORD}".encode()),
        ("/search", b"q=gadget"),
        ("/search", b"q=widget"),
    ]
    assert all(
        s.headers["content-type"] == FORM["Content-Type"]
        for s in crawl.seen
        if s.method == "POST" and s.path != "/hop/2"
    )


def test_request_headers_and_setting_headers_reach_the_site(crawl: Crawl) -> None:
    """The API got its Accept header and every request the --header token."""
    api = [s for s in crawl.seen if s.path.startswith("/api/")]
    assert [(s.headers["accept"], s.status) for s in api] == [("application/json", 200)]
    assert {s.headers.get("authorization") for s in crawl.seen} == {f"Bearer {TOKEN}"}
    assert {"page": "Private", "secret": "42"} in crawl.items


def test_the_spiders_items_come_from_css_and_json(crawl: Crawl) -> None:
    """Each item found by the searches is written once, and the API's items too."""
    names = sorted(i["name"] for i in crawl.items if "name" in i)
    assert names == ["Blue widget", "Green gadget", "Red widget"]
    assert sorted(i["api"] for i in crawl.items if "api" in i) == ["Blue widget", "Red widget"]


def test_a_per_request_timeout_and_redirect_limit_apply(crawl: Crawl) -> None:
    """The slow page timed out at 0.3 s, not the 30 s default; /hop/3 stopped after one hop."""
    reasons = {url.split("/", 3)[3]: error for url, error in crawl.dead.items()}
    assert reasons["slow?s=2"].startswith(("timed out", "no whole answer within the timeout"))
    assert reasons["hop/2"].startswith("more than 1 redirects")


def test_a_post_redirected_with_302_lands_as_a_get_without_body(crawl: Crawl) -> None:
    """/hop/2 was POSTed, then /hop/1 and /hop/0 were GETs, as browsers do."""
    hops = [(s.method, s.path, s.body) for s in crawl.seen if s.path.startswith("/hop/")]
    assert ("POST", "/hop/2", b"x=1") in hops
    assert ("GET", "/hop/0", b"") in hops
    assert {"page": "Landed by GET", "secret": None} in crawl.items


def test_setting_headers_never_reach_redis_and_request_headers_do(crawl: Crawl) -> None:
    """The --header token is nowhere in the crawl's keys, though the dead-lettered slow
    request was sent with it; that request's own header is in its dead letter."""
    assert TOKEN.encode() not in crawl.redis_text
    assert REQUEST_TOKEN.encode() in crawl.redis_text


def test_a_yielded_request_too_large_for_an_entry_fails_its_page_clearly(crawl: Crawl) -> None:
    """The login page's callback yielded it last: the page is dead-lettered with the sizes,
    what came before is kept, and nothing reached /big."""
    reasons = {url.split("/", 3)[3]: error for url, error in crawl.dead.items()}
    assert reasons["login"].startswith("the parse callback ")
    assert " raised ConfigError: Request POST http://" in reasons["login"]
    assert "-byte queue entry, over the 65520 an entry holds" in reasons["login"]
    assert not [s for s in crawl.seen if s.path == "/big"]


def test_a_body_too_large_for_an_entry_is_refused_with_a_clear_error() -> None:
    """A Request whose body cannot fit an entry is a ConfigError naming the sizes."""
    with pytest.raises(ConfigError, match="queue entry of at most 65536 bytes"):
        hashcrawl.Request("http://a.example/", method="POST", body=b"x" * (MAX_ENTRY_BYTES + 1))


def test_a_request_with_a_header_that_could_split_the_request_is_refused() -> None:
    """A CR/LF in a header value is refused before it can travel."""
    with pytest.raises(ConfigError, match="not one line of ASCII text"):
        hashcrawl.Request("http://a.example/", headers={"X-A": "1\r\nX-B: 2"})


def test_header_settings_reach_a_crawls_children_through_the_environment_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """write_flags leaves --header out (argv shows in ps); $HASHCRAWL_HEADERS brings it back."""
    import argparse
    import json

    from hashcrawl._cli._flagset import HEADERS_ENV_VAR, add_flags

    settings = hashcrawl.Settings.of({"headers": {"Authorization": "Bearer sekrit"}, "delay": 2})
    assert "sekrit" not in " ".join(write_flags(settings))
    parser = argparse.ArgumentParser()
    add_flags(parser)
    monkeypatch.setenv(HEADERS_ENV_VAR, json.dumps(list(settings.headers)))
    child = read_flags(parser.parse_args(write_flags(settings)))
    assert child == settings


def test_a_bad_header_setting_is_a_one_line_error_without_its_value() -> None:
    """--header without a colon is refused, and the message does not repeat the value."""
    with pytest.raises(ConfigError, match="expected 'Name: value'") as caught:
        hashcrawl.Settings.of({"headers": ["Bearer sekrit"]})
    assert "sekrit" not in str(caught.value)
    assert "sekrit" not in repr(hashcrawl.Settings.of({"headers": {"A": "sekrit"}}))
