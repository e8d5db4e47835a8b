"""A crawl's settings live with the crawl: recorded, taken, refused,
changed by ``configure``, applied by running workers, and read as hostile input."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import redis as redis_py
import trio

from hashcrawl._cli._commands import main
from hashcrawl._cli._parser import build_parser
from hashcrawl._cli._workers import _child_command
from hashcrawl._core._settings import CRAWL, Settings
from hashcrawl._exceptions import ConfigError
from hashcrawl._run._worker import Worker
from hashcrawl._store._crawlconfig import FIXED, RECORDED, CrawlSettings, adopt, change, view
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._store import Store
from testing.fleet import await_until


@contextlib.contextmanager
def opened(redis_url: str, crawl: str) -> Iterator[Store]:
    store = Store(RedisURL.parse(redis_url), crawl)
    try:
        yield store
    finally:
        store.close()


def record(redis_url: str, crawl: str) -> dict[str, str]:
    client = redis_py.Redis.from_url(redis_url, decode_responses=True)
    return dict(client.hgetall(f"hc:{{{crawl}}}:settings"))


def write(redis_url: str, crawl: str, **fields: str) -> None:
    """Write fields of the settings record by hand, as anyone with the Redis URL could."""
    client = redis_py.Redis.from_url(redis_url, decode_responses=True)
    client.hset(f"hc:{{{crawl}}}:settings", mapping=fields)


def join(redis_url: str, crawl: str, *flags: str) -> int:
    """``hashcrawl join`` in this process; a refused worker returns before it joins, and
    one that joins ends at once: the crawl has begun (a crawl never fed waits for its
    first URL) and has nothing left."""
    client = redis_py.Redis.from_url(redis_url, decode_responses=True)
    client.hset(f"hc:{{{crawl}}}:seenmeta", "queued", 1)
    return main(["join", "--redis", redis_url, "--crawl", crawl, "--idle", "0", *flags])


# -- the declaration -------------------------------------------------------------------------


def test_crawl_settings_are_the_fields_marked_in_the_declaration() -> None:
    """Politeness, scope and the fleet-wide limits are crawl settings; per-worker ones are not."""
    assert set(CRAWL) == {
        "delay", "per_host", "lease", "user_agent", "allow_domains", "span_hosts",
        "sitemaps", "max_depth", "max_attempts", "obey_robots", "cookies",
        "max_pages_per_host", "revisit", "revisit_min", "revisit_max", "revisit_pages",
        "accept_regex", "reject_regex", "no_parent", "max_pages_total",
        "render", "render_hosts", "render_fetch_hosts",
    }  # fmt: skip
    assert set(FIXED) == {
        "per_host", "lease", "user_agent", "revisit", "revisit_min", "revisit_max",
        "revisit_pages", "render_fetch_hosts",
    }  # fmt: skip
    assert set(RECORDED) == set(CRAWL) - {"allow_domains", "span_hosts"}


def test_only_the_crawl_flags_given_count_as_given() -> None:
    """A crawl flag left out is not given (the crawl's value is taken), one given is."""
    from hashcrawl._cli._flagset import given_flags

    args = build_parser().parse_args(["join", "--delay", "1.0", "--allow-domain", "A.test"])
    assert given_flags(args) == {"delay": 1.0, "allow_domains": ("A.test",)}
    assert given_flags(build_parser().parse_args(["join", "--concurrency", "2"])) == {}


def test_crawls_children_carry_no_crawl_flag() -> None:
    """``crawl``'s workers take the crawl settings from Redis, not from their command line."""
    args = build_parser().parse_args(
        ["crawl", "--delay", "0.5", "--ignore-robots", "--concurrency", "3", "http://x.test/"]
    )
    command = _child_command(args)
    assert "--delay" not in command and "--ignore-robots" not in command
    assert command[command.index("--concurrency") + 1] == "3"


# -- a worker starts ---------------------------------------------------------------------------


def test_the_first_worker_records_every_crawl_setting_defaults_included(
    redis_url: str, crawl_name: str
) -> None:
    """The first adopt records its given values and the defaults of the rest, at version 1."""
    with opened(redis_url, crawl_name) as store:
        settings, crawl = adopt(store, Settings(delay=0.3), {"delay": 0.3})
    assert crawl.version == 1 and settings.delay == 0.3
    stored = record(redis_url, crawl_name)
    assert set(stored) == {*RECORDED, "version"}
    assert (stored["delay"], stored["max_attempts"], stored["obey_robots"]) == ("0.3", "4", "true")


def test_a_worker_without_crawl_flags_takes_the_crawls(redis_url: str, crawl_name: str) -> None:
    """A later worker's defaults give way to the recorded settings."""
    with opened(redis_url, crawl_name) as store:
        adopt(store, Settings(delay=0.3, obey_robots=False), {"delay": 0.3, "obey_robots": False})
        settings, _ = adopt(store, Settings(concurrency=3), {})
    assert (settings.delay, settings.obey_robots, settings.concurrency) == (0.3, False, 3)


def test_a_flag_equal_to_the_crawls_is_accepted(redis_url: str, crawl_name: str) -> None:
    """Repeating the crawl's own value is no disagreement."""
    with opened(redis_url, crawl_name) as store:
        adopt(store, Settings(delay=0.3), {"delay": 0.3})
        settings, _ = adopt(store, Settings(delay=0.3), {"delay": 0.3})
    assert settings.delay == 0.3


def test_a_disagreeing_flag_is_refused_in_one_line_naming_both_values_and_configure(
    redis_url: str, crawl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """join --delay 0.2 against a crawl at 1.0: exit 2, one line, the way to change it."""
    assert join(redis_url, crawl_name, "--delay", "1") == 0
    capsys.readouterr()
    assert join(redis_url, crawl_name, "--delay", "0.2") == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert "--delay 0.2 disagrees with crawl" in lines[0] and "--delay 1.0" in lines[0]
    assert f"hashcrawl configure --crawl {crawl_name} --delay 0.2" in lines[0]


def test_a_switch_that_disagrees_is_refused(
    redis_url: str, crawl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--ignore-robots on a crawl that obeys robots.txt is refused, naming the switch."""
    assert join(redis_url, crawl_name) == 0
    capsys.readouterr()
    assert join(redis_url, crawl_name, "--ignore-robots") == 2
    assert "--ignore-robots disagrees" in capsys.readouterr().err


def test_an_allowed_domain_outside_the_crawls_scope_is_refused(
    redis_url: str, crawl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The starting worker's --allow-domain is the scope; another's must be in it."""
    assert join(redis_url, crawl_name, "--allow-domain", "a.test") == 0
    assert join(redis_url, crawl_name, "--allow-domain", "a.test") == 0
    capsys.readouterr()
    assert join(redis_url, crawl_name, "--allow-domain", "b.test") == 2
    err = capsys.readouterr().err
    assert "--allow-domain b.test is not in crawl" in err
    assert "configure" in err and "--allow-domain b.test" in err


# -- configure ----------------------------------------------------------------------------------


def test_configure_changes_the_settings_atomically_at_a_new_version(
    redis_url: str, crawl_name: str
) -> None:
    """Each change raises the version by one; no change leaves it; the scope widens."""
    with opened(redis_url, crawl_name) as store:
        first, _ = change(store, {"delay": 2.0})
        second, lines = change(store, {"delay": 3.0, "allow_domains": ("b.test",)})
        same, none = change(store, {"delay": 3.0})
        shown = view(store)
    assert (first.version, second.version, same.version) == (1, 2, 2)
    assert lines == ["--delay: 3.0 (was 2.0)"] and none == []
    assert shown["delay"] == 3.0 and shown["allow_domains"] == ["b.test"]


def test_configure_refuses_a_value_out_of_range_and_changes_nothing(
    redis_url: str, crawl_name: str
) -> None:
    """--delay over half the crawl's --lease is refused with the flags' own check."""
    with opened(redis_url, crawl_name) as store:
        change(store, {"delay": 2.0})
        with pytest.raises(ConfigError, match="--delay must be at most half of --lease"):
            change(store, {"delay": 40.0})
    assert record(redis_url, crawl_name)["delay"] == "2.0"


def test_a_fixed_setting_changes_only_while_no_worker_is_a_member(
    redis_url: str, crawl_name: str
) -> None:
    """--lease with a member in the ring is refused; with none, it changes."""
    with opened(redis_url, crawl_name) as store:
        change(store, {})
        store.join("w1", {"pid": 1})
        with pytest.raises(ConfigError, match=r"--lease of .* can change only while no worker"):
            change(store, {"lease": 30.0})
        change(store, {"delay": 0.5})  # not fixed: fine
        store.leave("w1", {})
        assert change(store, {"lease": 30.0})[0].values["lease"] == 30.0


def test_configure_with_a_bad_value_s_flag_mends_the_record(
    redis_url: str, crawl_name: str
) -> None:
    """A hand-broken --delay blocks other changes, and giving --delay mends it."""
    with opened(redis_url, crawl_name) as store:
        change(store, {})
        write(redis_url, crawl_name, delay="fast")
        with pytest.raises(ConfigError, match="give --delay a value too"):
            change(store, {"max_depth": 2})
        mended, lines = change(store, {"delay": 0.5})
    assert mended.values["delay"] == 0.5 and lines == ["--delay: 0.5 (was not usable)"]


def test_configure_and_status_show_the_crawls_settings(
    redis_url: str, crawl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """configure prints the changes then the settings; status prints them by flag."""
    base = ["--redis", redis_url, "--crawl", crawl_name]
    assert join(redis_url, crawl_name) == 0  # records version 1; configure needs a crawl
    capsys.readouterr()
    assert main(["configure", *base, "--delay", "2", "--ignore-robots"]) == 0
    out = capsys.readouterr().out
    assert "--delay: 2.0 (was 1.0)" in out and "  --ignore-robots: yes" in out
    assert main(["configure", *base, "--reset", "ignore-robots"]) == 0
    assert "--ignore-robots: no (was yes)" in capsys.readouterr().out
    assert main(["status", *base]) == 0
    out = capsys.readouterr().out
    assert "settings: version 3" in out and "  --delay: 2.0" in out


# -- stored settings are hostile --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"delay": "fast"}, "--delay: expected a number, got 'fast'"),
        ({"delay": "-1"}, "--delay must be 0 or more"),
        ({"delay": "inf"}, "--delay: expected a finite number"),
        ({"per_host": "0"}, "--per-host must be above 0"),
        ({"delay": "40"}, "--delay must be at most half of --lease"),
        ({"obey_robots": "maybe"}, "--ignore-robots: expected true or false"),
        ({"user_agent": "bot/1\r\nX-Evil: 1"}, "--user-agent must be one line of ASCII"),
        ({"user_agent": "x" * 20_000}, "--user-agent is longer than 10000 characters"),
        ({"max_depth": "9" * 5000}, "--max-depth"),
        ({"version": "two"}, "its version must be a whole number"),
        ({"render": "yes"}, "--render: expected true or false"),
        ({"render_hosts": "*.shop.test, a b"}, "--render-hosts must be comma-separated host"),
    ],
)
def test_a_worker_reading_a_bad_record_says_so_in_one_line_and_exits_2(
    fields: dict[str, str],
    named: str,
    redis_url: str,
    crawl_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Malformed or out-of-range stored settings: one line naming the value, exit 2."""
    with opened(redis_url, crawl_name) as store:
        change(store, {})
    write(redis_url, crawl_name, **fields)
    assert join(redis_url, crawl_name) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "settings in Redis are not usable" in lines[0]
    assert named in lines[0]


def test_status_shows_why_a_bad_record_is_not_usable(redis_url: str, crawl_name: str) -> None:
    """status reports the error in place of the settings instead of failing."""
    with opened(redis_url, crawl_name) as store:
        change(store, {})
        write(redis_url, crawl_name, lease="soon")
        shown = view(store)
    assert shown["version"] is None and "--lease: expected a number" in shown["error"]


# -- a running worker ---------------------------------------------------------------------------


async def _running(
    redis_url: str, crawl: str, check: object, **settings: object
) -> tuple[Worker, BaseException | None]:
    """Run an idle worker until ``check`` (an async callable) returns; what run raised."""
    worker = Worker(redis_url, crawl, idle=None, lease=2.0, grace=0.5, **settings)  # type: ignore[arg-type]
    raised: list[BaseException] = []

    async def run() -> None:
        try:
            await worker.run()
        except ConfigError as exc:
            raised.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        # Started: its settings adopted and its membership made (the shards' check sits
        # between the two, and a check run before the membership would see none).
        started = lambda: worker.crawl_settings is not None and worker.session is not None  # noqa: E731
        await await_until(started, what="the worker started")
        await check(worker)  # type: ignore[operator]
        await await_until(lambda: bool(raised) or worker.session is None, what="run returned")
        worker.stop()
    return worker, (raised[0] if raised else None)


async def test_a_running_worker_applies_a_change_within_a_heartbeat(
    redis_url: str, crawl_name: str
) -> None:
    """configure --delay 0.7: the worker's frontier paces by 0.7 once its heartbeat says so."""

    async def configure(worker: Worker) -> None:
        with opened(redis_url, crawl_name) as store:
            await trio.to_thread.run_sync(lambda: change(store, {"delay": 0.7}))
        await await_until(lambda: worker.settings.delay == 0.7, what="the change applied")
        session = worker.session
        assert session is not None
        assert session.frontier.delay == 0.7 and session.settings.delay == 0.7
        assert worker.crawl_settings is not None and worker.crawl_settings.version == 2
        worker.stop()

    _, raised = await _running(redis_url, crawl_name, configure, delay=0.2)
    assert raised is None


async def test_a_running_worker_stops_and_says_why_on_a_bad_record(
    redis_url: str, crawl_name: str
) -> None:
    """A record broken under a running worker stops it, its hosts handed back, with one line."""

    async def vandalize(worker: Worker) -> None:
        write(redis_url, crawl_name, delay="soon", version="2")

    _, raised = await _running(redis_url, crawl_name, vandalize, delay=0.2)
    assert isinstance(raised, ConfigError) and "--delay: expected a number" in str(raised)
    with opened(redis_url, crawl_name) as store:
        assert store.members()[1] == ()  # it left the ring, not waited out its lease


async def test_a_fixed_setting_changed_under_a_running_worker_stops_it(
    redis_url: str, crawl_name: str
) -> None:
    """A --lease written past configure's check: the worker cannot take it, and stops."""

    async def relent(worker: Worker) -> None:
        write(redis_url, crawl_name, lease="30.0", version="2")

    _, raised = await _running(redis_url, crawl_name, relent, delay=0.2)
    assert isinstance(raised, ConfigError) and "--lease changed while this worker ran" in str(
        raised
    )


def test_render_hosts_recorded_by_the_first_worker_is_the_next_ones(
    redis_url: str, crawl_name: str
) -> None:
    """--render-hosts is the crawl's, as --delay is: stored, and taken by a later worker
    that gives none (so every owner renders the hosts it matches)."""
    with opened(redis_url, crawl_name) as store:
        given = {"render_hosts": "*.shop.test,app.test"}
        adopt(store, Settings(**given), given)
        settings, _ = adopt(store, Settings(), {})
    assert record(redis_url, crawl_name)["render_hosts"] == "*.shop.test,app.test"
    assert settings.render_hosts == "*.shop.test,app.test" and not settings.render


def test_crawl_settings_parse_back_what_they_store() -> None:
    """Every default, written as text and read back, is the value it was."""
    defaults = Settings()
    texts = [str(_text(name, getattr(defaults, name))) for name in RECORDED]
    found = CrawlSettings.from_texts("c", "1", texts)
    assert all(found.values[name] == getattr(defaults, name) for name in RECORDED)


def _text(name: str, value: object) -> str:
    from hashcrawl._store._crawlconfig import to_text

    return to_text(name, value)


def test_a_change_from_a_value_that_looks_like_the_changes_count_is_made(
    redis_url: str, crawl_name: str
) -> None:
    """settings.lua compares each stored text with its new one, not with a neighbour's."""
    with opened(redis_url, crawl_name) as store:
        change(store, {"max_attempts": 1})
        assert record(redis_url, crawl_name)["max_attempts"] == "1"
        now, lines = change(store, {"max_attempts": 2})
    assert now.values["max_attempts"] == 2 and lines == ["--max-attempts: 2 (was 1)"]
