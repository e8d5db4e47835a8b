"""Tests for Queue: feeding, inspecting and clearing a crawl from Python."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from hashcrawl import ConfigError, InvalidURL, QueueError
from hashcrawl._core._entry import Entry
from hashcrawl._run._queue import Queue
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer

STATUS_KEYS = {
    "crawl",
    "shards",
    "spread",
    "exists",
    "bad_samples",
    "spiders",
    "mixed_spiders",
    "waiting",
    "held",
    "workers",
    "stale",
    "robots_denied",
    "pattern_refused",
    "pages_taken",
    "members",
    "seen",
    "queued",
    "fetched",
    "links_dropped",
    "host_capped",
    "sub_refused",
    "failed",
    "dead",
    "leases_reclaimed",
    "queue_bad",
    "epoch",
    "ended",
    "settings",
    "revisits",
}


@pytest.fixture
def queue(redis_url: str, crawl_name: str) -> Iterator[Queue]:
    """A Queue on the shared server, for a crawl no other test uses."""
    with Queue(redis_url, crawl_name) as queue:
        yield queue


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the shared server, to look at keys as they are stored."""
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        yield client


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port bound by this test and never listened on, so connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def inbox(raw: redis.Redis, crawl: str) -> list[Entry]:
    """The entries waiting in a crawl's inbox (where submissions go while no worker runs)."""
    return [Entry.decode(f["r"]) for _, f in raw.xrange(f"hc:{{{crawl}}}:inbox")]


def crawl_keys(raw: redis.Redis, crawl: str) -> list[str]:
    return list(raw.scan_iter(match=f"hc:\\{{{crawl}\\}}:*"))


def test_submit_returns_how_many_urls_were_new(queue: Queue) -> None:
    """submit counts new URLs only: repeats in the call and URLs seen before are left out."""
    urls = ["http://a.example/1", "http://a.example/2", "http://b.example/1"]
    assert queue.submit([*urls, urls[0]]) == 3
    assert queue.submit(urls) == 0
    assert queue.submit([*urls, "http://c.example/"]) == 1


def test_submit_dedupes_by_canonical_url(queue: Queue) -> None:
    """Two spellings of one page (case, default port, fragment, query order) count once."""
    assert queue.submit(["http://a.example/x?b=2&a=1"]) == 1
    assert queue.submit(["HTTP://A.EXAMPLE:80/x?a=1&b=2#top"]) == 0


def test_submit_takes_any_iterable_across_batches(queue: Queue) -> None:
    """A generator longer than a batch goes in whole, and status counts every URL."""
    urls = (f"http://h{i % 7}.example/p/{i}" for i in range(2500))
    assert queue.submit(urls) == 2500
    status = queue.status()
    assert (status["seen"], status["queued"], status["waiting"]) == (2500, 2500, 2500)


def test_submit_with_dont_filter_adds_a_seen_url_again(queue: Queue) -> None:
    """dont_filter bypasses the seen filter: queued grows, seen does not."""
    queue.submit(["http://a.example/"])
    assert queue.submit(["http://a.example/"], dont_filter=True) == 1
    status = queue.status()
    assert (status["seen"], status["queued"], status["waiting"]) == (1, 2, 2)


def test_submit_with_priority_stores_it_on_each_entry(
    queue: Queue, raw: redis.Redis, crawl_name: str
) -> None:
    """The priority given to submit travels with every entry it adds."""
    queue.submit(["http://a.example/1", "http://b.example/2"], priority=10)
    queue.submit(["http://a.example/3"])
    priorities = {e.url: e.priority for e in inbox(raw, crawl_name)}
    assert priorities == {
        "http://a.example/1": 10,
        "http://b.example/2": 10,
        "http://a.example/3": 0,
    }


def test_submitted_entries_start_at_depth_zero_with_canonical_urls(
    queue: Queue, raw: redis.Redis, crawl_name: str
) -> None:
    """A submitted URL is a start request: canonical, depth 0, no attempts yet."""
    queue.submit(["HTTP://Example.COM:80"])
    (entry,) = inbox(raw, crawl_name)
    assert (entry.url, entry.depth, entry.attempts) == ("http://example.com/", 0, 0)


def test_status_has_every_documented_key(queue: Queue, crawl_name: str) -> None:
    """status() names the crawl and gives every count the CLI prints, all zero at first.

    A crawl with no keys does not exist yet, and so has not ended either.
    """
    status = queue.status()
    assert status.keys() == STATUS_KEYS
    assert status["crawl"] == crawl_name
    assert status["members"] == []
    lists = ("crawl", "members", "ended", "exists", "bad_samples", "spiders", "mixed_spiders")
    lists += ("settings", "revisits", "shards", "spread")
    assert status["shards"] == 1  # a crawl started without --shards
    assert status["spread"] == {"one server": 1}
    counts = {k: v for k, v in status.items() if k not in lists}
    assert set(counts.values()) == {0}
    assert set(status["revisits"].values()) == {0}  # a crawl without --revisit
    assert (status["bad_samples"], status["spiders"], status["mixed_spiders"]) == ([], [], False)
    assert (status["exists"], status["ended"]) == (False, False)
    assert status["settings"]["version"] is None  # none recorded: no worker has joined


def test_status_is_not_ended_while_urls_wait(queue: Queue) -> None:
    """A crawl with URLs waiting and no worker has not ended."""
    queue.submit(["http://a.example/"])
    status = queue.status()
    assert (status["waiting"], status["held"], status["workers"]) == (1, 0, 0)
    assert status["ended"] is False


def test_clear_deletes_every_key_of_the_crawl(
    queue: Queue, raw: redis.Redis, crawl_name: str
) -> None:
    """clear() returns how many keys it deleted and leaves the crawl as if new."""
    queue.submit(["http://a.example/", "http://b.example/"])
    keys = crawl_keys(raw, crawl_name)
    assert keys
    assert queue.clear() == len(keys)
    assert crawl_keys(raw, crawl_name) == []
    assert queue.status()["seen"] == 0
    assert queue.submit(["http://a.example/"]) == 1


def test_clear_leaves_other_crawls_alone(redis_url: str, raw: redis.Redis, crawl_name: str) -> None:
    """Clearing one crawl keeps the keys of another on the same server."""
    other = crawl_name + "-other"
    with Queue(redis_url, crawl_name) as mine, Queue(redis_url, other) as theirs:
        mine.submit(["http://a.example/"])
        theirs.submit(["http://a.example/", "http://b.example/"])
        before = sorted(crawl_keys(raw, other))
        mine.clear()
        assert sorted(crawl_keys(raw, other)) == before
        assert theirs.status()["seen"] == 2
        theirs.clear()


def test_clear_of_an_empty_crawl_deletes_nothing(queue: Queue) -> None:
    """A crawl that never had keys clears to zero without error."""
    assert queue.clear() == 0


def test_queue_is_a_context_manager_that_closes_its_connection(redis_server: RedisServer) -> None:
    """``with Queue(...) as q`` gives the queue and hands its connection back on exit."""
    with redis.Redis.from_url(redis_server.url) as admin:
        alone = admin.info("clients")["connected_clients"]
        with Queue(redis_server.url, "ctx") as queue:
            assert isinstance(queue, Queue)
            queue.status()
            assert admin.info("clients")["connected_clients"] == alone + 1
        # The server drops a closed connection on its next event loop turn.
        for _ in range(100):
            if admin.info("clients")["connected_clients"] == alone:
                break
        assert admin.info("clients")["connected_clients"] == alone


def test_queue_context_lets_exceptions_through(queue: Queue) -> None:
    """An error inside the with block propagates; the queue does not swallow it."""
    with pytest.raises(KeyError), queue:
        raise KeyError("mine")


def test_queue_accepts_a_parsed_redis_url(redis_url: str, crawl_name: str) -> None:
    """A RedisURL works where a string does."""
    with Queue(RedisURL.parse(redis_url), crawl_name) as queue:
        assert queue.submit(["http://a.example/"]) == 1


@pytest.mark.parametrize(
    "url", ["ftp://example.com/file", "mailto:a@example.com", "example.com/x", "http:///nohost"]
)
def test_submit_of_a_non_http_url_raises_invalid_url(queue: Queue, url: str) -> None:
    """Anything but an http(s) URL with a host raises InvalidURL (a ValueError)."""
    with pytest.raises(InvalidURL) as caught:
        queue.submit([url])
    assert isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_invalid_url_in_a_batch_keeps_the_whole_batch_out(queue: Queue) -> None:
    """URLs of the batch holding a bad one do not go in: every URL is checked first."""
    with pytest.raises(InvalidURL):
        queue.submit(["http://a.example/1", "ftp://example.com/", "http://a.example/2"])
    assert queue.status()["seen"] == 0


def test_url_with_credentials_is_refused_without_showing_them(queue: Queue) -> None:
    """A URL carrying user:password would put it in the shared queue: refused, masked."""
    with pytest.raises(InvalidURL) as caught:
        queue.submit(["http://user:pw-secret@a.example/"])
    assert "pw-secret" not in str(caught.value)


def test_bad_redis_url_or_crawl_name_raises_config_error(redis_url: str) -> None:
    """Queue checks its arguments before connecting: ConfigError for each."""
    with pytest.raises(InvalidURL):
        Queue("http://x", "c")
    with pytest.raises(ConfigError):
        Queue(redis_url, "")
    with pytest.raises(ConfigError):
        Queue(redis_url, "a b")


def test_unreachable_redis_raises_queue_error_without_the_password(dead_port: int) -> None:
    """Every operation on a Redis nobody listens at raises QueueError, password hidden."""
    url = f"redis://:pw-secret@127.0.0.1:{dead_port}/0"
    with Queue(url, "c", timeout=2) as queue:
        for call in (queue.status, queue.clear, lambda: queue.submit(["http://a.example/"])):
            with pytest.raises(QueueError) as caught:
                call()
            assert isinstance(caught.value, ConnectionError)
            message = str(caught.value)
            assert "pw-secret" not in message
            assert f"127.0.0.1:{dead_port}" in message


def test_wrong_password_raises_queue_error(tmp_path: Path) -> None:
    """A server that refuses the password gives QueueError, with neither password shown."""
    with RedisServer(directory=tmp_path, password="pw-secret") as server:
        url = f"redis://:wrong-pw@127.0.0.1:{server.port}/0"
        with Queue(url, "c") as queue, pytest.raises(QueueError) as caught:
            queue.status()
    assert "wrong-pw" not in str(caught.value)
    assert "pw-secret" not in str(caught.value)


def test_seen_filter_remembers_urls_across_a_layer_rollover(
    queue: Queue, raw: redis.Redis, crawl_name: str
) -> None:
    """URLs seen before are still left out when the seen filter starts a new layer.

    The filter is a scalable Bloom filter whose first layer holds ``c0`` URLs (about a
    million by default). ``c0`` is read from ``seenmeta``, so a small one set there
    makes the rollover cheap to reach: 100 URLs fill layer 0, and the same 100 again
    must still be duplicates when the next batch opens layer 1.
    """
    raw.hset(f"hc:{{{crawl_name}}}:seenmeta", mapping={"c0": 100})
    urls = [f"http://a.example/{i}" for i in range(100)]
    assert queue.submit(urls) == 100
    assert queue.submit(urls) == 0
    assert queue.submit([*urls, "http://a.example/new"]) == 1
    assert queue.status()["seen"] == 101
