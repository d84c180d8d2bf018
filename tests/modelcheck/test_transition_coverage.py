"""Transition coverage: every row of every table, counted; and every row taken by the checks."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest

from diagnosis_harness._generated.tables import (
    BUDGET,
    LIFECYCLE,
    RETRY,
    BudgetEvent,
    BudgetState,
    RunState,
)
from diagnosis_harness.conformance.suite._support import BUDGETS
from diagnosis_harness.modelcheck import TABLES, Exploration, TransitionCoverage
from diagnosis_harness.modelcheck._stateful import MACHINES

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck._stateful import MachineStats, _ProbeMachine

ROWS = sum(len(table.rows) for table in TABLES)


def test_every_row_is_listed_from_the_start() -> None:
    coverage = TransitionCoverage()
    assert len(coverage.counts()) == ROWS == 5 + 6 + 7
    assert set(coverage.counts().values()) == {0}
    assert len(coverage.uncovered()) == ROWS
    assert coverage.per_table() == {"lifecycle": (0, 5), "budget": (0, 6), "retry": (0, 7)}


def test_record_by_row_or_index_and_by_step() -> None:
    coverage = TransitionCoverage()
    coverage.record(LIFECYCLE, LIFECYCLE.rows[0])
    coverage.record("lifecycle", 1)
    row = coverage.record_step(BUDGET, BudgetState.ACTIVE, BudgetEvent.RESERVE, False)
    assert row is BUDGET.rows[1]
    assert coverage.count(LIFECYCLE, 1) == 2
    assert coverage.count("budget", row) == 1
    assert ("lifecycle", 1) not in coverage.uncovered()


def test_a_step_without_a_row_is_refused() -> None:
    coverage = TransitionCoverage()
    with pytest.raises(KeyError, match="no row"):
        coverage.record_step(BUDGET, BudgetState.EXHAUSTED, BudgetEvent.RESERVE, True)
    with pytest.raises(KeyError, match="no row 99"):
        coverage.record("retry", 99)
    with pytest.raises(KeyError):
        coverage.record("nope", 1)
    assert set(coverage.counts().values()) == {0}


def test_merge_adds_counts() -> None:
    first, second = TransitionCoverage(), TransitionCoverage()
    first.record(RETRY, 3)
    second.record(RETRY, 3)
    second.record(RETRY, 4)
    first.merge(second)
    assert first.count(RETRY, 3) == 2
    assert first.count(RETRY, 4) == 1
    assert second.count(RETRY, 3) == 1


def test_as_dict_lists_every_row_with_what_it_is() -> None:
    coverage = TransitionCoverage.from_counts({("budget", 2): 7})
    data: dict[str, Any] = json.loads(coverage.to_json())
    assert data["total"] == ROWS
    assert data["covered"] == 1
    assert list(data["tables"]) == ["lifecycle", "budget", "retry"]
    budget = data["tables"]["budget"]
    assert budget["source"] == "model/budget.toml"
    assert (budget["covered"], budget["total"]) == (1, 6)
    assert budget["rows"][1] == {
        "index": 2,
        "source": "ACTIVE",
        "event": "reserve",
        "guard": "not within_limits",
        "target": "EXHAUSTED",
        "requirement": BUDGETS,
        "count": 7,
    }
    assert budget["rows"][0]["guard"] == "within_limits"
    lifecycle = data["tables"]["lifecycle"]["rows"]
    assert [row["count"] for row in lifecycle] == [0] * 5
    assert lifecycle[0]["guard"] is None
    assert lifecycle[0]["target"] == RunState.SUCCESS.name
    assert "lifecycle 0/5" in repr(coverage)


def test_recording_is_thread_safe() -> None:
    coverage = TransitionCoverage()
    threads, per_thread = 4, 2_000
    barrier = threading.Barrier(threads)

    def record() -> None:
        barrier.wait()
        for _ in range(per_thread):
            coverage.record(RETRY, 1)

    workers = [threading.Thread(target=record) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert coverage.count(RETRY, 1) == threads * per_thread


@pytest.mark.model_check
def test_every_row_is_taken_by_the_explorer_and_by_the_hypothesis_runs(
    exploration: Exploration,
    stateful_runner: Callable[[type[_ProbeMachine]], MachineStats],
    hypothesis_coverage: TransitionCoverage,
    transition_coverage: TransitionCoverage,
) -> None:
    for machine in MACHINES:
        stateful_runner(machine)  # each runs once per session, whichever test asks first
    assert exploration.coverage.uncovered() == []
    assert hypothesis_coverage.uncovered() == []
    assert transition_coverage.uncovered() == []
    total = transition_coverage.counts()
    for key, count in exploration.coverage.counts().items():
        assert total[key] >= count + hypothesis_coverage.counts()[key]
