"""How a process learns that a run ended without asking: one subscriber thread per store.

Theory of operation. Every script that ends a run publishes the new state on the run's channel.
The store's :class:`Listener` holds one pub/sub connection and a thread; each run owner of this
process is watched on its channel until its ending has been delivered here. Whatever arrives on a
channel -- the ending, or the confirmation that the subscription is live -- makes the owner
re-read the run's stored state, and an owner that reads an ending runs this process's callbacks
(exactly once: :class:`~diagnosis_harness._cancellation.CancelSignal` decides, under the owner's
lock). Reading on the subscription's confirmation closes the gap between an owner's first read
and its subscription; a lost connection re-subscribes every channel on a new one, and so
re-reads every run: an ending published while the connection was down is not missed.

The listener is a convenience for callbacks, not a gate: every operation of an owner reads the
stored state itself, so no work is ever granted on what the listener has or has not heard.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Final, final

import redis

if TYPE_CHECKING:
    from ._run import RedisRun

__all__ = ["Listener"]

_log = logging.getLogger("diagnosis_harness")

_POLL_SECONDS: Final = 0.1  # how long a wait for a message lasts before new channels are taken
_BACKOFF_SECONDS: Final = 0.2  # the pause after a lost connection before the next attempt


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@final
class Listener:
    """One pub/sub connection and thread for the runs of one store in this process."""

    __slots__ = ("_client", "_lock", "_pubsub", "_runs", "_stop", "_thread", "_unsubscribe")

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._lock = threading.Lock()  # protects _runs and _unsubscribe
        # channel -> the owner watched on it; weak, so an owner nobody holds stops being watched
        self._runs: dict[str, weakref.ref[RedisRun]] = {}
        self._unsubscribe: set[str] = set()
        self._pubsub: redis.client.PubSub | None = None  # only the thread touches it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, channel: str, run: RedisRun) -> None:
        """Watch ``run`` on ``channel`` until :meth:`forget`; starts the thread if needed."""
        with self._lock:
            self._runs[channel] = weakref.ref(run)
            self._unsubscribe.discard(channel)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._loop, name="diagnosis-harness-redis-listener", daemon=True
                )
                self._thread.start()

    def forget(self, channel: str) -> None:
        """Stop watching ``channel`` (its run's ending has been delivered here)."""
        with self._lock:
            if self._runs.pop(channel, None) is not None:
                self._unsubscribe.add(channel)

    def close(self) -> None:
        """Stop the thread and close the connection; the owners still read the store."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _loop(self) -> None:
        subscribed: set[str] = set()
        while not self._stop.is_set():
            try:
                if self._pubsub is None:
                    # redis-py leaves pubsub() unannotated; it returns a PubSub
                    self._pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
                    subscribed = set()
                with self._lock:
                    wanted = set(self._runs)
                    gone = self._unsubscribe & subscribed
                    self._unsubscribe.clear()
                if wanted - subscribed:
                    self._pubsub.subscribe(*(wanted - subscribed))
                    subscribed |= wanted
                if gone:
                    self._pubsub.unsubscribe(*gone)
                    subscribed -= gone
                if not subscribed:
                    self._stop.wait(_POLL_SECONDS)
                    continue
                message = self._pubsub.get_message(timeout=_POLL_SECONDS)
                if message is not None and message["type"] in ("subscribe", "message"):
                    self._refresh(_text(message["channel"]))
            except redis.RedisError:
                # A new connection subscribes every channel again, and so re-reads every run.
                self._drop()
                self._stop.wait(_BACKOFF_SECONDS)
            except Exception:  # a bug must not end the thread silently
                _log.exception("the Redis run store's listener failed; it starts over")
                self._drop()
                self._stop.wait(_BACKOFF_SECONDS)
        self._drop()

    def _refresh(self, channel: str) -> None:
        with self._lock:
            ref = self._runs.get(channel)
        run = None if ref is None else ref()
        if run is None:
            self.forget(channel)
            return
        run.refresh_from_listener()

    def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError):  # closing a broken connection
                pubsub.close()
