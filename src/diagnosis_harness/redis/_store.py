"""``RedisRunStore``: runs that live in Redis, shared by every process attached to them.

Theory of operation. A store is a Redis client, a namespace and how long a run's keys outlive its
ending. It validates what it is given once, loads the scripts of :mod:`._scripts`, and makes the
owners (:class:`~._redis_run.RedisRun`) of the runs ``RunContext.create(..., store=...)``
publishes and ``RunContext.attach(...)`` opens. The keys of a run are built from safe segments,
the way :class:`~diagnosis_harness.ToolCallKeyFactory` builds Tool Call keys, with the ID of its
tree's root as the hash tag: ``{namespace}:{{run_id}}:{part}`` for a root,
``{namespace}:{{root_id}}:{run_id}:{part}`` for a child (``ctx.child``), so one tree lives in one
Redis Cluster slot and every script touches keys of one slot only (:class:`RunKeys`).

Every round trip -- the store's and its owners' -- goes through one private
:class:`~._link.StoreLink` and its :class:`~._bounded.BoundedClient`, made from the given client:
on connections of its own, with redis-py's retries off, each waited for at most its
:class:`~._bounded.Bound` (the run's deadline, the store's timeout if sooner). The store keeps
only its public methods; the owners it makes hold the link.
"""

from __future__ import annotations

import math
import uuid
from typing import TYPE_CHECKING, Any, Final, Literal, final

import redis
from redis.cluster import RedisCluster

from .._errors import RunStoreConflict
from .._keys import safe_segment
from ._capacity import RedisCapacityCounter
from ._link import StoreLink, load
from ._protocol import Created
from ._redis_run import RedisRun
from ._run_keys import RunKeys
from ._servers import where_of
from ._stored import limits_differ, limits_of, run_fields

if TYPE_CHECKING:
    from .._cancellation import CallbackErrorHandler
    from .._clock import Clock
    from .._limits import BudgetLimits
    from ._bounded import Bound

__all__ = ["DURABILITIES", "Durability", "RedisRunStore", "RunKeys"]

Durability = Literal["primary", "replica"]
DURABILITIES: Final[tuple[Durability, ...]] = ("primary", "replica")
"""What a write the store acknowledges has reached: the primary alone (a failover before its
replica has it may lose it), or a replica too (``WAIT``; a write no replica confirms within its
bound is refused). See docs/workers.md, "Durability"."""


def _in_sync(info: dict[str, Any]) -> bool:
    """Whether ``INFO`` of a primary shows a replica online (not still taking its first sync)."""
    return any(
        isinstance(replica, dict) and replica.get("state") == "online"
        for name, replica in info.items()
        if name.startswith("slave")
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@final
class RedisRunStore:
    """Runs kept in Redis, under ``namespace``; pass it to ``RunContext.create`` / ``attach``.

    ``client`` is a :class:`redis.Redis` (on a ``ConnectionPool`` or ``BlockingConnectionPool``)
    or a :class:`redis.cluster.RedisCluster`, with a finite ``socket_timeout`` (redis-py 8's
    default is 5 s), the store's timeout. A run tree's keys and channels share its root's hash
    tag, so each tree lives on one shard of a cluster, and runs spread over all of them. The
    store talks to the client's servers on connections of its own, with the client's settings
    but without redis-py's retries: every round trip waits at most until the run's deadline, or
    the store's timeout if sooner (see :mod:`._bounded`), then fails with
    ``RunStoreUnavailable``; the store decides what is sent again (on a cluster, through a
    failover or a moving slot, until that bound). ``durability``: ``"primary"`` (default)
    acknowledges a write the primary applied; ``"replica"`` also waits for a replica to confirm
    it (``WAIT``) and refuses it, with ``RunStoreUnavailable``, if none does in time -- see
    :data:`DURABILITIES`. ``namespace`` is a safe key segment (``[A-Za-z0-9_.-]``, 1 to 128
    characters); a run's keys expire ``expire_after`` seconds (default a day) after the run
    ends. Thread-safe; one store per client is enough for every run of a process.
    :meth:`close` stops its listener thread, as does the store's collection once neither it
    nor an owner of its runs is held.
    """

    __slots__ = ("__weakref__", "_expire_after_ms", "_link", "client", "durability", "namespace")

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        namespace: str,
        expire_after: float = 86_400.0,
        durability: Durability = "primary",
    ) -> None:
        if not isinstance(client, (redis.Redis, RedisCluster)):
            raise TypeError(
                f"client must be a redis.Redis or a redis.cluster.RedisCluster, got {client!r}"
            )
        if durability not in DURABILITIES:
            raise ValueError(
                f"durability must be one of {', '.join(map(repr, DURABILITIES))}, "
                f"got {durability!r}"
            )
        self.namespace: Final = safe_segment("namespace", namespace)
        if type(expire_after) not in (int, float) or not (
            math.isfinite(expire_after) and expire_after > 0
        ):
            raise ValueError(
                f"expire_after must be a finite number of seconds > 0, got {expire_after!r}"
            )
        self._expire_after_ms = max(1, round(expire_after * 1000))
        self.client: Final = client
        self.durability: Final = durability
        # Refuses a client without a socket_timeout. The link stops its listener's thread and
        # its workers once neither this store nor an owner of its runs (which hold the link) is
        # held, also when nobody called close().
        self._link = link = StoreLink(
            client,
            f"RedisRunStore(namespace={self.namespace!r}, server={where_of(client)!r})",
            durable=durability == "replica",
        )
        servers = link.servers
        try:
            infos = link.run(lambda _: [node.info() for node in servers.primaries()], link.bound())
        except redis.RedisError as error:
            raise link.unavailable("the client is not connected", error) from error
        for info in infos:
            version = str(info.get("redis_version", "0"))
            if int(version.split(".", maxsplit=1)[0]) < 7:
                raise ValueError(
                    f"RedisRunStore needs Redis 7.0 or later (Functions); got {version}"
                )
            if durability == "replica" and not _in_sync(info):
                raise ValueError(
                    "durability='replica' needs a replica in sync with every primary; the "
                    f"primary on port {info.get('tcp_port')} has none online (durability="
                    "'primary' keeps a write the primary acknowledged, which a failover may lose)"
                )
        try:
            link.run(lambda _: load(servers), link.bound())
        except redis.RedisError as error:
            raise link.unavailable("FUNCTION LOAD", error) from error

    # -- what RunContext calls ----------------------------------------------------------------

    def create_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits,
        deadline_ns: int,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RedisRun:
        """Publish a new run; :class:`RunStoreConflict` if the ID exists (see ``RunStore``): a
        root's, or one a child run holds."""
        keys = RunKeys.of(self.namespace, run_id)
        limit_fields = run_fields(limits)  # ValueError for a number the functions cannot keep
        link = self._link
        bound = link.bound(deadline_ns - clock.monotonic_ns())
        origin_ns = self._server_time_ns(keys, bound)
        offset = -clock.monotonic_ns()  # run time 0 is this clock's now
        fields: list[str | int] = [
            "session_id", session_id,
            "origin_ns", origin_ns,
            "deadline", deadline_ns + offset,
            "ttl_ms", self._expire_after_ms,
            *limit_fields,
        ]  # fmt: skip
        # An id of its own: a create sent again after a lost answer finds the run its own.
        op_id = uuid.uuid4().hex
        try:
            answer = link.call("create", keys, ["", op_id, 0, *fields], bound)
        except redis.RedisError as error:
            raise link.unavailable(f"create of run {run_id!r}", error) from error
        if answer == Created("exists"):
            raise RunStoreConflict(repr(self), f"run {run_id!r} exists already in the store")
        run = RedisRun(
            link=link,
            keys=keys,
            limits=limits,
            deadline_ns=deadline_ns,
            offset=offset,
            clock=clock,
            on_callback_error=on_callback_error,
            store=self,
            path=(),
            priced=limits.cost is not None,
            expire_after_ms=self._expire_after_ms,
        )
        # No read here, which could fail after the run was published: the listener reads the
        # run once the subscription is live, which finds an ending another process recorded.
        link.watch(keys.channel, run)
        return run

    def attach_run(
        self,
        *,
        session_id: str,
        run_id: str,
        limits: BudgetLimits | None,
        clock: Clock,
        on_callback_error: CallbackErrorHandler,
    ) -> RedisRun:
        """The owner of a stored run -- a root, or a child found by the index its creation
        wrote under its own ID (see :class:`RunKeys`); :class:`UnknownRun` or
        :class:`RunStoreConflict` else.

        A refusal registers nothing with the listener and writes nothing; an owner of a run that
        has ended already is never watched (it has nothing more to learn)."""
        keys = RunKeys.of(self.namespace, run_id)
        link = self._link
        bound = link.bound()  # the run's deadline is not known before this read
        fields = ("session_id", "limits", "origin_ns", "deadline", "path", "priced")
        try:
            stored = link.read(keys.run, fields, bound)
            if stored[0] is None:  # no root of this ID: a child's, if its index says so
                root = link.run(lambda client: client.hget(keys.index, "root"), bound)
                if root is not None:
                    keys = RunKeys.of(self.namespace, run_id, _text(root))
                    stored = link.read(keys.run, fields, bound)
        except redis.RedisError as error:
            raise link.unavailable(f"attach to run {run_id!r}", error) from error
        session, limits_text, origin, deadline, path, priced = stored
        if session is None or limits_text is None or origin is None or deadline is None:
            raise link.unknown(run_id)
        if _text(session) != session_id:
            raise RunStoreConflict(
                repr(self),
                f"run {run_id!r} belongs to session {_text(session)!r}, not {session_id!r}",
            )
        stored_limits = limits_of(_text(limits_text))
        if limits is not None and limits != stored_limits:
            raise RunStoreConflict(
                repr(self),
                "limits must be None or equal the run's stored limits; "
                f"run {run_id!r} is {limits_differ(stored_limits, limits)}",
            )
        before = clock.monotonic_ns()
        server_ns = self._server_time_ns(keys, bound)
        after = clock.monotonic_ns()
        offset = server_ns - int(origin) - (before + after) // 2
        run = RedisRun(
            link=link,
            keys=keys,
            limits=stored_limits,
            deadline_ns=int(deadline) - offset,
            offset=offset,
            clock=clock,
            on_callback_error=on_callback_error,
            store=self,
            path=() if path is None else tuple(_text(path).split()),
            priced=stored_limits.cost is not None or (priced is not None and _text(priced) == "1"),
            expire_after_ms=self._expire_after_ms,
        )
        run.refresh()  # an ending read here is delivered now; a callback registered later runs
        # inside register(), and the owner has nothing left to learn from the listener
        if not run.ending_delivered:
            link.watch(keys.channel, run)  # it re-reads once the subscription is live
        return run

    # -- the run's capacity counter -----------------------------------------------------------

    def capacity_counter(self, run_id: str, limit_bytes: int) -> RedisCapacityCounter:
        """The capacity counter of a stored run (a root, or a child found by its index), shared
        by every process; see the class."""
        keys = RunKeys.of(self.namespace, run_id)
        link = self._link
        try:
            root = link.run(lambda client: client.hget(keys.index, "root"), link.bound())
        except redis.RedisError as error:
            raise link.unavailable(f"capacity of run {run_id!r}", error) from error
        if root is not None:
            keys = RunKeys.of(self.namespace, run_id, _text(root))
        return RedisCapacityCounter(link, keys, limit_bytes)

    # -- this process's side ---------------------------------------------------------------------

    @property
    def watched_runs(self) -> frozenset[str]:
        """The IDs of the runs this store's listener watches now: those with an owner in this
        process that is still held and has not learned of the run's ending. Empty once closed."""
        return self._link.watched

    def close(self) -> None:
        """Stop the listener thread; the runs stay in Redis and their owners keep working, but
        callbacks run only when an owner reads an ending."""
        self._link.close()

    def _server_time_ns(self, keys: RunKeys, bound: Bound) -> int:
        try:
            return self._link.time_ns(keys.run, bound)
        except redis.RedisError as error:
            raise self._link.unavailable("TIME", error) from error

    def __repr__(self) -> str:
        return self._link.name
