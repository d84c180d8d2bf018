"""Cooperative cancellation: the first reason wins, and every callback runs exactly once.

Theory of operation. A :class:`CancelSignal` holds one reason (``None`` until signalled) and an
ordered registry of callbacks. The first :meth:`CancelSignal.signal` sets the reason and *takes*
every registered callback out of the registry; its owner then runs them outside its lock, in
registration order. Taking them in the same locked step that sets the reason is what makes
"exactly once" hold: a callback is either still registered (and will be taken by the one
signaller, or removed by ``unregister()``) or it has been taken, never both. A callback registered
after the signal runs at once, inline. A callback that raises does not stop the others; its error
goes to the error handler (default: logged on the ``diagnosis_harness`` logger), never to the
caller of ``cancel()``.

Nothing here imports ``asyncio`` or ``logging`` at module level: a sync user of the harness never
needs the event loop, and the logger serves only a callback's error. ``import diagnosis_harness``
pays for neither (tests/test_independence.py checks it); :meth:`Cancellation.wait_async` imports
``asyncio`` when first awaited, the default error handler ``logging`` when a callback first fails.

:class:`Cancellation` is the handle users hold: a view over an owner. In a run the owner is the
run's state (see :mod:`._local_run`), so "the first reason wins" and "the first terminal outcome
wins" are one decision under one lock; ``Cancellation()`` on its own makes a standalone token.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, final

from ._checkpoint import checkpoint
from ._endings import CancellationReason
from ._validate import seconds

if TYPE_CHECKING:
    import logging

    from ._backend import CancellationOwner

__all__ = [
    "CallbackErrorHandler",
    "CancelSignal",
    "Cancellation",
    "CancellationCallback",
    "CancellationReason",
    "Registration",
]

CancellationCallback: TypeAlias = Callable[[CancellationReason], object]
"""A resource's release hook: receives the first reason."""
CallbackErrorHandler: TypeAlias = Callable[[Exception, CancellationCallback], None]
"""Receives an exception a callback raised, and that callback."""
Pending: TypeAlias = list[CancellationCallback]
"""Callbacks taken by the signal, to be run outside the owner's lock."""


def _logger() -> logging.Logger:
    """The ``diagnosis_harness`` logger; ``logging`` is imported only once there is an error."""
    import logging  # noqa: PLC0415 -- lazy: only an error path logs (see the module docstring)

    return logging.getLogger("diagnosis_harness")


def _log_callback_error(error: Exception, callback: CancellationCallback) -> None:
    _logger().error("cancellation callback %r raised", callback, exc_info=error)


def checked_error_handler(handler: object) -> CallbackErrorHandler:
    """``handler``, or the logging default for ``None``; a TypeError names a non-callable."""
    if handler is None:
        return _log_callback_error
    if not callable(handler):
        raise TypeError(f"on_callback_error must be callable, got {handler!r}")
    return handler


@final
class CancelSignal:
    """The first cancellation reason and the callbacks waiting for it. Not locked itself.

    Invariants: ``reason`` is set once and never changes; a callback is in the registry only
    while ``reason`` is ``None``. :meth:`signal` runs under the owner's lock; :meth:`register`
    and :meth:`unregister` take it; :meth:`deliver` runs outside it.
    """

    __slots__ = ("_callbacks", "_keys", "_on_error", "reason")

    def __init__(self, on_error: CallbackErrorHandler) -> None:
        self.reason: CancellationReason | None = None
        self._callbacks: dict[int, CancellationCallback] = {}  # in registration order
        self._keys = itertools.count()
        self._on_error = on_error

    def signal(self, reason: CancellationReason) -> Pending | None:
        """Set the reason if none is set and take every callback; ``None`` if another won."""
        if self.reason is not None:
            return None
        checkpoint("cancellation.signal")  # between reading the reason and writing it
        self.reason = reason
        pending = list(self._callbacks.values())
        self._callbacks.clear()
        return pending

    def register(
        self, lock: AbstractContextManager[object], callback: CancellationCallback
    ) -> int | None:
        """Keep ``callback`` under the owner's ``lock`` and return its key; if a reason is set,
        run it now, outside the lock, and return ``None``."""
        with lock:
            reason = self.reason
            if reason is None:
                checkpoint("cancellation.register")  # between reading the reason and adding
                key = next(self._keys)
                self._callbacks[key] = callback
                return key
        self.deliver([callback], reason)
        return None

    def unregister(self, lock: AbstractContextManager[object], key: int) -> bool:
        """Remove a kept callback under the owner's ``lock``; True only if it had not been taken."""
        with lock:
            return self._callbacks.pop(key, None) is not None

    def deliver(self, pending: Pending, reason: CancellationReason) -> None:
        """Run taken callbacks in order, outside every lock; errors go to the handler."""
        for callback in pending:
            try:
                callback(reason)
            except Exception as error:  # a callback's error must not stop the others
                try:
                    self._on_error(error, callback)
                except Exception:  # nor may the handler's own failure
                    _logger().exception("cancellation error handler failed")


@final
class _Token:
    """The owner of a standalone ``Cancellation()``: a lock and a :class:`CancelSignal`."""

    __slots__ = ("_lock", "_signal")

    def __init__(self, on_error: CallbackErrorHandler) -> None:
        self._lock = threading.Lock()  # protects _signal
        self._signal = CancelSignal(on_error)

    @property
    def reason(self) -> CancellationReason | None:
        return self._signal.reason

    def cancel(self, reason: CancellationReason) -> bool:
        with self._lock:
            pending = self._signal.signal(reason)
        if pending is None:
            return False
        self._signal.deliver(pending, reason)
        return True

    def register(self, callback: CancellationCallback) -> int | None:
        return self._signal.register(self._lock, callback)

    def unregister(self, key: int) -> bool:
        return self._signal.unregister(self._lock, key)


class _Unregister(Protocol):
    def __call__(self, key: int, /) -> bool: ...


@final
class Registration:
    """The handle :meth:`Cancellation.register` returns."""

    __slots__ = ("_key", "_unregister")

    def __init__(self, unregister: _Unregister | None, key: int) -> None:
        self._unregister = unregister
        self._key = key

    def unregister(self) -> bool:
        """Remove the callback; True only if it was removed before it ran. Never waits."""
        return False if self._unregister is None else self._unregister(self._key)


@final
class Cancellation:
    """A cancellation token. Thread-safe; usable from threads and from asyncio.

    ``Cancellation()`` is a standalone token; a run's token is ``ctx.cancellation``, whose state
    belongs to the run (cancelling it ends the run).
    """

    __slots__ = ("_owner",)

    def __init__(
        self,
        *,
        on_callback_error: CallbackErrorHandler | None = None,
        _owner: CancellationOwner | None = None,
    ) -> None:
        handler = checked_error_handler(on_callback_error)
        self._owner: CancellationOwner = _Token(handler) if _owner is None else _owner

    @property
    def is_cancelled(self) -> bool:
        return self._owner.reason is not None

    @property
    def reason(self) -> CancellationReason | None:
        """The first reason, or ``None`` while not cancelled."""
        return self._owner.reason

    def cancel(self, reason: CancellationReason) -> bool:
        """Signal cancellation; True only for the call whose reason won.

        The run becomes ``CANCELLED`` (``TIMED_OUT`` for ``DEADLINE_EXCEEDED``,
        ``BUDGET_EXHAUSTED`` for ``BUDGET_EXHAUSTED``) unless it already has a terminal outcome.
        Every callback has run when the winning call returns.
        """
        if type(reason) is not CancellationReason:
            raise TypeError(f"reason must be a CancellationReason, got {reason!r}")
        if reason is CancellationReason.RUN_FINISHED:
            raise ValueError(
                "reason RUN_FINISHED is signalled by the lifecycle; "
                "call ctx.lifecycle.succeed() or ctx.lifecycle.fail(reason) instead"
            )
        if reason is CancellationReason.PARENT_ENDED:
            raise ValueError(
                "reason PARENT_ENDED is signalled when an ancestor run ends; cancel the parent "
                "run, or cancel this one with USER_REQUESTED, SHUTDOWN or CLIENT_DISCONNECTED"
            )
        return self._owner.cancel(reason)

    def register(self, callback: CancellationCallback) -> Registration:
        """Run ``callback(reason)`` once on cancellation; at once, inline, if already cancelled."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        key = self._owner.register(callback)
        if key is None:  # it has run
            return Registration(None, -1)
        return Registration(self._owner.unregister, key)

    def wait(self, timeout: float | None = None) -> bool:
        """Block this thread until cancelled or ``timeout`` seconds pass; True if cancelled."""
        if timeout is not None:
            # Beyond TIMEOUT_MAX the platform's wait overflows; that long is "forever" anyway.
            timeout = min(seconds("timeout", timeout), threading.TIMEOUT_MAX)
        woken = threading.Event()
        registration = self.register(lambda _reason: woken.set())
        try:
            return woken.wait(timeout)
        finally:
            registration.unregister()

    async def wait_async(self) -> CancellationReason:
        """Wait in asyncio until cancelled (from any thread); returns the first reason."""
        import asyncio  # noqa: PLC0415 -- lazy: a sync user never loads the event loop

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

    def __repr__(self) -> str:
        reason = self._owner.reason
        return f"Cancellation(reason={reason.name if reason else None})"
