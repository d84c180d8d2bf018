"""The small builders the suite's tests share; they use only the library's public API.

They ship with the suite so that it runs from an installed wheel, and the repository's own tests
import them from here (``tests/strategies.py`` re-exports the builders), so each is written once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pytest

from diagnosis_harness import BudgetLimits, ManualClock, RunContext

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from diagnosis_harness import (
        AttemptOutcome,
        AttemptRecord,
        Clock,
        Deadline,
        ExecutionRecord,
        HarnessRetryExecutor,
        RunState,
    )
    from diagnosis_harness.modelcheck import ScenarioResult

__all__ = [
    "BUDGETS",
    "DEADLINE",
    "GENEROUS",
    "HIDDEN_RETRY",
    "INDEPENDENCE",
    "PRIMITIVES",
    "REQUIREMENTS",
    "RETRY",
    "RUN_CONTEXT",
    "TERMINAL",
    "WHITESPACE",
    "AsyncScripted",
    "Scripted",
    "attempts_summary",
    "check_scenario",
    "limits",
    "new_run",
    "only_execution",
    "run_on_clock",
    "state",
]

# The spec's requirement names, verbatim, for ``@pytest.mark.spec(requirement, scenario)`` and for
# whatever a test compares with a requirement's name. Every test, here and in the repository's
# tests/, takes them from this one place, so a renamed requirement is changed once;
# tests/conformance/test_conformance_spec.py checks that they are the spec's, in its order.
RUN_CONTEXT: Final = "RunContext SHALL be explicit and structurally immutable"
DEADLINE: Final = "Deadline and cancellation SHALL stop subsequent controlled work"
BUDGETS: Final = "Run budgets SHALL be explicit, thread-safe, and observable"
TERMINAL: Final = "A Run SHALL have exactly one terminal outcome"
RETRY: Final = "Harness retry SHALL be typed, bounded, and recorded"
HIDDEN_RETRY: Final = "Spring AI hidden retry SHALL be disabled"
PRIMITIVES: Final = (
    "Tool invocation key and Run capacity primitives SHALL be safe and store-independent"
)
INDEPENDENCE: Final = "Harness Core SHALL remain independent from current runtime and persistence"
REQUIREMENTS: Final = (
    RUN_CONTEXT,
    DEADLINE,
    BUDGETS,
    TERMINAL,
    RETRY,
    HIDDEN_RETRY,
    PRIMITIVES,
    INDEPENDENCE,
)
"""Every requirement of the spec, in the spec's order."""

# Every character str.strip() removes: a name made only of these is blank.
WHITESPACE = (
    " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

GENEROUS = 1_000_000


def limits(**overrides: Any) -> BudgetLimits:
    """Limits that a test does not reach unless it lowers one of them by keyword."""
    values: dict[str, Any] = {
        "model_calls": GENEROUS,
        "tool_calls": GENEROUS,
        "per_tool_calls": GENEROUS,
        "input_tokens": GENEROUS,
        "output_tokens": GENEROUS,
        "total_tokens": GENEROUS,
        "run_bytes": GENEROUS,
    }
    values.update(overrides)
    return BudgetLimits(**values)


def new_run(
    *,
    budget: BudgetLimits | None = None,
    clock: Clock | None = None,
    timeout: float | None = None,
    deadline: Deadline | None = None,
    session_id: str = "session-1",
    run_id: str = "run-1",
    **kwargs: Any,
) -> RunContext:
    """A run on a ``ManualClock`` at 0 with a 30 s timeout unless told otherwise."""
    if timeout is None and deadline is None:
        timeout = 30
    return RunContext.create(
        session_id=session_id,
        run_id=run_id,
        limits=limits() if budget is None else budget,
        clock=ManualClock() if clock is None else clock,
        timeout=timeout,
        deadline=deadline,
        **kwargs,
    )


def state(ctx: RunContext) -> RunState:
    """The run's state, read through a call so that mypy does not narrow it between reads."""
    return ctx.lifecycle.state


def run_on_clock(clock: ManualClock | None = None, **kwargs: Any) -> tuple[RunContext, ManualClock]:
    """A run (as :func:`new_run`) on ``clock``, a ``ManualClock`` at 1 µs by default."""
    clock = ManualClock(1_000) if clock is None else clock
    return new_run(clock=clock, **kwargs), clock


def only_execution(executor: HarnessRetryExecutor) -> ExecutionRecord:
    """The executor's one execution record."""
    (execution,) = executor.executions
    return execution


def attempts_summary(
    attempts: Iterable[AttemptRecord],
) -> list[tuple[int, AttemptOutcome, object]]:
    """(number, outcome, failure kind) of each attempt."""
    return [(a.number, a.outcome, a.failure) for a in attempts]


@dataclass
class Scripted:
    """An operation that plays a script: each item is returned, or raised if an exception.

    It advances ``clock`` by ``step_ns`` inside every invocation and remembers what it saw (its
    arguments, and the clock's readings at its start and end), so a test can compare the records
    with what actually happened.
    """

    script: list[object]
    clock: ManualClock | None = None
    step_ns: int = 7
    before: Callable[[int], None] | None = None  # runs first in invocation n (from 1)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # (start, end) ns of each

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        self.calls.append((args, kwargs))
        if self.before is not None:
            self.before(len(self.calls))
        started = self.clock.monotonic_ns() if self.clock else 0
        if self.clock is not None:
            self.clock.advance_ns(self.step_ns)
        self.spans.append((started, self.clock.monotonic_ns() if self.clock else 0))
        item = self.script[len(self.calls) - 1]
        if isinstance(item, BaseException):
            raise item
        return item


@dataclass
class AsyncScripted:
    """An async operation that plays a script (return an item, or raise it if an exception).

    It remembers what it saw as :class:`Scripted` does.
    """

    script: list[object]
    clock: ManualClock | None = None
    step_ns: int = 7
    before: Callable[[int], None] | None = None  # runs first in invocation n (from 1)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)  # (start, end) ns of each

    async def __call__(self, *args: Any, **kwargs: Any) -> object:
        self.calls.append((args, kwargs))
        if self.before is not None:
            self.before(len(self.calls))
        started = self.clock.monotonic_ns() if self.clock else 0
        await asyncio.sleep(0)  # a real suspension point inside the attempt
        if self.clock is not None:
            self.clock.advance_ns(self.step_ns)
        self.spans.append((started, self.clock.monotonic_ns() if self.clock else 0))
        item = self.script[len(self.calls) - 1]
        if isinstance(item, BaseException):
            raise item
        return item


def check_scenario(record_property: Callable[[str, object], None], result: ScenarioResult) -> None:
    """One model check's verdict on one scenario, as the report reads it.

    Records ``checked`` (``{"kind": "sequences" | "schedules" | "examples" | "properties",
    "count": n}``) and, when the check failed, ``counterexample`` (its JSON form), then fails
    with the counterexample's text, whose first line says what went wrong.
    """
    record_property("checked", {"kind": result.unit, "count": result.checked})
    counterexample = result.counterexample
    if counterexample is not None:
        record_property("counterexample", counterexample.as_json())
        pytest.fail(counterexample.text(), pytrace=False)
