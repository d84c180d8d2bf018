"""The runtime engine against the generated python-statemachine models, exhaustively.

For every table, every state, every event and every valuation of the table's guards, the one
engine every runtime machine steps with (:meth:`MachineTable.take`, used by the run's state owner
and the retry executor alike) and a fresh model instance (reached by a shortest event path) must
do the same thing, and that thing must be what the table's rows say.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest
from statemachine.exceptions import TransitionNotAllowed

from diagnosis_harness._errors import IllegalTransition
from diagnosis_harness._generated.models import BudgetModel, LifecycleModel, RetryModel
from diagnosis_harness._generated.tables import (
    BUDGET,
    LIFECYCLE,
    RETRY,
    BudgetEvent,
    BudgetState,
    RetryEvent,
    RetryState,
)
from diagnosis_harness._machine import MachineTable, Row
from diagnosis_harness.codegen import load_all
from diagnosis_harness.codegen._load import requirement_names

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Mapping

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC = REPO_ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md"

AnyTable = MachineTable[Any, Any]
AnyRow = Row[Any, Any]
AnyModel = LifecycleModel | BudgetModel | RetryModel
Guards = dict[str, bool]

TABLES: tuple[AnyTable, ...] = (LIFECYCLE, BUDGET, RETRY)
MODELS: dict[str, type[AnyModel]] = {
    LIFECYCLE.name: LifecycleModel,
    BUDGET.name: BudgetModel,
    RETRY.name: RetryModel,
}


# --- helpers ----------------------------------------------------------------------------------


def _guards_for(table: AnyTable, row: AnyRow) -> Guards:
    """A full valuation under which ``row`` (and no other row of its (state, event)) applies."""
    guards = dict.fromkeys(table.guards, True)
    if row.guard is not None:
        guards[row.guard] = row.expect
    return guards


def _valuations(table: AnyTable) -> list[Guards]:
    """Every True/False assignment to the table's guards (one empty one when it has none)."""
    return [
        dict(zip(table.guards, values, strict=True))
        for values in itertools.product((True, False), repeat=len(table.guards))
    ]


def _shortest_paths(table: AnyTable) -> dict[enum.Enum, list[tuple[enum.Enum, Guards]]]:
    """BFS over the rows: for each reachable state, a shortest (event, guards) path to it."""
    paths: dict[enum.Enum, list[tuple[enum.Enum, Guards]]] = {table.initial: []}
    queue = deque([table.initial])
    while queue:
        state = queue.popleft()
        for row in table.rows:
            if row.source is state and row.target not in paths:
                paths[row.target] = [*paths[state], (row.event, _guards_for(table, row))]
                queue.append(row.target)
    return paths


def _states(table: AnyTable) -> list[enum.Enum]:
    """The table's states in declaration order."""
    return list(table.states.__members__.values())


PATHS = {table.name: _shortest_paths(table) for table in TABLES}


def _fire_model(model: AnyModel, event: enum.Enum, guards: Mapping[str, bool]) -> None:
    fire: Callable[..., None] = model.fire
    fire(event.value, **guards)


def _take(table: AnyTable, state: enum.Enum, event: enum.Enum, guards: Mapping[str, bool]) -> Any:
    """The engine's step, with the value of the (state, event)'s one guard from ``guards``."""
    name = table.guard_of(state, event)
    return table.take(state, event, None if name is None else guards.get(name))


def _reach(table: AnyTable, state: enum.Enum) -> AnyModel:
    """A fresh model driven to ``state`` by the path the engine takes there too."""
    model = MODELS[table.name]()
    current = table.initial
    for event, guards in PATHS[table.name][state]:
        row = _take(table, current, event, guards)
        assert row is not None
        current = row.target
        _fire_model(model, event, guards)
        assert model.model_state is current
    assert current is state
    assert model.model_state is state
    return model


@dataclass(frozen=True, slots=True)
class Expected:
    kind: Literal["moved", "absorbed", "illegal"]
    target: enum.Enum | None = None


def _expected(
    table: AnyTable, state: enum.Enum, event: enum.Enum, guards: Mapping[str, bool]
) -> Expected:
    """What the table's rows say, computed independently of the engine."""
    if state in table.terminal:
        return Expected("absorbed")
    matching = [
        row
        for row in table.rows
        if row.source is state
        and row.event is event
        and (row.guard is None or guards[row.guard] is row.expect)
    ]
    assert len(matching) <= 1, f"overlapping rows {matching}"
    if matching:
        return Expected("moved", matching[0].target)
    return Expected("illegal")


def _guard_id(guards: Mapping[str, bool]) -> str:
    return ",".join(f"{name}={value}" for name, value in guards.items()) or "no_guards"


def _cases() -> list[Any]:
    cases = []
    for table in TABLES:
        for state in _states(table):
            for event in table.events:
                for guards in _valuations(table):
                    cases.append(
                        pytest.param(
                            table,
                            state,
                            event,
                            guards,
                            id=f"{table.name}-{state.name}-{event.value}-{_guard_id(guards)}",
                        )
                    )
    return cases


# --- the exhaustive comparison ----------------------------------------------------------------


def test_every_state_is_reached_by_a_path() -> None:
    for table in TABLES:
        assert set(PATHS[table.name]) == set(_states(table)), table.name


def test_case_count_is_the_full_product() -> None:
    expected = sum(
        len(_states(table)) * len(table.events.__members__) * 2 ** len(table.guards)
        for table in TABLES
    )
    assert len(_cases()) == expected == 6 * 5 + 2 * 3 * 2 + 6 * 4 * 2


@pytest.mark.parametrize(("table", "state", "event", "guards"), _cases())
def test_runtime_agrees_with_model(
    table: AnyTable, state: enum.Enum, event: enum.Enum, guards: Guards
) -> None:
    model = _reach(table, state)
    expected = _expected(table, state, event, guards)

    if expected.kind == "moved":
        row = _take(table, state, event, guards)
        assert row is not None
        assert row in table.transitions[(state, event)]
        assert (row.source, row.event, row.target) == (state, event, expected.target)
        _fire_model(model, event, guards)
        assert model.model_state is row.target
        return

    if expected.kind == "absorbed":
        assert state in table.terminal
        assert _take(table, state, event, guards) is None
    else:
        assert state not in table.terminal
        with pytest.raises(IllegalTransition) as info:
            _take(table, state, event, guards)
        assert info.value.machine == table.name
        assert info.value.state == state.name
        assert info.value.event == event.value
    with pytest.raises(TransitionNotAllowed):
        _fire_model(model, event, guards)
    assert model.model_state is state


# --- IllegalTransition and guard values ---------------------------------------------------------


def test_illegal_transition_message_names_state_and_event() -> None:
    with pytest.raises(IllegalTransition) as info:
        RETRY.take(RetryState.READY, RetryEvent.SUCCEED)
    message = str(info.value)
    assert "retry" in message
    assert RetryState.READY.name in message
    assert repr(RetryEvent.SUCCEED.value) in message


def _guarded_keys() -> list[Any]:
    return [
        pytest.param(table, source, event, id=f"{table.name}-{source.name}-{event.value}")
        for table in TABLES
        for (source, event), rows in table.transitions.items()
        if any(row.guard is not None for row in rows)
    ]


def test_there_are_guarded_keys() -> None:
    assert {param.values[0].name for param in _guarded_keys()} == {BUDGET.name, RETRY.name}


@pytest.mark.parametrize(("table", "state", "event"), _guarded_keys())
def test_a_guard_that_was_not_evaluated_or_is_not_a_bool_is_illegal(
    table: AnyTable, state: enum.Enum, event: enum.Enum
) -> None:
    with pytest.raises(IllegalTransition, match="was not evaluated") as info:
        table.take(state, event)
    assert (info.value.state, info.value.event) == (state.name, event.value)
    untyped: Any = table
    for not_a_bool in (1, 0, "yes"):  # 1 == True and hashes alike: it must not find True's row
        with pytest.raises(IllegalTransition, match="must be a bool"):
            untyped.take(state, event, not_a_bool)
    assert table.take(state, event, True) is not None


def test_unguarded_rows_refuse_a_guard_value() -> None:
    with pytest.raises(IllegalTransition, match="take no guard"):
        LIFECYCLE.take(LIFECYCLE.initial, next(iter(LIFECYCLE.events)), True)


def test_a_terminal_state_absorbs_without_a_guard() -> None:
    assert BUDGET.take(BudgetState.EXHAUSTED, BudgetEvent.RESERVE) is None
    assert BUDGET.take(BudgetState.EXHAUSTED, BudgetEvent.RESERVE, False) is None


def _row(
    index: int, source: BudgetState, target: BudgetState, guard: str | None, expect: bool
) -> Row[BudgetState, BudgetEvent]:
    return Row(
        index=index,
        source=source,
        event=BudgetEvent.RESERVE,
        target=target,
        guard=guard,
        expect=expect,
        requirement="r",
    )


def _table(*rows: Row[BudgetState, BudgetEvent]) -> MachineTable[BudgetState, BudgetEvent]:
    return MachineTable(
        name="t",
        source="model/t.toml",
        states=BudgetState,
        events=BudgetEvent,
        initial=BudgetState.ACTIVE,
        terminal=frozenset({BudgetState.EXHAUSTED}),
        guards=("g", "h"),
        rows=rows,
    )


def test_a_table_refuses_two_guards_on_one_state_and_event() -> None:
    active, exhausted = BudgetState.ACTIVE, BudgetState.EXHAUSTED
    with pytest.raises(ValueError, match=r"\(ACTIVE, reserve\) mixes guards 'g' and 'h'"):
        _table(_row(1, active, active, "g", True), _row(2, active, exhausted, "h", False))
    with pytest.raises(ValueError, match="mixes guards 'g' and None"):
        _table(_row(1, active, active, "g", True), _row(2, active, exhausted, None, True))


def test_a_table_refuses_overlapping_rows() -> None:
    active, exhausted = BudgetState.ACTIVE, BudgetState.EXHAUSTED
    with pytest.raises(ValueError, match="rows 1 and 2 overlap"):
        _table(_row(1, active, active, "g", True), _row(2, active, exhausted, "g", True))
    table = _table(_row(1, active, active, "g", True), _row(2, active, exhausted, "g", False))
    assert table.take(active, BudgetEvent.RESERVE, False) is table.rows[1]


# --- structure of the tables ------------------------------------------------------------------

TABLE_IDS = [table.name for table in TABLES]


@pytest.mark.parametrize("table", TABLES, ids=TABLE_IDS)
def test_exactly_one_initial_state(table: AnyTable) -> None:
    specs = {spec.name: spec for spec in load_all(REPO_ROOT)}
    initials = [state.name for state in specs[table.name].states if state.initial]
    assert initials == [table.initial.name]
    assert table.initial not in table.terminal
    model_initials = [state.value for state in MODELS[table.name].states if state.initial]
    assert model_initials == [table.initial]


@pytest.mark.parametrize("table", TABLES, ids=TABLE_IDS)
def test_terminal_states_have_no_outgoing_rows(table: AnyTable) -> None:
    assert table.terminal
    assert all(row.source not in table.terminal for row in table.rows)
    assert all(source not in table.terminal for source, _ in table.transitions)
    sources = {row.source for row in table.rows}
    assert sources == set(_states(table)) - table.terminal  # and no other state is a trap
    model_finals = {state.value for state in MODELS[table.name].states if state.final}
    assert model_finals == set(table.terminal)


@pytest.mark.parametrize("table", TABLES, ids=TABLE_IDS)
def test_every_requirement_is_a_spec_heading(table: AnyTable) -> None:
    headings = requirement_names(SPEC.read_text(encoding="utf-8"))
    assert headings
    for row in table.rows:
        assert row.requirement in headings, f"{table.name} row {row.index}: {row.requirement!r}"


@pytest.mark.parametrize("table", TABLES, ids=TABLE_IDS)
def test_transitions_index_the_rows_in_order(table: AnyTable) -> None:
    assert [row.index for row in table.rows] == list(range(1, len(table.rows) + 1))
    for (source, event), rows in table.transitions.items():
        assert rows == tuple(r for r in table.rows if (r.source, r.event) == (source, event))
    assert sorted(r.index for rows in table.transitions.values() for r in rows) == [
        r.index for r in table.rows
    ]
    assert table.source == f"model/{table.name}.toml"
