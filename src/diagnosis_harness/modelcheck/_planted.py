"""Planted defects: known bugs put into the runtime on purpose, to show the checks find them.

Theory of operation. A check that never fails proves nothing about its own power. Each
:class:`Defect` here is a context manager that monkeypatches one method of the runtime
with a plausible wrong version (each written as a method of the patched class: it is the class's
own code, wrong), and names the stateful machine expected to catch it:

* ``replaceable-terminal`` -- ``LocalRun._end_locked`` lets a later outcome overwrite the first
  (spec: "Later success, failure, cancellation, deadline or budget events SHALL NOT replace the
  state, reason or timestamp of the first RunTermination").
* ``tool-total-before-check`` -- ``LocalRun.reserve_tool_call`` counts the call in the total
  before the per-Tool check and does not roll it back when that check refuses (spec: "the extra
  call is not reserved and the total and per-Tool usage remain internally consistent").
* ``retry-ignores-cancellation`` -- the executor's gate ``ctx.check(Boundary.RETRY)`` is skipped
  between attempts (spec: "the executor rejects the next attempt and does not invoke the
  operation again").

:func:`hunt` runs the machine against the patched runtime the way ``hypothesis.find`` would:
derandomized, no example database, a bounded number of examples; Hypothesis shrinks the first
failure, and the rules of the final (shrunk) run are the reproduction. A defect counts as caught
when the run fails with a :class:`~._disagreement.Disagreement` (or another ``AssertionError``); the
shrunk sequence is expected to be a handful of steps. The patch is always undone.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

from hypothesis import HealthCheck, Phase, Verbosity, settings

from .. import Boundary, HarnessRetryExecutor, RunContext
from .._endings import RunTermination, ending_of
from .._generated.tables import LIFECYCLE, BudgetEvent, LifecycleEvent
from .._limits import BudgetDimension
from .._local_run import LocalRun
from ._results import CheckResult
from ._stateful import (
    BudgetMachine,
    MachineStats,
    RetryMachine,
    RunMachine,
    machine_counterexample,
    run_machine,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .._local_run import Deliveries
    from ._counterexample import Counterexample
    from ._stateful import _ProbeMachine

__all__ = ["DEFECTS", "Catch", "Defect", "check_planted", "hunt", "hunt_all"]

T = TypeVar("T")
RESERVE = BudgetEvent.RESERVE


@contextmanager
def _patched(owner: type[Any], name: str, replacement: object) -> Iterator[None]:
    """Replace ``owner.name`` for the duration of the block."""
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


# -- defect 1: a terminal outcome that a later one can replace -------------------------------------


def _end_locked_replaceable(
    self: LocalRun,
    event: LifecycleEvent,
    reason: str,
    at_ns: int,
    boundary: Boundary | None = None,
    *,
    origin: LocalRun | None = None,  # noqa: ARG001 - the real method's; the bug cascades nothing
) -> Deliveries | None:
    """The bug: every ending is recorded, whether or not the run had already ended."""
    row = LIFECYCLE.take(LIFECYCLE.initial, event)  # as if the run were still RUNNING
    assert row is not None
    self._state = row.target  # overwrites a terminal state
    self._termination = RunTermination(row.target, reason, at_ns, boundary)
    signal = ending_of(event).signal
    pending = None if signal is None else self._signal.signal(signal)
    return [(self._signal, [] if pending is None else pending)]


def replaceable_terminal() -> AbstractContextManager[None]:
    return _patched(LocalRun, "_end_locked", _end_locked_replaceable)


# -- defect 2: a per-Tool reservation that bumps the total before checking -------------------------


def _reserve_tool_call_bumping(self: LocalRun, tool: str, now_ns: int, hold: int = 0) -> None:
    """The bug: the total moves first, and a per-Tool (or money) refusal does not put it back.
    The money hold is taken as the real code takes it, so that only the total is wrong."""
    with self._lock:
        if self._termination is not None or now_ns >= self._deadline_ns:
            pending = self._time_out_locked(Boundary.TOOL, now_ns)
        elif self._tool_calls >= self._limits.tool_calls:
            pending = self._exhaust_locked(RESERVE, BudgetDimension.TOOL_CALLS, "reached", now_ns)
        else:
            self._tool_calls += 1
            used = self._per_tool.get(tool, 0)
            within = used < self._limits.per_tool_limit(tool)
            cost_limit = self._cost_limit
            fits = cost_limit is None or self._cost_settled + self._cost_held + hold <= cost_limit
            if within and fits:
                self._step_budget_locked(RESERVE)
                self._per_tool[tool] = used + 1
                self._cost_held += hold
                return
            dimension = BudgetDimension.PER_TOOL_CALLS if not within else BudgetDimension.COST
            pending = self._exhaust_locked(RESERVE, dimension, "reached", now_ns)
    self._refuse(Boundary.TOOL, pending)


def tool_total_before_check() -> AbstractContextManager[None]:
    return _patched(LocalRun, "reserve_tool_call", _reserve_tool_call_bumping)


# -- defect 3: a retry loop that does not look at the run between attempts -------------------------


@contextmanager
def retry_ignores_cancellation() -> Iterator[None]:
    """The bug: only the first attempt of an execution passes the gate; later ones skip it."""
    first_gate = [True]
    check = RunContext.check
    execute = HarnessRetryExecutor.execute
    execute_async = HarnessRetryExecutor.execute_async

    def gate(self: RunContext, boundary: Boundary) -> None:
        if boundary is Boundary.RETRY:
            if not first_gate[0]:
                return
            first_gate[0] = False
        check(self, boundary)

    def patched_execute(self: HarnessRetryExecutor, *args: Any, **kwargs: Any) -> Any:
        first_gate[0] = True
        return execute(self, *args, **kwargs)

    async def patched_execute_async(self: HarnessRetryExecutor, *args: Any, **kwargs: Any) -> Any:
        first_gate[0] = True
        return await execute_async(self, *args, **kwargs)

    with ExitStack() as stack:
        stack.enter_context(_patched(RunContext, "check", gate))
        stack.enter_context(_patched(HarnessRetryExecutor, "execute", patched_execute))
        stack.enter_context(_patched(HarnessRetryExecutor, "execute_async", patched_execute_async))
        yield


# -- hunting ---------------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Defect:
    """A known bug, how to plant it, and the machine that must catch it."""

    name: str
    description: str
    plant: Callable[[], AbstractContextManager[None]]
    machine: type[_ProbeMachine]


DEFECTS: Final[tuple[Defect, ...]] = (
    Defect(
        "replaceable-terminal",
        "a later outcome replaces the first terminal outcome",
        replaceable_terminal,
        RunMachine,
    ),
    Defect(
        "tool-total-before-check",
        "a per-Tool reservation bumps the total before its check and keeps it when refused",
        tool_total_before_check,
        BudgetMachine,
    ),
    Defect(
        "retry-ignores-cancellation",
        "the retry gate is skipped between attempts",
        retry_ignores_cancellation,
        RetryMachine,
    ),
)


@final
@dataclass(frozen=True, slots=True)
class Catch:
    """What hunting one defect found."""

    defect: str
    caught: bool
    steps: tuple[str, ...]  # the shrunk failing sequence (empty when not caught)
    error: str  # the failure's message, or why nothing was caught
    examples: int
    seconds: float
    counterexample: Counterexample | None = None  # the shrunk example that caught it

    def as_dict(self) -> dict[str, object]:
        return {
            "defect": self.defect,
            "caught": self.caught,
            "shrunk_steps": len(self.steps),
            "steps": list(self.steps),
            "error": self.error,
            "examples": self.examples,
            "seconds": round(self.seconds, 3),
        }


def hunt_settings(max_examples: int = 300, steps: int = 10) -> settings:
    """``hypothesis.find``-like: derandomized, no database, quiet, bounded.

    Fewer steps per example than the ``ci`` profile: each defect needs only a few, and the
    shrinker replays every candidate, so short examples keep the hunt to seconds. No explain
    phase: it replays hundreds of variations of the shrunk example only to annotate the report
    (it made one hunt 20 times slower).
    """
    return settings(
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=max_examples,
        stateful_step_count=steps,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
        report_multiple_bugs=False,
        phases=(Phase.generate, Phase.shrink),
    )


def hunt(defect: Defect, *, max_examples: int = 300) -> Catch:
    """Plant ``defect``, run its machine until it fails (or gives up), undo the patch."""
    stats = MachineStats(defect.machine.__name__)
    started = time.perf_counter()
    try:
        with defect.plant():
            run_machine(defect.machine, settings=hunt_settings(max_examples), stats=stats)
    except AssertionError as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return Catch(
            defect.name,
            True,
            tuple(stats.last_steps),
            message,
            stats.examples,
            time.perf_counter() - started,
            machine_counterexample(defect.machine, stats, error),
        )
    except Exception as error:  # anything else is not the check catching the bug
        return Catch(
            defect.name,
            False,
            (),
            f"{type(error).__name__}: {error}",
            stats.examples,
            time.perf_counter() - started,
        )
    return Catch(
        defect.name,
        False,
        (),
        f"not found in {stats.examples} examples",
        stats.examples,
        time.perf_counter() - started,
    )


def hunt_all(*, max_examples: int = 300) -> tuple[Catch, ...]:
    return tuple(hunt(defect, max_examples=max_examples) for defect in DEFECTS)


def check_planted(
    defects: tuple[Defect, ...] | None = None,
    *,
    tick: Callable[[str, int, int | None], None] | None = None,
) -> CheckResult:
    """Hunt every defect; passed only if each was caught. It shows the checks' power, so it
    credits no scenario."""
    chosen = DEFECTS if defects is None else defects
    catches = []
    for number, defect in enumerate(chosen):
        if tick is not None:
            tick("planted defects", number, len(chosen))
        catches.append(hunt(defect))
    caught = [catch for catch in catches if catch.caught]
    shrunk = ", ".join(str(len(catch.steps)) for catch in caught) or "-"
    details = tuple(
        f"{catch.defect}: {'; '.join(catch.steps)}"
        if catch.caught
        else f"{catch.defect}: NOT CAUGHT ({catch.error})"
        for catch in catches
    )
    return CheckResult(
        name="planted defects",
        kind="planted",
        passed=len(caught) == len(catches),
        summary=f"{len(caught)}/{len(catches)} caught, shrunk to {shrunk} steps",
        problems=tuple(f"{c.defect} not caught: {c.error}" for c in catches if not c.caught),
        details=details,
        figures=(("defects", len(catches)), ("caught", len(caught))),
    )
