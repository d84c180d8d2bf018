"""Which spec scenarios a probe's step exercises, decided before the step is applied.

Theory of operation. Each step is appended to the probe's trail *before* it is applied, as a
:class:`ProbeStep` with the spec scenarios it exercises (:func:`step_scenarios`): decided from the
model's state before the step, the kind of step and the reference -- a Tool reservation on a
live run is "Per-Tool budget is exhausted", a late ``succeed()`` after budget exhaustion is
"Budget exhaustion wins a terminal race", and so on; a late ending after an outcome no scenario
names (``FAILED``, a cancellation other than the client's) counts for "Success wins a terminal
race", the spec's scenario of a first outcome staying. So when a step raises, the last step not
taken inside a retry execution is the one that disagreed, and its scenarios are the ones to
charge.

Invariant: the scenarios depend only on the prediction's state before the step (the model and
the reference), never on the runtime: a step that disagrees is charged to what it was meant to
exercise.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

from .. import BudgetDimension, CancellationReason, FailureKind, RunState
from ._probe_script import RETURN, Effect
from ._spec_scenarios import (
    BUDGET_WINS,
    CAPACITY,
    CLIENT_DISCONNECTS,
    DEADLINE_BEFORE_TOOL,
    PER_TOOL,
    RETRY_CANCELLED,
    RETRY_TOOL_FAILS,
    RETRY_TRANSPORT,
    SUCCESS_WINS,
    TOKENS_EXCEED,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .. import RetryPolicy
    from ._probe_prediction import Prediction
    from ._probe_reference import Reference
    from ._probe_script import Attempt
    from ._spec_scenarios import SpecScenario

__all__ = ["ProbeStep", "retry_scenarios", "step_scenarios"]


@final
@dataclass(frozen=True, slots=True)
class ProbeStep:
    """One step a probe took: what it was, and the spec scenarios it exercises."""

    action: str
    scenarios: frozenset[SpecScenario]
    nested: bool = False  # taken by an attempt inside a retry execution


_ENDINGS: Final = frozenset({"succeed", "fail", "cancel", "record_usage"})
"""Steps that may end a run (``record_token_usage`` past a limit exhausts the budget)."""
_GATES: Final = frozenset({"check", "reserve_model", "reserve_tool", "reserve_bytes", "execute"})
"""Steps that pass a gate, which refuses them once the run is over or past its deadline."""
_TOKENS: Final = frozenset(
    {BudgetDimension.INPUT_TOKENS, BudgetDimension.OUTPUT_TOKENS, BudgetDimension.TOTAL_TOKENS}
)
_FIRST_OUTCOME_KEPT: Final[Mapping[RunState, SpecScenario]] = MappingProxyType(
    {
        RunState.SUCCESS: SUCCESS_WINS,
        # The spec's scenario of a first outcome staying, for the outcomes none names.
        RunState.FAILED: SUCCESS_WINS,
        RunState.CANCELLED: SUCCESS_WINS,
        RunState.BUDGET_EXHAUSTED: BUDGET_WINS,
        RunState.TIMED_OUT: DEADLINE_BEFORE_TOOL,
    }
)
"""A later ending after each first outcome: the scenario that says the first one stays."""
_LIVE_STEP: Final[Mapping[str, SpecScenario]] = MappingProxyType(
    {
        "succeed": SUCCESS_WINS,
        "cancel": CLIENT_DISCONNECTS,  # with CLIENT_DISCONNECTED only
        "reserve_tool": PER_TOOL,
        "record_usage": TOKENS_EXCEED,
    }
)
"""The scenario a step on a live run, before its deadline, exercises."""
_NOTHING: Final[frozenset[SpecScenario]] = frozenset()
_ONLY: Final[Mapping[SpecScenario, frozenset[SpecScenario]]] = MappingProxyType(
    {
        scenario: frozenset({scenario})
        for scenario in (
            BUDGET_WINS,
            CAPACITY,
            CLIENT_DISCONNECTS,
            DEADLINE_BEFORE_TOOL,
            PER_TOOL,
            SUCCESS_WINS,
            TOKENS_EXCEED,
        )
    }
)
"""The one-scenario sets a step can exercise, made once (a step is noted many times a second)."""


def step_scenarios(
    kind: str,
    prediction: Prediction,
    *,
    reason: CancellationReason | None = None,
    policy: RetryPolicy | None = None,
    script: Sequence[Attempt] = (),
) -> frozenset[SpecScenario]:
    """The spec scenarios a step of ``kind`` exercises, from the prediction before it."""
    if kind == "reserve_capacity":
        return _ONLY[CAPACITY]
    state, ref = prediction.life_state, prediction.ref
    if state is RunState.RUNNING:
        past = ref.now_ns >= prediction.config.deadline_ns
        if kind == "execute" and policy is not None and not past:
            return retry_scenarios(policy, script)
        found = _live_scenario(kind, past=past, reason=reason)
    else:
        found = _late_scenario(kind, state, ref)
    return _NOTHING if found is None else _ONLY[found]


def _live_scenario(
    kind: str, *, past: bool, reason: CancellationReason | None
) -> SpecScenario | None:
    """A step on a running run: a gate past the deadline, or the step's own scenario."""
    if kind in _GATES and past:
        return DEADLINE_BEFORE_TOOL
    if kind == "cancel" and reason is not CancellationReason.CLIENT_DISCONNECTED:
        return None
    return _LIVE_STEP.get(kind)


def _late_scenario(kind: str, state: RunState, ref: Reference) -> SpecScenario | None:
    """The run is over: an ending must not replace the first outcome, a gate must refuse."""
    if (
        state is RunState.CANCELLED
        and ref.first_reason is CancellationReason.CLIENT_DISCONNECTED
        and kind in _ENDINGS | _GATES
    ):
        return CLIENT_DISCONNECTS
    if kind in _ENDINGS:
        return _FIRST_OUTCOME_KEPT.get(state)
    if kind in _GATES and state is RunState.TIMED_OUT:
        return DEADLINE_BEFORE_TOOL
    if kind in _GATES and state is RunState.BUDGET_EXHAUSTED and ref.dimension in _TOKENS:
        return TOKENS_EXCEED  # "the Core rejects the next controlled operation"
    return None


def retry_scenarios(policy: RetryPolicy, script: Sequence[Attempt]) -> frozenset[SpecScenario]:
    """The retry scenarios an execution on a live run exercises, from its policy and script."""
    found: set[SpecScenario] = set()
    first = script[0] if script else RETURN
    if policy.max_attempts == 1 and first.failure is not None:
        found.add(RETRY_TOOL_FAILS)
    retried = [
        attempt
        for attempt in script[: policy.max_attempts - 1]
        if attempt.failure in policy.retryable
    ]
    if retried and first.effect is Effect.NONE and first.failure is FailureKind.TRANSPORT:
        found.add(RETRY_TRANSPORT)
    # The run stops (cancelled, past its deadline, finished, out of Model calls) while a
    # retryable failure is in flight: the executor must refuse the next attempt.
    if any(attempt.effect is not Effect.NONE for attempt in retried):
        found.add(RETRY_CANCELLED)
    return frozenset(found)
