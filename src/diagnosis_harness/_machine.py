"""The one engine: a generated ``(state, event, guard) -> row`` table and the step that reads it.

Theory of operation. The tables in ``model/`` are the truth; ``_generated/tables.py`` holds each
one as a :class:`MachineTable` of enums. :meth:`MachineTable.take` is the whole engine: a pure
function from the current state, an event and the value of that (state, event)'s one guard to the
row the table says to take. It holds no state, so it is safe from any thread; whoever owns a
machine's state keeps it, reads it and writes ``row.target`` back under its own lock (the run's
owner for the lifecycle and the budget, one execution's frame for the retry executor).

Terminal states absorb every event: ``take`` returns ``None`` and the owner changes nothing. An
event with no row from a non-terminal state raises :class:`~diagnosis_harness.IllegalTransition`.

Why not python-statemachine here: its ``send()`` is not safe from two threads and costs two orders
of magnitude more than a dict lookup. The model generated from the same tables is the oracle the
tests compare this engine against, every (state, event, guard) of every table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar, final

from ._errors import IllegalTransition

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MachineTable", "Row"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Row(Generic[S, E]):
    """One transition row of a table, as written in ``model/<machine>.toml``."""

    index: int  # 1-based position among the file's [[transitions]]
    source: S
    event: E
    target: S
    guard: str | None
    expect: bool  # the row applies when `guard` evaluates to this value
    requirement: str  # the spec requirement the row serves


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class MachineTable(Generic[S, E]):
    """A whole table: closed-world and frozen.

    Invariants, checked at construction: every (state, event) has rows of at most one guard (a
    plain row, or ``g`` and ``not g``), and no two rows share (state, event, guard value).
    """

    name: str
    source: str  # the model file, relative to the repository root
    states: type[S]
    events: type[E]
    initial: S
    terminal: frozenset[S]
    guards: tuple[str, ...]
    rows: tuple[Row[S, E], ...]
    # Derived from `rows`: the rows of each (state, event), in file order.
    transitions: Mapping[tuple[S, E], tuple[Row[S, E], ...]] = field(init=False, repr=False)
    # Derived from `rows`: the row of each (state, event, guard value or None when unguarded).
    _index: Mapping[tuple[S, E, bool | None], Row[S, E]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        grouped: dict[tuple[S, E], list[Row[S, E]]] = {}
        index: dict[tuple[S, E, bool | None], Row[S, E]] = {}
        for row in self.rows:
            rows = grouped.setdefault((row.source, row.event), [])
            if rows and rows[0].guard != row.guard:
                raise ValueError(
                    f"{self.name}: ({row.source.name}, {row.event.value}) mixes guards "
                    f"{rows[0].guard!r} and {row.guard!r}: one (state, event) has one guard"
                )
            key = (row.source, row.event, None if row.guard is None else row.expect)
            if key in index:
                raise ValueError(f"{self.name}: rows {index[key].index} and {row.index} overlap")
            rows.append(row)
            index[key] = row
        object.__setattr__(self, "transitions", {k: tuple(v) for k, v in grouped.items()})
        object.__setattr__(self, "_index", index)

    def guard_of(self, state: S, event: E) -> str | None:
        """The guard that decides ``event`` in ``state``, or ``None`` when its rows take none."""
        rows = self.transitions.get((state, event))
        return None if rows is None else rows[0].guard

    def row(self, state: S, event: E, guard: bool | None = None) -> Row[S, E] | None:
        """The row written for exactly (state, event, guard), or ``None``; a lookup, not a step."""
        row = self._index.get((state, event, guard))
        # 1 == True and hashes alike: only None or a bool names a guard's value.
        if row is not None and (guard is None or guard.__class__ is bool):
            return row
        return None

    def take(self, state: S, event: E, guard: bool | None = None) -> Row[S, E] | None:
        """The row ``event`` takes from ``state`` when the (state, event)'s guard is ``guard``.

        ``guard`` is ``None`` for unguarded rows. Returns ``None`` from a terminal state (the
        event is absorbed). Raises :class:`IllegalTransition` when no row applies.
        """
        row = self.row(state, event, guard)
        if row is not None:
            return row
        if state in self.terminal:
            return None
        detail = self._why(state, event, guard)
        raise IllegalTransition(self.name, state.name, event.value, detail=detail)

    def _why(self, state: S, event: E, guard: object) -> str:
        if (state, event) not in self.transitions:
            return ""
        name = self.guard_of(state, event)
        if name is None:
            return f"the rows take no guard, got {guard!r}"
        if guard is None:
            return f"guard {name!r} was not evaluated"
        if guard.__class__ is not bool:
            return f"guard {name!r} must be a bool, got {guard!r}"
        return f"no row matches {name}={guard}"
