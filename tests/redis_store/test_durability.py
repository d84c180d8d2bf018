"""``durability="replica"``: a write the store acknowledges is on a replica too, or refused.

A real primary and a real replica (``--replicaof``), on one machine. What a user relies on: with
the option, every grant a caller received is on the replica at that moment (a failover to it
would keep it); a replica that stops answering turns grants into a clear refusal within the
run's deadline, never a grant the replica may not have; bad input names the argument and
changes nothing. The same on a cluster, through failovers, is tests/redis_store/
test_cluster_failover.py.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import RunContext, RunStoreUnavailable
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._run_keys import RunKeys
from strategies import limits

from .server import REDIS_SERVER, RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis

LIMITS = limits()  # none reached: these tests are about where writes go
_SYNC_SECONDS = 30.0  # a bound on the replica's first sync, never a pause


def _online(primary: redis.Redis) -> bool:
    info = primary.info("replication")
    return any(
        isinstance(value, dict) and value.get("state") == "online"
        for name, value in info.items()
        if name.startswith("slave")
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, the replica in sync (state online) before the test begins."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    (tmp_path / "primary").mkdir()
    (tmp_path / "replica").mkdir()
    primary = RedisServer(tmp_path / "primary", extra=("--repl-diskless-sync-delay", "0"))
    primary.start()
    replica = RedisServer(
        tmp_path / "replica", extra=("--replicaof", "127.0.0.1", str(primary.port))
    )
    replica.start()
    client = primary.client()
    try:
        started = time.monotonic()
        while not _online(client):  # polls a state the servers reach by themselves
            assert time.monotonic() - started < _SYNC_SECONDS, "the replica never synced"
            time.sleep(0.02)
        yield primary, replica
    finally:
        client.close()
        replica.stop()
        primary.stop()


def _namespace() -> str:
    return f"d-{uuid.uuid4().hex[:12]}"


def test_durability_other_than_primary_or_replica_is_refused_naming_it(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, _ = pair
    client = primary.client()
    before = client.dbsize()
    for bad in ("sync", "", "REPLICA", None, 1):
        with pytest.raises(ValueError, match=r"durability must be one of 'primary', 'replica'"):
            RedisRunStore(client, namespace=_namespace(), durability=bad)  # type: ignore[arg-type]  # the refusal is the test
    assert client.dbsize() == before
    assert client.function_list() == []  # refused before it loaded anything


def test_a_client_of_another_kind_is_refused_naming_what_is_allowed() -> None:
    with pytest.raises(TypeError, match=r"client must be a redis.Redis or a redis.cluster"):
        RedisRunStore("redis://127.0.0.1", namespace="x")  # type: ignore[arg-type]  # as above


def test_replica_durability_on_a_server_without_a_replica_is_refused(tmp_path: Path) -> None:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; CI installs it)")
    alone = RedisServer(tmp_path)
    alone.start()
    try:
        with pytest.raises(ValueError, match=r"durability='replica' needs a replica in sync"):
            RedisRunStore(alone.client(), namespace=_namespace(), durability="replica")
        # The default keeps what the primary acknowledged, and works alone.
        RedisRunStore(alone.client(), namespace=_namespace()).close()
    finally:
        alone.stop()


def test_every_grant_is_on_the_replica_when_the_caller_receives_it(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    namespace = _namespace()
    store = RedisRunStore(primary.client(), namespace=namespace, durability="replica")
    on_replica = replica.client()
    try:
        ctx = RunContext.create(
            session_id="s", run_id="durable", limits=LIMITS, timeout=60.0, store=store
        )
        keys = RunKeys.of(namespace, "durable")
        tools = keys.all[1]  # the per-Tool hash
        for granted in range(1, 41):
            ctx.reserve_tool_call("search")
            # Read at once, without waiting: the grant was confirmed by the replica before the
            # caller had it. (Without the option the replica may lag; nothing is promised.)
            assert int(on_replica.hget(tools, "n:search") or 0) == granted
        ctx.lifecycle.succeed()
        assert on_replica.hget(keys.run, "state") == b"SUCCESS"
    finally:
        on_replica.close()
        store.close()


def test_a_replica_that_stops_answering_turns_grants_into_a_refusal_within_the_deadline(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    store = RedisRunStore(primary.client(), namespace=_namespace(), durability="replica")
    try:
        ctx = RunContext.create(
            session_id="s", run_id="refused", limits=LIMITS, timeout=60.0, store=store
        )
        ctx.reserve_tool_call("search")
        short = RunContext.create(
            session_id="s", run_id="short", limits=LIMITS, timeout=1.0, store=store
        )
        replica.pause()
        try:
            started = time.monotonic()
            with pytest.raises(RunStoreUnavailable, match="not confirmed by a replica"):
                short.reserve_tool_call("search")
            # Refused within the run's deadline (1 s), with slack for a loaded machine.
            assert time.monotonic() - started < 1.0 + 2.0
        finally:
            replica.resume()
        # Once the replica answers again, the run goes on: the refused call took nothing the
        # caller was told it had, and the next grant is confirmed.
        ctx.reserve_tool_call("search")
        assert ctx.budget.snapshot().per_tool_calls["search"] >= 2
    finally:
        store.close()
