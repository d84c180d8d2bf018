"""A real Redis Cluster on free loopback ports: 3 primaries, 3 replicas, started by the tests.

Six of Debian's ``redis-server`` (``.ci/run`` installs it), each a :class:`RedisServer` with
cluster mode on, in its own directory; ``redis-cli --cluster create --cluster-replicas 1`` makes
them one cluster (16384 slots over the 3 primaries, a replica each) and the fixture waits until
every node reports ``cluster_state:ok`` and agrees on the slots. The node timeout is short
(2 s: shorter, and a loaded machine's late gossip fails healthy nodes), so a failover after a
killed primary takes seconds, not the default fifteen.

:meth:`RedisClusterNodes.failover` promotes a replica (``CLUSTER FAILOVER`` sent to it, the manual
failover a maintenance window does); :meth:`RedisClusterNodes.kill` crashes a node;
:meth:`RedisClusterNodes.reshard` moves hash slots from one primary to another with
``redis-cli --cluster reshard`` (the slot migration an operator runs to rebalance: each slot set
``MIGRATING`` on its owner and ``IMPORTING`` on the new one, its keys moved by ``MIGRATE``, then
the new owner announced), which takes the source's lowest-numbered slots first, so a test picks
keys in ``slots_of(source)[:n]`` before it moves them. All three return once the cluster is whole
again, as its nodes report. Waiting here polls the servers' own reports of a state they reach by
themselves; it orders nothing in a test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from .server import RedisServer, free_port

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["REDIS_CLI", "NodeRole", "RedisClusterNodes"]

REDIS_CLI: Final = shutil.which("redis-cli")
_NODE_TIMEOUT_MS: Final = 2000
_WHOLE_SECONDS: Final = 30.0


def _node_arguments() -> tuple[str, ...]:
    """A cluster node's ``redis-server`` arguments, with a bus port of its own."""
    return (
        *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
        *("--cluster-node-timeout", str(_NODE_TIMEOUT_MS)),
        # The bus on a free port of its own: by default it is the port + 10000, which a free
        # port above 55535 cannot have.
        *("--cluster-port", str(free_port())),
        # A replica whose primary failed takes over however long it was cut off.
        *("--cluster-replica-validity-factor", "0"),
        # A replica's first sync starts at once, not after Redis's 5 s wait for more replicas.
        *("--repl-diskless-sync-delay", "0"),
    )


@dataclass(frozen=True, slots=True)
class NodeRole:
    """One node as the cluster sees it: its port, whether it is a primary, the primary's ID."""

    port: int
    node_id: str
    primary: bool
    primary_id: str | None
    slots: int
    ranges: tuple[tuple[int, int], ...] = ()  # the slots it serves, as (first, last) ranges


class RedisClusterNodes:
    """Six ``redis-server`` in cluster mode made one cluster; ``start()`` it, ``stop()`` it."""

    def __init__(self, directory: Path, *, primaries: int = 3) -> None:
        self.directory = directory
        self.servers = [
            RedisServer(directory / f"node-{i}", extra=_node_arguments())
            for i in range(primaries * 2)
        ]

    def start(self) -> None:
        assert REDIS_CLI is not None
        for server in self.servers:
            server.directory.mkdir(parents=True, exist_ok=True)
            server.start()
        addresses = [f"127.0.0.1:{server.port}" for server in self.servers]
        subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
        )
        self.wait_whole()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def client(self, **kwargs: Any) -> RedisCluster:
        """A cluster client that finds every node from the first live one."""
        kwargs.setdefault("socket_timeout", 5.0)
        live = next(s for s in self.servers if s.running)
        return RedisCluster(host="127.0.0.1", port=live.port, **kwargs)

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (for the commands a node answers about itself)."""
        server = next(s for s in self.servers if s.port == port)
        return server.client(socket_timeout=2.0)

    def roles(self) -> list[NodeRole]:
        """Every live node as the first live node sees the cluster (``CLUSTER NODES``)."""
        live = next(s for s in self.servers if s.running)
        return self._view(live.port)

    def _view(self, port: int) -> list[NodeRole]:
        """Every node not failed as the node on ``port`` sees the cluster."""
        assert REDIS_CLI is not None
        # The raw text, which redis-py would parse into a dict of its own making.
        text = subprocess.run(
            [REDIS_CLI, "-p", str(port), "CLUSTER", "NODES"],
            check=True,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        roles = []
        for line in text.strip().splitlines():
            fields = line.split()
            node_id, address, flags, primary_id = fields[0], fields[1], fields[2], fields[3]
            if "fail" in flags.split(",") or "noaddr" in flags:
                continue
            ranges = []
            for spec in fields[8:]:
                if spec.startswith("["):
                    continue  # a slot being migrated: counted where it lives now
                low, _, high = spec.partition("-")
                ranges.append((int(low), int(high or low)))
            roles.append(
                NodeRole(
                    port=int(address.split("@")[0].rsplit(":", 1)[1]),
                    node_id=node_id,
                    primary="master" in flags,
                    primary_id=None if primary_id == "-" else primary_id,
                    slots=sum(last - first + 1 for first, last in ranges),
                    ranges=tuple(sorted(ranges)),
                )
            )
        return sorted(roles, key=lambda role: role.port)

    def primaries(self) -> list[NodeRole]:
        return [role for role in self.roles() if role.primary and role.slots]

    def replicas(self) -> list[NodeRole]:
        return [role for role in self.roles() if not role.primary]

    def slots_of(self, port: int) -> list[int]:
        """The hash slots the primary on ``port`` serves, lowest first, as the cluster sees it."""
        (role,) = (role for role in self.roles() if role.port == port)
        return [slot for first, last in role.ranges for slot in range(first, last + 1)]

    def primary_of(self, key: str) -> int:
        """The port of the primary that serves ``key``'s hash slot, as the cluster sees it."""
        slot = key_slot(key.encode())
        (port,) = (
            role.port
            for role in self.primaries()
            if any(first <= slot <= last for first, last in role.ranges)
        )
        return port

    def reshard(self, slots: int, from_port: int, to_port: int) -> list[int]:
        """Move ``slots`` hash slots, keys and all, from the primary on ``from_port`` to the one on
        ``to_port`` (``redis-cli --cluster reshard``), and return the slots moved, lowest first,
        once the cluster is whole with them on ``to_port``.

        redis-cli plans the move from the source's slots in ascending order and takes the first
        ``slots``: the slots moved are ``slots_of(from_port)[:slots]`` as read before the call
        (checked here against the plan it prints). Clients of a moved slot are redirected
        (``ASK`` while it moves, ``MOVED`` after); a script on keys some of which have moved is
        answered ``TRYAGAIN``."""
        assert REDIS_CLI is not None
        self.wait_whole()  # redis-cli refuses to move slots the nodes do not agree on
        roles = {role.port: role for role in self.roles()}
        source, target = roles[from_port], roles[to_port]
        planned = self.slots_of(from_port)[:slots]
        done = subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "reshard",
                f"127.0.0.1:{from_port}",
                *("--cluster-from", source.node_id),
                *("--cluster-to", target.node_id),
                *("--cluster-slots", str(slots)),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # Its plan, one line a slot: "Moving slot 17 from <source id>".
        moved = [
            int(slot)
            for slot in re.findall(
                r"^\s*Moving slot (\d+) from [0-9a-f]+$", done.stdout, re.MULTILINE
            )
        ]
        if done.returncode != 0 or moved != planned:
            raise RuntimeError(
                f"redis-cli --cluster reshard moved {moved}, not {planned} "
                f"(exit {done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        self.wait_whole(lambda: set(moved) <= set(self.slots_of(to_port)))
        return moved

    def move_slot(self, slot: int, from_port: int, to_port: int) -> None:
        """Move the one hash ``slot``, keys and all, from the primary on ``from_port`` to the one on
        ``to_port``, as redis-cli does it (``CLUSTER SETSLOT ... IMPORTING`` / ``MIGRATING``,
        ``MIGRATE`` of its keys, ``SETSLOT ... NODE`` on every primary), and return once the
        cluster is whole with it on ``to_port``: for a test that picks the slot itself."""
        self.wait_whole()
        roles = {role.port: role for role in self.roles()}
        source, target = roles[from_port], roles[to_port]
        with self.node(from_port) as on_source, self.node(to_port) as on_target:
            _send(on_target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            _send(on_source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            while keys := _send(on_source, "CLUSTER", "GETKEYSINSLOT", slot, 1000):
                _send(on_source, "MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        for role in self.primaries():
            with self.node(role.port) as node:
                _send(node, "CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        self.wait_whole(lambda: slot in self.slots_of(to_port))

    def failover(self, replica_port: int) -> None:
        """Promote the replica on ``replica_port`` (``CLUSTER FAILOVER``: its primary is caught up
        first, then demoted), and return once the cluster is whole with it as a primary."""
        shards = len(self.primaries())
        with self.node(replica_port) as client:
            client.execute_command("CLUSTER FAILOVER")

        def promoted() -> bool:
            primaries = self.primaries()
            return len(primaries) == shards and any(r.port == replica_port for r in primaries)

        self.wait_whole(promoted)

    def kill(self, port: int) -> None:
        """Crash the node on ``port`` (SIGKILL) and return once the cluster is whole without it:
        a killed primary's replica has taken its slots."""
        shards = len(self.primaries())
        server = next(s for s in self.servers if s.port == port)
        server.kill()

        def replaced() -> bool:
            primaries = self.primaries()
            return len(primaries) == shards and all(r.port != port for r in self.roles())

        self.wait_whole(replaced)

    def wait_whole(self, also: Callable[[], bool] = lambda: True) -> None:
        """Return once every live node says ``cluster_state:ok`` and sees the same cluster, in
        which every slot is served, every node is a primary with slots or a replica of one, and
        ``also()`` holds; fail after 30 s, with what the nodes said."""
        started = time.monotonic()
        said = ""
        while time.monotonic() - started < _WHOLE_SECONDS:
            try:
                live = [s.port for s in self.servers if s.running]
                states = [self._state(port) for port in live]
                views = [self._view(port) for port in live]
                first = views[0]
                served = sum(role.slots for role in first if role.primary)
                serving = {role.node_id for role in first if role.primary and role.slots}
                settled = all(
                    (role.primary and role.slots) or role.primary_id in serving for role in first
                )
                agreed = all(view == first for view in views)
                if all(states) and served == 16384 and settled and agreed and also():
                    return
                said = f"states {states}, {served} slots served, roles {first}"
            except redis.RedisError as error:
                said = repr(error)
            time.sleep(0.05)  # polling servers that converge by themselves, not ordering a race
        raise RuntimeError(f"the cluster did not become whole in {_WHOLE_SECONDS:g} s: {said}")

    def _state(self, port: int) -> bool:
        with self.node(port) as client:
            info = client.execute_command("CLUSTER INFO")  # parsed by redis-py into a dict
        return isinstance(info, dict) and info.get("cluster_state") == "ok"


def _send(node: redis.Redis, *args: object) -> Any:
    """A command redis-py has no typed method for (``CLUSTER SETSLOT``, ``MIGRATE``, ...)."""
    send: Callable[..., Any] = node.execute_command
    return send(*args)
