"""Where the store's commands go: one Redis server, or the primaries of a Redis Cluster.

Theory of operation. The store is given a client -- a :class:`redis.Redis` or a
:class:`redis.cluster.RedisCluster` -- and talks on one of its own derived from it, with the same
servers, credentials, TLS and timeouts but redis-py's retries off (:mod:`._bounded` says why).
:func:`servers_of` makes that client and says, for the rest of the store, what differs between
one server and a cluster:

- which node holds a key (a run's node: its ``TIME``, its write confirmed by a replica, its
  channel's subscription) and which nodes are primaries (each loads the functions);
- which failures are worth sending the command again while its bound leaves time. One server:
  a lost connection, once (a restart). A cluster: also a node that fails over, a slot that moves
  or is moving (``MOVED``, ``ASK``, ``TRYAGAIN``, ``CLUSTERDOWN``, a script stopped because a
  key of its slot left mid-migration, a ``WAIT`` dropped by a primary demoted to replica) --
  each clears within the cluster's node timeout or the migration's end, so the store keeps
  trying, with a growing pause, until the bound;
- how long a command that fails in the caller's thread may take at worst (``slowest``): a connect
  and a read on one server; on a cluster also redis-py's reload of the slot map after a lost
  node, a connect and a read to each node it tries.

A write confirmed by a replica (the store's ``durability="replica"``) is sent on one connection
to the primary of the run's slot with a fence and ``WAIT 1``: the fence (a short-lived key in the
run's slot) is a write of this connection after everything the primary applied before it, so
``WAIT`` confirms the operation's own write even when the operation was a retry that the primary
had applied already and so wrote nothing this time.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import redis
from redis.backoff import NoBackoff
from redis.cluster import REDIS_ALLOWED_KEYS, ClusterNode, RedisCluster
from redis.exceptions import AskError, ClusterError, RedisClusterException, TryAgainError
from redis.retry import Retry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Client", "Servers", "WriteNotConfirmed", "servers_of", "where_of"]

Client = redis.Redis | RedisCluster
"""A client the store sends on: its own, derived from the one it was given."""

_POOLS: Final = (redis.ConnectionPool, redis.BlockingConnectionPool)
_FENCE_MS: Final = 60_000  # the fence outlives any WAIT the store sends, then goes
# A script stopped mid-way because a key of its slot has left for another node (a migration):
# the server's words; it wrote nothing before the key it could not read (see lua/common.lua).
_MIGRATING_SCRIPT: Final = "non local key"
# A WAIT the primary dropped as it became a replica (a manual failover): the write is on the new
# primary (the failover waited for it), so the call sent again there finds it applied, once.
_DEMOTED: Final = "UNBLOCKED"


class WriteNotConfirmed(redis.RedisError):
    """No replica confirmed a write within its bound: the store refuses what it would grant."""


# redis-py leaves these cluster methods unannotated (which ones changes between releases): each
# is reached through a variable of a declared type, which checks the same against every release.


def _node_of_key(cluster: RedisCluster, key: str) -> ClusterNode:
    get: Callable[[str], ClusterNode] = cluster.get_node_from_key
    return get(key)


def _nodes(cluster: RedisCluster, *, primaries: bool = False) -> list[ClusterNode]:
    get: Callable[[], list[ClusterNode]] = cluster.get_primaries if primaries else cluster.get_nodes
    return get()


def _node_named(cluster: RedisCluster, name: str) -> ClusterNode | None:
    get: Callable[..., ClusterNode | None] = cluster.get_node
    return get(node_name=name)


def _timeout_of(kwargs: dict[str, Any]) -> float:
    """The client's ``socket_timeout``: finite and > 0, else an error that says what to set."""
    timeout = kwargs.get("socket_timeout")
    if timeout is None:
        raise ValueError(
            "client must have a socket_timeout (seconds), e.g. redis.Redis(..., "
            "socket_timeout=5.0): it is how long the store waits for Redis before it fails a "
            "boundary (never longer than the run's deadline)"
        )
    if type(timeout) not in (int, float) or not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"client's socket_timeout must be a finite number > 0, got {timeout!r}")
    return float(timeout)


def _confirmed(pipe: redis.client.Pipeline, durable_fence: str, wait_ms: int) -> Any:
    """Send what ``pipe`` holds, then the fence and ``WAIT 1``: the first command's answer,
    or ``WriteNotConfirmed``. Raises the first command's error as it is."""
    pipe.set(durable_fence, 1, px=_FENCE_MS)
    send: Callable[..., object] = pipe.execute_command
    send("WAIT", 1, wait_ms)
    answer, _fence, replicas = pipe.execute(raise_on_error=False)
    if isinstance(answer, Exception):
        raise answer
    if isinstance(replicas, Exception):
        raise replicas
    if int(replicas) < 1:
        raise WriteNotConfirmed(f"the write was not confirmed by a replica within {wait_ms} ms")
    return answer


@final
@dataclass(frozen=True, slots=True)
class Servers:
    """The store's own client and what it needs to know of the servers behind it.

    ``timeout``: the given client's ``socket_timeout``, the store's timeout. ``slowest``: the
    longest a command that fails in the caller's thread can take (see the module docstring).
    ``where``: the servers, for the store's ``repr``.
    """

    client: Client
    timeout: float
    slowest: float
    where: str

    @property
    def cluster(self) -> RedisCluster | None:
        return self.client if isinstance(self.client, RedisCluster) else None

    def node_of(self, key: str) -> redis.Redis:
        """A client of the primary that holds ``key`` (as far as the client knows)."""
        cluster = self.cluster
        if cluster is None:
            assert isinstance(self.client, redis.Redis)
            return self.client
        return cluster.get_redis_connection(_node_of_key(cluster, key))

    def primaries(self) -> list[redis.Redis]:
        cluster = self.cluster
        if cluster is None:
            assert isinstance(self.client, redis.Redis)
            return [self.client]
        return [cluster.get_redis_connection(node) for node in _nodes(cluster, primaries=True)]

    def route(self, channel: str) -> str:
        """The name of the node whose primary holds ``channel``'s slot (one server: "")."""
        cluster = self.cluster
        return "" if cluster is None else str(_node_of_key(cluster, channel).name)

    def node_named(self, name: str) -> redis.Redis | None:
        """A client of the node :meth:`route` named, if the cluster still has it."""
        cluster = self.cluster
        if cluster is None:
            assert isinstance(self.client, redis.Redis)
            return self.client
        node = _node_named(cluster, name)
        return None if node is None else cluster.get_redis_connection(node)

    def refresh(self) -> None:
        """Read the slot map again (a cluster's; nothing for one server)."""
        cluster = self.cluster
        if cluster is not None:
            cluster.nodes_manager.initialize()

    def again(self, error: Exception, attempt: int) -> bool:
        """Whether a command that failed with ``error`` on its ``attempt``-th sending is worth
        sending again (while its bound leaves time): see the module docstring."""
        if isinstance(error, (redis.TimeoutError, WriteNotConfirmed)):
            return False  # a timeout would only wait again; an unconfirmed write was applied
        if self.cluster is None:
            return attempt < 2 and isinstance(error, redis.ConnectionError)
        moving = (redis.ConnectionError, ClusterError, TryAgainError, AskError)
        return isinstance(error, moving) or (
            isinstance(error, redis.ResponseError)
            and (_MIGRATING_SCRIPT in str(error) or str(error).startswith(_DEMOTED))
        )

    def fcall(
        self, function: str, keys: Sequence[str], args: Sequence[str | int], wait_ms: int | None
    ) -> Any:
        """``FCALL function`` on ``keys`` (one slot), sent to the primary that holds the slot;
        with ``wait_ms``, confirmed by a replica within that many milliseconds or refused
        (``WriteNotConfirmed``). A node lost, or a slot found elsewhere (``MOVED``) or on the
        move (``ASK``), reads the slot map again and raises: the caller sends it again.

        Sent to the node, not through redis-py's cluster client, which asks a node for the keys
        of every ``FCALL`` (``COMMAND GETKEYS``: two round trips more) and retries on its own;
        the keys of the store's calls are known, ``keys[0]`` names the slot."""
        node = self.node_of(keys[0])
        try:
            if wait_ms is None:
                return node.fcall(function, len(keys), *keys, *args)
            with node.pipeline(transaction=False) as pipe:  # one connection: WAIT counts its writes
                pipe.fcall(function, len(keys), *keys, *args)
                return _confirmed(pipe, f"{keys[0]}:fence", wait_ms)
        except (redis.ConnectionError, AskError):  # AskError: MOVED too (a subclass)
            if self.cluster is not None:
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    self.refresh()  # no node answered: the next sending reads it again
            raise

    def shutdown(self) -> None:
        """Close the store's connections (to every node of a cluster)."""
        cluster = self.cluster
        if cluster is None:
            assert isinstance(self.client, redis.Redis)
            self.client.connection_pool.disconnect()
        else:
            cluster.close()


def servers_of(client: object) -> Servers:
    """The :class:`Servers` of a client the store was given, on a client of its own."""
    if isinstance(client, RedisCluster):
        return _cluster(client)
    if isinstance(client, redis.Redis):
        return _one_server(client)
    raise TypeError(f"client must be a redis.Redis or a redis.cluster.RedisCluster, got {client!r}")


def _one_server(client: redis.Redis) -> Servers:
    pool = client.connection_pool
    if type(pool) not in _POOLS:
        raise TypeError(
            "client must use a redis.ConnectionPool or BlockingConnectionPool (a plain "
            f"redis.Redis(...) or Redis.from_url(...)), got {type(pool).__name__}"
        )
    kwargs = dict(pool.connection_kwargs)
    timeout = _timeout_of(kwargs)
    connect = kwargs.get("socket_connect_timeout")
    kwargs["retry"] = Retry(NoBackoff(), 0)
    kwargs["retry_on_error"] = []
    if "retry_on_timeout" in kwargs:  # redis-py before 6 keeps it among the settings
        kwargs["retry_on_timeout"] = False
    own = redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )
    return Servers(
        client=own,
        timeout=timeout,
        slowest=timeout + (float(connect) if connect else timeout),
        where=where_of(client),
    )


def _cluster(client: RedisCluster) -> Servers:
    settings = dict(client.nodes_manager.connection_kwargs)
    timeout = _timeout_of(settings)
    connect = settings.get("socket_connect_timeout")
    # The settings a user gives RedisCluster, not those it adds itself (its on-connect hook).
    kwargs = {
        key: value
        for key, value in settings.items()
        if key in REDIS_ALLOWED_KEYS and key not in ("redis_connect_func", "retry")
    }
    make: Callable[[str, int], ClusterNode] = ClusterNode
    nodes = [make(node.host, node.port) for node in _nodes(client)]
    own = RedisCluster(
        startup_nodes=nodes,
        retry=Retry(NoBackoff(), 0),
        address_remap=client.nodes_manager.address_remap,
        **kwargs,
    )
    one = timeout + (float(connect) if connect else timeout)
    return Servers(
        client=own,
        timeout=timeout,
        # A lost node: the failed command, then redis-py reads the slot map from the nodes it
        # knows, one after another, until one answers.
        slowest=one * (1 + len(nodes)),
        where=where_of(client),
    )


def where_of(client: Client) -> str:
    """The servers of ``client``, as the store's ``repr`` names them."""
    if isinstance(client, RedisCluster):
        return "cluster " + ",".join(sorted(str(node.name) for node in _nodes(client)))
    kwargs = client.connection_pool.connection_kwargs
    return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")
