"""Named points inside locked sections where a test's scheduler may switch threads.

In production :func:`checkpoint` finds no scheduler and returns: one global read. A deterministic
scheduler for tests (the model-checking layer) installs itself with :func:`scheduled`; it then
decides, at every checkpoint, which of its real threads runs next, so an interleaving that a
barrier stress test would meet once in a million rounds is met on purpose.

The sites sit between a read of shared state and the write that depends on it -- exactly where a
missing lock would let another thread in.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["checkpoint", "scheduled"]

_scheduler: Callable[[str], None] | None = None


def checkpoint(site: str) -> None:
    """A point where the installed scheduler, if any, may run another thread first."""
    scheduler = _scheduler
    if scheduler is not None:
        scheduler(site)


@contextmanager
def scheduled(scheduler: Callable[[str], None]) -> Iterator[None]:
    """Install ``scheduler`` for the duration of the block (tests only; not re-entrant)."""
    global _scheduler  # noqa: PLW0603 - the one switch the test scheduler needs
    if _scheduler is not None:
        raise RuntimeError("a scheduler is already installed")
    _scheduler = scheduler
    try:
        yield
    finally:
        _scheduler = None
