"""diagnosis-harness: one explicit RunContext for every LLM diagnosis run.

A deadline read off an injected clock, cooperative cancellation that keeps its first reason,
thread-safe budgets, a lifecycle with exactly one terminal outcome, typed and recorded retries,
safe Tool Call keys and a run capacity counter. The lifecycle, the budget and the retry executor
are state machines generated from the tables in ``model/``.

Two names differ by one letter: a :class:`RunTermination` is the record of how a run ended
(``ctx.lifecycle.termination``: state, reason, time, boundary), a :class:`RunTerminated` the
exception a boundary raises when work is attempted after it, carrying that record as
``.termination``.
"""

from __future__ import annotations

from ._backend import RunStore
from ._boundary import Boundary
from ._budget import Budget, CallHold
from ._cancellation import (
    CallbackErrorHandler,
    Cancellation,
    CancellationCallback,
    Registration,
)
from ._capacity import RunCapacityCounter
from ._clock import Clock, Deadline, ManualClock, SystemClock
from ._context import RunContext
from ._endings import CancellationReason, FinishResult, RunTermination
from ._errors import (
    BudgetExhausted,
    HarnessError,
    IllegalTransition,
    InvalidRunIdentity,
    RunCancelled,
    RunFinished,
    RunStoreConflict,
    RunStoreError,
    RunStoreUnavailable,
    RunTerminated,
    RunTimedOut,
    UnknownRun,
    UnsafeKeySegment,
)
from ._failure import FailureKind, HarnessFailure
from ._generated.tables import BudgetState, RetryState, RunState
from ._keys import ToolCallKeyFactory
from ._lifecycle import Lifecycle
from ._limits import BudgetDimension, BudgetLimits, BudgetUsage
from ._retry import (
    AttemptOutcome,
    AttemptRecord,
    Backoff,
    Classifier,
    ExecutionRecord,
    HarnessRetryExecutor,
    StopReason,
)
from ._retry_policy import RetryPolicies, RetryPolicy
from ._scope import RunScope

# The one place the version is written (hatch builds the metadata from it); not read back through
# importlib.metadata, whose import alone cost more than the rest of the package's.
from ._version import __version__

__all__ = [
    "AttemptOutcome",
    "AttemptRecord",
    "Backoff",
    "Boundary",
    "Budget",
    "BudgetDimension",
    "BudgetExhausted",
    "BudgetLimits",
    "BudgetState",
    "BudgetUsage",
    "CallHold",
    "CallbackErrorHandler",
    "Cancellation",
    "CancellationCallback",
    "CancellationReason",
    "Classifier",
    "Clock",
    "Deadline",
    "ExecutionRecord",
    "FailureKind",
    "FinishResult",
    "HarnessError",
    "HarnessFailure",
    "HarnessRetryExecutor",
    "IllegalTransition",
    "InvalidRunIdentity",
    "Lifecycle",
    "ManualClock",
    "Registration",
    "RetryPolicies",
    "RetryPolicy",
    "RetryState",
    "RunCancelled",
    "RunCapacityCounter",
    "RunContext",
    "RunFinished",
    "RunScope",
    "RunState",
    "RunStore",
    "RunStoreConflict",
    "RunStoreError",
    "RunStoreUnavailable",
    "RunTerminated",
    "RunTermination",
    "RunTimedOut",
    "StopReason",
    "SystemClock",
    "ToolCallKeyFactory",
    "UnknownRun",
    "UnsafeKeySegment",
    "__version__",
]
