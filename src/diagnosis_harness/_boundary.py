"""The kinds of controlled boundary a run's gate, ``ctx.check(boundary)``, stands before."""

from __future__ import annotations

import enum

__all__ = ["Boundary"]


class Boundary(enum.Enum):
    """Where controlled work is about to start; named in every refusal."""

    MODEL = "model"
    """A Model call."""
    TOOL = "tool"
    """A Tool call."""
    RETRY = "retry"
    """An attempt of HarnessRetryExecutor."""
    CAPACITY = "capacity"
    """A byte reservation against the run's capacity."""
    GUARD = "guard"
    """A guard (SemanticGuard, evidence check) about to run."""
