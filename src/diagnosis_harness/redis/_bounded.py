"""The store's side of the wire: every round trip bounded, none retried behind the store's back.

Theory of operation. redis-py bounds one read by the connection's ``socket_timeout`` and then
retries on its own (redis-py 8: ten times, a timeout among the errors it retries), so one command
to a server that stopped answering held a boundary for a minute. It has no per-command timeout:
a pooled connection's socket timeout is fixed when it connects, and a new connection's handshake
(AUTH, SELECT, HELLO, CLIENT SETINFO) reads with it too. So the store does not send on the
client it is given. :class:`BoundedClient` derives a client of its own from that client's
connection settings, with redis-py's retries off. An operation's :class:`Bound` is the run's
deadline, or the store's timeout (the client's ``socket_timeout``) when that is sooner, and never
less than :data:`GRACE_SECONDS`; past it the operation fails with ``redis.TimeoutError``.

Where the command runs follows from the bound. Without retries, the slowest way a command on a
server that stopped answering can fail in the caller's own thread is a connect and one read, each
ended by its own timeout (``socket_connect_timeout`` + ``socket_timeout``: a new connection's
handshake fails at its first read). While the run's deadline is further away than that, the
command runs in the caller's thread and the store's timeout bounds it, at no cost. Nearer the
deadline it runs on one of the store's worker threads, and the caller stops waiting when the
bound passes: a command it stopped waiting for ends on its worker within the store's timeout
(its socket times out; nothing retries it), and its answer is dropped -- the server may still
apply it once it answers again. Every write carries an operation id the server remembers
(``lua/common.lua``), so a write sent again is applied once.

The store decides what is retried: after a ``redis.ConnectionError`` (a pooled connection the
server closed, a restart) the command is sent once more, on a new connection, if its bound
leaves time; on a Redis Cluster, also after a failover or a slot on the move, as often as the
bound leaves time for (:mod:`._servers`); never after a timeout, which would only wait again.
The client may be a ``redis.Redis`` or a ``redis.cluster.RedisCluster``; on a cluster the
slowest failure in the caller's thread includes redis-py's reload of the slot map.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar, final

import redis
from redis.exceptions import RedisClusterException

from ._servers import servers_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._servers import Client

__all__ = ["GRACE_SECONDS", "Bound", "BoundedClient"]

T = TypeVar("T")

GRACE_SECONDS: Final = 0.25
"""How long a round trip made at or after a run's deadline (or just before it) may wait: enough
for a boundary past the deadline to record ``TIMED_OUT`` and for a read to learn the ending from
a server that answers, short enough that a stalled one holds nobody long past the deadline."""

_WORKERS: Final = 16  # round trips in flight at once per store; more wait for a worker
_FIRST_PAUSE: Final = 0.02  # before a command is sent again; doubled each time, up to _MOST
_MOST_PAUSE: Final = 0.5


@final
@dataclass(frozen=True, slots=True)
class Bound:
    """One operation waits for the store until ``until`` (``time.monotonic()``), ``seconds``
    after it began; ``why`` says which limit set it, for the error. ``here``: its commands run
    in the caller's thread, the socket timeouts ending them well before the deadline."""

    until: float
    seconds: float
    why: str
    here: bool

    def left(self) -> float:
        return self.until - time.monotonic()


@final
class BoundedClient:
    """The store's own client and its worker threads.

    ``servers``: the client (redis-py's retries off), the store's timeout (the given client's
    ``socket_timeout``) and what else differs between one server and a cluster. Thread-safe.
    Under ``_lock``: the executor, made again in a process forked from the one that made it
    (threads do not survive ``fork()``).
    """

    __slots__ = ("_executor", "_lock", "_pid", "servers")

    def __init__(self, client: object) -> None:
        # Refuses a client of another kind, or without a finite socket_timeout.
        self.servers: Final = servers_of(client)
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = os.getpid()

    def bound(self, left_ns: int | None = None) -> Bound:
        """The bound of an operation beginning now: the store's timeout, or ``left_ns`` (the
        time before the run's deadline, on the run's clock) if sooner, but at least
        :data:`GRACE_SECONDS`."""
        seconds, why = self.servers.timeout, "the store's timeout, the client's socket_timeout"
        here = left_ns is None or left_ns / 1e9 > self.servers.slowest
        if left_ns is not None:
            left = max(left_ns / 1e9, GRACE_SECONDS)
            if left < seconds:
                seconds = left
                why = (
                    "the time left before the run's deadline"
                    if left_ns / 1e9 > GRACE_SECONDS
                    else "the grace at the run's deadline"
                )
        return Bound(until=time.monotonic() + seconds, seconds=seconds, why=why, here=here)

    def run(self, command: Callable[[Client], T], bound: Bound | None) -> T:
        """``command(client)``'s answer; its ``RedisError``; ``redis.TimeoutError`` once
        ``bound`` passes. Sent again after a failure the servers say is worth it
        (:meth:`~._servers.Servers.again`: a lost connection; on a cluster also a failover or
        a moving slot), after a pause that doubles each time, while ``bound`` leaves time.

        ``bound`` ``None`` runs it in this thread, for the store's own thread (the listener's),
        which holds up no caller: each wait on the socket ends within the store's timeout; it
        is sent at most twice.
        """
        attempt, pause = 0, _FIRST_PAUSE
        while True:
            attempt += 1
            try:
                if bound is None:
                    return self._cluster_errors(command)
                if bound.here and attempt == 1:  # a second one could outlast what the first left
                    return self._here(command, bound)
                return self._wait(command, bound)
            except redis.RedisError as error:
                if not self.servers.again(error, attempt) or (bound is None and attempt >= 2):
                    raise
                if bound is not None:
                    if bound.left() <= pause:
                        raise
                    time.sleep(pause)  # a node failing over, a slot moving: give it a moment
                    pause = min(pause * 2, _MOST_PAUSE)

    def _cluster_errors(self, command: Callable[[Client], T]) -> T:
        """``command(client)``, with redis-py's cluster errors that are not a ``RedisError``
        (no node holds the slot yet, no node answered) as the lost connection they are."""
        try:
            return command(self.servers.client)
        except RedisClusterException as error:
            raise redis.ConnectionError(f"{type(error).__name__}: {error}") from error

    def _here(self, command: Callable[[Client], T], bound: Bound) -> T:
        try:
            return self._cluster_errors(command)
        except redis.TimeoutError as error:
            raise redis.TimeoutError(
                f"no answer within {bound.seconds:.3g} s ({bound.why})"
            ) from error

    def _wait(self, command: Callable[[Client], T], bound: Bound) -> T:
        try:
            future = self._submit(command)
        except RuntimeError as error:  # no new threads once the interpreter is exiting
            raise redis.ConnectionError(f"the store's workers are gone: {error}") from error
        try:
            return future.result(timeout=max(0.0, bound.left()))
        except (concurrent.futures.TimeoutError, redis.TimeoutError) as error:
            # Ours or the socket's (the store's timeout, when it set the bound): one message.
            future.cancel()  # not sent if no worker has taken it yet
            raise redis.TimeoutError(
                f"no answer within {bound.seconds:.3g} s ({bound.why})"
            ) from error

    def shutdown(self) -> None:
        """Stop the workers (those waiting on a stalled server end with its timeout) and close
        the connections. Safe in a finalizer: no wait."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        self.servers.shutdown()

    def _submit(self, command: Callable[[Client], T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=_WORKERS, thread_name_prefix="diagnosis-harness-redis"
                )
                self._pid = os.getpid()
            return self._executor.submit(self._cluster_errors, command)
