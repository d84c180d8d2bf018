"""The runtime engine: walk a generated ``(state, event) -> target`` table under a lock.

Theory of operation. The tables in ``model/`` are the truth; ``_generated/tables.py`` holds them
as frozen maps of enums. A :class:`TableMachine` is one instance of such a table: its state is the
only mutable datum and it changes only in :meth:`TableMachine.fire_locked`, which the owner calls
while holding :attr:`TableMachine.lock` (several machines of one run share one lock, so that a
budget reservation and the run's terminal outcome are decided atomically). Terminal states absorb
every event: firing one returns ``None`` and changes nothing. An event with no row from a
non-terminal state raises :class:`~diagnosis_harness.IllegalTransition` and changes nothing.

Why not python-statemachine here: its ``send()`` costs about 95 µs and is not safe from two
threads; a locked dict lookup costs well under a microsecond. The python-statemachine model
generated from the same tables is the oracle the tests compare this engine against.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar, final

from . import _checkpoint
from ._errors import IllegalTransition

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["NO_GUARDS", "MachineTable", "Row", "TableMachine"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)

NO_GUARDS: Mapping[str, bool] = MappingProxyType({})


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
    """A whole table: closed-world, frozen, generated from ``model/``."""

    name: str
    source: str  # the model file, relative to the repository root
    states: type[S]
    events: type[E]
    initial: S
    terminal: frozenset[S]
    guards: tuple[str, ...]
    rows: tuple[Row[S, E], ...]
    # Derived from `rows`, so a table cannot disagree with itself: each (state, event)'s rows, in
    # file order.
    transitions: Mapping[tuple[S, E], tuple[Row[S, E], ...]] = field(
        init=False, repr=False, compare=False
    )
    # Derived once per table for the hot path (plain dicts: a mappingproxy's get() is slower).
    # The generator allows at most `g` / `not g` of one guard per (state, event), so a row is
    # found by (state, event, the guard's value or None for an unguarded row).
    index: dict[tuple[S, E, bool | None], Row[S, E]] = field(init=False, repr=False, compare=False)
    guard_of: dict[tuple[S, E], str | None] = field(init=False, repr=False, compare=False)
    # The same rows grouped by (event, guard value): a caller that applies one event often (a
    # reservation) looks its rows up once and then finds a row by the state alone.
    steps: dict[tuple[E, bool | None], dict[S, Row[S, E]]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        grouped: dict[tuple[S, E], tuple[Row[S, E], ...]] = {}
        for row in self.rows:
            grouped[row.source, row.event] = (*grouped.get((row.source, row.event), ()), row)
        object.__setattr__(self, "transitions", MappingProxyType(grouped))
        index: dict[tuple[S, E, bool | None], Row[S, E]] = {}
        guard_of: dict[tuple[S, E], str | None] = {}
        steps: dict[tuple[E, bool | None], dict[S, Row[S, E]]] = {}
        for (source, event), rows in self.transitions.items():
            names = {row.guard for row in rows}
            if len(names) != 1:
                raise ValueError(
                    f"{self.name}: ({source.name}, {event.value}) mixes guards {names}"
                )
            guard_of[source, event] = rows[0].guard
            for row in rows:
                value = None if row.guard is None else row.expect
                index[source, event, value] = row
                steps.setdefault((event, value), {})[source] = row
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "guard_of", guard_of)
        object.__setattr__(self, "steps", steps)

    def step(self, event: E, guard: bool | None = None) -> dict[S, Row[S, E]]:
        """The rows ``event`` takes with the guard's value ``guard``, keyed by source state."""
        return self.steps.get((event, guard), {})


@final
class TableMachine(Generic[S, E]):
    """One running instance of a :class:`MachineTable`.

    ``lock`` protects ``_state``. Pass a shared lock to decide several machines atomically.
    """

    __slots__ = ("_guard_of", "_state", "_table", "_terminal", "lock")

    def __init__(self, table: MachineTable[S, E], *, lock: threading.Lock | None = None) -> None:
        self._table = table
        self._guard_of = table.guard_of
        self._terminal = table.terminal
        self._state: S = table.initial
        self.lock = threading.Lock() if lock is None else lock

    @property
    def table(self) -> MachineTable[S, E]:
        return self._table

    @property
    def state(self) -> S:
        return self._state

    @property
    def is_terminal(self) -> bool:
        return self._state in self._terminal

    def fire(self, event: E, guards: Mapping[str, bool] = NO_GUARDS) -> Row[S, E] | None:
        """Take the lock and :meth:`fire_locked`."""
        with self.lock:
            return self.fire_locked(event, guards)

    def fire_locked(self, event: E, guards: Mapping[str, bool] = NO_GUARDS) -> Row[S, E] | None:
        """Apply ``event`` with the guards' values by name; the caller holds :attr:`lock`.

        Returns the row taken, or ``None`` when the machine is terminal (the event is absorbed).
        Raises :class:`IllegalTransition` (state unchanged) when no row applies.
        """
        name = self._guard_of.get((self._state, event))
        if name is None:
            return self.step_locked(event)
        try:
            value = guards[name]
        except KeyError:
            raise IllegalTransition(
                self._table.name,
                self._state.name,
                event.value,
                detail=f"guard {name!r} was not evaluated",
            ) from None
        return self.step_locked(event, value)

    def step_locked(self, event: E, guard: bool | None = None) -> Row[S, E] | None:
        """:meth:`fire_locked` for callers that evaluated the one guard of (state, event) already.

        ``guard`` is that guard's value, or ``None`` where the rows are unguarded.
        """
        return self.take_locked(self._table.step(event, guard), event, guard)

    def take_locked(
        self, rows: dict[S, Row[S, E]], event: E, guard: bool | None = None
    ) -> Row[S, E] | None:
        """:meth:`step_locked` with ``rows = table.step(event, guard)`` looked up beforehand.

        The hot paths (every reservation) hold their ``rows`` from import time, so a step is one
        dict lookup by the state: no key tuple is built and hashed per call.
        """
        state = self._state
        try:
            row = rows[state]  # a subscript, not .get(): no method call on the hot path
        except KeyError:
            if state in self._terminal:
                return None  # terminal states absorb every event
            self._refuse(state, event, guard)
        # Between reading the state and writing it. Inlined rather than `checkpoint()`: this is
        # every reservation's path, and a call costs more than the test-only branch it guards.
        scheduler = _checkpoint._scheduler
        if scheduler is not None:
            scheduler(self._table.name)
        self._state = row.target
        return row

    def _refuse(self, state: S, event: E, guard: object) -> NoReturn:
        name = self._guard_of.get((state, event))
        if (state, event) not in self._guard_of:
            detail = ""
        elif name is None:
            detail = f"the rows take no guard, got {guard!r}"
        elif guard is None:
            detail = f"guard {name!r} was not evaluated"
        elif guard.__class__ is not bool:
            detail = f"guard {name!r} must be a bool, got {guard!r}"
        else:
            detail = f"no row matches {name}={guard}"
        raise IllegalTransition(self._table.name, state.name, event.value, detail=detail)
