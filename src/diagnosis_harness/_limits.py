"""The budget's value types: the seven limits a run is given and a snapshot of what it used.

Both are frozen, compare by value and hash (each holds one read-only mapping, hashed as the set of
its items), so they can be dictionary keys, set members and cache keys.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import final

from ._validate import non_blank_str, positive_int

__all__ = ["BudgetDimension", "BudgetLimits", "BudgetUsage"]


class BudgetDimension(enum.Enum):
    """One limit of :class:`BudgetLimits`."""

    MODEL_CALLS = "model_calls"
    TOOL_CALLS = "tool_calls"
    PER_TOOL_CALLS = "per_tool_calls"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"
    TOTAL_TOKENS = "total_tokens"
    RUN_BYTES = "run_bytes"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """Every limit is required and a positive ``int``: there is no "unlimited" by accident.

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

    def __post_init__(self) -> None:
        for dimension in BudgetDimension:
            positive_int(dimension.value, getattr(self, dimension.value))
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
        limits = tuple(getattr(self, dimension.value) for dimension in BudgetDimension)
        return hash((limits, frozenset(self.per_tool_overrides.items())))

    def per_tool_limit(self, tool: str) -> int:
        """The most calls ``tool`` may be granted in one run."""
        return self.per_tool_overrides.get(tool, self.per_tool_calls)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetUsage:
    """One consistent reading of a run's counters, all taken in one decision of the run.

    ``tool_calls == sum(per_tool_calls.values())`` always; ``total_tokens`` is
    ``input_tokens + output_tokens``; ``exhausted`` is the first limit reached, or ``None``.
    """

    model_calls: int
    tool_calls: int
    per_tool_calls: Mapping[str, int]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    run_bytes: int
    exhausted: BudgetDimension | None

    def __hash__(self) -> int:
        counters = (self.model_calls, self.tool_calls, self.input_tokens, self.output_tokens)
        per_tool = frozenset(self.per_tool_calls.items())
        return hash((counters, per_tool, self.total_tokens, self.run_bytes, self.exhausted))
