"""A run's byte capacity: atomic, all-or-nothing reservations against a fixed limit.

Theory of operation: ``try_reserve(n)`` adds ``n`` to the usage only if the sum still fits the
limit, and does the check and the add under one lock, so concurrent callers can never together
reserve more than the limit and no reservation is lost. A rejected reservation changes nothing;
usage only ever grows (there is no release), so a rejection stays correct until the run ends.
The counter is a plain object owned by its run: no thread-local or context-local state.
"""

from __future__ import annotations

import threading
from typing import Final, final

from ._checkpoint import checkpoint
from ._validate import positive_int

__all__ = ["RunCapacityCounter"]


@final
class RunCapacityCounter:
    """Reserves byte counts for one run, up to ``limit_bytes`` in total.

    ``limit_bytes`` and every ``n`` must be a positive ``int`` (not ``bool``): a wrong type raises
    ``TypeError``, zero or a negative ``ValueError``, and neither changes the usage. Thread-safe.
    """

    __slots__ = ("_limit", "_lock", "_used")

    def __init__(self, limit_bytes: int, *, _lock: threading.Lock | None = None) -> None:
        self._limit: Final = positive_int("limit_bytes", limit_bytes)  # fixed for the run
        # Protects ``_used``: the fit check and the add in ``try_reserve`` happen as one step.
        # (``_lock`` is for the model checks' scheduler, which supplies a lock it controls.)
        self._lock: Final = threading.Lock() if _lock is None else _lock
        self._used = 0  # 0 <= _used <= _limit; the sum of accepted reservations

    def try_reserve(self, n: int) -> bool:
        """Reserve ``n`` bytes and return ``True`` if ``used + n <= limit``, else return ``False``.

        A rejected reservation leaves the usage unchanged.
        """
        n = positive_int("n", n)
        with self._lock:
            used = self._used
            if used + n > self._limit:
                return False
            checkpoint("capacity.reserve")  # between reading the usage and writing it
            self._used = used + n
            return True

    @property
    def used(self) -> int:
        """Bytes reserved so far."""
        with self._lock:
            return self._used

    @property
    def limit(self) -> int:
        """The most bytes that can ever be reserved."""
        return self._limit

    @property
    def remaining(self) -> int:
        """Bytes still available: ``limit - used``."""
        with self._lock:
            return self._limit - self._used

    def __repr__(self) -> str:
        with self._lock:
            used = self._used
        return f"RunCapacityCounter(limit_bytes={self._limit}, used={used})"
