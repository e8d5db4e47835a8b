"""Fixtures for the whole suite: real Redis-compatible servers that the tests start."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hashcrawl._server import RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A private server for one test, which may kill, pause or restart it."""
    with RedisServer(directory=tmp_path / "redis") as server:
        yield server


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the whole session; tests keep apart by using their own crawl_name."""
    with RedisServer(directory=tmp_path_factory.mktemp("shared-redis")) as server:
        yield server


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The shared server's URL: never kill, pause or restart what it points to."""
    return shared_redis.url


@pytest.fixture
def crawl_name() -> str:
    """A crawl name no other test uses, so its keys on the shared server are its own."""
    return "t" + uuid.uuid4().hex[:10]
