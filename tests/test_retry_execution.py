"""One execution for sync and async: the step machine both retry loops drive, and its table.

``execute`` and ``execute_async`` make their decisions in one ``_Execution``; these tests hold the
two loops to the same records and the same errors for the same script, derive the machine's steps
from the generated table's engine, and keep the async-only modules out of a sync import.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import diagnosis_harness._retry as retry_module
from diagnosis_harness import (
    Boundary,
    CancellationReason,
    Deadline,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    IllegalTransition,
    RetryPolicy,
    RunTerminated,
)
from diagnosis_harness._generated.tables import RETRY, RetryEvent, RetryState
from diagnosis_harness._retry import AttemptAbandoned
from diagnosis_harness.conformance.suite._support import AsyncScripted, Scripted, run_on_clock

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator

    from diagnosis_harness import ExecutionRecord, RunContext

SRC = Path(retry_module.__file__).parent
TECHNICAL = frozenset({FailureKind.TRANSPORT, FailureKind.TIMEOUT})
THREE_TRIES = RetryPolicy("three", 3, TECHNICAL)


class Interrupt(BaseException):
    """A BaseException that is not an Exception, which asyncio does not treat specially."""


def _ended_run_error() -> RunTerminated:
    ctx, _ = run_on_clock()
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    try:
        ctx.check(Boundary.TOOL)
    except RunTerminated as ended:
        return ended
    raise AssertionError("the cancelled run's gate passed")


def _classify(error: Exception) -> FailureKind | None:
    if isinstance(error, LookupError):
        raise RuntimeError("classifier bug")
    return FailureKind.TIMEOUT if isinstance(error, TimeoutError) else None


def _cancel_at(n: int, ctx: RunContext) -> Callable[[int], None]:
    def before(call: int) -> None:
        if call == n:
            ctx.cancellation.cancel(CancellationReason.SHUTDOWN)

    return before


def _transport() -> HarnessFailure:
    return HarnessFailure(FailureKind.TRANSPORT)


# Each script: what the operation returns or raises, attempt after attempt, made anew for each run
# (the executor attaches its record to the very exception raised); "cancel@n" cancels the run
# inside invocation n, so the gate before invocation n + 1 stops the loop.
SCRIPTS: dict[str, Callable[[], list[object]]] = {
    "first-try": lambda: ["ok"],
    "retried-then-ok": lambda: [_transport(), TimeoutError("t"), "ok"],
    "exhausted": lambda: [_transport(), _transport(), _transport()],
    "not-retryable": lambda: [ValueError("unclassified")],
    "never-retried-kind": lambda: [HarnessFailure(FailureKind.BUDGET_EXHAUSTED)],
    "interrupted": lambda: [_transport(), Interrupt()],
    "abandoned": lambda: [_transport(), AttemptAbandoned(_ended_run_error())],
    "classifier-bug": lambda: [LookupError("x")],
    "operation-run-ended": lambda: [_ended_run_error()],
    "cancel@1": lambda: [_transport(), "unreached"],
}


def _drive(coroutine: Coroutine[object, object, object]) -> object:
    """Run a coroutine whose only suspensions are ``asyncio.sleep(0)`` to its end, without a
    loop: a ``BaseException`` it raises then reaches the test as it left the execution."""
    for _ in range(100):
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
    raise AssertionError("the execution did not end")  # pragma: no cover - a bug in the test


def _outcome(
    name: str, run: Callable[[HarnessRetryExecutor, RunContext], object]
) -> tuple[object, tuple[ExecutionRecord, ...]]:
    ctx, _ = run_on_clock(timeout=600)
    executor = HarnessRetryExecutor(ctx, classifier=_classify)
    try:
        result: object = ("returned", run(executor, ctx))
    except BaseException as error:  # compared below, sync against async
        record = getattr(error, "harness_execution", None)
        notes = tuple(getattr(error, "__notes__", ()))
        result = ("raised", type(error), str(error), record, notes)
    return result, executor.executions


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_sync_and_the_async_loop_decide_alike(name: str) -> None:
    script = SCRIPTS[name]

    def sync(executor: HarnessRetryExecutor, ctx: RunContext) -> object:
        operation = Scripted(script(), ctx.clock)  # type: ignore[arg-type]  # a ManualClock
        if name.startswith("cancel@"):
            operation.before = _cancel_at(int(name.split("@")[1]), ctx)
        return executor.execute(THREE_TRIES, operation)

    def in_async(executor: HarnessRetryExecutor, ctx: RunContext) -> object:
        operation = AsyncScripted(script(), ctx.clock)  # type: ignore[arg-type]  # a ManualClock
        if name.startswith("cancel@"):
            operation.before = _cancel_at(int(name.split("@")[1]), ctx)
        return _drive(executor.execute_async(THREE_TRIES, operation))

    sync_outcome = _outcome(name, sync)
    assert sync_outcome == _outcome(name, in_async)
    assert len(sync_outcome[1]) == 1  # one execution, kept once


def test_each_step_of_an_execution_is_the_engines_step_of_the_generated_table() -> None:
    guards = (None, True, False)
    for state, event, guard in itertools.product(RetryState, RetryEvent, guards):
        key = (state.name, event.value, guard)
        try:
            row = RETRY.take(state, event, guard)
        except IllegalTransition:
            assert key not in retry_module._NEXT
            continue
        if row is None:  # a terminal state absorbs the event: an execution fires nothing there
            assert key not in retry_module._NEXT
        else:
            assert retry_module._NEXT[key] == row.target.name
    assert RETRY.initial.name == retry_module._INITIAL
    assert len(retry_module._NEXT) == len(RETRY.rows)  # every row is a step, and nothing else


def test_the_coroutine_flag_is_inspects() -> None:
    assert inspect.CO_COROUTINE == retry_module._CO_COROUTINE


def _top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it is imported (not under ``if TYPE_CHECKING``)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    ("module", "lazy"),
    [("_retry.py", {"asyncio", "inspect", "random"}), ("_scope.py", {"asyncio"})],
)
def test_a_sync_import_does_not_import_the_async_modules(module: str, lazy: set[str]) -> None:
    assert _top_level_imports(SRC / module).isdisjoint(lazy)


def _steps_of(waits: Generator[float, bool, None], answers: list[bool]) -> list[float]:
    steps = [next(waits)]
    with contextlib.suppress(StopIteration):
        for cancelled in answers:
            steps.append(waits.send(cancelled))
    return steps


def test_the_waits_of_a_pause_are_decided_once_for_both_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Deadline, "MAX_WAIT_SECONDS", 1.0)
    ctx, _ = run_on_clock(timeout=600)
    # A delay past the cap: capped waits, then the rest; each wait ran its course.
    assert _steps_of(retry_module._waits(ctx, 2.5), [False] * 5) == [1.0, 1.0, 0.5]
    # A cancellation ends the pause at once.
    assert _steps_of(retry_module._waits(ctx, 2.5), [True] * 5) == [1.0]
    # The deadline before the delay's end: one wait, to the deadline, and the next gate decides.
    near, _ = run_on_clock(timeout=0.25)
    assert _steps_of(retry_module._waits(near, 2.5), [False] * 5) == [0.25]
    # No delay: no wait at all.
    assert list(retry_module._waits(ctx, 0)) == []
