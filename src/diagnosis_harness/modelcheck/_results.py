"""The typed results every model check returns: per scenario, what was checked and what failed.

Theory of operation. A check (the explorer, one Hypothesis machine, the scheduler's races, Spin)
returns one :class:`CheckResult`. It names every (requirement, scenario) pair it exercised, each
as a :class:`ScenarioResult` with how many things it checked for that scenario (``unit``:
sequences, schedules, examples or properties) and, when it failed, the first -- shortest --
:class:`~._counterexample.Counterexample` charged to it. A failure is charged only to the
scenarios of the step (or race, or property) that failed, so one bug does not turn unrelated
scenarios red. ``problems`` holds what failed without a scenario to charge (a check that could
not run, a row never taken). Everything is frozen and has a JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, final

from ._counterexample import Counterexample

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._spec_scenarios import SpecScenario

__all__ = ["CheckResult", "CheckedUnit", "ModelCheckSummary", "ScenarioResult", "ScenarioTally"]

CheckedUnit = Literal["sequences", "schedules", "examples", "properties"]


@final
@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """One scenario as one check exercised it: how much was checked, the first failure."""

    scenario: SpecScenario
    unit: CheckedUnit
    checked: int
    counterexample: Counterexample | None = None

    @property
    def passed(self) -> bool:
        return self.counterexample is None

    def as_json(self) -> dict[str, Any]:
        return {
            "requirement": self.scenario[0],
            "scenario": self.scenario[1],
            "checked": {"kind": self.unit, "count": self.checked},
            "passed": self.passed,
            "counterexample": None
            if self.counterexample is None
            else self.counterexample.as_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioResult:
        """The inverse of :meth:`as_json`."""
        counterexample = data["counterexample"]
        return cls(
            (str(data["requirement"]), str(data["scenario"])),
            cast("CheckedUnit", data["checked"]["kind"]),
            int(data["checked"]["count"]),
            None if counterexample is None else Counterexample.from_json(counterexample),
        )


@final
@dataclass(frozen=True, slots=True)
class CheckResult:
    """What one check did: passed or not, its figures, and its scenarios' results."""

    name: str
    kind: str  # "exhaustive", "stateful", "planted", "scheduled" or "spin"
    passed: bool
    summary: str  # one readable line of what was checked
    scenarios: tuple[ScenarioResult, ...] = ()
    problems: tuple[str, ...] = ()  # failures charged to no scenario, one line each
    details: tuple[str, ...] = ()  # further readable lines (per machine, per defect, ...)
    figures: tuple[tuple[str, int | float | str | bool | None], ...] = field(default=())

    def scenario(self, pair: SpecScenario) -> ScenarioResult | None:
        return next((result for result in self.scenarios if result.scenario == pair), None)

    @property
    def counterexamples(self) -> tuple[Counterexample, ...]:
        return tuple(r.counterexample for r in self.scenarios if r.counterexample is not None)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "summary": self.summary,
            "figures": dict(self.figures),
            "problems": list(self.problems),
            "details": list(self.details),
            "scenarios": [result.as_json() for result in self.scenarios],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        """The inverse of :meth:`as_json`."""
        return cls(
            name=str(data["name"]),
            kind=str(data["kind"]),
            passed=bool(data["passed"]),
            summary=str(data["summary"]),
            scenarios=tuple(ScenarioResult.from_json(item) for item in data["scenarios"]),
            problems=tuple(data["problems"]),
            details=tuple(data["details"]),
            figures=tuple(data["figures"].items()),
        )


@final
@dataclass(frozen=True, slots=True)
class ModelCheckSummary:
    """What ``diagnosis-harness model-check`` did: every check's result, the coverage, the
    scenarios; ``--json`` prints :meth:`as_json`."""

    profile: str
    passed: bool
    seconds: float
    checks: tuple[CheckResult, ...]
    coverage: tuple[tuple[str, int, int], ...]  # (table, rows taken, rows)
    never_taken: tuple[str, ...]  # "table row N", one per row no check took

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "checks": [check.as_json() for check in self.checks],
            "coverage": [
                {"table": table, "covered": covered, "total": total}
                for table, covered, total in self.coverage
            ],
            "never_taken": list(self.never_taken),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelCheckSummary:
        """The inverse of :meth:`as_json`."""
        return cls(
            profile=str(data["profile"]),
            passed=bool(data["passed"]),
            seconds=float(data["seconds"]),
            checks=tuple(CheckResult.from_json(item) for item in data["checks"]),
            coverage=tuple(
                (str(row["table"]), int(row["covered"]), int(row["total"]))
                for row in data["coverage"]
            ),
            never_taken=tuple(data["never_taken"]),
        )


@final
class ScenarioTally:
    """Builds the :class:`ScenarioResult` s of one check as its cases are checked.

    ``count`` a passing case for the scenarios it exercised; ``charge`` a failing one to the
    scenarios that failed. The shortest counterexample charged to a scenario is kept (the first
    of the shortest); one without steps (a check that lost its power) only when there is no other.
    """

    __slots__ = ("_checked", "_failed", "_order", "unit")

    def __init__(self, unit: CheckedUnit, scenarios: Iterable[SpecScenario] = ()) -> None:
        self.unit = unit
        self._order: list[SpecScenario] = []
        self._checked: dict[SpecScenario, int] = {}
        self._failed: dict[SpecScenario, Counterexample] = {}
        for pair in scenarios:
            self._add(pair)

    def _add(self, pair: SpecScenario) -> None:
        if pair not in self._checked:
            self._order.append(pair)
            self._checked[pair] = 0

    def count(self, scenarios: Iterable[SpecScenario], n: int = 1) -> None:
        for pair in scenarios:
            self._add(pair)
            self._checked[pair] += n

    def charge(
        self, scenarios: Iterable[SpecScenario], counterexample: Counterexample, n: int = 1
    ) -> None:
        for pair in scenarios:
            self._add(pair)
            self._checked[pair] += n
            kept = self._failed.get(pair)
            if kept is None or _length(counterexample) < _length(kept):
                self._failed[pair] = counterexample

    @property
    def failed(self) -> bool:
        return bool(self._failed)

    def results(self) -> tuple[ScenarioResult, ...]:
        return tuple(
            ScenarioResult(pair, self.unit, self._checked[pair], self._failed.get(pair))
            for pair in self._order
        )


def _length(counterexample: Counterexample) -> float:
    """How short a counterexample is; one without steps shows the least, so it is the longest."""
    return len(counterexample.steps) or float("inf")
