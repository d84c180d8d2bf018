"""The budget's value types: the limits a run is given and a snapshot of what it used.

The seven counted limits are required ints; the money limit ``cost`` (US dollars, a ``Decimal``)
is optional. ``decimal`` is imported only when a cost is checked or read, so ``import
diagnosis_harness`` does not load it.

Both are frozen, compare by value and hash (each holds one read-only mapping, hashed as the set of
its items), so they can be dictionary keys, set members and cache keys.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

from ._validate import non_blank_str, positive_int

if TYPE_CHECKING:
    from decimal import Decimal

__all__ = ["COUNTED_DIMENSIONS", "BudgetDimension", "BudgetLimits", "BudgetUsage"]


class BudgetDimension(enum.Enum):
    """One limit of :class:`BudgetLimits`."""

    MODEL_CALLS = "model_calls"
    TOOL_CALLS = "tool_calls"
    PER_TOOL_CALLS = "per_tool_calls"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    TOTAL_TOKENS = "total_tokens"
    RUN_BYTES = "run_bytes"
    COST = "cost"
    """The money limit (``BudgetLimits.cost``, US dollars): held by reservations, settled after."""


COUNTED_DIMENSIONS: Final = tuple(d for d in BudgetDimension if d is not BudgetDimension.COST)
"""The seven limits that are positive ints, always set (every dimension but ``COST``)."""


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """Every counted limit is required and a positive ``int``: there is no "unlimited" by accident.

    ``cost`` is the optional money limit in US dollars, a finite ``decimal.Decimal`` > 0 (a float
    is refused: money is exact); ``None`` (the default) means no money budget.

    ``per_tool_calls`` is the limit of each Tool not named in ``per_tool_overrides``; the overrides
    are kept as a private read-only copy, so a later change to the caller's dict changes nothing.
    """

    model_calls: int
    tool_calls: int
    per_tool_calls: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    run_bytes: int
    per_tool_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    cost: Decimal | None = None

    def __post_init__(self) -> None:
        for dimension in COUNTED_DIMENSIONS:
            positive_int(dimension.value, getattr(self, dimension.value))
        if self.cost is not None:
            from ._money import checked_money  # noqa: PLC0415 - lazily: it loads decimal

            checked_money("cost", self.cost, positive=True, hint=", or None for no money budget")
        overrides: object = self.per_tool_overrides
        if not isinstance(overrides, Mapping):
            raise TypeError(
                f"per_tool_overrides must be a mapping of tool name to int, got {overrides!r}"
            )
        frozen = {}
        for tool, limit in overrides.items():
            non_blank_str("per_tool_overrides key", tool)
            frozen[tool] = positive_int(f"per_tool_overrides[{tool!r}]", limit)
        object.__setattr__(self, "per_tool_overrides", MappingProxyType(frozen))

    def __hash__(self) -> int:
        limits = tuple(getattr(self, dimension.value) for dimension in COUNTED_DIMENSIONS)
        return hash((limits, frozenset(self.per_tool_overrides.items()), self.cost))

    def per_tool_limit(self, tool: str) -> int:
        """The most calls ``tool`` may be granted in one run."""
        return self.per_tool_overrides.get(tool, self.per_tool_calls)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetUsage:
    """One consistent reading of a run's counters, all taken in one decision of the run.

    ``tool_calls == sum(per_tool_calls.values())`` always; ``total_tokens`` is
    ``input_tokens + output_tokens``; ``exhausted`` is the first limit reached, or ``None``.
    Money is kept in integer picodollars (:func:`diagnosis_harness.pricing.to_units`):
    ``cost_units`` settled, ``cost_held_units`` held by reservations not settled yet; the
    properties :attr:`cost` and :attr:`cost_held` give them in US dollars, as ``Decimal``.

    A run with children (``RunContext.child``) counts their usage in its own counters as it
    happens; ``children`` gives each child's own reading by run ID (recursively, in creation
    order, taken in the same decision). ``capped_by`` names, for each limit where a run above
    leaves this run less than its own limit does (a child's cap above what its parent has left),
    the run ID of the one leaving the least: that is the limit that binds. Both are empty for a
    run without children or without a parent.
    """

    model_calls: int
    tool_calls: int
    per_tool_calls: Mapping[str, int]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    run_bytes: int
    exhausted: BudgetDimension | None
    cost_units: int = 0
    cost_held_units: int = 0
    children: Mapping[str, BudgetUsage] = field(default_factory=lambda: MappingProxyType({}))
    capped_by: Mapping[BudgetDimension, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def cost(self) -> Decimal:
        """The money settled so far, in US dollars (actual costs, each rounded up)."""
        from ._money import dollars  # noqa: PLC0415 - lazily: it loads decimal

        return dollars(self.cost_units)

    @property
    def cost_held(self) -> Decimal:
        """The money held by reservations not settled yet, in US dollars (their ``max_cost``)."""
        from ._money import dollars  # noqa: PLC0415 - lazily: it loads decimal

        return dollars(self.cost_held_units)

    def __hash__(self) -> int:
        counters = (self.model_calls, self.tool_calls, self.input_tokens, self.output_tokens)
        per_tool = frozenset(self.per_tool_calls.items())
        money = (self.cost_units, self.cost_held_units)
        tree = (frozenset(self.children.items()), frozenset(self.capped_by.items()))
        return hash(
            (counters, per_tool, self.total_tokens, self.run_bytes, self.exhausted, money, tree)
        )
