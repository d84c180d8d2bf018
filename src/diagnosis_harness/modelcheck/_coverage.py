"""Transition coverage: how often each row of each table in ``model/`` was taken by a model check.

Theory of operation. A row is identified by its table's name and its 1-based ``index`` in the
table's ``[[transitions]]`` (the same numbering as ``model/<machine>.toml`` and the generated
tables). The checks never guess a row: they derive it from the (state, event, guard value) the
python-statemachine model actually took, through the table's own ``index``
(:meth:`TransitionCoverage.record_step`). Every row of every table is listed from the start with a
count of 0, so a row no check reaches is visible (:meth:`TransitionCoverage.uncovered`) rather
than silently missing. The counts are what the conformance report prints beside each row.

Thread-safe: one lock protects the counters, so checks running on several threads (the
deterministic scheduler's, say) may share one object.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, final

from .._generated.tables import BUDGET, LIFECYCLE, RETRY

if TYPE_CHECKING:
    import enum
    from collections.abc import Iterable, Mapping

    from .._machine import MachineTable, Row

__all__ = ["TABLES", "TransitionCoverage"]

TABLES: tuple[MachineTable[Any, Any], ...] = (LIFECYCLE, BUDGET, RETRY)
"""Every generated table, in the order the reports list them."""


def _guard_text(row: Row[Any, Any]) -> str | None:
    """The guard as written in the table: ``g``, ``not g`` or ``None`` for an unguarded row."""
    if row.guard is None:
        return None
    return row.guard if row.expect else f"not {row.guard}"


@final
class TransitionCoverage:
    """A thread-safe counter of rows taken, keyed by ``(table name, row index)``."""

    __slots__ = ("_counts", "_lock", "_tables")

    def __init__(self, tables: Iterable[MachineTable[Any, Any]] = TABLES) -> None:
        self._tables: dict[str, MachineTable[Any, Any]] = {table.name: table for table in tables}
        # _lock protects _counts; the key set is fixed here: every row, counted from 0.
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {
            (table.name, row.index): 0 for table in self._tables.values() for row in table.rows
        }

    # -- recording ----------------------------------------------------------------------------

    def record(self, table: MachineTable[Any, Any] | str, row: Row[Any, Any] | int) -> None:
        """Count one taking of ``row`` (a :class:`Row` or its index) of ``table``."""
        name = table if isinstance(table, str) else table.name
        index = row if isinstance(row, int) else row.index
        key = (name, index)
        with self._lock:
            if key not in self._counts:
                raise KeyError(f"no row {index} in table {name!r}")
            self._counts[key] += 1

    def record_step(
        self,
        table: MachineTable[Any, Any],
        state: enum.Enum,
        event: enum.Enum,
        guard: bool | None,
    ) -> Row[Any, Any]:
        """Count the row the table's ``index`` gives for (state, event, guard); return it.

        ``guard`` is the value of the (state, event)'s one guard, or ``None`` for unguarded rows.
        A step no row allows is a :class:`KeyError`: a check must not record a transition that
        was not taken.
        """
        row = table.row(state, event, guard)
        if row is None:
            raise KeyError(
                f"{table.name}: no row for ({state.name}, {event.value}, guard={guard!r})"
            )
        self.record(table, row)
        return row

    def merge(self, other: TransitionCoverage) -> None:
        """Add ``other``'s counts to these (tables must agree)."""
        counts = other.counts()
        with self._lock:
            for key, count in counts.items():
                if key not in self._counts:
                    raise KeyError(f"no row {key[1]} in table {key[0]!r}")
                self._counts[key] += count

    # -- reading ------------------------------------------------------------------------------

    def count(self, table: MachineTable[Any, Any] | str, row: Row[Any, Any] | int) -> int:
        name = table if isinstance(table, str) else table.name
        index = row if isinstance(row, int) else row.index
        with self._lock:
            return self._counts[name, index]

    def counts(self) -> dict[tuple[str, int], int]:
        """A copy of every count, keyed by (table name, row index)."""
        with self._lock:
            return dict(self._counts)

    def uncovered(self) -> list[tuple[str, int]]:
        """The rows never taken, as (table name, row index), in table order."""
        counts = self.counts()
        return [key for key, count in counts.items() if count == 0]

    def per_table(self) -> dict[str, tuple[int, int]]:
        """For each table: (rows taken at least once, rows)."""
        counts = self.counts()
        summary: dict[str, tuple[int, int]] = {}
        for name, table in self._tables.items():
            taken = sum(1 for row in table.rows if counts[name, row.index] > 0)
            summary[name] = (taken, len(table.rows))
        return summary

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data: every row of every table with its count and what it is."""
        counts = self.counts()
        tables: dict[str, Any] = {}
        for name, table in self._tables.items():
            rows = [
                {
                    "index": row.index,
                    "source": row.source.name,
                    "event": row.event.value,
                    "guard": _guard_text(row),
                    "target": row.target.name,
                    "requirement": row.requirement,
                    "count": counts[name, row.index],
                }
                for row in table.rows
            ]
            tables[name] = {
                "source": table.source,
                "rows": rows,
                "covered": sum(1 for r in rows if r["count"] > 0),
                "total": len(rows),
            }
        return {
            "tables": tables,
            "covered": sum(1 for count in counts.values() if count > 0),
            "total": len(counts),
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[tuple[str, int], int],
        tables: Iterable[MachineTable[Any, Any]] = TABLES,
    ) -> TransitionCoverage:
        """A coverage object holding ``counts`` (for tests and for merging saved data)."""
        coverage = cls(tables)
        with coverage._lock:
            for key, count in counts.items():
                if key not in coverage._counts:
                    raise KeyError(f"no row {key[1]} in table {key[0]!r}")
                coverage._counts[key] = count
        return coverage

    def __repr__(self) -> str:
        parts = ", ".join(f"{name} {a}/{b}" for name, (a, b) in self.per_table().items())
        return f"TransitionCoverage({parts})"
