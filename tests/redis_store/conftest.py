"""A real ``redis-server`` and a real Redis Cluster for the session, and a store with its own
namespace for each test -- on each of the two.

``client`` and ``store`` come from ``redis_backend``, which is the single server and then the
3-primary, 3-replica cluster (:mod:`.cluster`): a test that takes them runs against both. The
cluster's run is marked ``version_independent`` (the cluster behaves the same whatever the
Python; CI runs it once, in ``e2e-checks``). A test that by nature needs the one server -- it
pauses or kills it, puts a proxy in front of it, or spawns workers that connect to it -- takes
``redis_server`` or ``fresh_server``, or says ``@single_server``.

The tests here skip, saying why, where ``redis-server`` is not installed (``.ci/run`` installs
Debian's); in CI they run.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Final, Protocol

import pytest

from diagnosis_harness.redis import RedisRunStore

from .cluster import REDIS_CLI, RedisClusterNodes
from .server import REDIS_SERVER, RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis
    from redis.cluster import RedisCluster

_NOT_INSTALLED: Final = (
    "redis-server is not installed (apt-get install redis-server; CI installs it)"
)

single_server: Final = pytest.mark.parametrize("redis_backend", ["server"], indirect=True)
"""For a test whose ``store`` or ``client`` must be the one server's (see the module's text)."""


class RedisBackend(Protocol):
    """The single server or the cluster: what makes the clients of a test's store."""

    def client(self, **kwargs: Any) -> redis.Redis | RedisCluster: ...


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip(_NOT_INSTALLED)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """One cluster for the session (six servers take seconds to make one). A test may move slots
    or fail nodes over on it only if it leaves it whole, as the fixture's methods do; a test that
    kills nodes starts a cluster of its own."""
    if REDIS_SERVER is None or REDIS_CLI is None:
        pytest.skip(_NOT_INSTALLED)
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["server", pytest.param("cluster", marks=pytest.mark.version_independent)])
def redis_backend(request: pytest.FixtureRequest) -> RedisBackend:
    """The single server, then the cluster: started only for the tests that ask for it."""
    backend: RedisBackend = request.getfixturevalue(
        "redis_server" if request.param == "server" else "redis_cluster"
    )
    return backend


@pytest.fixture
def client(redis_backend: RedisBackend) -> Iterator[redis.Redis | RedisCluster]:
    client = redis_backend.client()
    yield client
    client.close()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(client: redis.Redis | RedisCluster, namespace: str) -> Iterator[RedisRunStore]:
    store = RedisRunStore(client, namespace=namespace)
    yield store
    store.close()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of its own, for a test that kills or pauses it."""
    if REDIS_SERVER is None:
        pytest.skip(_NOT_INSTALLED)
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()
