"""Shared hosts (``--render-fetch-hosts``): the hosts named, the window of a turn, the
turn script against a real Redis, and the fetcher that takes turns, on a fake clock."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from hashcrawl import FetchError, Request, Response
from hashcrawl._core._settings import Settings
from hashcrawl._core._turns import AHEAD, DRIFT, MAX_MISSED, Start, Turn, shared_hosts
from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._run._turns import SharedRobots, SharedTurns
from hashcrawl._spiders._spider import Spider, scrapy_settings
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Store
from hashcrawl._web import _pools
from hashcrawl._web._pools import NotSent

# -- the hosts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["*.cdn.test", "http://cdn.test/", "cdn.test/app.js", "cdn .test", "", "cdn.test,,x.test"],
)
def test_a_shared_host_must_be_a_host_not_a_pattern_or_url(text: str) -> None:
    """Patterns, URLs and empty names are refused in one line naming the flag."""
    with pytest.raises(ConfigError, match="--render-fetch-hosts must be comma-separated hosts"):
        shared_hosts(text or " ,")


def test_the_shared_hosts_are_capped_and_kept_as_the_crawl_routes_them() -> None:
    """At most 100 hosts; each as its host key (lower case, a default port dropped)."""
    with pytest.raises(ConfigError, match="at most 100"):
        shared_hosts(",".join(f"h{n}.test" for n in range(101)))
    assert shared_hosts("CDN.test, 127.0.0.9:8080,static.test:80") == {
        "cdn.test",
        "127.0.0.9:8080",
        "static.test",
    }
    assert shared_hosts(None) == frozenset()
    with pytest.raises(ConfigError, match="render-fetch-hosts"):
        Settings(render_fetch_hosts="*.cdn.test")


def test_a_spiders_render_fetch_hosts_become_the_setting() -> None:
    """A spider's ``render_fetch_hosts`` list is the crawl's --render-fetch-hosts."""

    class Shop(Spider):
        name = "shop"
        render_fetch_hosts = ["cdn.test", "static.test"]

    assert scrapy_settings(Shop)["render_fetch_hosts"] == "cdn.test,static.test"


# -- a turn's window ----------------------------------------------------------------


def test_a_turn_opens_at_its_slot_after_the_reply_and_closes_a_margin_after_the_ask() -> None:
    """Asked at 10, answered at 10.1, 2 s off, margin 0.25: open from 12.1 (stretched
    for drift) until 12.35 (shrunk)."""
    turn = Turn.granted(asked=10.0, answered=10.1, wait=2.0, margin=0.25)
    assert turn.opens == pytest.approx(10.1 + 2.0 * (1 + DRIFT))
    assert turn.closes == pytest.approx(10.0 + 2.0 * (1 - DRIFT) + 0.25)
    assert turn.usable
    assert not turn.open_at(12.0) and turn.open_at(12.2) and not turn.open_at(12.4)


def test_a_reply_later_than_the_margin_gives_a_turn_that_cannot_be_used() -> None:
    """A round trip longer than the margin: the window is empty."""
    assert not Turn.granted(asked=0.0, answered=0.3, wait=0.0, margin=0.25).usable


def test_a_request_checked_once_within_its_window_has_started() -> None:
    """Its first bytes left in time: its later writes pass; one past the window is missed."""
    start = Start(Turn(opens=1.0, closes=2.0))
    assert start.check(1.5) and start.check(9.0) and not start.missed
    late = Start(Turn(opens=1.0, closes=2.0))
    assert not late.check(2.5) and late.missed


# -- the script, against a real Redis -----------------------------------------------


class Clock:
    """Milliseconds for the script's now (as the simulations drive it)."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def store_at(redis_url: str, crawl: str, clock: Clock | None = None) -> Store:
    return Store(RedisURL.parse(redis_url), crawl, clock=clock)


def test_turns_queue_up_a_gap_and_margin_apart(redis_url: str, crawl_name: str) -> None:
    """The first turn is at once; each next one is reserved gap + margin + 1 ms after."""
    clock = Clock()
    store = store_at(redis_url, crawl_name, clock)
    take = {"gap": 1.0, "margin": 0.25, "most_wait": 10.0}
    assert store.take_turn("cdn.test", **take) == (True, 0.0)
    assert store.take_turn("cdn.test", **take) == (True, 1.251)
    clock.ms += 500
    assert store.take_turn("cdn.test", **take) == (True, 2.002)
    assert store.take_turn("other.test", **take) == (True, 0.0)  # each host its own


def test_a_turn_too_far_off_reserves_nothing(redis_url: str, crawl_name: str) -> None:
    """Past most_wait: told how far, and the next caller gets that same slot."""
    store = store_at(redis_url, crawl_name, Clock())
    store.take_turn("cdn.test", gap=5.0, margin=0.25, most_wait=10.0)
    assert store.take_turn("cdn.test", gap=5.0, margin=0.25, most_wait=1.0) == (False, 5.251)
    assert store.take_turn("cdn.test", gap=5.0, margin=0.25, most_wait=10.0) == (True, 5.251)


def test_the_longest_gap_given_is_kept_and_spaces_the_next_turn(
    redis_url: str, crawl_name: str
) -> None:
    """A caller that knows the host's Crawl-delay (5 s) spaces everyone's next turns,
    those of callers that know only --delay (1 s) included."""
    store = store_at(redis_url, crawl_name, Clock())
    store.take_turn("cdn.test", gap=1.0, margin=0.0, most_wait=60.0)
    assert store.take_turn("cdn.test", gap=5.0, margin=0.0, most_wait=60.0) == (True, 5.001)
    assert store.take_turn("cdn.test", gap=1.0, margin=0.0, most_wait=60.0) == (True, 10.002)


def test_a_turn_key_expires_a_minute_after_its_next_turn_is_due(
    redis_url: str, crawl_name: str
) -> None:
    """The key does not outlive its use by more than a minute (server time, real TTL)."""
    store = store_at(redis_url, crawl_name)
    assert store.take_turn("cdn.test", gap=2.0, margin=0.25, most_wait=10.0) == (True, 0.0)
    granted, wait = store.take_turn("cdn.test", gap=2.0, margin=0.25, most_wait=10.0)
    assert granted and 0 < wait <= 2.251
    ttl = store._redis.pttl(store.key("turn:cdn.test"))
    assert 60_000 < ttl <= 60_000 + 2 * 2_251 + 1


def edges(values: st.SearchStrategy[float], *often: float) -> st.SearchStrategy[float]:
    """``values``, with the edges where a gap is shortest drawn often."""
    return st.one_of(st.sampled_from(often), values)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            edges(st.floats(0, 3), 0.0, 0.001),  # when the worker asks, s
            edges(st.floats(0, 0.4), 0.0, 0.25),  # until Redis runs the script
            edges(st.floats(0, 0.4), 0.0, 0.25),  # until the reply is read
            edges(st.floats(0, 1), 0.0, 1.0),  # where in its window the request leaves
        ),
        min_size=2,
        max_size=12,
    ),
    st.sampled_from([0.0, 0.05, 0.25]),
)
def test_any_two_starts_are_a_gap_apart_whatever_the_replies_take(
    shared_redis: RedisServer, asks: list[tuple[float, float, float, float]], margin: float
) -> None:
    """Workers ask at random moments with random latencies (some past the margin); every
    request that leaves within its window leaves at least the gap after any other."""
    gap = 1.0
    clock = Clock()
    store = store_at(shared_redis.url, "turns" + uuid.uuid4().hex[:10], clock)
    starts = []
    for asked, to_redis, back, where in sorted(asks, key=lambda a: a[0] + a[1]):
        granted_at = asked + to_redis
        clock.ms = int(granted_at * 1000) + 1_000_000  # the server's TIME, to the ms
        granted, wait = store.take_turn("cdn.test", gap=gap, margin=margin, most_wait=60.0)
        assert granted
        turn = Turn.granted(asked=asked, answered=granted_at + back, wait=wait, margin=margin)
        if turn.usable:
            starts.append(turn.opens + where * (turn.closes - turn.opens))
    store.clear()
    starts.sort()
    assert all(b - a >= gap - 1e-9 for a, b in itertools.pairwise(starts))


# -- the fetcher that takes turns, on a fake clock -----------------------------------


class Recorder:
    """A fetcher that records when each request was sent. As the default fetcher does,
    it connects (``connect`` seconds), awaits the task's hook before writing, then asks
    the task's check as the bytes leave (``pause`` seconds after the hook)."""

    def __init__(self, connect: float = 0.0, pause: float = 0.0) -> None:
        self.sent: list[tuple[str, float]] = []
        self.connect, self.pause = connect, pause

    async def fetch(self, request: Request) -> Response:
        await trio.sleep(self.connect)
        hook = _pools._before_send.get()
        if hook is not None:
            await hook()
        await trio.sleep(self.pause)
        check = _pools._may_send.get()
        if check is not None and not check():
            raise NotSent("the check said no")
        self.sent.append((request.url, trio.current_time()))
        return Response(request.url, 200, {}, b"", request)


class Redis:
    """A stand-in for ``Store.take_turn``: answers from a list, after ``latency``."""

    def __init__(self, *replies: Any, latency: float = 0.0) -> None:
        self.replies = list(replies)
        self.latency = latency
        self.asked: list[dict[str, Any]] = []

    async def offload(self, call: Any) -> Any:
        await trio.sleep(self.latency)
        return call()

    def take(self, host: str, **args: Any) -> tuple[bool, float]:
        self.asked.append({"host": host, **args})
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[no-any-return]


def turns_over(fetcher: Recorder, redis: Redis, *, at_write: bool = True) -> SharedTurns:
    s = Settings(render_fetch_hosts="cdn.test", delay=2.0)
    return SharedTurns(
        fetcher,
        take=redis.take,
        settings=lambda: s,
        gap_of=lambda host: 2.0,
        offload=redis.offload,
        at_write=at_write,
    )


async def test_a_request_to_another_host_takes_no_turn(autojump_clock: Any) -> None:
    """Only the crawl's shared hosts ask Redis."""
    fetcher, redis = Recorder(), Redis()
    await turns_over(fetcher, redis).fetch(Request("http://a.test/app.js"))
    assert redis.asked == [] and fetcher.sent == [("http://a.test/app.js", 0.0)]


async def test_a_request_to_a_shared_host_leaves_once_its_turn_opens(autojump_clock: Any) -> None:
    """Granted 3 s off, with the host's gap and the margin: sent at the slot, no sooner."""
    fetcher, redis = Recorder(), Redis((True, 3.0), latency=0.01)
    await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert redis.asked == [{"host": "cdn.test", "gap": 2.0, "margin": 0.25, "most_wait": AHEAD}]
    [(_, sent)] = fetcher.sent
    assert 0.01 + 3.0 <= sent <= 3.0 + 0.25


async def test_a_request_held_past_its_window_is_not_sent_and_asks_again(
    autojump_clock: Any,
) -> None:
    """The fetcher's check (as its bytes leave) refuses a turn gone by; the next turn is
    taken, and after MAX_MISSED such the fetch fails with a reason."""
    fetcher, redis = Recorder(pause=0.5), Redis(*[(True, 0.0)] * MAX_MISSED)
    with pytest.raises(FetchError, match=r"no turn: cdn\.test's turns came later"):
        await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert len(redis.asked) == MAX_MISSED and fetcher.sent == []


async def test_a_slow_connect_costs_no_turn_with_the_default_fetcher(autojump_clock: Any) -> None:
    """The turn is taken once the connection is made (2 s here, longer than the margin)."""
    fetcher, redis = Recorder(connect=2.0), Redis((True, 1.0))
    await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    [(_, sent)] = fetcher.sent
    assert 3.0 <= sent <= 3.0 + 0.25 and len(redis.asked) == 1


async def test_with_another_fetcher_the_turn_is_taken_before_it_is_called(
    autojump_clock: Any,
) -> None:
    """A fetcher with no hook of its own: called once the turn opens, within its window."""
    fetcher, redis = Recorder(), Redis((True, 1.0))
    turns = turns_over(fetcher, redis, at_write=False)
    await turns.fetch(Request("http://cdn.test/lib.js"))
    [(_, sent)] = fetcher.sent
    assert 1.0 <= sent <= 1.0 + 0.25 and turns.taken == 1


async def test_a_late_reply_lets_its_turn_go(autojump_clock: Any) -> None:
    """Replies slower than the margin: no request leaves, the fetch fails."""
    fetcher, redis = Recorder(), Redis(*[(True, 0.0)] * MAX_MISSED, latency=0.3)
    turns = turns_over(fetcher, redis)
    with pytest.raises(FetchError, match="no turn"):
        await turns.fetch(Request("http://cdn.test/lib.js"))
    assert fetcher.sent == [] and turns.missed == MAX_MISSED


async def test_no_turn_before_the_deadline_fails_the_request_at_once(autojump_clock: Any) -> None:
    """A page with 5 s left asks for a turn at most 5 s off; 40 s off, it fails then."""
    fetcher, redis = Recorder(), Redis((False, 40.0))
    with trio.move_on_after(5.0):
        with pytest.raises(FetchError, match=r"next free turn is 40\.0 s off"):
            await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert redis.asked[0]["most_wait"] == pytest.approx(5.0) and fetcher.sent == []
    assert trio.current_time() == 0.0


async def test_a_turn_further_than_ahead_is_asked_for_again_closer(autojump_clock: Any) -> None:
    """No deadline, 25 s off: asked again 15 s later (at most AHEAD ahead), then sent."""
    fetcher, redis = Recorder(), Redis((False, 25.0), (True, AHEAD))
    await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert len(redis.asked) == 2
    [(_, sent)] = fetcher.sent
    assert 25.0 <= sent <= 25.0 + 0.25


async def test_redis_not_answering_fails_the_request_not_the_worker(autojump_clock: Any) -> None:
    """A QueueError is a FetchError naming the host."""
    fetcher, redis = Recorder(), Redis(QueueError("Redis at x: refused"))
    with pytest.raises(FetchError, match=r"no turn: Redis did not answer for cdn\.test"):
        await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert fetcher.sent == []


async def test_the_callers_check_still_holds_within_a_turn(autojump_clock: Any) -> None:
    """A worker that may no longer send (its check says no) sends nothing, in its turn."""
    fetcher, redis = Recorder(), Redis((True, 0.0))
    with _pools.sending_only_while(lambda: False), pytest.raises(NotSent):
        await turns_over(fetcher, redis).fetch(Request("http://cdn.test/lib.js"))
    assert fetcher.sent == [] and len(redis.asked) == 1


# -- a shared host's robots.txt, for the pages that do not own it -------------------------


class RobotsServer:
    """A fetcher answering robots.txt with ``answers`` in turn (status, body, location)."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def fetch(self, request: Request) -> Response:
        self.asked.append(request.url)
        status, body, location = self.answers.pop(0)
        headers = {"content-type": "text/plain", **({"location": location} if location else {})}
        return Response(request.url, status, headers, body.encode(), request)


def robots_over(server: RobotsServer) -> SharedRobots:
    s = Settings(render_fetch_hosts="cdn.test", lease=60.0)
    return SharedRobots(server, lambda: s)


async def test_a_shared_hosts_robots_txt_is_fetched_once_for_all_pages() -> None:
    """Pages asking at once share one fetch; its rules and Crawl-delay are kept (the
    delay at most half the lease)."""
    server = RobotsServer((200, "User-agent: *\nDisallow: /private\nCrawl-delay: 99\n", ""))
    robots = robots_over(server)
    got: list[bool] = []

    async def ask(url: str) -> None:
        got.append((await robots.rules(url, "cdn.test")).allowed(url))

    async with trio.open_nursery() as nursery:
        for url in ("https://cdn.test/app.js", "https://cdn.test/private/x.js"):
            nursery.start_soon(ask, url)
    assert sorted(got) == [False, True]
    assert server.asked == ["https://cdn.test/robots.txt"]
    assert robots.crawl_delay("cdn.test") == 30.0 and robots.crawl_delay("other.test") == 0.0


async def test_an_unreachable_shared_robots_txt_allows_nothing_until_asked_again(
    autojump_clock: Any,
) -> None:
    """A 503: nothing allowed for its backoff; then asked again."""
    server = RobotsServer((503, "", ""), (404, "", ""))
    robots = robots_over(server)
    assert not (await robots.rules("http://cdn.test/a.js", "cdn.test")).allowed(
        "http://cdn.test/a.js"
    )
    assert not (await robots.rules("http://cdn.test/a.js", "cdn.test")).allowed(
        "http://cdn.test/a.js"
    )
    await trio.sleep(3)
    assert (await robots.rules("http://cdn.test/a.js", "cdn.test")).allowed("http://cdn.test/a.js")
    assert len(server.asked) == 2


async def test_a_shared_robots_txt_redirected_to_a_host_not_shared_is_no_file() -> None:
    """The hop would be a request to another worker's host: not made, and no rules."""
    server = RobotsServer((301, "", "http://elsewhere.test/robots.txt"))
    robots = robots_over(server)
    rules = await robots.rules("http://cdn.test/a.js", "cdn.test")
    assert rules.allowed("http://cdn.test/a.js") and server.asked == ["http://cdn.test/robots.txt"]
