"""Races with real threads: one home for releasing racers together and for eager switching.

No sleep anywhere: a ``threading.Barrier`` releases the racers at once, and a lowered switch
interval makes the interpreter interleave them far more often than its default 5 ms would. Every
wait is bounded, so a deadlock fails the test instead of hanging CI. The ``eager_thread_switching``
fixture in ``tests/conftest.py`` wraps :func:`eager_switching` for the tests that want it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["BOUND", "SWITCH_INTERVAL", "eager_switching", "race"]

BOUND = 30.0
"""Seconds before a barrier or a join calls a racer stuck."""

SWITCH_INTERVAL = 1e-6
"""Seconds between the interpreter's thread switches while racing (the lowest the tests used)."""


@contextlib.contextmanager
def eager_switching(interval: float = SWITCH_INTERVAL) -> Iterator[None]:
    """Lower ``sys.setswitchinterval`` for the block, so racers interleave; restore it after."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def race(racers: list[Callable[[], None]], *, bound: float = BOUND) -> None:
    """One thread per racer, released together, joined with a bound; re-raise any failure.

    A racer that fails aborts the barrier, so the others are not left waiting for it; the first
    failure is raised in the calling (test) thread, and a racer still alive after ``bound``
    seconds fails the assertion.
    """
    barrier = threading.Barrier(len(racers))
    errors: list[BaseException] = []

    def run(racer: Callable[[], None]) -> None:
        try:
            barrier.wait(bound)
            racer()
        except BaseException as error:  # re-raised below, in the test thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(racer,), daemon=True) for racer in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(bound)
    assert not any(thread.is_alive() for thread in threads), "a racer is stuck"
    if errors:
        raise errors[0]
