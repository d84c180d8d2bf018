"""Time as the harness reads it: an injected monotonic clock in integer nanoseconds, and deadlines.

Every deadline decision reads :meth:`Clock.monotonic_ns` and compares integers (``now >= at`` is
expired), so a test can stand one nanosecond before a deadline and one on it. Wall-clock time is
never used: it jumps. freezegun and time-machine cannot move ``time.monotonic`` the way a deadline
test needs, hence :class:`ManualClock`.

Seconds become nanoseconds by rounding the float's exact binary value to the nearest nanosecond,
ties to even (``round``'s rule): ``0.3``, exactly 0.29999999999999998889... s, is 300_000_000 ns
where truncation would give 299_999_999, and ``2**-10`` s (exactly 976_562.5 ns) is 976_562 ns.
A duration of any size converts without overflow (a deadline is an unbounded ``int``), an ``int``
of seconds exactly.

A deadline may lie beyond what any timer can wait for (``timeout=1e300``,
``Deadline.at_ns(10**400)``). Whoever waits for one asks :meth:`Deadline.remaining_seconds`, which
never exceeds :attr:`Deadline.MAX_WAIT_SECONDS`, and waits again when a capped wait ends early:
every accepted deadline works everywhere, and none overflows a platform timer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import ClassVar, Protocol, final, runtime_checkable

from ._checkpoint import checkpoint
from ._validate import non_negative_int
from ._validate import seconds as _seconds

__all__ = ["Clock", "Deadline", "ManualClock", "SystemClock"]

_NS_PER_SECOND = 1_000_000_000


def _to_ns(seconds: float) -> int:
    """The nearest nanosecond to ``seconds``' exact value, ties to even.

    Exact for every finite float: ``round(1e300 * 1e9)`` would be ``round(inf)``. Truncating
    loses a nanosecond: ``int(6e-10 * 1e9)`` is 0, ``int(Fraction(0.3) * 10**9)`` 299_999_999.
    A float is exactly ``numerator / denominator`` (:meth:`float.as_integer_ratio`, the
    denominator a power of two), so integer arithmetic gives the exact quotient and remainder;
    this is ``round(Fraction(seconds) * 10**9)`` without importing :mod:`fractions`, which with
    :mod:`decimal` cost every import a few milliseconds (tests/test_clock.py checks they agree).
    """
    if isinstance(seconds, int):  # the common `timeout=60`: exact as it is
        return seconds * _NS_PER_SECOND
    numerator, denominator = seconds.as_integer_ratio()  # denominator > 0
    ns, remainder = divmod(numerator * _NS_PER_SECOND, denominator)  # floor; 0 <= remainder
    twice = 2 * remainder
    # Past the half: up; on the half: up only from an odd floor (ties to even).
    if twice > denominator or (twice == denominator and ns % 2 == 1):
        ns += 1
    return ns


@runtime_checkable
class Clock(Protocol):
    """Anything with a monotonic ``monotonic_ns() -> int``."""

    def monotonic_ns(self) -> int: ...


@final
class SystemClock:
    """The process's monotonic clock, :func:`time.monotonic_ns`."""

    __slots__ = ()

    # The builtin itself, not a wrapper: the gate's fast path calls it on every boundary.
    monotonic_ns = staticmethod(time.monotonic_ns)

    def __repr__(self) -> str:
        return "SystemClock()"


@final
class ManualClock:
    """A clock that moves only when told to, and never backwards. Thread-safe.

    Concurrent advances all count: each is a read and a write of the time under the clock's lock.
    """

    __slots__ = ("_lock", "_now_ns")

    def __init__(self, start_ns: int = 0, *, _lock: threading.Lock | None = None) -> None:
        self._now_ns = non_negative_int("start_ns", start_ns)
        # Protects _now_ns against racing advances; `_lock` lets the model checks' scheduler
        # supply a lock it controls.
        self._lock = threading.Lock() if _lock is None else _lock

    def monotonic_ns(self) -> int:
        return self._now_ns  # one attribute read: never a half-written value, no lock needed

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (finite, >= 0), rounded to the nearest nanosecond.

        Rounding is of the float's exact value, ties to even (see the module's docstring).
        """
        self.advance_ns(_to_ns(_seconds("seconds", seconds)))

    def advance_ns(self, ns: int) -> None:
        """Move forward by ``ns`` nanoseconds (an int >= 0; a clock never goes back)."""
        non_negative_int("ns", ns)
        with self._lock:
            now = self._now_ns
            # A read-modify-write: without the lock, another advance here would be lost.
            checkpoint("clock.advance")
            self._now_ns = now + ns

    def __repr__(self) -> str:
        return f"ManualClock(now_ns={self._now_ns})"


@final
@dataclass(frozen=True, slots=True)
class Deadline:
    """An instant on a :class:`Clock`'s timeline; expired when ``now >= instant_ns``.

    Any ``int`` is an instant, however far; waits for it are capped (:meth:`remaining_seconds`).
    """

    MAX_WAIT_SECONDS: ClassVar[float] = 86_400.0
    """The longest single wait :meth:`remaining_seconds` asks for: a day.

    Under every platform's limit (``threading.TIMEOUT_MAX``, about 49 days on Windows) and the
    longest wait asyncio hands to its selector; a waiter re-reads the clock after it, so a
    deadline further away is still honoured.
    """

    instant_ns: int

    def __post_init__(self) -> None:
        if type(self.instant_ns) is not int:
            raise TypeError(f"instant_ns must be an int of nanoseconds, got {self.instant_ns!r}")

    @classmethod
    def after(cls, clock: Clock, seconds: float) -> Deadline:
        """The instant ``seconds`` (finite, >= 0) after ``clock``'s now, to the nearest ns."""
        if not callable(getattr(clock, "monotonic_ns", None)):
            raise TypeError(f"clock must have monotonic_ns() -> int, got {clock!r}")
        return cls(clock.monotonic_ns() + _to_ns(_seconds("seconds", seconds)))

    @classmethod
    def at_ns(cls, ns: int) -> Deadline:
        """The instant ``ns`` on the clock's timeline; one already past expires at once."""
        if type(ns) is not int:
            raise TypeError(f"ns must be an int of nanoseconds, got {ns!r}")
        return cls(ns)

    def expired(self, clock: Clock) -> bool:
        return clock.monotonic_ns() >= self.instant_ns

    def remaining_ns(self, clock: Clock) -> int:
        """Nanoseconds left before expiry; 0 once expired. Exact, and unbounded like the instant."""
        return max(0, self.instant_ns - clock.monotonic_ns())

    def remaining_seconds(self, clock: Clock) -> float:
        """Seconds to wait for expiry: 0.0 once expired, never more than :attr:`MAX_WAIT_SECONDS`.

        Every wait for a deadline takes its timeout from here: a far deadline (even one past the
        float range) never overflows a timer. A wait that ends on the cap is not the deadline:
        re-read the clock and wait again.
        """
        left_ns = self.instant_ns - clock.monotonic_ns()
        if left_ns <= 0:
            return 0.0
        cap = self.MAX_WAIT_SECONDS
        # An int compared with a float is exact in Python, and never converts the int: no
        # overflow. Below the cap, int / int is in float range and correctly rounded.
        if left_ns >= cap * _NS_PER_SECOND:
            return cap
        return left_ns / _NS_PER_SECOND
