"""The runtime engine against the generated python-statemachine models, exhaustively.

For every table, every state (reached by the same shortest event path in both), every event and
every valuation of the table's guards, a fresh runtime machine and a fresh model instance must do
the same thing, and that thing must be what the table's rows say.
"""

from __future__ import annotations

import itertools
import threading
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
from diagnosis_harness._machine import MachineTable, Row, TableMachine
from diagnosis_harness.codegen import load_all
from diagnosis_harness.codegen._load import requirement_names

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Mapping

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC = REPO_ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md"

AnyTable = MachineTable[Any, Any]
AnyRow = Row[Any, Any]
AnyMachine = TableMachine[Any, Any]
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


def _reach(table: AnyTable, state: enum.Enum) -> tuple[AnyMachine, AnyModel]:
    """A fresh runtime machine and a fresh model, both driven to ``state`` by the same path."""
    machine: AnyMachine = TableMachine(table)
    model = MODELS[table.name]()
    for event, guards in PATHS[table.name][state]:
        row = machine.fire(event, guards)
        assert row is not None
        _fire_model(model, event, guards)
        assert model.model_state is machine.state is row.target
    assert machine.state is state
    assert model.model_state is state
    return machine, model


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
    assert len(_cases()) == expected == 6 * 5 + 2 * 2 * 2 + 6 * 4 * 2


@pytest.mark.parametrize(("table", "state", "event", "guards"), _cases())
def test_runtime_agrees_with_model(
    table: AnyTable, state: enum.Enum, event: enum.Enum, guards: Guards
) -> None:
    machine, model = _reach(table, state)
    expected = _expected(table, state, event, guards)

    if expected.kind == "moved":
        row = machine.fire(event, guards)
        assert row is not None
        assert row in table.transitions[(state, event)]
        assert (row.source, row.event, row.target) == (state, event, expected.target)
        assert machine.state is expected.target
        _fire_model(model, event, guards)
        assert model.model_state is machine.state
        return

    if expected.kind == "absorbed":
        assert machine.is_terminal
        assert machine.fire(event, guards) is None
    else:
        assert not machine.is_terminal
        with pytest.raises(IllegalTransition) as info:
            machine.fire(event, guards)
        assert info.value.machine == table.name
        assert info.value.state == state.name
        assert info.value.event == event.value
    assert machine.state is state
    with pytest.raises(TransitionNotAllowed):
        _fire_model(model, event, guards)
    assert model.model_state is state


# --- IllegalTransition and missing guards -------------------------------------------------------


def test_illegal_transition_message_names_state_and_event() -> None:
    machine = TableMachine(RETRY)
    with pytest.raises(IllegalTransition) as info:
        machine.fire(RetryEvent.SUCCEED)
    message = str(info.value)
    assert "retry" in message
    assert RetryState.READY.name in message
    assert repr(RetryEvent.SUCCEED.value) in message
    assert machine.state is RetryState.READY


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
def test_missing_guard_value_is_illegal_and_changes_nothing(
    table: AnyTable, state: enum.Enum, event: enum.Enum
) -> None:
    machine, _ = _reach(table, state)
    with pytest.raises(IllegalTransition, match="was not evaluated") as info:
        machine.fire(event, {})
    assert info.value.state == state.name
    assert info.value.event == event.value
    assert machine.state is state
    # The same machine still works once the guard is given.
    row = machine.fire(event, dict.fromkeys(table.guards, True))
    assert row is not None
    assert machine.state is row.target


def test_missing_guard_is_not_needed_once_terminal() -> None:
    machine = TableMachine(BUDGET)
    assert machine.fire(BudgetEvent.RESERVE, {"within_limits": False}) is not None
    assert machine.state is BudgetState.EXHAUSTED
    assert machine.fire(BudgetEvent.RESERVE) is None
    assert machine.state is BudgetState.EXHAUSTED


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


# --- the lock -----------------------------------------------------------------------------------


def test_default_locks_are_per_machine() -> None:
    assert TableMachine(BUDGET).lock is not TableMachine(BUDGET).lock


def test_shared_lock_is_used_by_fire() -> None:
    lock = threading.Lock()
    budget = TableMachine(BUDGET, lock=lock)
    retry = TableMachine(RETRY, lock=lock)
    assert budget.lock is lock
    assert retry.lock is lock

    started = threading.Event()
    results: list[object] = []

    def fire_in_thread() -> None:
        started.set()
        results.append(budget.fire(BudgetEvent.RESERVE, {"within_limits": False}))

    with lock:
        # fire_locked takes no lock of its own (a non-reentrant Lock would deadlock here).
        assert retry.fire_locked(RetryEvent.ATTEMPT) is not None
        worker = threading.Thread(target=fire_in_thread)
        worker.start()
        assert started.wait(timeout=5)
        worker.join(timeout=0.05)
        assert worker.is_alive(), "fire() ran while another holder had the shared lock"
        assert not budget.is_terminal
        assert results == []
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert budget.state is BudgetState.EXHAUSTED
    assert results == [BUDGET.rows[1]]
    assert retry.state is RetryState.ATTEMPTING
    assert not lock.locked()
