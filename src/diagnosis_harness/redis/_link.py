"""``StoreLink``: what a store and the owners of its runs share, kept off the public store.

A :class:`~._store.RedisRunStore` is the public face: it validates, creates and attaches. What it
and the owners it makes (:class:`~._redis_run.RedisRun`, :class:`~._capacity.RedisCapacityCounter`)
send and learn goes through one link: the bounded client (:mod:`._bounded`), the listener
(:mod:`._listener`), the functions' calls decoded into their answers (:mod:`._protocol`), and the
errors that name the store. The owners hold the link, not the store; the link's collection -- once
neither the store nor an owner of its runs is held -- stops the listener's thread and the bounded
client's workers.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import redis

from .._errors import RunStoreUnavailable, UnknownRun
from ._bounded import BoundedClient
from ._listener import Listener
from ._protocol import decode
from ._scripts import library

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._bounded import Bound
    from ._protocol import Answer
    from ._redis_run import RedisRun
    from ._servers import Client, Servers
    from ._store import RunKeys

T = TypeVar("T")

__all__ = ["StoreLink", "load"]


def load(servers: Servers) -> None:
    """Load the function library on every primary (Functions are per node: a cluster's are not
    shared); one loaded already (by any process) is fine. A replica has its primary's."""
    for node in servers.primaries():
        try:
            node.function_load(library().text)
        except redis.ResponseError as error:
            if "already exists" not in str(error):
                raise


@final
class StoreLink:
    """One store's round trips and listener. Thread-safe: its parts are.

    ``name`` is the store's ``repr``, fixed when made: the errors name the store by it.
    ``durable``: every write is confirmed by a replica or refused (``durability="replica"``).
    """

    __slots__ = ("__weakref__", "_io", "_listener", "durable", "name")

    def __init__(self, client: Client, name: str, *, durable: bool = False) -> None:
        self.name: Final = name
        self.durable: Final = durable
        self._io = io = BoundedClient(client)  # refuses a client without a socket_timeout
        self._listener = Listener(io.servers)
        # The listener's thread holds the listener, not the link: a link nobody holds stops the
        # thread and the workers, also when nobody called close().
        weakref.finalize(self, self._listener.stop)
        weakref.finalize(self, self._io.shutdown)

    # -- round trips ----------------------------------------------------------------------------

    def bound(self, left_ns: int | None = None) -> Bound:
        """How long an operation beginning now waits for the store: its timeout, or ``left_ns``
        (the time before the run's deadline) if sooner, but at least the grace."""
        return self._io.bound(left_ns)

    @property
    def servers(self) -> Servers:
        return self._io.servers

    def run(self, command: Callable[[Client], T], bound: Bound | None) -> T:
        """``command`` on the store's own client, within ``bound`` (``None``: in this thread,
        for the listener's; see :meth:`BoundedClient.run`); raises ``RedisError``."""
        return self._io.run(command, bound)

    def read(self, key: str, fields: tuple[str, ...], bound: Bound | None) -> list[Any]:
        """``HMGET key fields``: one command, so one consistent read."""

        def hmget(client: Client) -> list[Any]:
            values: list[Any] = client.hmget(key, fields)
            return values

        return self.run(hmget, bound)

    def call(
        self, operation: str, keys: RunKeys, args: list[str | int], bound: Bound | None = None
    ) -> Answer:
        """``FCALL`` of ``operation``'s function on the run's keys, within ``bound`` (the
        store's timeout if not given): its answer, decoded. Confirmed by a replica when the
        link is ``durable`` (``WriteNotConfirmed`` else). Loads the library again if the node
        does not know it (a restart without persistence, a node added to a cluster); raises
        ``RedisError``, or ``ProtocolError`` for an answer of another shape than declared."""
        function = library().functions[operation]
        servers = self._io.servers
        bound = self._io.bound() if bound is None else bound

        def fcall(_client: Client) -> list[Any]:
            # WAIT's own timeout ends before the bound does, so that a refusal is an answer.
            wait_ms = max(1, int(bound.left() * 750)) if self.durable else None
            try:
                raw: list[Any] = servers.fcall(function, keys.all, args, wait_ms)
            except redis.ResponseError as error:
                if "function not found" not in str(error).lower():
                    raise
                load(servers)
                raw = servers.fcall(function, keys.all, args, wait_ms)
            return raw

        return decode(operation, self.run(fcall, bound))

    def time_ns(self, key: str, bound: Bound) -> int:
        """The clock of the node that holds ``key`` (the run's timeline is read off it)."""

        def time_of(_client: Client) -> tuple[int, int]:
            seconds, micros = self._io.servers.node_of(key).time()
            return int(seconds), int(micros)

        seconds, micros = self.run(time_of, bound)
        return (seconds * 1_000_000 + micros) * 1_000

    # -- errors that name the store --------------------------------------------------------------

    def unavailable(self, what: str, error: Exception) -> RunStoreUnavailable:
        """The error of an operation the store did not answer: nothing was granted."""
        return RunStoreUnavailable(
            self.name, f"{what} failed, nothing granted: {type(error).__name__}: {error}"
        )

    def unknown(self, run_id: str) -> UnknownRun:
        return UnknownRun(
            self.name,
            f"no run {run_id!r} is stored (never created, expired after it ended, "
            "or lost when a server without persistence restarted)",
        )

    # -- the listener ----------------------------------------------------------------------------

    def watch(self, channel: str, run: RedisRun) -> None:
        """The listener watches ``run``: it re-reads it once the subscription is live."""
        self._listener.watch(channel, run)

    def forget(self, channel: str, run: RedisRun) -> None:
        """The listener stops watching ``run`` (it learned of the ending, or the run is gone)."""
        self._listener.forget(channel, run)

    def owners(self) -> list[RedisRun]:
        """The owners in this process the listener watches now (see ``Listener.owners``)."""
        return self._listener.owners()

    @property
    def watched(self) -> frozenset[str]:
        return self._listener.watched

    def close(self) -> None:
        self._listener.close()
