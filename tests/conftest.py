"""Fixtures for the whole suite: real Redis-compatible servers that the tests start.

scripts/test runs the suite on pytest-xdist workers (``--dist loadgroup``). The hooks
below keep the tests of a module that share a module-scoped fixture (often several crawls)
on one worker, so that fixture runs once, and hand every other test out alone, so that no
long module ends the run on one worker while the others sit idle. They hand the longest
tests out first, and run a test marked ``alone`` while no other test runs: one that bounds
a duration cannot share two cores with three crawls.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from hashcrawl._store._server import RedisServer
from testing.cluster import Cluster
from testing.sentinel import Sentinels

CLUSTER_PASSWORD = "s3cr#t/pw"  # characters a URL must carry escaped or raw

# No timed assertions: Hypothesis's default 200 ms deadline per example failed
# test_canonicalize_is_idempotent (742 ms) and a test_wire property beside other work.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# The order tests are handed out in, the longest first, so that no long one starts late
# and ends the run on one worker while the others sit idle (scripts/test keeps this
# order: --no-loadscope-reorder). The crash simulation's quick profile (two CPU-bound
# halves of a minute or more, which thus start on two workers) and its deliberate bugs;
# then the end-to-end crawls marked ``slow`` (20-60 s each, mostly waiting on leases,
# delays and idle time, so they share the cores well with the CPU-bound halves); then
# test_cli (a process or more per test, 3-20 s each); then the rest in file order.
FIRST_MODULES = ("test_simulation.py",)
THEN_MODULES = ("test_cli.py",)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest first (see FIRST_MODULES); the modules with a test marked ``alone``
    last (it then waits for short tests only), that test last in its module. The tests
    of a module that use a fixture wider than a test are one xdist group (so it is set up
    once), handed out where its first test comes; its other tests are handed out alone
    (test_cluster's crawls start clusters of their own)."""
    for item in items:
        if _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    last = {item.path for item in items if item.get_closest_marker("alone")}
    items.sort(key=lambda item: (_rank(item, last), item.get_closest_marker("alone") is not None))


def _rank(item: pytest.Item, last: set[Path]) -> int:
    """0: the first modules; 1: a slow test; 2: the modules after them; 3: any other; 4:
    a module with a test that runs alone."""
    if item.path.name in FIRST_MODULES:
        return 0
    if item.path in last:
        return 4
    if item.get_closest_marker("slow"):
        return 1
    return 2 if item.path.name in THEN_MODULES else 3


def _shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture set up once for its module (or class, or package)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs[-1].scope in ("module", "class", "package") for defs in info.name2fixturedefs.values()
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under xdist, every test holds the run's lock shared, and an ``alone`` test holds it
    alone, from its set-up (module fixtures included) to its teardown."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)
    shared = Path(item.config.getoption("basetemp")).parent  # each worker has a directory in it
    with _run_lock(shared, alone=item.get_closest_marker("alone") is not None):
        return (yield)


@contextlib.contextmanager
def _run_lock(directory: Path, *, alone: bool) -> Iterator[None]:
    # The gate keeps new tests from starting while an alone test waits for the lock:
    # without it, tests on the other workers could hold it shared back to back for ever.
    with (directory / "gate.lock").open("a") as gate, (directory / "run.lock").open("a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


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
def browser_tmp() -> Iterator[Path]:
    """A temporary directory of the test's own for a worker that renders (its TMPDIR):
    any browser start sweeps its temporary directory of dead workers' profiles, so a
    test that looks for one must keep it apart. Short: Chromium puts its socket under
    it, and a Unix socket's path holds 107 bytes (pytest's tmp_path can be longer)."""
    directory = Path(tempfile.mkdtemp(prefix="hk-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def crawl_name() -> str:
    """A crawl name no other test uses, so its keys on the shared server are its own."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-primary Redis Cluster with a replica each, for one module (it takes seconds to
    form). Its node timeout is long enough that a test pausing a node briefly causes no
    failover; tests that kill a primary start a cluster of their own."""
    directory = tmp_path_factory.mktemp("cluster")
    with Cluster(directory, node_timeout_ms=5000, password=CLUSTER_PASSWORD) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def redis_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinels]:
    """A primary, its replica and three sentinels, for one module; tests that kill the
    primary start a set-up of their own."""
    with Sentinels(tmp_path_factory.mktemp("sentinel"), password=CLUSTER_PASSWORD) as sentinels:
        yield sentinels
