"""How a process learns that a run ended without asking: one subscriber thread per store.

Theory of operation. Every script that ends a run publishes the new state on the run's channel.
The store's :class:`Listener` holds one pub/sub connection and a thread; each owner of this
process whose run is running is watched on its run's channel -- several owners of one run each
on their own -- until it has learned of the ending. Whatever arrives on a channel -- the ending,
or the confirmation that the subscription is live -- makes each owner watched on it re-read the
run's stored state, and an owner that reads an ending runs this process's callbacks (exactly
once: :class:`~diagnosis_harness._cancellation.CancelSignal` decides, under the owner's lock).

An owner has read its run once before it is watched. The listener re-reads it once the channel's
subscription is live -- on the confirmation of a new subscription, or at once when another owner
had the channel subscribed already -- so an ending published between that first read and the
subscription is not missed; a lost connection subscribes every channel again on a new one, and
so re-reads every run.

What the listener keeps is bounded by the owners alive and running. An owner is forgotten when
it learns of its run's ending (whoever read it), when its run is gone from the store, or when
nobody holds it any more (a weak reference, whose callback only queues the channel: it may run
in any thread, at any allocation, even under this listener's lock); a channel no owner is
watched on any more is unsubscribed on the thread's next turn. A closed listener watches nothing.

The channels are sharded (``SSUBSCRIBE``; the scripts ``SPUBLISH``, Redis 7): a channel lives
in its run tree's slot, so the listener subscribes it on the primary that holds the slot, with a
connection per primary it needs. When the slot moves or its primary fails over, Redis ends the
subscription (a ``sunsubscribe`` the listener did not ask for) or the connection drops (a killed
primary): the listener reads the slot map again and subscribes the channel where it is now,
whose confirmation re-reads every owner on it -- an ending published meanwhile is read, not
missed, and an owner that has learned of its ending is not watched any more, so nothing is
delivered twice. A primary that stalls without dropping its connection ends nothing; the
listener reads the slot map again every :data:`_ROUTES_SECONDS` and moves a channel whose slot
is elsewhere now. One server is a cluster of one node, whose slot map never changes.

The listener is a convenience for callbacks, not a gate: every operation of an owner reads the
stored state itself, so no work is ever granted on what the listener has or has not heard.

A stalled server never holds the thread for long: its connection is the store's own (redis-py's
retries off, :mod:`._bounded`), so each command fails within the store's timeout, and each
re-read of a run is bounded as any read of a property is; ``close()`` returns once the command
in progress has.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, final

import redis
from redis.exceptions import RedisClusterException

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._redis_run import RedisRun
    from ._servers import Servers

__all__ = ["Listener"]

_log = logging.getLogger("diagnosis_harness")

_POLL_SECONDS: Final = 0.1  # how long a wait for a message lasts before new channels are taken
_BACKOFF_SECONDS: Final = 0.2  # the pause after a lost connection before the next attempt
_ROUTES_SECONDS: Final = 2.0  # how often a cluster's slot map is read again without a reason

_Owner = weakref.ref["RedisRun"]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@final
class _Subscription:
    """redis-py's ``PubSub`` behind typed methods.

    redis-py leaves some of these unannotated, and which ones changes between releases (8.1:
    ``Redis.pubsub``; 8.2: ``PubSub.unsubscribe``, ``get_message``). Each is reached through a
    variable of a declared type, which checks the same against every release: no ignore that
    one release needs and the next rejects as unused.
    """

    __slots__ = ("_pubsub",)

    def __init__(self, client: redis.Redis) -> None:
        make: Callable[[], redis.client.PubSub] = client.pubsub
        self._pubsub = make()

    # One channel per command: a cluster refuses channels of several slots in one (CROSSSLOT).

    def subscribe(self, channels: set[str]) -> None:
        subscribe: Callable[..., object] = self._pubsub.ssubscribe
        for channel in channels:
            subscribe(channel)

    def unsubscribe(self, channels: set[str]) -> None:
        unsubscribe: Callable[..., object] = self._pubsub.sunsubscribe
        for channel in channels:
            unsubscribe(channel)

    def get_message(self, timeout: float) -> dict[str, Any] | None:
        """The next message (a subscription's confirmation included), or None after
        ``timeout`` seconds."""
        get: Callable[..., dict[str, Any] | None] = self._pubsub.get_message
        return get(timeout=timeout)

    def close(self) -> None:
        close: Callable[[], object] = self._pubsub.close
        close()


@final
class Listener:
    """One pub/sub connection and thread for the runs of one store in this process.

    Under ``_lock``: ``_owners`` (channel -> the owners watched on it, weakly, never empty) and
    ``_fresh`` (owners watched since the thread last looked). ``_collected`` (channels whose
    owner was collected) is a ``SimpleQueue``, safe to put to from a weak reference's callback.
    Only the thread touches the subscriptions (:class:`_Subscriptions`).
    """

    __slots__ = (
        "_collected",
        "_fresh",
        "_lock",
        "_owners",
        "_servers",
        "_stop",
        "_thread",
    )

    def __init__(self, servers: Servers) -> None:
        """``servers``: the store's own client (:mod:`._servers`), without retries."""
        self._servers = servers
        self._lock = threading.Lock()
        self._owners: dict[str, list[_Owner]] = {}
        self._fresh: list[tuple[str, _Owner]] = []
        self._collected: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def watched(self) -> frozenset[str]:
        """The run IDs of the owners watched now."""
        with self._lock:
            self._prune()
            owners = [ref() for refs in self._owners.values() for ref in refs]
        return frozenset(run.run_id for run in owners if run is not None)

    def owners(self) -> list[RedisRun]:
        """The owners watched now (held, and not yet told of their run's ending)."""
        with self._lock:
            self._prune()
            refs = [ref for refs in self._owners.values() for ref in refs]
        return [run for run in (ref() for ref in refs) if run is not None]

    def watch(self, channel: str, run: RedisRun) -> None:
        """Watch ``run`` on ``channel`` until :meth:`forget` or until it is collected; starts the
        thread if needed. ``run`` has read its run's state once already and found it running."""
        on_collected = functools.partial(self._on_collected, channel)
        with self._lock:
            if self._stop.is_set():
                return  # closed: nothing would ever wake it
            if self._thread is None:  # first, so that a thread that cannot start leaves nothing
                thread = threading.Thread(
                    target=self._loop, name="diagnosis-harness-redis-listener", daemon=True
                )
                thread.start()
                self._thread = thread
            self._prune()
            ref = weakref.ref(run, on_collected)
            self._owners.setdefault(channel, []).append(ref)
            self._fresh.append((channel, ref))

    def forget(self, channel: str, run: RedisRun) -> None:
        """Stop watching ``run`` (it learned of its run's ending, or its run is gone)."""
        with self._lock:
            self._drop_owners(channel, lambda owner: owner is run)

    def stop(self) -> None:
        """Ask the thread to end on its next turn, and return: safe in a finalizer, which may run
        in any thread (no lock, no join). The thread closes its connection as it ends."""
        self._stop.set()

    def close(self) -> None:
        """Stop the thread and close the connection; the owners still read the store."""
        with self._lock:
            self._stop.set()
            self._owners.clear()
            self._fresh.clear()
            self._prune()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- under the lock ---------------------------------------------------------------------------

    def _drop_owners(self, channel: str, gone: Callable[[RedisRun | None], bool]) -> None:
        """Drop the owners on ``channel`` that are ``gone`` (``None``: collected)."""
        owners = [ref for ref in self._owners.get(channel, ()) if not gone(ref())]
        if owners:
            self._owners[channel] = owners
        else:
            self._owners.pop(channel, None)

    def _prune(self) -> None:
        """Drop the owners that were collected since the last time."""
        while True:
            try:
                channel = self._collected.get_nowait()
            except queue.Empty:
                return
            self._drop_owners(channel, lambda owner: owner is None)

    def _on_collected(self, channel: str, _ref: _Owner) -> None:
        self._collected.put(channel)  # no lock here: see the module docstring

    # -- the thread -------------------------------------------------------------------------------

    def _loop(self) -> None:
        subscriptions = _Subscriptions(self._servers)
        routes_read = time.monotonic()
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._prune()
                    wanted = set(self._owners)
                    fresh, self._fresh = self._fresh, []
                if subscriptions.any() and time.monotonic() - routes_read >= _ROUTES_SECONDS:
                    routes_read = time.monotonic()
                    subscriptions.read_routes()
                live = subscriptions.follow(wanted)  # a new owner on one of these is re-read now
                self._reread(fresh, live)
                if not subscriptions.any():
                    self._stop.wait(_POLL_SECONDS)
                    continue
                for channel in subscriptions.arrivals(_POLL_SECONDS):
                    self._refresh(channel)
            except (redis.RedisError, RedisClusterException):
                # New connections subscribe every channel again, and so re-read every run. (A
                # cluster whose slot map has a hole, or no node of which answers, mid-failover.)
                subscriptions.drop()
                self._stop.wait(_BACKOFF_SECONDS)
            except Exception:  # a bug must not end the thread silently
                _log.exception("the Redis run store's listener failed; it starts over")
                subscriptions.drop()
                self._stop.wait(_BACKOFF_SECONDS)
        subscriptions.drop()

    # The next two hold the owners they wake only while they run: a reference left in the
    # loop's frame would keep a dropped owner alive, and watched, until it was overwritten.

    @staticmethod
    def _reread(fresh: list[tuple[str, _Owner]], live: set[str]) -> None:
        """Re-read each new owner whose channel was subscribed before it was watched."""
        for channel, ref in fresh:
            run = ref() if channel in live else None
            if run is not None:
                run.refresh_from_listener()

    def _refresh(self, channel: str) -> None:
        with self._lock:
            owners = [ref() for ref in self._owners.get(channel, ())]
        for run in owners:
            if run is not None:
                run.refresh_from_listener()


@final
class _Subscriptions:
    """The listener thread's sharded subscriptions: a connection per node it needs, and where
    each channel is subscribed. Only the listener's thread uses one."""

    __slots__ = ("_by_node", "_servers", "_where")

    def __init__(self, servers: Servers) -> None:
        self._servers = servers
        self._by_node: dict[str, _Subscription] = {}
        self._where: dict[str, str] = {}  # channel -> the node it is subscribed on

    def any(self) -> bool:
        return bool(self._where)

    def read_routes(self) -> None:
        """Read the slot map again: :meth:`follow` then moves a channel whose slot moved."""
        self._servers.refresh()

    def follow(self, wanted: set[str]) -> set[str]:
        """Subscribe each ``wanted`` channel on the node that holds its slot, and unsubscribe
        the others (and a channel from a node that no longer holds it). The channels that were
        subscribed where they are before this call: the others are re-read on confirmation."""
        servers = self._servers
        live = set()
        for channel, node in list(self._where.items()):
            if channel in wanted and servers.route(channel) == node:
                live.add(channel)
                continue
            del self._where[channel]
            self._by_node[node].unsubscribe({channel})
        new: dict[str, set[str]] = {}
        for channel in wanted - live:
            new.setdefault(servers.route(channel), set()).add(channel)
        for node, channels in new.items():
            subscription = self._by_node.get(node)
            if subscription is None:
                client = servers.node_named(node)
                if client is None:  # gone from the slot map: read it again, next turn
                    servers.refresh()
                    continue
                subscription = self._by_node[node] = _Subscription(client)
            subscription.subscribe(channels)
            self._where.update(dict.fromkeys(channels, node))
        for node in set(self._by_node) - set(self._where.values()):
            self._close(node)
        return live

    def arrivals(self, timeout: float) -> list[str]:
        """The channels that had a message -- an ending, or a subscription's confirmation --
        within ``timeout`` seconds (shared between the nodes). A subscription the server ended
        on its own (its slot moved, its primary failed over) is forgotten, the slot map read
        again: the next :meth:`follow` subscribes it where it is now."""
        channels = []
        each = timeout / len(self._by_node)
        for node, subscription in list(self._by_node.items()):
            message = subscription.get_message(timeout=each)
            if message is None:
                continue
            channel = _text(message["channel"])
            if message["type"] in ("ssubscribe", "smessage"):
                channels.append(channel)
            elif message["type"] == "sunsubscribe" and self._where.get(channel) == node:
                del self._where[channel]  # not asked for: the server moved it
                self._servers.refresh()
        return channels

    def drop(self) -> None:
        """Close every connection and forget every subscription (after a lost connection)."""
        for node in list(self._by_node):
            self._close(node)
        self._where.clear()

    def _close(self, node: str) -> None:
        subscription = self._by_node.pop(node)
        with contextlib.suppress(redis.RedisError):  # closing a broken connection
            subscription.close()
