"""The Hypothesis stateful machines, run as tests under the loaded profile.

Each machine drives one run through any interleaving of its operations, predicts every step on
the python-statemachine models generated from ``model/`` and checks the spec's sentences after
every step (see :mod:`diagnosis_harness.modelcheck._probe`). The spec marks below are the
scenarios each machine model-checks; ``test_marks_match_the_machines`` keeps them equal to the
machines' own ``SCENARIOS``, which the ``model-check`` command reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from diagnosis_harness.codegen._load import requirement_names
from diagnosis_harness.conformance.suite._support import (
    BUDGETS,
    DEADLINE,
    PRIMITIVES,
    RETRY,
    TERMINAL,
)
from diagnosis_harness.modelcheck._profiles import register_profiles, settings_for
from diagnosis_harness.modelcheck._stateful import (
    MACHINES,
    BudgetMachine,
    RetryMachine,
    RunMachine,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.modelcheck._stateful import MachineStats, _ProbeMachine

    Runner = Callable[[type[_ProbeMachine]], MachineStats]

SPEC = Path(__file__).resolve().parents[2] / "specs" / "diagnosis-harness-run-context" / "spec.md"


def _check(stats: MachineStats) -> None:
    current = settings()
    assert stats.examples >= current.max_examples
    assert stats.steps >= current.max_examples  # at least one step per example, mostly many
    assert stats.timing.model_events > 0
    assert stats.timing.runtime_calls > 0


@pytest.mark.model_check
@pytest.mark.spec(TERMINAL, "Success wins a terminal race")
@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
@pytest.mark.spec(DEADLINE, "Deadline expires before a Tool call")
@pytest.mark.spec(DEADLINE, "Client disconnects")
@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.spec(BUDGETS, "Actual Token usage exceeds the limit")
@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
def test_run_machine(stateful_runner: Runner) -> None:
    _check(stateful_runner(RunMachine))


@pytest.mark.model_check
@pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
@pytest.mark.spec(BUDGETS, "Actual Token usage exceeds the limit")
@pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
@pytest.mark.spec(PRIMITIVES, "Run byte limit would be exceeded")
def test_budget_machine(stateful_runner: Runner) -> None:
    _check(stateful_runner(BudgetMachine))


@pytest.mark.model_check
@pytest.mark.spec(RETRY, "Router transport failure succeeds on retry")
@pytest.mark.spec(RETRY, "Tool call fails")
@pytest.mark.spec(RETRY, "Run is cancelled between attempts")
@pytest.mark.spec(DEADLINE, "Client disconnects")
def test_retry_machine(stateful_runner: Runner) -> None:
    _check(stateful_runner(RetryMachine))


TESTS = {
    RunMachine: test_run_machine,
    BudgetMachine: test_budget_machine,
    RetryMachine: test_retry_machine,
}


def _marks(test: object) -> set[tuple[str, str]]:
    marks = getattr(test, "pytestmark", [])
    return {tuple(mark.args) for mark in marks if mark.name == "spec"}


def test_marks_match_the_machines() -> None:
    assert set(TESTS) == set(MACHINES)
    for machine, test in TESTS.items():
        assert _marks(test) == set(machine.SCENARIOS), machine.__name__


def test_every_scenario_named_is_in_the_spec() -> None:
    text = SPEC.read_text(encoding="utf-8")
    requirements = requirement_names(text)
    for machine in MACHINES:
        for requirement, scenario in machine.SCENARIOS:
            assert requirement in requirements
            assert f"#### Scenario: {scenario}\n" in text, scenario


def test_the_packaged_profiles_match_conftest() -> None:
    """The command registers the profiles itself; they must be conftest.py's."""
    ci = settings_for("ci")
    assert ci.derandomize
    assert ci.deadline is None
    assert (ci.max_examples, ci.stateful_step_count) == (100, 30)
    deep = settings_for("deep")
    assert deep.deadline is None
    assert deep.max_examples >= 1_000
    assert 100 <= deep.stateful_step_count <= 200
    assert deep.database is not None
    assert ".hypothesis" not in str(getattr(deep.database, "path", ""))  # out of any checkout
    dev = settings_for("dev")
    assert (dev.max_examples, dev.stateful_step_count) == (100, 30)
    with pytest.raises(ValueError, match="unknown profile"):
        settings_for("shallow")


def test_register_profiles_registers_every_profile() -> None:
    registered: dict[str, settings] = {}

    def register(name: str, profile: settings) -> None:
        registered[name] = profile

    # Recorded, not registered: the session's own profiles stay conftest.py's.
    register_profiles(register)
    assert sorted(registered) == ["ci", "deep", "dev"]
    for name, profile in registered.items():
        assert profile.max_examples == settings_for(name).max_examples
        assert profile.stateful_step_count == settings_for(name).stateful_step_count
