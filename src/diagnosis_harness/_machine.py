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
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Generic, TypeVar, final

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
    transitions: Mapping[tuple[S, E], tuple[Row[S, E], ...]]


@final
class TableMachine(Generic[S, E]):
    """One running instance of a :class:`MachineTable`.

    ``lock`` protects ``_state``. Pass a shared lock to decide several machines atomically.
    """

    __slots__ = ("_state", "_table", "_terminal", "_transitions", "lock")

    def __init__(self, table: MachineTable[S, E], *, lock: threading.Lock | None = None) -> None:
        self._table = table
        self._transitions = table.transitions
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
        """Apply ``event``; the caller holds :attr:`lock`.

        Returns the row taken, or ``None`` when the machine is terminal (the event is absorbed).
        Raises :class:`IllegalTransition` (state unchanged) when no row applies.
        """
        state = self._state
        rows = self._transitions.get((state, event))
        if rows is None:
            if state in self._terminal:
                return None
            raise IllegalTransition(self._table.name, state.name, event.value)
        for row in rows:
            guard = row.guard
            if guard is not None:
                try:
                    holds = guards[guard]
                except KeyError:
                    raise IllegalTransition(
                        self._table.name,
                        state.name,
                        event.value,
                        detail=f"guard {guard!r} was not evaluated",
                    ) from None
                if holds.__class__ is not bool:
                    raise IllegalTransition(
                        self._table.name,
                        state.name,
                        event.value,
                        detail=f"guard {guard!r} must be a bool, got {holds!r}",
                    )
                if holds is not row.expect:
                    continue
            self._state = row.target
            return row
        raise IllegalTransition(
            self._table.name,
            state.name,
            event.value,
            detail=f"no row matches guards {dict(guards)}",
        )


def transition_index(table: MachineTable[S, E]) -> Mapping[tuple[S, E, bool | None], S]:
    """``(state, event, guard value or None) -> target`` for a machine confined to one call.

    A walk that lives in one function's locals (one retry execution) needs neither an instance
    nor a lock: a lookup in this frozen index is the whole transition. A missing key is a
    transition the table does not have. Tables with more than one guard per row group cannot be
    indexed this way and are refused.
    """
    index: dict[tuple[S, E, bool | None], S] = {}
    for (source, event), rows in table.transitions.items():
        guards = {row.guard for row in rows}
        if len(guards) > 1:
            raise ValueError(f"{table.name}: ({source.name}, {event.value}) mixes guards {guards}")
        for row in rows:
            index[source, event, None if row.guard is None else row.expect] = row.target
    return MappingProxyType(index)
