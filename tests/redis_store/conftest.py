"""A real ``redis-server`` for the session, and a store with its own namespace for each test.

The tests here skip, saying why, where ``redis-server`` is not installed (``.ci/run`` installs
Debian's); in CI they run.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness.redis import RedisRunStore

from .server import REDIS_SERVER, RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(client: redis.Redis, namespace: str) -> Iterator[RedisRunStore]:
    store = RedisRunStore(client, namespace=namespace)
    yield store
    store.close()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of its own, for a test that kills or pauses it."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()
