"""Tests for how the ``hashcrawl`` command is told the Redis password, and keeps it secret.

The URL comes from ``--redis`` or ``$HASHCRAWL_REDIS``, the password may come from
``--redis-password-file``, and no argv (what ``ps`` shows every user), message or log
line holds the password.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hashcrawl._store._server import RedisServer
from testing.fleet import DEADLINE
from testing.testsite import SITE_FLAGS, SiteServer, generate_site
from tests.test_cli import COMMAND_TIMEOUT, Result, _read_until, assert_ok
from tests.test_cli import assert_one_line_error as one_line_error

#: A password as users pick them: every character that breaks a naive URL parser.
SECRET = "s3cr#t/p?w@x:y é"
COMMANDS = ["submit", "status", "clear", "dead", "retry-dead", "join"]


def hashcrawl(*args: str, env: dict[str, str]) -> Result:
    """Run ``python -m hashcrawl ARGS`` with ``env`` in place of HASHCRAWL_REDIS."""
    environ = {k: v for k, v in os.environ.items() if k != "HASHCRAWL_REDIS"} | env
    done = subprocess.run(
        [sys.executable, "-m", "hashcrawl", *args],
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
        env=environ,
    )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def args_for(command: str) -> list[str]:
    """The least arguments ``command`` needs besides the Redis URL."""
    if command == "submit":
        return ["--new", "http://a.example/"]
    if command == "clear":
        return ["--yes"]
    if command == "join":
        # One try at submit's unresolvable URL: its retries' backoff would add 7 s.
        return ["--idle", "0.2", "--delay", "0", "--max-attempts", "1", "-o", os.devnull]
    return []


REPORTS = ("joined crawl", " left crawl ", "has no dead letters")


def without_join_report(result: Result) -> Result:
    """``result`` less the lines that say what a command did (join's as it joins and as it
    leaves, dead's when there are none), once checked to name no secret."""
    assert SECRET not in result.err
    kept = [line for line in result.err.splitlines(True) if not any(r in line for r in REPORTS)]
    return Result(result.code, result.out, "".join(kept))


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server that requires SECRET (with appendonly, so join has no warning)."""
    with RedisServer(directory=tmp_path / "redis", password=SECRET, appendonly=True) as server:
        yield server


def raw_url(server: RedisServer) -> str:
    """The server's URL with SECRET typed raw, as a user would."""
    return f"redis://:{SECRET}@127.0.0.1:{server.port}/0"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_redis_url_from_the_environment(
    command: str, guarded: RedisServer
) -> None:
    """Without --redis, $HASHCRAWL_REDIS names the server, raw password and all."""
    env = {"HASHCRAWL_REDIS": raw_url(guarded)}
    assert_ok(hashcrawl("submit", "--new", *args_for("submit"), env=env))  # status wants a crawl
    result = hashcrawl(command, *args_for(command), env=env)
    assert_ok(without_join_report(result))
    assert SECRET not in result.out


@pytest.mark.parametrize("command", COMMANDS)
def test_no_redis_url_anywhere_exits_2_naming_flag_and_variable(command: str) -> None:
    """Neither --redis nor $HASHCRAWL_REDIS: one line naming both, exit 2."""
    line = one_line_error(hashcrawl(command, *args_for(command), env={}), 2)
    assert "--redis" in line and "$HASHCRAWL_REDIS" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_password_file_authenticates_every_command(
    command: str, guarded: RedisServer, tmp_path: Path
) -> None:
    """--redis-password-file gives the password, typed raw, with a password-free URL."""
    (tmp_path / "pw").write_text(SECRET + "\n", encoding="utf-8")
    url = f"redis://127.0.0.1:{guarded.port}/0"
    flags = ["--redis", url, "--redis-password-file", str(tmp_path / "pw")]
    assert_ok(
        hashcrawl("submit", "--new", *flags, *args_for("submit"), env={})
    )  # status wants a crawl
    result = hashcrawl(command, *flags, *args_for(command), env={})
    assert_ok(without_join_report(result))
    assert SECRET not in result.out


def test_a_bad_port_never_shows_a_raw_password() -> None:
    """The issue's case: a raw # and / in the password, then a bad port: exit 2, masked."""
    result = hashcrawl("status", "--redis", f"redis://:{SECRET}@h:port/0", env={})
    line = one_line_error(result, 2)
    assert "bad port" in line and "***@h:port/0" in line
    assert SECRET not in result.out + result.err


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        (f"redis+sentinel://:{SECRET}@s1:port,s2/svc", "bad port in 's1:port'"),
        (f"redis+sentinel://:{SECRET}@s1,s2", "needs the service name"),
    ],
)
def test_a_bad_sentinel_url_in_the_environment_is_refused_masked(url: str, rule: str) -> None:
    """A bad redis+sentinel:// URL in $HASHCRAWL_REDIS: exit 2, one line naming the rule,
    no piece of the password."""
    result = hashcrawl("status", env={"HASHCRAWL_REDIS": url})
    assert rule in one_line_error(result, 2)
    for text in (SECRET, SECRET.split("#")[0]):
        assert text not in result.out + result.err


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (["status", f"redis://:{SECRET}@h/0"], "takes no argument 'redis://***@h/0'"),
        (["status", f"--rediss=redis://:{SECRET}@h/0"], "--rediss=redis://***@h/0"),
        (["status", "--redis", f"http://:{SECRET}@h/0"], "or redis+sentinel://, got 'http://***@h"),
        (["status", "--redis", "redis://h:1/0", "--crawl", f"r://:{SECRET}@h"], "--crawl must"),
        (["submit", "--redis", "redis://h:1/0", f"redis://:{SECRET}@h/0"], "'redis://***@h/0'"),
        (["submit", "--redis", "redis://h:1/0", f"http://u:{SECRET}@h:x/"], "'http://***@h:x/'"),
    ],
)
def test_a_url_with_a_password_in_the_wrong_place_is_refused_masked(
    argv: list[str], rule: str
) -> None:
    """A URL given as an argument, after a mistyped flag, for the wrong flag or as a URL
    to crawl: exit 2, one line with its rule, and no piece of the password, not even the
    part before a raw "#"."""
    result = hashcrawl(*argv, env={})
    assert rule in one_line_error(result, 2)
    for text in (SECRET, SECRET.split("#")[0]):
        assert text not in result.out + result.err


def test_a_refused_worker_logs_and_exits_without_the_password(guarded: RedisServer) -> None:
    """A worker with a wrong password logs its retries (-v) and exits 1; no line shows
    either password."""
    wrong = "wr#ng/pw?"
    env = {"HASHCRAWL_REDIS": f"redis://:{wrong}@127.0.0.1:{guarded.port}/0"}
    result = hashcrawl("join", "-v", "--lease", "1", "--delay", "0", "--idle", "1", env=env)
    assert result.code == 1, result
    assert "Traceback" not in result.err
    assert result.err.splitlines()[-1].startswith("hashcrawl: Redis at redis://***@127.0.0.1")
    for text in (SECRET, wrong):
        assert text not in result.out + result.err


def cmdline(pid: int) -> list[str]:
    """What ps shows every user: the process's argv."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def redis_env_of(pid: int) -> str | None:
    """$HASHCRAWL_REDIS in the process's environment (readable by its own user only)."""
    for part in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        key, _, value = part.decode(errors="replace").partition("=")
        if key == "HASHCRAWL_REDIS":
            return value
    return None


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
def test_a_running_worker_argv_holds_no_password(guarded: RedisServer) -> None:
    """A worker given the URL in $HASHCRAWL_REDIS: its /proc/PID/cmdline has no password."""
    env = {**os.environ, "HASHCRAWL_REDIS": raw_url(guarded)}
    args = [sys.executable, "-m", "hashcrawl", "join", "-v", "--idle", "none", "-o", os.devnull]
    with subprocess.Popen(args, stderr=subprocess.PIPE, env=env) as worker:
        try:
            _read_until(worker.stderr, "joined crawl", timeout=DEADLINE)
            shown = " ".join(cmdline(worker.pid))
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=COMMAND_TIMEOUT)
    assert worker.returncode == 0
    assert "join" in shown
    assert SECRET not in shown and "redis://" not in shown


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
def test_crawl_hands_its_workers_the_redis_url_through_the_environment(tmp_path: Path) -> None:
    """``hashcrawl crawl``'s workers run with no Redis URL in argv: it is in their env."""
    site = generate_site(pages=3, hosts=1, seed=4, port=0)
    with SiteServer(site) as server:
        args = [sys.executable, "-m", "hashcrawl", "crawl", server.site.root, "-v", *SITE_FLAGS]
        args += ["--workers", "2", "--idle", "none", "--delay", "0", "-o", os.devnull]
        args += ["--state-dir", str(tmp_path / "state")]
        with subprocess.Popen(args, stderr=subprocess.PIPE) as crawl:
            try:
                _read_until(crawl.stderr, "joined crawl", timeout=DEADLINE)
                _read_until(crawl.stderr, "joined crawl", timeout=DEADLINE)
                children = Path(f"/proc/{crawl.pid}/task/{crawl.pid}/children").read_text()
                seen = [(cmdline(int(pid)), redis_env_of(int(pid))) for pid in children.split()]
            finally:
                crawl.send_signal(signal.SIGTERM)
                crawl.communicate(timeout=COMMAND_TIMEOUT)
    assert crawl.returncode == 0
    workers = [(argv, url) for argv, url in seen if "hashcrawl" in argv]  # not redis-server
    assert len(workers) == 2
    for argv, url in workers:
        assert "join" in argv
        assert "--redis" not in argv and not any("redis+unix" in arg for arg in argv)
        assert url is not None and url.startswith("redis+unix://")
