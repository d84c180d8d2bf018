"""The run's budget: seven caller-supplied limits, counters that never pass them, one snapshot.

The ACTIVE -> EXHAUSTED decision is the generated budget table (``model/budget.toml``); its guard
``within_limits`` is computed here from the counters. A reservation is all or nothing across the
total and per-Tool counters: the call that would pass a limit reserves nothing, so total Tool calls
always equal the sum per Tool. Reported token usage is different: the tokens were spent, so they
are recorded as reported even past a limit, and that exhausts the budget for good.

Every method named ``*_locked`` runs under the run's lock (the one the lifecycle and cancellation
share): ``RunContext`` checks the deadline and the terminal outcome and reserves in one section.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, final

from . import _checkpoint
from ._generated.tables import BUDGET, BudgetEvent, BudgetState
from ._machine import TableMachine
from ._validate import non_blank_str, positive_int

if TYPE_CHECKING:
    import threading
    from collections.abc import Mapping

    from ._lifecycle import Lifecycle

__all__ = ["Budget", "BudgetDimension", "BudgetLimits", "BudgetUsage"]

_RESERVE = BudgetEvent.RESERVE
_RECORD_USAGE = BudgetEvent.RECORD_USAGE
# The rows a granted reservation and an accepted usage report take, looked up once.
_RESERVE_GRANTED = BUDGET.step(_RESERVE, True)
_USAGE_ACCEPTED = BUDGET.step(_RECORD_USAGE, True)


class BudgetDimension(enum.Enum):
    """One limit of :class:`BudgetLimits`."""

    MODEL_CALLS = "model_calls"
    TOOL_CALLS = "tool_calls"
    PER_TOOL_CALLS = "per_tool_calls"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    TOTAL_TOKENS = "total_tokens"
    RUN_BYTES = "run_bytes"


# The seven limits' field names, read once: an enum's `.value` is a property, slow per call.
_LIMIT_NAMES = tuple(dimension.value for dimension in BudgetDimension)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """Every limit is required and a positive ``int``: there is no "unlimited" by accident."""

    model_calls: int
    tool_calls: int
    per_tool_calls: int  # the limit for each Tool not named in per_tool_overrides
    input_tokens: int
    output_tokens: int
    total_tokens: int
    run_bytes: int
    per_tool_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name in _LIMIT_NAMES:
            positive_int(name, getattr(self, name))
        overrides = self.per_tool_overrides
        if not hasattr(overrides, "items"):
            raise TypeError(
                f"per_tool_overrides must be a mapping of tool name to int, got {overrides!r}"
            )
        frozen = {}
        for tool, limit in overrides.items():
            non_blank_str("per_tool_overrides key", tool)
            frozen[tool] = positive_int(f"per_tool_overrides[{tool!r}]", limit)
        # A private frozen copy: the caller's dict may change, these limits may not.
        object.__setattr__(self, "per_tool_overrides", MappingProxyType(frozen))

    def per_tool_limit(self, tool: str) -> int:
        return self.per_tool_overrides.get(tool, self.per_tool_calls)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetUsage:
    """A consistent snapshot of the counters (taken under the run lock)."""

    model_calls: int
    tool_calls: int
    per_tool_calls: Mapping[str, int]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    run_bytes: int
    exhausted: BudgetDimension | None  # the first limit reached, or None while ACTIVE


@final
class Budget:
    """The run's counters against its :class:`BudgetLimits`. Read it with :meth:`snapshot`.

    Reservations go through the run: ``ctx.reserve_model_call()``, ``ctx.reserve_tool_call(name)``,
    ``ctx.reserve_bytes(n)`` and ``ctx.record_token_usage(...)``, which check the run first.
    """

    __slots__ = (
        "_exhausted",
        "_input_tokens",
        "_limit_of",
        "_limits",
        "_lock",
        "_machine",
        "_model_call_limit",
        "_model_calls",
        "_output_tokens",
        "_overrides",
        "_per_tool",
        "_per_tool_limit",
        "_run_bytes",
        "_tool_call_limit",
        "_tool_calls",
    )

    def __init__(self, limits: BudgetLimits, *, lock: threading.Lock) -> None:
        self._limits = limits
        self._lock = lock  # the run's lock: protects every counter and _machine
        self._machine = TableMachine(BUDGET, lock=lock)
        # The limits the reservation paths read, as plain attributes (they never change).
        self._model_call_limit = limits.model_calls
        self._tool_call_limit = limits.tool_calls
        self._per_tool_limit = limits.per_tool_calls
        self._overrides = dict(limits.per_tool_overrides)
        self._model_calls = 0
        self._tool_calls = 0
        self._per_tool: dict[str, int] = {}
        # The per-Tool limit of each Tool granted a call so far: its name was checked then.
        self._limit_of: dict[str, int] = {}
        self._input_tokens = 0
        self._output_tokens = 0
        self._run_bytes = 0
        self._exhausted: BudgetDimension | None = None

    @property
    def limits(self) -> BudgetLimits:
        return self._limits

    @property
    def state(self) -> BudgetState:
        return self._machine.state

    @property
    def exhausted(self) -> BudgetDimension | None:
        """The first limit that exhausted the budget, or ``None`` while ACTIVE."""
        return self._exhausted

    def snapshot(self) -> BudgetUsage:
        with self._lock:
            return BudgetUsage(
                model_calls=self._model_calls,
                tool_calls=self._tool_calls,
                per_tool_calls=MappingProxyType(dict(self._per_tool)),
                input_tokens=self._input_tokens,
                output_tokens=self._output_tokens,
                total_tokens=self._input_tokens + self._output_tokens,
                run_bytes=self._run_bytes,
                exhausted=self._exhausted,
            )

    # -- the granted path, whole -----------------------------------------------------------------
    # A reservation clearly within every limit of a live run is granted by these, which take the
    # run's lock themselves and make no call while they hold it (subscripts, not `dict.get`; the
    # generated enums hash in C). Why: CPython switches threads where a function is entered or
    # returns from a call, or where a loop jumps back; with none of those inside the locked
    # section, no thread is switched out while it holds the run's lock, and threads reserving at
    # once do not queue up behind a holder that is not running (a lock convoy). With calls inside,
    # 8 threads reserving together took 6 to 14 times as long as without, in many rounds.
    # Anything else -- a run that is over, a Tool seen for the first time, a limit reached --
    # returns False having changed nothing, and RunContext takes the full path under the lock.

    def _grant_model_call(self, now: int, deadline_ns: int, lifecycle: Lifecycle) -> bool:
        with self._lock:
            if lifecycle._termination is not None or now >= deadline_ns:
                return False
            machine = self._machine
            try:  # free in Python >= 3.11 unless it raises
                row = _RESERVE_GRANTED[machine._state]
            except KeyError:  # no granted row from this state: the full path says why
                return False
            used = self._model_calls
            if used >= self._model_call_limit:
                return False
            scheduler = _checkpoint._scheduler  # the machine step's checkpoint, inlined
            if scheduler is not None:
                scheduler(BUDGET.name)
            machine._state = row.target
            self._model_calls = used + 1
            return True

    def _grant_tool_call(self, tool: str, now: int, deadline_ns: int, lifecycle: Lifecycle) -> bool:
        with self._lock:
            if lifecycle._termination is not None or now >= deadline_ns:
                return False
            machine = self._machine
            try:
                row = _RESERVE_GRANTED[machine._state]
                limit = self._limit_of[tool]
            except KeyError:  # or a Tool not granted yet: its name is checked on the full path
                return False
            total = self._tool_calls
            used = self._per_tool[tool]
            if total >= self._tool_call_limit or used >= limit:
                return False
            scheduler = _checkpoint._scheduler
            if scheduler is not None:
                scheduler(BUDGET.name)
            machine._state = row.target
            # Both counters move together, after every check: total == sum per Tool, always.
            self._tool_calls = total + 1
            self._per_tool[tool] = used + 1
            return True

    # -- under the run lock ---------------------------------------------------------------------
    # Each returns None when granted, else the reason the budget is (now) exhausted. A budget that
    # is already EXHAUSTED has ended the run (same lock), so RunContext never calls these then.

    def _refuse_locked(self, event: BudgetEvent, dimension: BudgetDimension, detail: str) -> str:
        """Take the over-limit row and describe the refusal."""
        if self._machine.step_locked(event, False) is not None:
            self._exhausted = dimension
        return f"{dimension.value} limit {detail}"

    def _reserve_model_call_locked(self) -> str | None:
        used = self._model_calls
        if used >= self._model_call_limit:
            return self._refuse_locked(
                _RESERVE,
                BudgetDimension.MODEL_CALLS,
                f"{self._model_call_limit} reached: Model call {used + 1} refused",
            )
        self._machine.take_locked(_RESERVE_GRANTED, _RESERVE, True)
        self._model_calls = used + 1
        return None

    def _reserve_tool_call_locked(self, tool: str) -> str | None:
        total = self._tool_calls
        used = self._per_tool.get(tool)
        if used is None:  # the first call of this Tool: its name is checked once, before writes
            non_blank_str("tool", tool)
            used = 0
        if total >= self._tool_call_limit:
            return self._refuse_locked(
                _RESERVE,
                BudgetDimension.TOOL_CALLS,
                f"{self._tool_call_limit} reached: Tool call {total + 1} ({tool!r}) refused",
            )
        limit = (
            self._overrides.get(tool, self._per_tool_limit)
            if self._overrides
            else self._per_tool_limit
        )
        if used >= limit:
            return self._refuse_locked(
                _RESERVE,
                BudgetDimension.PER_TOOL_CALLS,
                f"{limit} for Tool {tool!r} reached: call {used + 1} refused",
            )
        # (The step's own checkpoint sits between these checks and the writes below.)
        self._machine.take_locked(_RESERVE_GRANTED, _RESERVE, True)
        # Both counters move together, after both checks: total == sum per Tool, always.
        self._tool_calls = total + 1
        self._per_tool[tool] = used + 1
        self._limit_of[tool] = limit
        return None

    def _reserve_bytes_locked(self, n: int) -> str | None:
        limit = self._limits.run_bytes
        used = self._run_bytes
        if used + n > limit:
            return self._refuse_locked(
                _RESERVE,
                BudgetDimension.RUN_BYTES,
                f"{limit} would be passed: {n} more bytes refused ({used} used)",
            )
        self._machine.take_locked(_RESERVE_GRANTED, _RESERVE, True)
        self._run_bytes = used + n
        return None

    def _record_token_usage_locked(self, input_tokens: int, output_tokens: int) -> str | None:
        # The tokens were spent: record them as reported, whatever the limits say.
        self._input_tokens += input_tokens
        self._output_tokens += output_tokens
        limits = self._limits
        total = self._input_tokens + self._output_tokens
        if self._input_tokens > limits.input_tokens:
            over = (BudgetDimension.INPUT_TOKENS, limits.input_tokens, self._input_tokens)
        elif self._output_tokens > limits.output_tokens:
            over = (BudgetDimension.OUTPUT_TOKENS, limits.output_tokens, self._output_tokens)
        elif total > limits.total_tokens:
            over = (BudgetDimension.TOTAL_TOKENS, limits.total_tokens, total)
        else:
            self._machine.take_locked(_USAGE_ACCEPTED, _RECORD_USAGE, True)
            return None
        dimension, limit, used = over
        return self._refuse_locked(_RECORD_USAGE, dimension, f"{limit} exceeded: {used} used")

    def __repr__(self) -> str:
        return f"Budget(state={self.state.name}, exhausted={self._exhausted})"
