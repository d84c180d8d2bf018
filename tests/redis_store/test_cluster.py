"""The cluster the tests start: 3 primaries and 3 replicas of Debian's ``redis-server``, made one
cluster by ``redis-cli --cluster create``, whose failovers the store's cluster tests will cause.

What is checked here is the fixture itself, so that a store test that fails on the cluster fails
for the store's sake: the slots are spread over three primaries with a replica each, keys with
one hash tag share a shard, a manual failover and a killed primary each leave a whole cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .cluster import REDIS_CLI, RedisClusterNodes
from .server import REDIS_SERVER

if TYPE_CHECKING:
    from collections.abc import Iterator


# One cluster for the module (six servers take a few seconds to make one); the failover test,
# which changes who is primary, comes last. The cluster behaves the same whatever the Python.
pytestmark = pytest.mark.version_independent


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    if REDIS_SERVER is None or REDIS_CLI is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_the_cluster_has_three_primaries_each_with_a_replica(
    redis_cluster: RedisClusterNodes,
) -> None:
    primaries = redis_cluster.primaries()
    replicas = redis_cluster.replicas()
    assert len(primaries) == 3
    assert sum(p.slots for p in primaries) == 16384
    assert sorted(r.primary_id or "" for r in replicas) == sorted(p.node_id for p in primaries)


def test_runs_spread_over_every_shard_and_a_runs_keys_share_one(
    redis_cluster: RedisClusterNodes,
) -> None:
    with redis_cluster.client() as client:
        shards = set()
        for i in range(64):
            tag = f"{{run-{i}}}"
            client.set(f"dh:{tag}:run", i)
            client.set(f"dh:{tag}:tools", i)
            node = client.get_node_from_key(f"dh:{tag}:run")
            assert node == client.get_node_from_key(f"dh:{tag}:tools")
            shards.add(node.port)
        assert len(shards) == 3


def test_a_manual_failover_and_a_killed_primary_leave_a_whole_cluster(
    redis_cluster: RedisClusterNodes,
) -> None:
    with redis_cluster.client() as client:
        client.set("{run-1}:run", "before")
    replica = redis_cluster.replicas()[0]
    redis_cluster.failover(replica.port)
    assert replica.port in {p.port for p in redis_cluster.primaries()}

    primary = redis_cluster.primaries()[0]
    redis_cluster.kill(primary.port)  # returns once a replica serves its slots
    with redis_cluster.client() as client:
        assert client.get("{run-1}:run") == b"before"
