"""How a run ends: its one :class:`RunTermination`, and the table of endings.

:data:`ENDINGS` is the one place that says, for each terminal state, the lifecycle event that
reaches it, the :class:`~diagnosis_harness.RunTerminated` subclass a refused boundary raises, the
:class:`CancellationReason` the ending signals, and the :class:`FailureKind` the retry executor
records when the gate refuses an attempt. The run's owner, the context, the scope and the executor
all read it; none of them spells the mapping out again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

from ._boundary import Boundary
from ._errors import BudgetExhausted, RunCancelled, RunFinished, RunTerminated, RunTimedOut
from ._failure import FailureKind
from ._generated.tables import LifecycleEvent, RunState
from ._limits import BudgetDimension

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ANCESTOR_ENDED",
    "ANCESTOR_LIMIT",
    "CANCELLED",
    "COST_EXCEEDED",
    "COST_REFUSED",
    "DEADLINE_EXCEEDED",
    "ENDINGS",
    "LIFECYCLE_REASONS",
    "LIMIT",
    "LIMIT_BOUNDARY",
    "MODEL_CALLS_REFUSED",
    "PER_TOOL_CALLS_REFUSED",
    "REASON_TEXTS",
    "RUN_BYTES_REFUSED",
    "TOKENS_EXCEEDED",
    "TOOL_CALLS_REFUSED",
    "CancellationReason",
    "Ending",
    "FinishResult",
    "ReasonText",
    "RunTermination",
    "deadline_reason",
    "ending_of",
    "ending_of_cancel",
    "error_for",
]


class CancellationReason(enum.Enum):
    """Why a run's cancellation was signalled; the first one is kept."""

    CLIENT_DISCONNECTED = "client_disconnected"
    """The client that asked for the diagnosis went away."""
    USER_REQUESTED = "user_requested"
    """Someone asked for the run to stop."""
    SHUTDOWN = "shutdown"
    """The process is shutting down."""
    DEADLINE_EXCEEDED = "deadline_exceeded"
    """A boundary read the clock at or after the deadline (the run is ``TIMED_OUT``)."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """A budget limit was reached (the run is ``BUDGET_EXHAUSTED``)."""
    RUN_FINISHED = "run_finished"
    """The run recorded ``SUCCESS`` or ``FAILED``: release resources. Not for ``cancel()``."""
    PARENT_ENDED = "parent_ended"
    """An ancestor run ended, so this child run is ``CANCELLED`` (``RunContext.child``): the
    ending of a run cascades to every live descendant. Not for ``cancel()``."""


@final
@dataclass(frozen=True, slots=True)
class RunTermination:
    """The run's one terminal outcome: recorded once, never replaced. The *record*, not an error.

    Every ended run has exactly one, read as ``ctx.lifecycle.termination`` (``None`` while
    RUNNING) and returned in :class:`FinishResult`. Not to be confused with
    :class:`~diagnosis_harness.RunTerminated` (with a ``d``), the *exception* a boundary raises
    when work is attempted after the ending: it carries this record as ``error.termination``.

    ``boundary`` is the boundary at which the harness decided the ending -- the one whose
    reservation passed a limit, or that read the clock past the deadline -- and ``None`` for an
    ending decided elsewhere (``succeed``, ``fail``, ``cancel``) or by a backend that does not
    record it. It is the boundary a refusal's message names first, whichever boundary refuses
    later work: a per-Tool limit reached inside an agent framework reads ``TOOL boundary
    refused: ...`` even when the framework's next model request is what raises it.
    """

    state: RunState
    reason: str
    at_ns: int  # the run clock's reading at the instant the ending was decided
    boundary: Boundary | None = None


@final
@dataclass(frozen=True, slots=True)
class FinishResult:
    """What a finish attempt did: ``changed`` only for the attempt that recorded the outcome."""

    changed: bool
    termination: RunTermination


@final
@dataclass(frozen=True, slots=True)
class Ending:
    """One way a run ends (a row of :data:`ENDINGS`)."""

    event: LifecycleEvent
    state: RunState
    error: type[RunTerminated]
    # What the ending signals to the cancellation callbacks; None for CANCELLED, whose reason is
    # the one cancel() was given (and signalled by cancel() itself).
    signal: CancellationReason | None
    failure: FailureKind  # what a retry attempt refused by this ending is recorded as


_ROWS = (
    Ending(
        LifecycleEvent.SUCCEED,
        RunState.SUCCESS,
        RunFinished,
        CancellationReason.RUN_FINISHED,
        FailureKind.CANCELLED,
    ),
    Ending(
        LifecycleEvent.FAIL,
        RunState.FAILED,
        RunFinished,
        CancellationReason.RUN_FINISHED,
        FailureKind.CANCELLED,
    ),
    Ending(
        LifecycleEvent.CANCEL,
        RunState.CANCELLED,
        RunCancelled,
        None,
        FailureKind.CANCELLED,
    ),
    Ending(
        LifecycleEvent.TIME_OUT,
        RunState.TIMED_OUT,
        RunTimedOut,
        CancellationReason.DEADLINE_EXCEEDED,
        FailureKind.DEADLINE_EXCEEDED,
    ),
    Ending(
        LifecycleEvent.EXHAUST_BUDGET,
        RunState.BUDGET_EXHAUSTED,
        BudgetExhausted,
        CancellationReason.BUDGET_EXHAUSTED,
        FailureKind.BUDGET_EXHAUSTED,
    ),
)

ENDINGS: Mapping[RunState, Ending] = MappingProxyType({e.state: e for e in _ROWS})
"""Each terminal state's ending."""

_BY_EVENT: Mapping[LifecycleEvent, Ending] = MappingProxyType({e.event: e for e in _ROWS})
# RUN_FINISHED is signalled by SUCCESS and FAILED alone, PARENT_ENDED by an ancestor's ending;
# cancel() refuses both.
_BY_SIGNAL: dict[CancellationReason | None, Ending] = {
    e.signal: e for e in _ROWS if e.signal not in (None, CancellationReason.RUN_FINISHED)
}
LIFECYCLE_REASONS: Final[frozenset[CancellationReason]] = frozenset(
    {CancellationReason.RUN_FINISHED, CancellationReason.PARENT_ENDED}
)
"""The reasons the lifecycle signals itself, which ``cancel()`` refuses."""


@final
@dataclass(frozen=True, slots=True)
class ReasonText:
    """One reason's wording, written once: ``text`` with ``{field}`` holes.

    The owner in this process fills it with :meth:`format`; the Redis scripts fill the same text,
    rendered into their prelude (``diagnosis_harness.redis._scripts``), with ``text(name,
    values)``. So a reason reads the same whichever store recorded it. Every hole is filled and
    nothing else is given; the values are given already worded (a Tool's ``repr``, say).
    """

    name: str
    text: str
    fields: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        # The holes, read without ``string`` (and the ``re`` it imports): no text here has braces
        # of its own.
        names = frozenset(part.split("}", 1)[0] for part in self.text.split("{")[1:])
        object.__setattr__(self, "fields", names)  # derived once; frozen afterwards

    def format(self, **values: object) -> str:
        if values.keys() != self.fields:
            raise ValueError(
                f"the {self.name} text takes {sorted(self.fields)}, was given {sorted(values)}"
            )
        return self.text.format_map(values)


DEADLINE_EXCEEDED: Final = ReasonText(
    "deadline_exceeded", "deadline exceeded: {late} past it when the {boundary} boundary checked"
)
"""``TIMED_OUT``: how far past (:func:`seconds_text`), and which boundary looked."""
LIMIT: Final = ReasonText("limit", "{dimension} limit {detail}")
"""``BUDGET_EXHAUSTED``: the limit's dimension, then one of the details below."""
MODEL_CALLS_REFUSED: Final = ReasonText("model_calls", "{limit} reached: Model call {call} refused")
TOOL_CALLS_REFUSED: Final = ReasonText(
    "tool_calls", "{limit} reached: Tool call {call} ({tool}) refused"
)
PER_TOOL_CALLS_REFUSED: Final = ReasonText(
    "per_tool_calls", "{limit} for Tool {tool} reached: call {call} refused"
)
RUN_BYTES_REFUSED: Final = ReasonText(
    "run_bytes", "{limit} would be passed: {n} more bytes refused ({used} used)"
)
TOKENS_EXCEEDED: Final = ReasonText("tokens", "{limit} exceeded: {used} used")
"""Usage reported past a token limit (input, output or total)."""
COST_REFUSED: Final = ReasonText(
    "cost_refused",
    "{limit} would be passed: a hold of {hold} refused ({settled} settled, {held} held)",
)
"""A reservation whose ``max_cost`` would take settled + held past the money limit (US dollars)."""
COST_EXCEEDED: Final = ReasonText("cost", "{limit} exceeded: {settled} settled, {held} held")
"""A settled actual cost that took settled + held past the money limit (US dollars)."""
CANCELLED: Final = ReasonText("cancelled", "cancelled: {reason}")
"""``cancel(reason)``: the reason's name."""
ANCESTOR_ENDED: Final = ReasonText(
    "ancestor_ended", "cancelled: ancestor run {run} ended {state}: {reason}"
)
"""A child run cancelled because a run above it ended: that run's ID (``repr``), its terminal
state's name and its own reason."""
ANCESTOR_LIMIT: Final = ReasonText(
    "ancestor_limit", "{dimension} limit of ancestor run {run} {detail}"
)
"""``BUDGET_EXHAUSTED`` by a limit of a run above: the caller's reservation (or usage) passed
that run's limit, so it ends as that run does; ``detail`` is the text the ancestor records."""

REASON_TEXTS: Final = (
    DEADLINE_EXCEEDED,
    LIMIT,
    MODEL_CALLS_REFUSED,
    TOOL_CALLS_REFUSED,
    PER_TOOL_CALLS_REFUSED,
    RUN_BYTES_REFUSED,
    TOKENS_EXCEEDED,
    COST_REFUSED,
    COST_EXCEEDED,
    CANCELLED,
    ANCESTOR_ENDED,
    ANCESTOR_LIMIT,
)
"""Every reason text the harness writes on every store; the Redis prelude renders each one."""


LIMIT_BOUNDARY: Mapping[BudgetDimension, Boundary] = MappingProxyType(
    {
        BudgetDimension.MODEL_CALLS: Boundary.MODEL,
        BudgetDimension.TOOL_CALLS: Boundary.TOOL,
        BudgetDimension.PER_TOOL_CALLS: Boundary.TOOL,
        BudgetDimension.INPUT_TOKENS: Boundary.MODEL,
        BudgetDimension.OUTPUT_TOKENS: Boundary.MODEL,
        BudgetDimension.TOTAL_TOKENS: Boundary.MODEL,
        BudgetDimension.RUN_BYTES: Boundary.CAPACITY,
        BudgetDimension.COST: Boundary.MODEL,
    }
)
"""The boundary at which each limit is reached: the reservation it refuses, or, for tokens, the
Model call whose reported usage passed it. A termination records it; messages name it first.
``COST`` is reached by a Model call's or a Tool call's hold or settle: the run records the boundary
of that call (MODEL here is the default for a store that does not say)."""


def seconds_text(ns: int) -> str:
    """``ns`` (>= 0) nanoseconds in seconds, as a person reads them: to the millisecond
    (``1.716 s``, truncated), or exactly below one millisecond (``0.0000002 s``, ``0 s``)."""
    whole, fraction = divmod(ns, 1_000_000_000)
    if ns >= 1_000_000:
        return f"{whole}.{fraction // 1_000_000:03d} s"
    return f"0.{fraction:09d}".rstrip("0").rstrip(".") + " s"


def deadline_reason(now_ns: int, deadline_ns: int, boundary: Boundary) -> str:
    """The reason a run that ``boundary`` found at or past its deadline records (``TIMED_OUT``).

    It says how far past, in seconds, and which boundary looked; the instants themselves are
    the termination's ``at_ns`` and the run's ``deadline.instant_ns``.
    """
    return DEADLINE_EXCEEDED.format(late=seconds_text(now_ns - deadline_ns), boundary=boundary.name)


def ending_of(event: LifecycleEvent) -> Ending:
    """The ending ``event`` leads to."""
    return _BY_EVENT[event]


def ending_of_cancel(reason: CancellationReason) -> Ending:
    """The ending an explicit ``cancel(reason)`` records: the deadline's and the budget's own
    reasons end the run as those would; every other reason ends it ``CANCELLED``."""
    return _BY_SIGNAL.get(reason, _BY_EVENT[LifecycleEvent.CANCEL])


def error_for(
    termination: RunTermination,
    boundary: Boundary | None,
    dimension: BudgetDimension | None = None,
) -> RunTerminated:
    """The exception a refused boundary raises for the run's ``termination``.

    ``dimension`` is the budget limit that ended the run, carried by ``BudgetExhausted`` only.
    """
    error = ENDINGS[termination.state].error
    if error is BudgetExhausted:
        return BudgetExhausted(termination, boundary, dimension=dimension)
    return error(termination, boundary)
