"""A Hypothesis stateful test of a run tree: a parent and two children against a reference.

Theory of operation. :class:`TreeMachine` drives a real tree -- a parent (``parent``) with a
money limit, a child with a cap of its own and an earlier deadline (``child-a``) and a child
without limits, capped by its parent alone (``child-b``) -- through any interleaving of the
operations of each run: Model calls (whole and partial money holds), Tool calls with holds,
byte reservations, settles of any hold at an actual below, at or above it (with tokens for a
Model call), token usage reports, cancels, successes and failures, gate checks and a fake clock
moving across the deadlines. Each step is predicted by :class:`TreeReference`, a few plain
counters per run written from the semantics of ``RunContext.child`` (not from the runtime's
code), and the runtime must agree on every answer (a hold and its amount, or the refusal and the
run's termination), every run's state and how it ended, every run's usage (its descendants'
included) and ``capped_by``, and the callbacks the step ran, in order.

The semantics the reference encodes:

* a child's reservation is decided for the child and its parent, nearest first, all or nothing,
  and counted in both; a partial money hold is the least money left over the levels, refused only
  when not even its least fits; the first level that refuses ends BUDGET_EXHAUSTED, and so does
  the child (by its ancestor's limit), and its other live children are cancelled;
* settles and usage reports are recorded at both levels, even after the runs ended; the highest
  level they take past a limit ends, with every live run below it on the path;
* any ending of a run cancels its live children in the same decision (``PARENT_ENDED``, a reason
  that names the run whose ending cascaded); a child's own ending never ends its parent;
* a run times out on its own deadline only, when a gate of its own sees it;
* each run's callback runs once, a child's before its parent's.

Invariant: the reference is updated only by the machine's rules, one step at a time, exactly as
the runtime is; it reads nothing of the runtime's state.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, final

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from .. import Boundary, BudgetLimits, CancellationReason, RunContext, RunState
from .._errors import RunTerminated
from .._limits import BudgetDimension, BudgetUsage
from .._money import to_units
from ..pricing import from_units
from ..testing import ManualClock
from ._counterexample import Counterexample
from ._disagreement import Disagreement
from ._results import CheckResult, ScenarioTally
from ._spec_scenarios import CLIENT_DISCONNECTS, PER_TOOL

if TYPE_CHECKING:
    from collections.abc import Callable
    from decimal import Decimal

    from hypothesis import settings

    from .._budget import CallHold
    from ._spec_scenarios import SpecScenario

__all__ = [
    "CHILD_A",
    "CHILD_A_LIMITS",
    "CHILD_B",
    "PARENT",
    "PARENT_LIMITS",
    "TREE_SCENARIOS",
    "RefRun",
    "TreeMachine",
    "TreeReference",
    "check_tree_machine",
]

_NS: Final = 1_000_000_000
PARENT: Final = "parent"
CHILD_A: Final = "child-a"
CHILD_B: Final = "child-b"
RUNS: Final = (PARENT, CHILD_A, CHILD_B)
TOOLS: Final = ("search", "fetch")

PARENT_LIMITS: Final = BudgetLimits(
    model_calls=4,
    tool_calls=4,
    per_tool_calls=3,
    input_tokens=6,
    output_tokens=6,
    total_tokens=9,
    run_bytes=6,
    cost=from_units(10),
)
"""The parent's limits: every one below what its two children together may ask."""
CHILD_A_LIMITS: Final = BudgetLimits(
    model_calls=2,
    tool_calls=3,
    per_tool_calls=2,
    input_tokens=4,
    output_tokens=4,
    total_tokens=6,
    run_bytes=4,
    cost=from_units(6),
)
"""``child-a``'s share: each limit below the parent's, so either level can refuse first."""
PARENT_TIMEOUT_S: Final = 10
CHILD_A_TIMEOUT_S: Final = 5
"""``child-a``'s own timeout, before the parent's deadline; ``child-b`` has the parent's."""

_ROOMS: Final = (
    BudgetDimension.MODEL_CALLS,
    BudgetDimension.TOOL_CALLS,
    BudgetDimension.INPUT_TOKENS,
    BudgetDimension.OUTPUT_TOKENS,
    BudgetDimension.TOTAL_TOKENS,
    BudgetDimension.RUN_BYTES,
    BudgetDimension.COST,
)


def _units(amount: Decimal | None) -> int | None:
    return None if amount is None else to_units(amount, rounding="up")


# -- the reference -----------------------------------------------------------------------------


@final
@dataclass(slots=True, eq=False)
class RefRun:
    """One run of the reference: its fixed limits and deadline, its state, its own counters
    (which include its children's usage, as the runtime's do)."""

    run_id: str
    parent: RefRun | None
    limits: BudgetLimits
    deadline_ns: int
    children: list[RefRun] = field(default_factory=list)
    state: RunState = RunState.RUNNING
    ending: str = ""  # "own", "ancestor_ended" or "ancestor_limit" once ended
    origin: str | None = None  # the run the reason names (ancestor_ended, ancestor_limit)
    signal: CancellationReason | None = None
    budget_exhausted: bool = False
    exhausted: BudgetDimension | None = None
    model_calls: int = 0
    tool_calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    run_bytes: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    settled: int = 0
    held: int = 0

    @property
    def cost_limit(self) -> int | None:
        return _units(self.limits.cost)

    @property
    def live(self) -> bool:
        return self.state is RunState.RUNNING

    @property
    def path(self) -> list[RefRun]:
        """This run, then its ancestors, nearest first."""
        return [self] if self.parent is None else [self, *self.parent.path]

    def room(self, dimension: BudgetDimension) -> int | None:
        """What this run's own limit of ``dimension`` leaves (``None``: no such limit)."""
        limits = self.limits
        used = {
            BudgetDimension.MODEL_CALLS: (limits.model_calls, self.model_calls),
            BudgetDimension.TOOL_CALLS: (limits.tool_calls, self.tool_calls),
            BudgetDimension.INPUT_TOKENS: (limits.input_tokens, self.input_tokens),
            BudgetDimension.OUTPUT_TOKENS: (limits.output_tokens, self.output_tokens),
            BudgetDimension.TOTAL_TOKENS: (
                limits.total_tokens,
                self.input_tokens + self.output_tokens,
            ),
            BudgetDimension.RUN_BYTES: (limits.run_bytes, self.run_bytes),
        }
        if dimension is BudgetDimension.COST:
            cost = self.cost_limit
            return None if cost is None else cost - self.settled - self.held
        limit, spent = used[dimension]
        return limit - spent

    def tokens_over(self) -> BudgetDimension | None:
        limits = self.limits
        if self.input_tokens > limits.input_tokens:
            return BudgetDimension.INPUT_TOKENS
        if self.output_tokens > limits.output_tokens:
            return BudgetDimension.OUTPUT_TOKENS
        if self.input_tokens + self.output_tokens > limits.total_tokens:
            return BudgetDimension.TOTAL_TOKENS
        return None

    def money_over(self) -> bool:
        cost = self.cost_limit
        return cost is not None and self.settled + self.held > cost


@final
class TreeReference:
    """The tree's expected behaviour, step by step; see the module docstring.

    ``delivered`` collects the callbacks the current step runs, ``(run_id, reason)`` in order;
    the machine compares and clears it after each step.
    """

    __slots__ = ("delivered", "now_ns", "runs")

    def __init__(self) -> None:
        self.now_ns = 0
        parent = RefRun(PARENT, None, PARENT_LIMITS, PARENT_TIMEOUT_S * _NS)
        a = RefRun(CHILD_A, parent, CHILD_A_LIMITS, CHILD_A_TIMEOUT_S * _NS)
        b = RefRun(CHILD_B, parent, PARENT_LIMITS, parent.deadline_ns)
        parent.children += [a, b]
        self.runs = {run.run_id: run for run in (parent, a, b)}
        self.delivered: list[tuple[str, CancellationReason]] = []

    # -- endings ---------------------------------------------------------------------------

    def _end(
        self,
        run: RefRun,
        state: RunState,
        signal: CancellationReason,
        ending: str = "own",
        origin: str | None = None,
    ) -> None:
        """End a live run, then (same step) every live child, whose callbacks run first."""
        if not run.live:
            return
        run.state, run.ending, run.origin = state, ending, origin
        if run.signal is None:
            run.signal = signal
        cascade = run.run_id if origin is None or ending != "ancestor_ended" else origin
        for child in run.children:
            if child.live:
                self._end(
                    child,
                    RunState.CANCELLED,
                    CancellationReason.PARENT_ENDED,
                    "ancestor_ended",
                    cascade,
                )
        assert run.signal is not None
        self.delivered.append((run.run_id, run.signal))

    def _exhaust(
        self,
        run: RefRun,
        dimension: BudgetDimension,
        ending: str = "own",
        origin: str | None = None,
    ) -> None:
        if run.budget_exhausted:
            return  # EXHAUSTED absorbs: the run ended then (or had ended before)
        run.budget_exhausted = True
        run.exhausted = dimension
        self._end(
            run, RunState.BUDGET_EXHAUSTED, CancellationReason.BUDGET_EXHAUSTED, ending, origin
        )

    def _time_out(self, run: RefRun) -> None:
        self._end(run, RunState.TIMED_OUT, CancellationReason.DEADLINE_EXCEEDED)

    def _closed(self, run: RefRun) -> bool:
        return not run.live or self.now_ns >= run.deadline_ns

    # -- the operations ----------------------------------------------------------------------

    def advance(self, seconds: int) -> None:
        self.now_ns += seconds * _NS

    def check(self, run_id: str) -> bool:
        """A gate of ``run_id``: True if it passes."""
        run = self.runs[run_id]
        if not self._closed(run):
            return True
        self._time_out(run)
        return False

    def cancel(self, run_id: str) -> bool:
        run = self.runs[run_id]
        if run.signal is not None:
            return False
        run.signal = CancellationReason.USER_REQUESTED
        self._end(run, RunState.CANCELLED, CancellationReason.USER_REQUESTED)
        return True

    def finish(self, run_id: str, *, success: bool) -> bool:
        run = self.runs[run_id]
        changed = run.live
        state = RunState.SUCCESS if success else RunState.FAILED
        self._end(run, state, CancellationReason.RUN_FINISHED)
        return changed

    def reserve(
        self,
        run_id: str,
        boundary: Boundary,
        *,
        tool: str = "",
        hold: int = 0,
        least: int | None = None,
        n: int = 0,
    ) -> int | None:
        """The hold granted (0 for bytes), or ``None`` when refused (the run has ended)."""
        run = self.runs[run_id]
        floor = hold if least is None else least
        if run.parent is None:
            return self._reserve_root(run, boundary, tool=tool, hold=hold, floor=floor, n=n)
        if self._closed(run):
            self._time_out(run)
            return None
        granted = hold
        path = run.path
        for level, at in enumerate(path):
            room = at.room(BudgetDimension.COST)
            if room is not None:
                granted = min(granted, room)
            refused = self._refusal(at, boundary, tool=tool, hold=granted, floor=floor, n=n)
            if refused is not None:
                for below in path[:level]:
                    self._exhaust(below, refused, "ancestor_limit", at.run_id)
                self._exhaust(at, refused)
                return None
        for at in path:
            self._count(at, boundary, tool, granted, n)
        return granted

    @staticmethod
    def _refusal(
        run: RefRun, boundary: Boundary, *, tool: str, hold: int, floor: int, n: int
    ) -> BudgetDimension | None:
        """The limit of ``run`` that refuses, in the order the runtime names them."""
        limits = run.limits
        if boundary is Boundary.MODEL:
            if run.model_calls >= limits.model_calls:
                return BudgetDimension.MODEL_CALLS
        elif boundary is Boundary.TOOL:
            if run.tool_calls >= limits.tool_calls:
                return BudgetDimension.TOOL_CALLS
            if run.per_tool.get(tool, 0) >= limits.per_tool_calls:
                return BudgetDimension.PER_TOOL_CALLS
        elif run.run_bytes + n > limits.run_bytes:
            return BudgetDimension.RUN_BYTES
        cost = run.cost_limit
        if cost is not None and (hold < floor or run.settled + run.held + hold > cost):
            return BudgetDimension.COST
        return None

    @staticmethod
    def _count(run: RefRun, boundary: Boundary, tool: str, hold: int, n: int) -> None:
        if boundary is Boundary.MODEL:
            run.model_calls += 1
        elif boundary is Boundary.TOOL:
            run.tool_calls += 1
            run.per_tool[tool] = run.per_tool.get(tool, 0) + 1
        else:
            run.run_bytes += n
        run.held += hold

    def _reserve_root(
        self, run: RefRun, boundary: Boundary, *, tool: str, hold: int, floor: int, n: int
    ) -> int | None:
        """A run without a parent: its own limits, the single-run decision."""
        room = run.room(BudgetDimension.COST)
        granted = hold if room is None else min(hold, room)
        refused = self._refusal(run, boundary, tool=tool, hold=granted, floor=floor, n=n)
        if not self._closed(run) and refused is None and not run.budget_exhausted:
            self._count(run, boundary, tool, granted, n)
            return granted
        if self._closed(run):
            self._time_out(run)
        else:
            assert refused is not None
            self._exhaust(run, refused)
        return None

    def record(
        self,
        run_id: str,
        *,
        input_tokens: int,
        output_tokens: int,
        hold: int = 0,
        cost: int = 0,
        settle: bool,
    ) -> None:
        """A settle (``settle``: ``hold`` released, ``cost`` recorded) or a usage report,
        recorded at every level of the run's path, whatever the endings say."""
        run = self.runs[run_id]
        if run.parent is None:
            self._record_root(run, input_tokens, output_tokens, hold, cost, settle=settle)
            return
        path = run.path
        overs: list[BudgetDimension | None] = []
        for at in path:
            at.held -= hold
            at.settled += cost
            at.input_tokens += input_tokens
            at.output_tokens += output_tokens
            over = at.tokens_over()
            if over is None and settle and at.money_over():
                over = BudgetDimension.COST
            overs.append(over)
        for level, at in enumerate(path):
            above = next((k for k in range(level + 1, len(path)) if overs[k] is not None), None)
            over = overs[level]
            if over is not None:
                self._exhaust(at, over)
            elif above is not None and at.live:
                dimension = overs[above]
                assert dimension is not None
                self._exhaust(at, dimension, "ancestor_limit", path[above].run_id)

    def _record_root(
        self,
        run: RefRun,
        input_tokens: int,
        output_tokens: int,
        hold: int,
        cost: int,
        *,
        settle: bool,
    ) -> None:
        """A run without a parent: the single-run recorders (a settle checks the tokens only
        when it reports some)."""
        run.held -= hold
        run.settled += cost
        run.input_tokens += input_tokens
        run.output_tokens += output_tokens
        over = run.tokens_over() if input_tokens or output_tokens or not settle else None
        if over is None and settle and run.money_over():
            over = BudgetDimension.COST
        if over is not None:
            self._exhaust(run, over)

    # -- what the runtime must show ----------------------------------------------------------

    def capped_by(self, run: RefRun) -> dict[BudgetDimension, str]:
        if run.parent is None:
            return {}
        least = {d: r for d in _ROOMS if (r := run.room(d)) is not None}
        capped: dict[BudgetDimension, str] = {}
        for ancestor in run.path[1:]:
            for dimension in _ROOMS:
                room = ancestor.room(dimension)
                if room is None:
                    continue
                if dimension not in least or room < least[dimension]:
                    least[dimension] = room
                    capped[dimension] = ancestor.run_id
        return capped


# -- the machine -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Hold:
    run_id: str
    hold: CallHold
    units: int
    model: bool


class TreeMachine(RuleBasedStateMachine):
    """A parent and two children, driven through any interleaving; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        parent = RunContext.create(
            session_id="tree",
            run_id=PARENT,
            limits=PARENT_LIMITS,
            timeout=PARENT_TIMEOUT_S,
            clock=self.clock,
        )
        self.ctx = {
            PARENT: parent,
            CHILD_A: parent.child(run_id=CHILD_A, limits=CHILD_A_LIMITS, timeout=CHILD_A_TIMEOUT_S),
            CHILD_B: parent.child(run_id=CHILD_B),
        }
        self.ref = TreeReference()
        self.delivered: list[tuple[str, CancellationReason]] = []
        self.holds: list[_Hold] = []
        self.trail: list[str] = []  # this example's steps, in order (a counterexample's steps)
        self.exercised: list[SpecScenario] = []  # the spec scenario of each step, in order
        for run_id, ctx in self.ctx.items():
            ctx.cancellation.register(self._callback(run_id))

    def _callback(self, run_id: str) -> Callable[[CancellationReason], None]:
        def callback(reason: CancellationReason) -> None:
            self.delivered.append((run_id, reason))

        return callback

    def _did(self, scenario: SpecScenario, step: str) -> None:
        """Note a step and its spec scenario: the budget's for a reservation, a settle or a
        usage report, the cancellation's for an ending, a gate check or the clock."""
        self.trail.append(step)
        self.exercised.append(scenario)

    # -- comparing ---------------------------------------------------------------------------

    def _refused(self, run_id: str, error: RunTerminated, step: str) -> None:
        run = self.ref.runs[run_id]
        termination = self.ctx[run_id].lifecycle.termination
        if run.live or error.termination is not termination:
            raise Disagreement(
                f"{step}: refused with {error.termination}",
                model=f"the run is {run.state.name}",
                runtime=f"raised {type(error).__name__}: {error}",
            )

    def _answer(self, step: str, model: object, runtime: object) -> None:
        if model != runtime:
            raise Disagreement(
                f"{step}: the model says {model!r}, the runtime {runtime!r}",
                model=repr(model),
                runtime=repr(runtime),
            )

    def _reserve(
        self,
        run_id: str,
        step: str,
        call: Callable[[], CallHold | None],
        boundary: Boundary,
        *,
        tool: str = "",
        hold: int = 0,
        least: int | None = None,
        n: int = 0,
    ) -> None:
        self._did(PER_TOOL, step)
        want = self.ref.reserve(run_id, boundary, tool=tool, hold=hold, least=least, n=n)
        try:
            got = call()
        except RunTerminated as error:
            if want is not None:
                raise Disagreement(
                    f"{step}: refused", model=f"granted {want}", runtime=str(error)
                ) from error
            self._refused(run_id, error, step)
            return
        if want is None:
            raise Disagreement(f"{step}: granted", model="refused", runtime=repr(got))
        if got is not None:  # a hold (bytes return nothing)
            self._answer(f"{step}: the hold", want, _units(got.max_cost))
            self.holds.append(_Hold(run_id, got, want, boundary is Boundary.MODEL))

    # -- the rules ---------------------------------------------------------------------------

    @rule(
        run_id=st.sampled_from(RUNS),
        hold=st.integers(0, 4),
        partial=st.booleans(),
    )
    def reserve_model_call(self, run_id: str, hold: int, partial: bool) -> None:
        least = 1 if partial and hold >= 1 else None
        ctx = self.ctx[run_id]
        self._reserve(
            run_id,
            f"{run_id}.reserve_model_call(max_cost={hold}, min_cost={least})",
            lambda: ctx.reserve_model_call(
                max_cost=from_units(hold), min_cost=None if least is None else from_units(least)
            ),
            Boundary.MODEL,
            hold=hold,
            least=least,
        )

    @rule(run_id=st.sampled_from(RUNS), tool=st.sampled_from(TOOLS), hold=st.integers(0, 3))
    def reserve_tool_call(self, run_id: str, tool: str, hold: int) -> None:
        ctx = self.ctx[run_id]
        self._reserve(
            run_id,
            f"{run_id}.reserve_tool_call({tool!r}, max_cost={hold})",
            lambda: ctx.reserve_tool_call(tool, max_cost=from_units(hold)),
            Boundary.TOOL,
            tool=tool,
            hold=hold,
        )

    @rule(run_id=st.sampled_from(RUNS), n=st.integers(1, 3))
    def reserve_bytes(self, run_id: str, n: int) -> None:
        ctx = self.ctx[run_id]

        def reserve() -> None:
            ctx.reserve_bytes(n)

        self._reserve(run_id, f"{run_id}.reserve_bytes({n})", reserve, Boundary.CAPACITY, n=n)

    @precondition(lambda self: bool(self.holds))
    @rule(
        index=st.integers(0, 20),
        cost=st.integers(0, 5),
        input_tokens=st.integers(0, 3),
        output_tokens=st.integers(0, 3),
    )
    def settle(self, index: int, cost: int, input_tokens: int, output_tokens: int) -> None:
        held = self.holds.pop(index % len(self.holds))
        if not held.model:
            input_tokens = output_tokens = 0
        self._did(
            PER_TOOL,
            f"{held.run_id}: settle(cost={cost}"
            + (
                f", input_tokens={input_tokens}, output_tokens={output_tokens})"
                if held.model
                else ")"
            ),
        )
        self.ref.record(
            held.run_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            hold=held.units,
            cost=cost,
            settle=True,
        )
        if held.model:
            held.hold.settle(
                cost=from_units(cost), input_tokens=input_tokens, output_tokens=output_tokens
            )
        else:
            held.hold.settle(cost=from_units(cost))

    @rule(
        run_id=st.sampled_from(RUNS),
        input_tokens=st.integers(0, 3),
        output_tokens=st.integers(0, 3),
    )
    def record_token_usage(self, run_id: str, input_tokens: int, output_tokens: int) -> None:
        self._did(PER_TOOL, f"{run_id}.record_token_usage({input_tokens}, {output_tokens})")
        self.ref.record(
            run_id, input_tokens=input_tokens, output_tokens=output_tokens, settle=False
        )
        self.ctx[run_id].record_token_usage(input_tokens=input_tokens, output_tokens=output_tokens)

    @rule(run_id=st.sampled_from(RUNS))
    def cancel(self, run_id: str) -> None:
        self._did(CLIENT_DISCONNECTS, f"{run_id}.cancel(USER_REQUESTED)")
        want = self.ref.cancel(run_id)
        got = self.ctx[run_id].cancellation.cancel(CancellationReason.USER_REQUESTED)
        self._answer(f"{run_id}.cancel(USER_REQUESTED)", want, got)

    @rule(run_id=st.sampled_from(RUNS), success=st.booleans())
    def finish(self, run_id: str, success: bool) -> None:
        self._did(CLIENT_DISCONNECTS, f"{run_id}.{'succeed' if success else 'fail'}()")
        want = self.ref.finish(run_id, success=success)
        lifecycle = self.ctx[run_id].lifecycle
        result = lifecycle.succeed() if success else lifecycle.fail("failed")
        self._answer(f"{run_id}.{'succeed' if success else 'fail'}()", want, result.changed)

    @rule(run_id=st.sampled_from(RUNS))
    def check(self, run_id: str) -> None:
        self._did(CLIENT_DISCONNECTS, f"{run_id}.check(GUARD)")
        want = self.ref.check(run_id)
        try:
            self.ctx[run_id].check(Boundary.GUARD)
        except RunTerminated as error:
            if want:
                raise Disagreement(
                    f"{run_id}.check(GUARD) refused", model="passes", runtime=str(error)
                ) from error
            self._refused(run_id, error, f"{run_id}.check(GUARD)")
            return
        self._answer(f"{run_id}.check(GUARD) passes", want, True)

    @rule(seconds=st.sampled_from([1, 2, 4]))
    def advance(self, seconds: int) -> None:
        self._did(CLIENT_DISCONNECTS, f"clock.advance({seconds})")
        self.ref.advance(seconds)
        self.clock.advance(seconds)

    # -- after every step --------------------------------------------------------------------

    @invariant()
    def agrees(self) -> None:
        self._answer("the callbacks of the step", self.ref.delivered, self.delivered)
        self.ref.delivered.clear()
        self.delivered.clear()
        usages = {run_id: ctx.budget.snapshot() for run_id, ctx in self.ctx.items()}
        for run_id, ctx in self.ctx.items():
            run = self.ref.runs[run_id]
            self._compare_run(run, ctx)
            self._compare_usage(run, usages[run_id])
        parent = usages[PARENT]
        self._answer(
            "the parent's children",
            {CHILD_A: usages[CHILD_A], CHILD_B: usages[CHILD_B]},
            dict(parent.children),
        )

    def _compare_run(self, run: RefRun, ctx: RunContext) -> None:
        termination = ctx.lifecycle.termination
        state = ctx.lifecycle.state
        self._answer(f"{run.run_id}'s state", run.state, state)
        if termination is None:
            return
        reason = termination.reason
        if run.ending == "ancestor_ended":
            origin = self.ref.runs[run.origin or ""]
            prefix = f"cancelled: ancestor run {origin.run_id!r} ended {origin.state.name}: "
        elif run.ending == "ancestor_limit":
            assert run.exhausted is not None
            prefix = f"{run.exhausted.value} limit of ancestor run {run.origin!r} "
        else:
            prefix = ""
        if not reason.startswith(prefix) or (not prefix and "ancestor run" in reason):
            raise Disagreement(
                f"{run.run_id} ended {reason!r}",
                model=f"{run.ending} {prefix!r}",
                runtime=reason,
            )

    def _compare_usage(self, run: RefRun, usage: BudgetUsage) -> None:
        want = (
            run.model_calls,
            run.tool_calls,
            dict(run.per_tool),
            run.run_bytes,
            run.input_tokens,
            run.output_tokens,
            run.settled,
            run.held,
            run.exhausted,
            self.ref.capped_by(run),
        )
        got = (
            usage.model_calls,
            usage.tool_calls,
            dict(usage.per_tool_calls),
            usage.run_bytes,
            usage.input_tokens,
            usage.output_tokens,
            usage.cost_units,
            usage.cost_held_units,
            usage.exhausted,
            dict(usage.capped_by),
        )
        self._answer(f"{run.run_id}'s usage", want, got)

    @invariant()
    def an_ended_run_has_no_live_child(self) -> None:
        for run_id, ctx in self.ctx.items():
            if ctx.lifecycle.termination is None:
                continue
            for child in self.ref.runs[run_id].children:
                if self.ctx[child.run_id].lifecycle.termination is None:
                    raise Disagreement(
                        f"{run_id} ended but {child.run_id} is live",
                        model="every descendant ends with it",
                        runtime=f"{child.run_id} RUNNING",
                    )


# -- as a check of the model-check command ---------------------------------------------------

TREE_SCENARIOS: Final[tuple[SpecScenario, ...]] = (PER_TOOL, CLIENT_DISCONNECTS)
"""The spec scenarios the tree machine's steps exercise: reservations at every level of a tree
refused at their limits (with settles and usage reports), and endings stopping the children's
work (cancels, endings, gate checks, the clock). An example is credited to the scenarios of its
steps; a failure is charged to the scenario of the step that failed."""


def check_tree_machine(
    *,
    settings: settings | None = None,
    tick: Callable[[str, int, int | None], None] | None = None,
) -> CheckResult:
    """Run :class:`TreeMachine` under ``settings`` (by default the loaded Hypothesis profile);
    its typed result. The shrunk failing example (Hypothesis runs it last) is the counterexample,
    its steps the machine's. ``tick("examples", done, total)`` after each example starts."""
    chosen = hypothesis.settings() if settings is None else settings
    total = chosen.max_examples
    seen: list[TreeMachine] = []  # the latest example's machine
    counts = [0, 0]  # examples, steps of the examples before the latest
    credits: Counter[SpecScenario] = Counter()  # examples per scenario, but the latest

    class Counted(TreeMachine):
        def __init__(self) -> None:
            super().__init__()
            if seen:
                counts[1] += len(seen[0].trail)
                credits.update(set(seen[0].exercised))
            seen[:] = [self]
            counts[0] += 1
            if tick is not None:
                tick("examples", counts[0], total)

    Counted.__name__ = Counted.__qualname__ = TreeMachine.__name__
    started = time.perf_counter()
    failure: Exception | None = None
    try:
        run_state_machine_as_test(Counted, settings=chosen)
    except Exception as error:  # a failing example, shrunk; charged below
        failure = error
    seconds = time.perf_counter() - started
    steps = counts[1] + (len(seen[0].trail) if seen else 0)
    tally = ScenarioTally("examples")
    latest = seen[0].exercised if seen else []
    if failure is None:
        credits.update(set(latest))
    for pair in TREE_SCENARIOS:
        if credits[pair]:
            tally.count([pair], credits[pair])
    if failure is not None:
        actions = list(seen[0].trail) if seen else []
        message = str(failure).strip() or type(failure).__name__
        culprit = latest[-1:] or list(TREE_SCENARIOS)  # the failing step's (the last one)
        tally.charge(
            culprit,
            Counterexample.of(
                "hypothesis",
                f"TreeMachine: {message.splitlines()[0]}",
                actions,
                disagreement=len(actions) - 1 if actions else None,
                model=failure.model if isinstance(failure, Disagreement) else None,
                runtime=failure.runtime if isinstance(failure, Disagreement) else None,
                replay=(
                    "from hypothesis.stateful import run_state_machine_as_test; "
                    "from diagnosis_harness.modelcheck._tree_stateful import TreeMachine; "
                    "run_state_machine_as_test(TreeMachine)  # under the same Hypothesis profile"
                ),
            ),
            0,
        )
    return CheckResult(
        name="TreeMachine",
        kind="stateful",
        passed=failure is None,
        summary=(
            f"{counts[0]:,} examples, {steps:,} steps, {seconds:.1f} s (a parent and two "
            f"children): {'ok' if failure is None else 'FAILED'}"
        ),
        scenarios=tally.results(),
        figures=(("examples", counts[0]), ("steps", steps), ("seconds", round(seconds, 3))),
    )
