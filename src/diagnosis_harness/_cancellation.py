"""Cooperative cancellation: the first reason wins, and every callback runs exactly once.

Theory of operation. A :class:`Cancellation` holds one reason (``None`` until cancelled) and an
ordered registry of callbacks. The first :meth:`Cancellation.cancel` sets the reason and *takes*
every registered callback out of the registry, under the lock; it then runs them outside the lock,
in registration order. Taking them under the lock is what makes "exactly once" hold: a callback is
either still registered (and will be taken by the one signaller, or removed by ``unregister()``)
or it has been taken, never both. A callback registered after cancellation runs at once, inline.
A callback that raises does not stop the others; its error goes to the error handler (default:
logged on the ``diagnosis_harness`` logger), never to the caller of ``cancel()``.

Inside a run the lock is the run's lock, shared with the lifecycle, so that "the first reason wins"
and "the first terminal outcome wins" are one decision (see :mod:`._lifecycle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeAlias, final

from ._checkpoint import checkpoint
from ._validate import seconds

if TYPE_CHECKING:
    import weakref

__all__ = [
    "CallbackErrorHandler",
    "Cancellation",
    "CancellationCallback",
    "CancellationReason",
    "Registration",
]

_log = logging.getLogger("diagnosis_harness")


class CancellationReason(enum.Enum):
    """Why a run's cancellation was signalled; the first one is kept."""

    CLIENT_DISCONNECTED = "client_disconnected"
    """The client that asked for the diagnosis went away."""
    USER_REQUESTED = "user_requested"
    """Someone asked for the run to stop."""
    SHUTDOWN = "shutdown"
    """The process is shutting down."""
    DEADLINE_EXCEEDED = "deadline_exceeded"
    """A boundary read the clock at or after the deadline (the run is ``TIMED_OUT``)."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """A budget limit was reached (the run is ``BUDGET_EXHAUSTED``)."""
    RUN_FINISHED = "run_finished"
    """The run recorded ``SUCCESS`` or ``FAILED``: release resources. Not for ``cancel()``."""


CancellationCallback: TypeAlias = Callable[[CancellationReason], object]
"""A resource's release hook: receives the first reason."""
CallbackErrorHandler: TypeAlias = Callable[[Exception, CancellationCallback], None]
"""Receives an exception a callback raised, and that callback."""


def _log_callback_error(error: Exception, callback: CancellationCallback) -> None:
    _log.error("cancellation callback %r raised", callback, exc_info=error)


@final
class Registration:
    """The handle :meth:`Cancellation.register` returns."""

    __slots__ = ("_key", "_owner")

    def __init__(self, owner: Cancellation | None, key: int) -> None:
        self._owner = owner
        self._key = key

    def unregister(self) -> bool:
        """Remove the callback; True only if it was removed before it ran. Never waits."""
        if self._owner is None:
            return False
        return self._owner._remove(self._key)


_Pending: TypeAlias = list[CancellationCallback]


@final
class Cancellation:
    """A cancellation token. Thread-safe; usable from threads and from asyncio."""

    __slots__ = ("_callbacks", "_event", "_keys", "_lock", "_on_cancel", "_on_error", "_reason")

    def __init__(
        self,
        *,
        on_callback_error: CallbackErrorHandler | None = None,
        _lock: threading.Lock | None = None,
    ) -> None:
        if on_callback_error is not None and not callable(on_callback_error):
            raise TypeError(f"on_callback_error must be callable, got {on_callback_error!r}")
        # _lock protects _reason, _callbacks and _on_cancel; in a run it is the run's lock.
        self._lock = threading.Lock() if _lock is None else _lock
        self._reason: CancellationReason | None = None
        self._callbacks: dict[int, CancellationCallback] = {}
        self._keys = itertools.count()
        self._event: threading.Event | None = None  # made by the first wait(): most runs never wait
        self._on_error = _log_callback_error if on_callback_error is None else on_callback_error
        # Called under the lock by the winning cancel(): the run's lifecycle records its outcome.
        # Held weakly: the lifecycle holds this cancellation, and a cycle between the two would
        # leave every ended run to the cyclic GC instead of freeing it when its last user lets go.
        self._on_cancel: weakref.WeakMethod[Callable[[CancellationReason], None]] | None = None

    @property
    def is_cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> CancellationReason | None:
        """The first reason, or ``None`` while not cancelled."""
        return self._reason

    def cancel(self, reason: CancellationReason) -> bool:
        """Signal cancellation; True only for the call whose reason won.

        The run becomes ``CANCELLED`` (``TIMED_OUT`` for ``DEADLINE_EXCEEDED``,
        ``BUDGET_EXHAUSTED`` for ``BUDGET_EXHAUSTED``) unless it already has a terminal outcome.
        """
        if type(reason) is not CancellationReason:
            raise TypeError(f"reason must be a CancellationReason, got {reason!r}")
        if reason is CancellationReason.RUN_FINISHED:
            raise ValueError(
                "reason RUN_FINISHED is signalled by the lifecycle; "
                "call ctx.lifecycle.succeed() or ctx.lifecycle.fail(reason) instead"
            )
        with self._lock:
            pending = self._signal_locked(reason)
            if pending is None:
                return False
            on_cancel = None if self._on_cancel is None else self._on_cancel()
            if on_cancel is not None:  # None too once the lifecycle is gone: nothing to record
                on_cancel(reason)
        self._deliver(pending, reason)
        return True

    def register(self, callback: CancellationCallback) -> Registration:
        """Run ``callback(reason)`` once on cancellation; at once, inline, if already cancelled."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        with self._lock:
            reason = self._reason
            if reason is None:
                checkpoint("cancellation.register")  # between reading the reason and adding
                key = next(self._keys)
                self._callbacks[key] = callback
                return Registration(self, key)
        self._deliver([callback], reason)
        return Registration(None, -1)

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until cancelled or ``timeout`` seconds pass; True if cancelled."""
        if timeout is not None:
            # Beyond TIMEOUT_MAX the platform's wait overflows; that long is "forever" anyway.
            timeout = min(seconds("timeout", timeout), threading.TIMEOUT_MAX)
        with self._lock:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> CancellationReason:
        """Wait in asyncio until cancelled (from any thread); returns the first reason."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[CancellationReason] = loop.create_future()

        def resolve(reason: CancellationReason) -> None:
            if not future.done():
                future.set_result(reason)

        def wake(reason: CancellationReason) -> None:
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(resolve, reason)

        registration = self.register(wake)
        try:
            return await future
        finally:
            registration.unregister()

    def __await__(self) -> Generator[Any, None, CancellationReason]:
        """``await ctx.cancellation`` is ``await ctx.cancellation.wait_async()``."""
        return self.wait_async().__await__()

    # -- used by the run's lifecycle, under the shared lock ------------------------------------

    def _signal_locked(self, reason: CancellationReason) -> _Pending | None:
        """Set the reason if none is set; return the callbacks to deliver, or None if we lost."""
        if self._reason is not None:
            return None
        checkpoint("cancellation.signal")  # between reading the reason and writing it
        self._reason = reason
        pending = list(self._callbacks.values())
        self._callbacks.clear()
        if self._event is not None:
            self._event.set()
        return pending

    def _deliver(self, pending: _Pending, reason: CancellationReason) -> None:
        """Run taken callbacks in order, outside every lock; errors go to the handler."""
        for callback in pending:
            try:
                callback(reason)
            except Exception as error:  # a callback's error must not stop the others
                try:
                    self._on_error(error, callback)
                except Exception:  # nor may the handler's own failure
                    _log.exception("cancellation error handler failed")

    def _remove(self, key: int) -> bool:
        with self._lock:
            return self._callbacks.pop(key, None) is not None

    def __repr__(self) -> str:
        reason = self._reason
        return f"Cancellation(reason={reason.name if reason else None})"
