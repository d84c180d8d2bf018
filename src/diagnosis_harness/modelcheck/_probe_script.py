"""The scripted attempts of a retry execution a probe runs: plain data, nothing runs here.

Invariant: a script is frozen data -- an :class:`Attempt` says what one invocation of the
retried operation does (its :class:`Effect` on the run, then return or raise which typed
failure); it is read by :mod:`._probe_retry`, which performs it, and by :mod:`._probe_scenarios`,
which decides the scenarios it exercises. Past the end of a script the operation returns
(:data:`RETURN`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, final

from .. import CancellationReason, FailureKind

__all__ = ["RETURN", "Attempt", "Effect"]


class Effect(enum.Enum):
    """What a scripted attempt does to the run before it returns or raises."""

    NONE = "none"
    CANCEL = "cancel"
    """``ctx.cancellation.cancel(reason)``: the run is cancelled before the next attempt."""
    PASS_DEADLINE = "pass_deadline"
    """The clock reaches the run's deadline."""
    MODEL_CALL = "model_call"
    """``ctx.reserve_model_call()``; a refusal is raised as the attempt's failure."""
    FINISH_RUN = "finish_run"
    """``ctx.lifecycle.succeed()``: the owner records success while the attempt is in flight."""


@final
@dataclass(frozen=True, slots=True)
class Attempt:
    """One scripted invocation of a retried operation."""

    failure: FailureKind | None = None  # None: the operation returns
    effect: Effect = Effect.NONE
    reason: CancellationReason = CancellationReason.CLIENT_DISCONNECTED  # for Effect.CANCEL

    def __str__(self) -> str:
        what = "return" if self.failure is None else f"raise {self.failure.name}"
        if self.effect is Effect.NONE:
            return what
        if self.effect is Effect.CANCEL:
            return f"cancel({self.reason.name}); {what}"
        return f"{self.effect.value}; {what}"


RETURN: Final = Attempt()
"""The attempt past the end of a script: it returns and does nothing else."""
