"""Tests for the ``hashcrawl`` command, run as a subprocess against real servers.

Exit status: 0 done; 1 Redis unreachable or lost; 2 a bad URL, crawl name or flag. An
error is one line on standard error starting "hashcrawl: ", and never shows a password.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis

from hashcrawl import Queue
from hashcrawl._cli._parser import build_parser
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from hashcrawl._store._store import Store
from testing.fleet import DEADLINE, wait_until
from testing.testsite import SITE_FLAGS, Resource, Site, SiteServer, generate_site, judge

SECRET = "pw-secret"
TEXT_STATUS_KEYS = ("waiting", "held", "workers", "seen", "fetched", "failed", "ended")
COMMAND_TIMEOUT = DEADLINE  # a ceiling for hangs, never a measure of speed


@attrs.frozen
class Result:
    """How one run of the command ended."""

    code: int
    out: str
    err: str


def hashcrawl(*args: str, stdin: str | bytes | None = None) -> Result:
    """Run ``python -m hashcrawl ARGS`` to the end and collect its output."""
    done = subprocess.run(
        [sys.executable, "-m", "hashcrawl", *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def assert_one_line_error(result: Result, code: int) -> str:
    """The run exited with ``code`` after one "hashcrawl: " line on stderr; returns it."""
    assert result.code == code, result
    assert "Traceback" not in result.err, result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("hashcrawl: "), lines[0]
    return lines[0]


def assert_ok(result: Result) -> str:
    """The run exited 0 with nothing on stderr; returns its stdout."""
    assert (result.code, result.err) == (0, ""), result
    return result.out


def status(redis_url: str, crawl: str) -> dict[str, Any]:
    """``hashcrawl status --json``, parsed."""
    doc: dict[str, Any] = json.loads(
        assert_ok(hashcrawl("status", *at(redis_url, crawl), "--json"))
    )
    return doc


def assert_no_such_crawl(redis_url: str, crawl: str) -> None:
    """``status`` says the crawl does not exist: exit 2, one line naming it."""
    line = assert_one_line_error(hashcrawl("status", *at(redis_url, crawl)), 2)
    assert f"no crawl named {crawl!r}" in line


def at(redis_url: str, crawl: str) -> list[str]:
    return ["--redis", redis_url, "--crawl", crawl]


def crawl_keys(client: redis.Redis, crawl: str) -> set[bytes]:
    return set(client.scan_iter(match=f"hc:\\{{{crawl}\\}}:*"))


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port bound by this test and never listened on, so connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def secret_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server that requires the password SECRET."""
    with RedisServer(directory=tmp_path / "secret-redis", password=SECRET) as server:
        yield server


# -- bad arguments: exit 2 ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["submit", "status", "clear", "dead", "join"])
def test_bad_redis_url_exits_2_with_one_line(command: str) -> None:
    """--redis http://x is refused by every command that takes --redis."""
    urls = ["http://a.example/"] if command == "submit" else []
    line = assert_one_line_error(hashcrawl(command, "--redis", "http://x", *urls), 2)
    assert "--redis must be redis://" in line
    assert "'http://x'" in line


def test_unparsable_redis_url_exits_2_without_its_password() -> None:
    """A URL the standard library cannot split is a bad flag too, not a traceback."""
    result = hashcrawl("status", "--redis", f"redis://:{SECRET}@[::1")
    assert SECRET not in result.out + result.err
    assert_one_line_error(result, 2)


@pytest.mark.parametrize("command", ["submit", "status", "clear", "crawl"])
def test_bad_crawl_name_exits_2_with_one_line(command: str, tmp_path: Path) -> None:
    """--crawl 'a b' is refused before anything connects or starts."""
    if command == "crawl":
        args = ["--state-dir", str(tmp_path / "state"), "http://a.example/"]
    else:
        args = ["--redis", "redis://127.0.0.1:1/0"] + (
            ["http://a.example/"] * (command == "submit")
        )
    line = assert_one_line_error(hashcrawl(command, "--crawl", "a b", *args), 2)
    assert "--crawl must be" in line
    assert "'a b'" in line
    assert not (tmp_path / "state").exists()


BAD_FLAGS = [
    pytest.param(["--delay", "abc"], "--delay", id="delay-not-a-number"),
    pytest.param(["--per-host", "0"], "--per-host", id="per-host-zero"),
    pytest.param(["--delay", "31", "--lease", "60"], "--delay", id="delay-over-half-lease"),
    pytest.param(["--idle", "-1"], "--idle", id="idle-negative"),
]


@pytest.mark.parametrize(("flags", "named"), BAD_FLAGS)
@pytest.mark.parametrize("command", ["crawl", "join"])
def test_bad_flag_value_exits_2_naming_the_flag(
    command: str, flags: list[str], named: str, tmp_path: Path, dead_port: int
) -> None:
    """A bad --delay, --per-host or --idle is refused before anything starts."""
    if command == "crawl":
        where = ["--state-dir", str(tmp_path / "state"), "http://a.example/"]
    else:
        where = ["--redis", f"redis://127.0.0.1:{dead_port}/0"]
    line = assert_one_line_error(hashcrawl(command, *flags, *where), 2)
    assert named in line
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        pytest.param(["--delay", "nan"], "--delay", id="delay-nan"),
        pytest.param(["--workers", "0"], "--workers", id="workers-zero"),
    ],
)
def test_crawl_refuses_flags_that_would_break_it(
    flags: list[str], named: str, tmp_path: Path, dead_port: int
) -> None:
    """--delay nan (which disables pacing) and --workers 0 are bad flags: exit 2, one line."""
    where = ["--state-dir", str(tmp_path / "state"), "--idle", "0.5", "--max-attempts", "1"]
    result = hashcrawl("crawl", *flags, *where, f"http://127.0.0.1:{dead_port}/")
    line = assert_one_line_error(result, 2)
    assert named in line


def test_bare_hashcrawl_prints_usage_and_exits_2() -> None:
    """``hashcrawl`` alone prints the usage with every command, on standard error."""
    result = hashcrawl()
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("usage: hashcrawl")
    for command in ("join", "submit", "status", "clear", "dead", "retry-dead", "crawl"):
        assert f"    {command}" in result.err


# -- Redis unreachable: exit 1 ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["submit", "status", "clear"])
def test_unreachable_redis_exits_1_with_one_line_hiding_the_password(
    command: str, dead_port: int
) -> None:
    """A Redis nobody listens at: one line naming where, no traceback, no password."""
    url = f"redis://:{SECRET}@127.0.0.1:{dead_port}/0"
    urls = ["http://a.example/"] if command == "submit" else []
    result = hashcrawl(command, "--redis", url, *urls)
    line = assert_one_line_error(result, 1)
    assert f"127.0.0.1:{dead_port}" in line
    assert SECRET not in result.out + result.err
    assert result.out == ""


def test_unreachable_redis_while_reading_stdin_exits_1(dead_port: int) -> None:
    """submit - against a dead Redis fails at the first batch with the same one line."""
    url = f"redis://:{SECRET}@127.0.0.1:{dead_port}/0"
    result = hashcrawl("submit", "--new", "--redis", url, "-", stdin="http://a.example/\n")
    assert_one_line_error(result, 1)
    assert SECRET not in result.out + result.err


@pytest.mark.parametrize("given", ["wrong-pw", None])
def test_refused_password_exits_1_without_showing_any_password(
    secret_server: RedisServer, given: str | None
) -> None:
    """A wrong or missing password: exit 1, one line, neither password shown."""
    auth = f":{given}@" if given else ""
    result = hashcrawl("status", "--redis", f"redis://{auth}127.0.0.1:{secret_server.port}/0")
    assert_one_line_error(result, 1)
    assert SECRET not in result.out + result.err
    assert "wrong-pw" not in result.out + result.err


def test_password_server_works_end_to_end_without_echoing_it(secret_server: RedisServer) -> None:
    """With the right password submit, status and clear work and print no password."""
    runs = [
        hashcrawl("submit", "--new", "--redis", secret_server.url, "http://a.example/"),
        hashcrawl("status", "--redis", secret_server.url, "--json"),
        hashcrawl("status", "--redis", secret_server.url),
        hashcrawl("clear", "--yes", "--redis", secret_server.url),
    ]
    for result in runs:
        assert_ok(result)
        assert SECRET not in result.out
    assert json.loads(runs[1].out)["seen"] == 1


# -- submit -----------------------------------------------------------------------------------


def test_submit_then_status_counts_waiting_seen_and_queued(redis_url: str, crawl_name: str) -> None:
    """Submitted URLs wait in the queue and are counted as seen and queued."""
    urls = ["http://a.example/", "http://a.example/2", "http://b.example/"]
    out = assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), *urls))
    assert out == "submitted 3 new URLs\n"
    doc = status(redis_url, crawl_name)
    assert (doc["waiting"], doc["seen"], doc["queued"], doc["held"]) == (3, 3, 3, 0)


def test_submitting_a_seen_url_again_adds_nothing(redis_url: str, crawl_name: str) -> None:
    """The seen filter leaves a URL out the second time, however it is spelled."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/x"))
    again = hashcrawl("submit", "--new", *at(redis_url, crawl_name), "HTTP://A.example:80/x#frag")
    assert assert_ok(again) == "submitted 0 new URLs\n"
    doc = status(redis_url, crawl_name)
    assert (doc["waiting"], doc["seen"], doc["queued"]) == (1, 1, 1)


def test_dont_filter_submits_a_seen_url_again(redis_url: str, crawl_name: str) -> None:
    """--dont-filter puts a seen URL in the queue again: queued grows past seen."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/"))
    again = hashcrawl(
        "submit", "--new", *at(redis_url, crawl_name), "--dont-filter", "http://a.example/"
    )
    assert assert_ok(again) == "submitted 1 new URL\n"
    doc = status(redis_url, crawl_name)
    assert (doc["waiting"], doc["seen"], doc["queued"]) == (2, 1, 2)


@pytest.mark.parametrize(
    "bad", ["ftp://a.example/", "not a url", "http://user:pw-secret@a.example/", "-"]
)
def test_bad_url_among_arguments_exits_2_and_submits_nothing(
    redis_url: str, crawl_name: str, bad: str
) -> None:
    """One bad URL anywhere in the arguments: exit 2, and none of the others went in."""
    urls = ["http://a.example/1", bad, "http://a.example/2"]
    result = hashcrawl("submit", "--new", *at(redis_url, crawl_name), *urls)
    line = assert_one_line_error(result, 2)
    assert "pw-secret" not in line
    assert_no_such_crawl(redis_url, crawl_name)


def test_submit_from_stdin_reports_bad_lines_by_number_and_adds_the_rest(
    redis_url: str, crawl_name: str
) -> None:
    """Bad lines are named with their line numbers; blank lines are skipped; exit 2."""
    lines = ["http://a.example/1", "", "ftp://a.example/", "http://a.example/2", "junk", ""]
    result = hashcrawl("submit", "--new", *at(redis_url, crawl_name), "-", stdin="\n".join(lines))
    assert result.code == 2
    errors = result.err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith("hashcrawl: line 3: ")
    assert errors[1].startswith("hashcrawl: line 5: ")
    assert result.out == "submitted 2 new URLs; 2 bad lines skipped\n"
    assert status(redis_url, crawl_name)["seen"] == 2


def test_submit_from_stdin_commits_a_batch_before_input_ends(
    redis_url: str, crawl_name: str
) -> None:
    """A full batch of 1000 lines is in Redis while standard input is still open."""
    inbox = f"hc:{{{crawl_name}}}:inbox"
    read, write = os.pipe()
    args = [sys.executable, "-m", "hashcrawl", "submit", "--new", *at(redis_url, crawl_name), "-"]
    with (
        subprocess.Popen(args, stdin=read, stdout=subprocess.PIPE) as process,
        # The block below is the wait's ceiling: the socket must not give up first
        # (redis-py's default socket timeout is 5 s; a loaded machine starts the
        # command in more).
        redis.Redis.from_url(redis_url, socket_timeout=DEADLINE + 10) as client,
    ):
        os.close(read)
        with open(write, "wb") as pipe:
            pipe.write(b"".join(b"http://a.example/%d\n" % i for i in range(1000)))
            pipe.flush()
            # Blocks until the batch's entries arrive (a batch may be committed in parts):
            # no sleeping, no polling.
            arrived, last = 0, "0"
            while arrived < 1000:
                got = client.xread({inbox: last}, count=1000, block=int(DEADLINE * 1000))
                assert got, f"only {arrived} entries arrived"
                arrived += len(got[0][1])
                last = got[0][1][-1][0]
            assert client.xlen(inbox) == 1000
            pipe.write(b"http://a.example/last\n")
        out, _ = process.communicate(timeout=COMMAND_TIMEOUT)
    assert (process.returncode, out) == (0, b"submitted 1001 new URLs\n")


def _feed(pipe: int, lines: Iterable[str], failures: list[BaseException]) -> None:
    """Write ``lines`` to the pipe's write end and close it, keeping any error for the test."""
    try:
        with open(pipe, "wb", buffering=1 << 16) as out:
            for line in lines:
                out.write(line.encode())
    except BaseException as exc:  # the test re-raises it; a thread must not die loudly
        failures.append(exc)


def test_submit_from_stdin_takes_many_batches_through_a_pipe(
    redis_url: str, crawl_name: str
) -> None:
    """20,000 URLs streamed into ``submit -`` all go in, a batch at a time.

    Twenty batches of a thousand (the bound on one commit), 0.5 MB through a 64 KiB pipe
    (the writer blocks until the command has read on): what 200,000 URLs proved. Seven
    hosts, not 97: each name is looked up (twice, by the command and by Queue.submit, up
    to 64 names), which took 25 of the 39 s where .example names take 0.2 s to fail;
    the bound on look-ups has its own test (test_addresses).
    """
    count = 20_000
    lines = (f"http://h{i % 7}.example/p/{i}\n" for i in range(count))
    read, write = os.pipe()
    failures: list[BaseException] = []
    args = [sys.executable, "-m", "hashcrawl", "submit", "--new", *at(redis_url, crawl_name), "-"]
    with subprocess.Popen(
        args, stdin=read, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        os.close(read)
        feeder = threading.Thread(target=_feed, args=(write, lines, failures))
        feeder.start()
        out, err = process.communicate(timeout=COMMAND_TIMEOUT)
        feeder.join()
    assert not failures
    assert (process.returncode, out, err) == (0, b"submitted 20000 new URLs\n", b"")
    doc = status(redis_url, crawl_name)
    assert (doc["seen"], doc["queued"], doc["waiting"]) == (count, count, count)


# -- status -----------------------------------------------------------------------------------


def test_status_text_lists_every_count(redis_url: str, crawl_name: str) -> None:
    """The text form has a ``key: value`` line for each count, matching the JSON form."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/"))
    out = assert_ok(hashcrawl("status", *at(redis_url, crawl_name)))
    shown = dict(line.split(": ", 1) for line in out.splitlines())
    assert set(TEXT_STATUS_KEYS) <= shown.keys()
    doc = status(redis_url, crawl_name)
    for key in TEXT_STATUS_KEYS:
        assert shown[key] == str(doc[key])
    assert (shown["waiting"], shown["seen"], shown["ended"]) == ("1", "1", "False")


def test_status_json_is_valid_json_with_every_key(redis_url: str, crawl_name: str) -> None:
    """--json prints one JSON object with the counts and the member list."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/"))
    doc = status(redis_url, crawl_name)
    assert set(TEXT_STATUS_KEYS) | {"members", "crawl", "queued"} <= doc.keys()
    assert doc["crawl"] == crawl_name
    assert doc["members"] == []
    assert (doc["exists"], doc["ended"]) == (True, False)


def _read_until(stream: Any, text: str, *, timeout: float) -> str:
    """Read a process's stream until a line containing ``text``; returns that line."""
    buffer = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(deadline - time.monotonic()):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                if text in line:
                    return line
    raise AssertionError(f"no line with {text!r} in: {buffer.decode(errors='replace')}")


def test_status_shows_a_joined_worker_and_what_it_fetched(redis_url: str, crawl_name: str) -> None:
    """A running worker is a member (id, hosts, fetched); after it stops, totals remain."""
    site = generate_site(pages=6, hosts=2, seed=5, port=0)
    args = [sys.executable, "-m", "hashcrawl", "join", *at(redis_url, crawl_name), *SITE_FLAGS]
    args += ["--delay", "0", "--idle", "none", "--lease", "10", "-v", "--span-hosts"]
    with SiteServer(site) as server:
        assert_ok(
            hashcrawl("submit", "--new", *at(redis_url, crawl_name), *SITE_FLAGS, server.site.root)
        )
        with subprocess.Popen(args, stderr=subprocess.PIPE) as worker:
            try:
                joined = _read_until(worker.stderr, "joined crawl", timeout=DEADLINE)
                worker_id = joined.split("hashcrawl: ", 1)[1].split()[0]
                pages = len(server.site.expected())
                assert server.wait_for_requests(pages + len(site.hosts), timeout=DEADLINE)
                doc = status(redis_url, crawl_name)
                text = assert_ok(hashcrawl("status", *at(redis_url, crawl_name)))
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.communicate(timeout=COMMAND_TIMEOUT)
        fetched = sum(not r.is_robots for r in server.requests())
    assert worker.returncode == 0
    assert doc["workers"] == 1
    (member,) = doc["members"]
    assert member["id"] == worker_id
    assert isinstance(member["hosts"], int) and isinstance(member["fetched"], int)
    assert f"  {worker_id}: " in text
    after = status(redis_url, crawl_name)
    assert (after["workers"], after["members"], after["ended"]) == (0, [], True)
    assert after["fetched"] == fetched == pages


def test_status_counts_entries_parked_by_a_stopped_worker_as_waiting(
    redis_url: str, crawl_name: str
) -> None:
    """A worker whose buffer overflowed parks entries in Redis; status still counts them.

    With --max-buffer 5, a one-host site's links overflow into the host's park set. Once
    the worker has stopped, everything the crawl still has to do sits in the inbox or a
    park set, and ``waiting`` must count both, or an operator reads a half-done crawl
    as nearly (or entirely: ``ended``) finished and clears it.
    """
    site = generate_site(pages=60, hosts=1, seed=5, port=0)
    args = [sys.executable, "-m", "hashcrawl", "join", *at(redis_url, crawl_name), *SITE_FLAGS]
    args += ["--delay", "0.01", "--idle", "none", "--max-buffer", "5", "--grace", "1"]
    args.append("--span-hosts")  # the site links its hosts from the first one
    with SiteServer(site) as server:
        assert_ok(
            hashcrawl("submit", "--new", *at(redis_url, crawl_name), *SITE_FLAGS, server.site.root)
        )
        with subprocess.Popen(args, stderr=subprocess.DEVNULL) as worker:
            try:
                assert server.wait_for_requests(12, timeout=DEADLINE)
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=COMMAND_TIMEOUT)
    assert worker.returncode == 0
    with redis.Redis.from_url(redis_url) as client:
        prefix = f"hc:{{{crawl_name}}}:"
        parked = sum(client.zcard(key) for key in client.scan_iter(match=f"{prefix}park:*"))
        streams = client.scan_iter(match=f"{prefix}*", _type="stream")
        in_streams = sum(client.xlen(key) for key in streams)
    assert parked > 0, "the worker parked nothing: the test did not reach its case"
    doc = status(redis_url, crawl_name)
    assert (doc["workers"], doc["held"]) == (0, 0)
    assert doc["waiting"] == in_streams + parked
    assert doc["ended"] is False


# -- clear ------------------------------------------------------------------------------------


def test_clear_deletes_every_key_of_the_crawl_and_only_that_crawl(
    redis_url: str, crawl_name: str
) -> None:
    """clear removes the crawl's keys; another crawl on the same server keeps all of its."""
    other = crawl_name + "-other"
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/"))
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, other), "http://a.example/", "http://b/"))
    with redis.Redis.from_url(redis_url) as client:
        mine, theirs = crawl_keys(client, crawl_name), crawl_keys(client, other)
        assert mine and theirs
        out = assert_ok(hashcrawl("clear", "--yes", *at(redis_url, crawl_name)))
        assert out == f"deleted {len(mine)} keys\n"
        assert crawl_keys(client, crawl_name) == set()
        assert crawl_keys(client, other) == theirs
    assert status(redis_url, other)["seen"] == 2
    assert_no_such_crawl(redis_url, crawl_name)
    assert_ok(hashcrawl("clear", "--yes", *at(redis_url, other)))


# -- redis+unix:// ---------------------------------------------------------------------------


def test_unix_socket_url_works_end_to_end(tmp_path: Path) -> None:
    """submit, status and clear over redis+unix://, password in the query, never echoed."""
    with RedisServer(directory=tmp_path / "r", unix_socket=True, password=SECRET) as server:
        url = server.url
        assert url.startswith("redis+unix://") and SECRET in url
        runs = [
            hashcrawl("submit", "--new", "--redis", url, "http://a.example/", "http://b.example/")
        ]
        runs.append(hashcrawl("status", "--redis", url, "--json"))
        assert json.loads(runs[-1].out)["seen"] == 2
        runs.append(hashcrawl("clear", "--yes", "--redis", url))
        assert_no_such_crawl(url, "default")
    for result in runs:
        assert_ok(result)
        assert SECRET not in result.out


def test_unix_socket_in_a_directory_with_a_space_is_reachable(tmp_path: Path) -> None:
    """RedisServer.url percent-encodes a space in the socket path; the CLI must decode it."""
    with RedisServer(directory=tmp_path / "my redis", unix_socket=True) as server:
        assert "%20" in server.url
        assert_ok(hashcrawl("submit", "--new", "--redis", server.url, "http://a.example/"))
        assert_ok(hashcrawl("status", "--redis", server.url))


# -- crawl ------------------------------------------------------------------------------------


def _items(path: Path) -> list[str]:
    return [json.loads(line)["url"] for line in path.read_text().splitlines()]


def _page_requests(server: SiteServer, start: int = 0) -> list[str]:
    return [r.url for r in server.requests()[start:] if not r.is_robots]


def _crawl(site: Site, output: Path, state: Path, *, workers: int = 2, idle: float = 1) -> Result:
    flags = ["--workers", str(workers), "--delay", "0.02", "--idle", str(idle), "-q"]
    flags += ["--span-hosts", *SITE_FLAGS]
    return hashcrawl("crawl", site.root, "-o", str(output), *flags, "--state-dir", str(state))


def test_crawl_fetches_every_page_once_and_a_rerun_fetches_nothing(tmp_path: Path) -> None:
    """``hashcrawl crawl`` gets the whole site without duplicates; the seen filter persists.

    The second run on the same --state-dir restarts the private Redis from its AOF, finds
    the start URL seen, and ends without a page request.
    """
    site = generate_site(pages=100, hosts=4, seed=11, port=0)
    output, state = tmp_path / "items.jsonl", tmp_path / "state"
    with SiteServer(site) as server:
        assert_ok(_crawl(server.site, output, state))
        expected = server.site.expected()
        verdict = judge(server.site, server.requests(), [output], delay=0.02)
        requested = _page_requests(server)
        assert verdict.missing == ()
        assert verdict.missing_from_output == ()
        assert (verdict.duplicates, verdict.unexpected, verdict.forbidden_fetched) == (0, (), ())
        assert collections.Counter(_items(output)) == collections.Counter(expected)
        assert sorted(requested) == sorted(expected)

        logged = len(server.requests())
        assert_ok(_crawl(server.site, output, state))
        assert _page_requests(server, logged) == []
    assert len(_items(output)) == len(expected)


def test_crawl_state_dir_with_a_space_works(tmp_path: Path) -> None:
    """A --state-dir with a space in its path is a usable place for the private Redis."""
    site = generate_site(pages=3, hosts=1, seed=2, port=0)
    output, state = tmp_path / "items.jsonl", tmp_path / "crawl state"
    with SiteServer(site) as server:
        result = _crawl(server.site, output, state, workers=1, idle=0.5)
        expected = server.site.expected()
    assert_ok(result)
    assert set(_items(output)) == expected


# -- the exit-status table, row by row ----------------------------------------------------------

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def _section(title: str) -> str:
    """The text of docs/operations.md under ``## title``, up to the next ``## ``."""
    return OPERATIONS.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _table_cells(text: str) -> list[str]:
    """The first cell of every body row of the markdown tables in ``text``."""
    rows = re.findall(r"^\| ([^|]+?) \|", text, re.MULTILINE)
    return [row for row in rows if row not in ("status", "field", "---")]


@attrs.frozen
class Where:
    """What a scenario may use: a shared Redis, a fresh crawl name, a scratch directory."""

    redis_url: str
    crawl: str
    tmp: Path
    dead_port: int


def _ended_crawl(where: Where) -> Result:
    site = generate_site(pages=3, hosts=1, seed=2, port=0)
    with SiteServer(site) as server:
        return _crawl(server.site, where.tmp / "items.jsonl", where.tmp / "state", workers=1)


def _redis_silent_at_start(where: Where) -> Result:
    # --lease 600: without its start check, join would wait a lease for a Redis that
    # never answered, far longer than COMMAND_TIMEOUT.
    url = f"redis://127.0.0.1:{where.dead_port}/0"
    return hashcrawl("join", "--redis", url, "--lease", "600")


def _unwritable_output(where: Where) -> Result:
    return hashcrawl("crawl", "-o", str(where.tmp / "nodir" / "items.jsonl"), "http://a.example/")


def _start_url_refused(where: Where) -> Result:
    url = f"http://127.0.0.1:{where.dead_port}/"
    flags = ["--idle", "0.5", "--max-attempts", "1", "--workers", "1", "-q", "--allow-net"]
    flags.append("127.0.0.1")  # refused by nothing listening, not by the address rule
    return hashcrawl("crawl", *flags, "--state-dir", str(where.tmp / "state"), url)


def _ctrl_c_acts() -> None:
    """In a child before it runs: Ctrl-C does what it does to a terminal's foreground job.

    A suite started in the background (``cmd &`` in a script) inherits SIGINT ignored, and
    so would each hashcrawl it starts: Python then installs no KeyboardInterrupt, and a
    Ctrl-C test would see the child go on as if no Ctrl-C had come.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ctrl_c_while_starting(where: Where) -> Result:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        args = [sys.executable, "-m", "hashcrawl", "join", "--redis", url]
        with subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ctrl_c_acts
        ) as process:
            connection, _ = listener.accept()  # join is waiting for its first answer
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=COMMAND_TIMEOUT)
            connection.close()
    return Result(process.returncode, out.decode(), err.decode())


def _closed_standard_output(where: Where) -> Result:
    assert_ok(hashcrawl("submit", "--new", *at(where.redis_url, where.crawl), "http://a.example/"))
    read, write = os.pipe()
    os.close(read)  # the reader has gone, like ``| head`` once it has its lines
    args = [sys.executable, "-m", "hashcrawl", "status", *at(where.redis_url, where.crawl)]
    with open(write, "wb") as closed:
        done = subprocess.run(args, stdout=closed, stderr=subprocess.PIPE, check=False)
    return Result(done.returncode, "", done.stderr.decode())


EXIT_SCENARIOS = {
    0: _ended_crawl,
    1: _redis_silent_at_start,
    2: _unwritable_output,
    3: _start_url_refused,
    130: _ctrl_c_while_starting,
    141: _closed_standard_output,
}


def test_every_documented_exit_status_has_a_scenario() -> None:
    """The exit-status table of docs/operations.md lists exactly the statuses tested below."""
    documented = [int(cell) for cell in _table_cells(_section("Exit status"))]
    assert sorted(documented) == sorted(EXIT_SCENARIOS)


@pytest.mark.parametrize("code", sorted(EXIT_SCENARIOS))
def test_documented_exit_status_happens_as_documented(
    code: int, redis_url: str, crawl_name: str, tmp_path: Path, dead_port: int
) -> None:
    """Each row of the exit-status table: that status, no traceback, at most one line."""
    result = EXIT_SCENARIOS[code](Where(redis_url, crawl_name, tmp_path, dead_port))
    if code in (0, 141):
        assert (result.code, result.err) == (code, ""), result
    else:
        assert_one_line_error(result, code)


# -- no silent failure: crawl says why it fetched nothing -------------------------------------


def _robots_closed_site() -> Site:
    """One host whose robots.txt disallows everything."""
    host = "127.0.0.2"
    resources = {
        (host, "/robots.txt"): Resource(200, "text/plain", "User-agent: *\nDisallow: /\n"),
        (host, "/"): Resource(200, "text/html", "<html><title>home</title></html>"),
    }
    return Site(port=0, hosts=(host,), resources=resources, crawl_delays={})


def _quick_crawl(state: Path, *urls: str, extra: Iterable[str] = ()) -> Result:
    flags = ["--idle", "0.5", "--max-attempts", "2", "--workers", "1", "--timeout", "5", "-q"]
    flags += ["--delay", "0.05"]  # the default second between requests, on loopback
    flags += [*SITE_FLAGS, "--allow-net", "127.0.0.1"]  # the test sites, and a dead port
    return hashcrawl("crawl", *flags, *extra, "--state-dir", str(state), *urls)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("refused", "connection refused"),
        ("tls-to-http", "does not speak TLS"),
        ("dns", "DNS lookup failed"),
        ("robots", "robots.txt disallows"),
    ],
)
def test_crawl_that_fetched_no_start_url_exits_3_saying_why(
    case: str, reason: str, tmp_path: Path, dead_port: int
) -> None:
    """Refused, TLS to an http-only server, DNS, robots.txt: exit 3 and one line naming it."""
    site = (
        _robots_closed_site()
        if case == "robots"
        else generate_site(pages=2, hosts=1, seed=1, port=0)
    )
    with SiteServer(site) as server:
        url = {
            "refused": f"http://127.0.0.1:{dead_port}/",
            "tls-to-http": server.site.root.replace("http://", "https://"),
            "dns": "http://no-such-host.invalid/",
            "robots": server.site.root,
        }[case]
        result = _quick_crawl(tmp_path / "state", url, extra=["-o", str(tmp_path / "out.jsonl")])
        pages = _page_requests(server)
    line = assert_one_line_error(result, 3)
    assert reason in line
    assert pages == []


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


def test_failed_start_url_is_fetched_again_by_the_same_command(tmp_path: Path) -> None:
    """A start URL dead-lettered by one run is fetched by the next run of the same command."""
    port = _free_port("127.0.0.2")
    site = generate_site(pages=3, hosts=1, seed=3, port=port)
    output, state = tmp_path / "items.jsonl", tmp_path / "state"
    first = _quick_crawl(state, site.root, extra=["-o", str(output)])
    assert_one_line_error(first, 3)
    with SiteServer(site) as server:
        second = _quick_crawl(state, site.root, extra=["-o", str(output)])
        requested = _page_requests(server)
    assert_ok(second)
    assert site.root in requested
    assert set(_items(output)) == site.expected()


def test_robots_refused_start_url_is_asked_again_by_the_same_command(tmp_path: Path) -> None:
    """A crawl that never fetched a page submits its start URLs again on the next run."""
    state = tmp_path / "state"
    with SiteServer(_robots_closed_site()) as server:
        for _ in range(2):
            assert_one_line_error(_quick_crawl(state, server.site.root), 3)
        robots_asked = sum(r.is_robots for r in server.requests())
    assert robots_asked == 2


def test_fresh_forgets_earlier_runs_and_fetches_everything_again(tmp_path: Path) -> None:
    """--fresh deletes the crawl's state: every page is requested again."""
    site = generate_site(pages=4, hosts=1, seed=4, port=0)
    state = tmp_path / "state"
    with SiteServer(site) as server:
        assert_ok(_quick_crawl(state, server.site.root, extra=["-o", str(tmp_path / "a.jsonl")]))
        first = sorted(_page_requests(server))
        logged = len(server.requests())
        again = _quick_crawl(
            state, server.site.root, extra=["--fresh", "-o", str(tmp_path / "b.jsonl")]
        )
        assert_ok(again)
        second = sorted(_page_requests(server, logged))
    assert first == second == sorted(server.site.expected())


def test_crawl_runs_a_spider_and_takes_its_start_urls(tmp_path: Path) -> None:
    """crawl --spider FILE with no URL crawls the spider's start_urls through its parse."""
    site = generate_site(pages=3, hosts=1, seed=6, port=0)
    output = tmp_path / "items.jsonl"
    with SiteServer(site) as server:
        spider = tmp_path / "titles.py"
        spider.write_text(
            "import hashcrawl\n\n"
            "class Titles(hashcrawl.Spider):\n"
            f"    start_urls = [{server.site.root!r}]\n\n"
            "    def parse(self, response):\n"
            "        yield {'url': response.request.url, 'kind': 'title'}\n"
        )
        result = _quick_crawl(
            tmp_path / "state", extra=["--spider", str(spider), "-o", str(output)]
        )
    assert_ok(result)
    items = [json.loads(line) for line in output.read_text().splitlines()]
    assert items == [{"url": server.site.root, "kind": "title"}]


# -- Ctrl-C -------------------------------------------------------------------------------------


def _start_crawl(site: Site, state: Path, *flags: str) -> subprocess.Popen[bytes]:
    """A crawl in its own process group, as a shell runs a job; stderr is piped."""
    args = [sys.executable, "-m", "hashcrawl", "crawl", site.root, "--state-dir", str(state)]
    args += ["-o", str(state.parent / "items.jsonl"), *SITE_FLAGS, *flags]
    return subprocess.Popen(
        args,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_ctrl_c_acts,
    )


def _ctrl_c(process: subprocess.Popen[bytes]) -> None:
    """What a terminal does on Ctrl-C: SIGINT to every process of the foreground group."""
    os.killpg(process.pid, signal.SIGINT)


def test_first_ctrl_c_stops_a_crawl_with_one_line_and_exit_0(tmp_path: Path) -> None:
    """One Ctrl-C: one "stopping" line whatever the number of workers, then exit 0."""
    site = generate_site(pages=30, hosts=3, seed=7, port=0)
    with SiteServer(site, latency=0.2) as server:
        process = _start_crawl(server.site, tmp_path / "state", "--workers", "3", "--delay", "0.3")
        assert server.wait_for_requests(4, timeout=DEADLINE)
        _ctrl_c(process)
        _, err = process.communicate(timeout=COMMAND_TIMEOUT)
    lines = err.decode().splitlines()
    assert process.returncode == 0, lines
    stops = [line for line in lines if line.startswith("hashcrawl: stop")]  # not the summary
    assert len(stops) == 1, lines
    assert stops[0].startswith("hashcrawl: stopping")


def test_second_ctrl_c_exits_1_at_once_and_the_next_run_resumes_without_a_lease(
    tmp_path: Path,
) -> None:
    """A second Ctrl-C kills the workers (exit 1, one more line); a re-run finishes the site.

    The lease is ten minutes: a re-run that waited for the killed workers' lease to
    pass would outlast COMMAND_TIMEOUT many times over.
    """
    site = generate_site(pages=4, hosts=2, seed=8, port=0)
    state = tmp_path / "state"
    flags = ["--lease", "600", "--grace", "300", "--delay", "0.05", "--idle", "0.5", "--span-hosts"]
    # A host handed over while its request is out is busy for the new owner until that
    # request's --timeout at most: keep it short (twice the latency), so the re-run is quick.
    flags += ["--timeout", "4"]
    # Each answer takes 2 s, so the second Ctrl-C finds the workers still in their grace.
    with SiteServer(site, latency=2.0) as server:
        process = _start_crawl(server.site, state, *flags)
        assert server.wait_for_requests(3, timeout=DEADLINE)
        _ctrl_c(process)
        assert process.stderr is not None
        _read_until(process.stderr, "stopping", timeout=DEADLINE)
        _ctrl_c(process)
        _, rest = process.communicate(timeout=COMMAND_TIMEOUT)
        assert process.returncode == 1
        stops = [line for line in rest.decode().splitlines() if line.startswith("hashcrawl: stop")]
        assert stops == [
            "hashcrawl: stopped at once; run the same command again to go on where it stopped"
        ]
        server.latency = 0.0  # the slow answers were for the Ctrl-Cs; the re-run needs none
        again = hashcrawl(
            "crawl", server.site.root, "--state-dir", str(state), "-q", *SITE_FLAGS, *flags
        )
        assert_ok(again)
        verdict = judge(server.site, server.requests(), [], delay=0.05)
    assert verdict.missing == ()


INTERRUPTED_IMPORT = """
import importlib.abc, sys
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hashcrawl._cli._commands":
            raise KeyboardInterrupt  # as a Ctrl-C lands while the command imports
sys.meta_path.insert(0, Interrupt())
from hashcrawl.__main__ import run
raise SystemExit(run())
"""


def test_ctrl_c_while_the_command_imports_prints_one_line_and_exits_130() -> None:
    """A Ctrl-C during hashcrawl's imports: "interrupted", exit 130, no traceback."""
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT, "crawl", "http://a.example/"],
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    result = Result(done.returncode, done.stdout.decode(), done.stderr.decode())
    assert assert_one_line_error(result, 130) == "hashcrawl: interrupted"


def _wait_for_path(path: Path, process: subprocess.Popen[bytes]) -> None:
    """Poll until ``path`` exists (the crawl got that far) or the process has ended."""
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while not path.exists() and process.poll() is None:
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("after", [0.0, 0.1, 0.3])
def test_ctrl_c_while_a_crawl_starts_prints_no_traceback(
    after: float, tmp_path: Path, dead_port: int
) -> None:
    """A Ctrl-C while the private Redis or the workers start ends without a traceback.

    The Ctrl-C comes once the crawl has made its state directory (its own imports are
    done), then at a few sampled moments of the start-up that follows.
    """
    url = f"http://127.0.0.1:{dead_port}/"
    state = tmp_path / "s"
    args = [sys.executable, "-m", "hashcrawl", "crawl", url, "--state-dir", str(state)]
    args += ["--idle", "0.5", "--max-attempts", "1", "--workers", "2", "-q"]
    args += ["--allow-net", "127.0.0.1"]  # nothing listens there: the crawl must start
    with subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_ctrl_c_acts,
    ) as process:
        _wait_for_path(state / "default", process)
        time.sleep(after)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=COMMAND_TIMEOUT)
    text = err.decode()
    assert "Traceback" not in text, text
    assert len(text.splitlines()) <= 1, text
    assert process.returncode in (0, 3, 130), text


# -- status that tells the truth ------------------------------------------------------------------


def _ancient_member(redis_url: str, crawl: str, *, lease_ms: int = 5_000) -> str:
    """Join a member whose only heartbeat was at server time 1 s after the epoch."""
    store = Store(RedisURL.parse(redis_url), crawl, clock=lambda: 1_000)
    try:
        worker = "ghost-1-abcd"
        store.join(worker, {"host": "ghost", "pid": 1, "lease_ms": lease_ms})
        store.heartbeat(worker, lease_ms=lease_ms, applied=1, known_epoch=1, stats={"hosts": 1})
    finally:
        store.close()
    return worker


def test_status_shows_a_member_past_its_lease_as_stale_and_not_alive(
    redis_url: str, crawl_name: str
) -> None:
    """A member silent longer than its lease is listed as stale, not counted in workers."""
    worker = _ancient_member(redis_url, crawl_name)
    assert_ok(hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/"))
    doc = status(redis_url, crawl_name)
    assert (doc["workers"], doc["stale"]) == (0, 1)
    (member,) = doc["members"]
    assert (member["id"], member["stale"]) == (worker, True)
    text = assert_ok(hashcrawl("status", *at(redis_url, crawl_name)))
    assert f"  {worker}: 1 host, 0 fetched (stale" in text


def test_status_of_an_unknown_crawl_names_the_crawls_that_exist(redis_server: RedisServer) -> None:
    """A misspelled --crawl: exit 2, one line naming it and the crawls on that Redis."""
    for crawl in ("books", "news"):
        assert_ok(hashcrawl("submit", "--new", *at(redis_server.url, crawl), "http://a.example/"))
    for extra in ([], ["--json"]):
        result = hashcrawl("status", *at(redis_server.url, "bokos"), *extra)
        line = assert_one_line_error(result, 2)
        assert "no crawl named 'bokos'" in line
        assert line.endswith("crawls there: books, news")


@pytest.mark.parametrize(
    "command", [["dead"], ["retry-dead"], ["configure"], ["configure", "--delay", "2"]]
)
def test_a_mistyped_crawl_name_is_refused_and_nothing_is_created(
    command: list[str], redis_server: RedisServer
) -> None:
    """dead, retry-dead and configure of a crawl that does not exist: exit 2, one line
    naming it and those that exist; configure creates no crawl."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_server.url, "books"), "http://a.example/"))
    result = hashcrawl(command[0], *at(redis_server.url, "bokos"), *command[1:])
    line = assert_one_line_error(result, 2)
    assert "no crawl named 'bokos'" in line and line.endswith("crawls there: books")
    client = redis.Redis.from_url(redis_server.url)
    assert crawl_keys(client, "bokos") == set()


def test_a_crawl_that_does_not_exist_has_not_ended(redis_url: str, crawl_name: str) -> None:
    """Queue.status() of a crawl with no keys says it does not exist and has not ended."""
    with Queue(redis_url, crawl_name) as queue:
        doc = queue.status()
    assert (doc["exists"], doc["ended"], doc["workers"]) == (False, False, 0)


def _documented_fields() -> tuple[set[str], set[str]]:
    """The status fields docs/operations.md lists: (top level, each member's)."""
    top, member = _section("Status").split("Each of `members`", 1)
    fields = [set(), set()]
    for names, table in zip(fields, (top, member), strict=True):
        for cell in _table_cells(table):
            names.update(re.findall(r"`([a-z_]+)`", cell))
    return fields[0], fields[1]


def test_every_status_json_field_is_documented_and_nothing_else(
    redis_url: str, crawl_name: str
) -> None:
    """docs/operations.md lists exactly the keys --json prints, members' keys included."""
    _ancient_member(redis_url, crawl_name)
    doc = status(redis_url, crawl_name)
    top, member = _documented_fields()
    assert set(doc) == top
    assert set(doc["members"][0]) == member


# -- one line and the documented status for every user error ----------------------------------


def test_unwritable_output_file_exits_2_for_join_too(tmp_path: Path, dead_port: int) -> None:
    """join -o nodir/items.jsonl: one line naming the file, before connecting anywhere."""
    output = str(tmp_path / "nodir" / "items.jsonl")
    result = hashcrawl("join", "--redis", f"redis://127.0.0.1:{dead_port}/0", "-o", output)
    line = assert_one_line_error(result, 2)
    assert output in line and "No such file or directory" in line


def test_redis_database_the_server_lacks_is_a_bad_flag(redis_url: str) -> None:
    """--redis .../99 on a server with 16 databases: exit 2, one line naming the database."""
    url = redis_url.rsplit("/", 1)[0] + "/99"
    for command in (["status"], ["submit", "http://a.example/"]):
        line = assert_one_line_error(hashcrawl(command[0], "--redis", url, *command[1:]), 2)
        assert "database 99" in line


def test_join_gives_up_within_seconds_on_a_redis_that_never_answers() -> None:
    """A server that accepts and never answers: exit 1 long before a (ten-minute) lease."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        result = hashcrawl("join", "--redis", url, "--lease", "600")
    line = assert_one_line_error(result, 1)
    assert "no answer in time" in line


# -- CLI conventions ------------------------------------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"hashcrawl": parser, **action.choices}


def test_every_flag_has_help_and_every_default_is_shown() -> None:
    """No flag without help text; a flag with a default says it in --help."""
    for name, parser in _subparsers().items():
        assert parser.allow_abbrev is False, name
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (name, action.dest)
            takes_value = action.nargs != 0 and action.option_strings
            if takes_value and action.default not in (None, [], ()):
                assert "default" in action.help, (name, action.dest)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("crawl", "items go to standard output"),
        ("submit", "'-'"),
        ("join", "items go to standard output"),
    ],
)
def test_help_says_what_a_first_time_user_needs(command: str, says: str) -> None:
    """crawl --help tells where items go without -o; submit --help mentions '-'."""
    out = assert_ok(hashcrawl(command, "--help"))
    assert says in " ".join(out.split())


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--del", "1"], "'--del'; did you mean --delay?"),
        (["--dealy", "1"], "'--dealy'; did you mean --delay?"),
        (["--workres", "2"], "did you mean --workers?"),
        (["--no-such-flag"], "'--no-such-flag'"),
    ],
)
def test_a_misspelled_or_abbreviated_flag_is_refused_with_a_suggestion(
    flags: list[str], says: str, tmp_path: Path
) -> None:
    """No prefix matching, and difflib's closest flag as a hint: exit 2, one line."""
    result = hashcrawl("crawl", *flags, "--state-dir", str(tmp_path / "s"), "http://a.example/")
    assert says in assert_one_line_error(result, 2)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["crawl", "--workers", "0", "http://a.example/"], "--workers"),
        (["crawl", "--workers", "two", "http://a.example/"], "--workers"),
        (["crawl", "--max-depth", "-1", "http://a.example/"], "--max-depth"),
        (["crawl", "--timeout", "0", "http://a.example/"], "--timeout"),
        (["crawl"], "start URL"),
        (
            ["submit", "--redis", "redis://127.0.0.1:1/0", "--priority", "x", "http://a/"],
            "--priority",
        ),
        (
            ["submit", "--redis", "redis://127.0.0.1:1/0", "--priority", "501", "http://a/"],
            "--priority",
        ),
    ],
)
def test_every_bad_value_is_one_line_naming_its_flag(
    args: list[str], named: str, tmp_path: Path
) -> None:
    """Values out of range or of the wrong kind: exit 2 before anything starts."""
    result = (
        hashcrawl(*args, "--state-dir", str(tmp_path / "s"))
        if args[0] == "crawl"
        else hashcrawl(*args)
    )
    assert named in assert_one_line_error(result, 2)


def test_counts_are_spelled_with_correct_plurals(redis_url: str, crawl_name: str) -> None:
    """ "submitted 1 new URL", "deleted 1 key", "put back 0 pages"."""
    assert assert_ok(
        hashcrawl("submit", "--new", *at(redis_url, crawl_name), "http://a.example/")
    ) == ("submitted 1 new URL\n")
    assert assert_ok(hashcrawl("retry-dead", *at(redis_url, crawl_name))) == "put back 0 pages\n"
    with redis.Redis.from_url(redis_url) as client:
        client.delete(*[k for k in crawl_keys(client, crawl_name) if not k.endswith(b"seenmeta")])
    assert assert_ok(hashcrawl("clear", "--yes", *at(redis_url, crawl_name))) == "deleted 1 key\n"


def test_join_says_stopping_once_and_a_second_ctrl_c_exits_1_at_once(
    redis_url: str, crawl_name: str
) -> None:
    """join: the first SIGINT prints one line and stops gently; a second exits 1 at once."""
    site = generate_site(pages=10, hosts=1, seed=9, port=0)
    args = [sys.executable, "-m", "hashcrawl", "join", *at(redis_url, crawl_name), *SITE_FLAGS]
    args += ["--delay", "0.05", "--idle", "none", "--grace", "300", "-o", os.devnull]
    # Each answer takes 3 s, so the second SIGINT finds the worker still in its grace.
    with SiteServer(site, latency=3.0) as server:
        assert_ok(
            hashcrawl("submit", "--new", *at(redis_url, crawl_name), *SITE_FLAGS, server.site.root)
        )
        with subprocess.Popen(args, stderr=subprocess.PIPE, preexec_fn=_ctrl_c_acts) as worker:
            assert server.wait_for_requests(2, timeout=DEADLINE)
            worker.send_signal(signal.SIGINT)
            assert worker.stderr is not None
            first = _read_until(worker.stderr, "stopping", timeout=DEADLINE)
            worker.send_signal(signal.SIGINT)
            _, rest = worker.communicate(timeout=COMMAND_TIMEOUT)
    assert first.startswith("hashcrawl: stopping")
    assert worker.returncode == 1
    assert rest.decode().splitlines() == ["hashcrawl: stopped at once"]


def test_unknown_crawl_line_names_only_crawls_that_could_exist(redis_server: RedisServer) -> None:
    """Keys with a line break or a space in their braces are no crawl: never in the line."""
    assert_ok(hashcrawl("submit", "--new", *at(redis_server.url, "books"), "http://a.example/"))
    with redis.Redis.from_url(redis_server.url) as client:
        client.set("hc:{evil\nname}:x", 1)
        client.set("hc:{a b}:x", 1)
        client.set("unrelated", 1)
    line = assert_one_line_error(hashcrawl("status", *at(redis_server.url, "bokos")), 2)
    assert line.endswith("crawls there: books")


# -- private addresses ------------------------------------------------------------------------

PRIVATE_START_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://10.0.0.1/",
    "http://[::1]/",
    "http://localhost/",
]


@pytest.mark.parametrize("url", PRIVATE_START_URLS)
def test_submit_refuses_a_private_start_url_without_an_allow(
    url: str, redis_url: str, crawl_name: str
) -> None:
    """A start URL at a non-public address (by any spelling or name) exits 2, adds nothing."""
    line = assert_one_line_error(hashcrawl("submit", "--new", *at(redis_url, crawl_name), url), 2)
    assert "is not a public address" in line
    assert "--allow-net" in line
    with redis.Redis.from_url(redis_url) as client:
        assert crawl_keys(client, crawl_name) == set()


def test_submit_takes_a_private_start_url_its_allow_covers(redis_url: str, crawl_name: str) -> None:
    """--allow-net with the address's network, or --allow-private, lets it in."""
    assert_ok(
        hashcrawl(
            "submit",
            "--new",
            *at(redis_url, crawl_name),
            "--allow-net",
            "10.0.0.0/8",
            "http://10.1.2.3/",
        )
    )
    assert_ok(
        hashcrawl(
            "submit", "--new", *at(redis_url, crawl_name), "--allow-private", "http://2130706433/"
        )
    )
    assert status(redis_url, crawl_name)["seen"] == 2


def test_submit_from_stdin_skips_private_address_literals(redis_url: str, crawl_name: str) -> None:
    """Piped URLs at private IP literals are bad lines, named with their numbers."""
    lines = ["http://a.example/1", "http://0x7f.1/", "http://169.254.169.254/"]
    result = hashcrawl("submit", "--new", *at(redis_url, crawl_name), "-", stdin="\n".join(lines))
    assert result.code == 2
    assert [e.split(":")[1] for e in result.err.splitlines()] == [" line 2", " line 3"]
    assert status(redis_url, crawl_name)["seen"] == 1


@pytest.mark.parametrize("url", PRIVATE_START_URLS[:3])
def test_crawl_refuses_a_private_start_url_without_an_allow(url: str, tmp_path: Path) -> None:
    """``hashcrawl crawl`` says so in one line and exits 2 before starting anything."""
    result = hashcrawl("crawl", "--state-dir", str(tmp_path / "state"), url)
    assert "is not a public address" in assert_one_line_error(result, 2)
    assert not (tmp_path / "state").exists()


def test_a_bad_allow_net_is_a_flag_error(tmp_path: Path) -> None:
    """--allow-net that is not a network exits 2 naming the flag and the value."""
    result = hashcrawl(
        "crawl", "--state-dir", str(tmp_path), "--allow-net", "10.0.0.5/8", "http://a.example/"
    )
    line = assert_one_line_error(result, 2)
    assert "--allow-net" in line and "10.0.0.5/8" in line


# -- a spider's own faults ----------------------------------------------------------------------


def test_a_spider_whose_callback_always_raises_says_the_spider_failed(tmp_path: Path) -> None:
    """Every attempt got a 200 and the callback raised: the last line names the callback
    and its exception, and does not promise that running it again helps; what is shown of
    the traceback is the spider's own code, not hashcrawl's."""
    site = generate_site(pages=2, hosts=1, seed=7, port=0)
    spider = tmp_path / "broken.py"
    spider.write_text(
        "import hashcrawl\n\n"
        "class Broken(hashcrawl.Spider):\n"
        "    def parse(self, response):\n"
        "        raise RuntimeError('no title here')\n"
    )
    with SiteServer(site) as server:
        result = _quick_crawl(tmp_path / "state", server.site.root, extra=["--spider", str(spider)])
        statuses = [r.status for r in server.requests() if not r.is_robots]
    assert statuses == [200, 200]  # --max-attempts 2
    assert result.code == 3, result
    last = result.err.splitlines()[-1]
    assert last.startswith("hashcrawl: nothing scraped: ")
    assert "the parse callback Broken.parse raised RuntimeError: no title here" in last
    assert "fix the spider" in last and "to retry" not in last
    assert "hashcrawl/_" not in result.err and "trio" not in result.err
    assert f'{spider}", line 5, in parse' in result.err


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("class Broken(:\n    pass\n", "line 1: SyntaxError: invalid syntax"),
        ("import hashcrawl\nundefined_name\n", "line 2: NameError: name 'undefined_name'"),
    ],
)
def test_a_spider_that_cannot_load_is_one_line_and_exit_2(
    source: str, says: str, tmp_path: Path
) -> None:
    """A syntax error, or an exception as the spider file runs: exit 2, one line naming
    the file, the line and the error, and no traceback through hashcrawl."""
    spider = tmp_path / "broken.py"
    spider.write_text(source)
    result = hashcrawl("crawl", "--spider", str(spider), "--state-dir", str(tmp_path / "s"))
    line = assert_one_line_error(result, 2)
    assert f"--spider {spider}, {says}" in line


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``: pid -> command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(stat.parent.name)] = cmdline.decode(errors="replace")
    return found


def _gone(pid: int) -> bool:
    """``pid`` has exited (a zombie of another parent counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_crawl_killed_outright_takes_its_private_redis_with_it(tmp_path: Path) -> None:
    """SIGKILL to ``crawl`` (no handler runs): its Redis server and workers exit too."""
    site = generate_site(pages=40, hosts=2, seed=12, port=0)
    with SiteServer(site) as server:
        flags = ("--idle", "none", "--workers", "2")  # two, though one host is reached
        with _start_crawl(server.site, tmp_path / "state", *flags) as process:
            assert server.wait_for_requests(2, timeout=DEADLINE)
            children = _children(process.pid)
            (redis_pid,) = [pid for pid, cmd in children.items() if "redis-server" in cmd]
            assert len(children) == 3  # the server and two workers
            process.kill()
        started = time.monotonic()
        wait_until(lambda: all(_gone(pid) for pid in children), what="the children's exit")
    print(f"children gone {time.monotonic() - started:.1f} s after the SIGKILL")
    assert _gone(redis_pid)
