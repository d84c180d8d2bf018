"""Named points inside locked sections where a test's scheduler may switch threads.

In production :func:`checkpoint` finds no scheduler and returns: one global read. A section that
must make no call while it holds a lock (the reservations' granted path, see docs/performance.md)
reads :data:`scheduler` itself and calls it only when one is installed. A deterministic
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

__all__ = ["checkpoint", "scheduled", "scheduler"]

scheduler: Callable[[str], None] | None = None
"""The installed scheduler, or ``None`` (always, outside the model checks). Set only by
:func:`scheduled`; read it as ``_checkpoint.scheduler``, never bind it at import."""


def checkpoint(site: str) -> None:
    """A point where the installed scheduler, if any, may run another thread first."""
    installed = scheduler
    if installed is not None:
        installed(site)


@contextmanager
def scheduled(installed: Callable[[str], None]) -> Iterator[None]:
    """Install a scheduler for the duration of the block (tests only; not re-entrant)."""
    global scheduler  # noqa: PLW0603 - the one switch the test scheduler needs
    if scheduler is not None:
        raise RuntimeError("a scheduler is already installed")
    scheduler = installed
    try:
        yield
    finally:
        scheduler = None
