"""How a run's limits are kept in its hash: checked, written as fields, read back.

Shared by the store (a run it publishes or attaches to) and an owner (a child run it creates):
the hash's counters and limits, the canonical JSON of the limits an attach compares with, and
the checks that every number fits the functions' exact arithmetic (below 2**53: Lua's numbers
are doubles).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from .._limits import COUNTED_DIMENSIONS, BudgetLimits

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "LUA_EXACT",
    "cost_units",
    "limits_differ",
    "limits_json",
    "limits_of",
    "run_fields",
]

LUA_EXACT: Final = 2**53
"""Lua numbers are doubles, exact for integers below this: every limit, count and amount of
money (picodollars) the functions compare or add stays below it."""


def _limits_values(limits: BudgetLimits) -> dict[str, object]:
    """Every field of the limits by name, the overrides as a plain dict sorted by tool, the
    money limit as the text of its ``Decimal`` (JSON has no exact decimal) or ``None``."""
    values: dict[str, object] = {d.value: getattr(limits, d.value) for d in COUNTED_DIMENSIONS}
    values["per_tool_overrides"] = dict(sorted(limits.per_tool_overrides.items()))
    values["cost"] = None if limits.cost is None else str(limits.cost)
    return values


def cost_units(limits: BudgetLimits) -> int | None:
    """The money limit in picodollars (rounded up, as the run in one process holds it), or
    ``None``; ValueError, naming ``cost``, for a limit the store cannot compare exactly.

    The functions compare settled + held + a hold with the limit in Lua, whose numbers are
    doubles: exact for integers below 2**53. A limit below that keeps every comparison exact
    (see ``within_cost`` in ``lua/common.lua``), so the largest limit is 2**53 - 1 picodollars,
    $9,007.199254740991.
    """
    if limits.cost is None:
        return None
    from ..pricing import to_units  # noqa: PLC0415 - the one place the store converts a limit

    units = to_units(limits.cost, rounding="up")
    if units >= LUA_EXACT:
        raise ValueError(
            "cost must be below 2**53 picodollars ($9,007.199254740992) in a RedisRunStore, "
            f"whose functions compare money as Lua numbers (exact below 2**53); got "
            f"Decimal('{limits.cost}'): the largest money limit is Decimal('9007.199254740991')"
        )
    return units


def limits_json(limits: BudgetLimits) -> str:
    """The limits as the store keeps them: canonical JSON, so equal limits are equal strings."""
    return json.dumps(_limits_values(limits), sort_keys=True, separators=(",", ":"))


def limits_of(text: str) -> BudgetLimits:
    values = json.loads(text)
    cost = values.pop("cost", None)  # absent from a run an earlier release stored
    return BudgetLimits(**values, cost=None if cost is None else Decimal(cost))


def limits_differ(stored: BudgetLimits, given: BudgetLimits) -> str:
    """What differs, as ``stored with a=1, b=2; given a=3, b=4``: only the fields that differ."""
    was, now = _limits_values(stored), _limits_values(given)
    names = [name for name in was if was[name] != now[name]]
    if stored.cost == given.cost and "cost" in names:
        names.remove("cost")  # the same money written two ways (1 and 1.00): not a difference

    def listed(values: dict[str, object]) -> str:
        return ", ".join(f"{name}={values[name]}" for name in names)

    return f"stored with {listed(was)}; given {listed(now)}"


def run_fields(limits: BudgetLimits) -> Sequence[str | int]:
    """The limits' fields of a new run's hash -- ``limits`` (the JSON), zeroed counters, each
    limit as ``l_<dimension>`` (``l_cost`` only with a money limit) -- then ``--limits--`` and
    the per-Tool overrides as Tool, limit pairs: what ``create`` and ``create_child`` take.

    ValueError, naming the field, for a number the functions could not keep exactly; checked
    before anything is sent.
    """
    for dimension in COUNTED_DIMENSIONS:
        value = getattr(limits, dimension.value)
        if value >= LUA_EXACT:
            raise ValueError(
                f"{dimension.value} must be below 2**53 in a RedisRunStore, got {value}"
            )
    money_limit = cost_units(limits)
    for tool, value in limits.per_tool_overrides.items():
        if value >= LUA_EXACT:
            raise ValueError(f"per_tool_overrides[{tool!r}] must be below 2**53, got {value}")
    fields: list[str | int] = [
        "limits", limits_json(limits),
        "model_calls", 0, "tool_calls", 0, "input_tokens", 0, "output_tokens", 0,
        "run_bytes", 0, "cost", 0, "cost_held", 0,
    ]  # fmt: skip
    for dimension in COUNTED_DIMENSIONS:
        fields += [f"l_{dimension.value}", getattr(limits, dimension.value)]
    if money_limit is not None:  # no l_cost: no money limit
        fields += ["l_cost", money_limit]
    fields.append("--limits--")
    for tool, value in limits.per_tool_overrides.items():
        fields += [tool, value]
    return fields
