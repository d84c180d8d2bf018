"""The conformance report's data model: spec scenarios, the tests that show them, and coverage.

Theory of operation. :func:`build_report` indexes the parsed spec by ``(requirement name,
scenario name)`` once, drops every :class:`TestResult` into its scenario's bucket (or into
``unknown`` when the pair names no scenario, with a "did you mean" hint), and folds each bucket
into outcomes: overall, for example tests ("tested") and for model checks ("model-checked").
Transition coverage arrives in any of the shapes the model checks produce (see
:func:`coverage_counts`), is normalised to ``{table name: {row index: count}}`` and laid over the
tables themselves, so every row shows how often the stateful runs took it, and the rows
they never reached stand out. The renderers (JSON, Markdown, HTML) read only this model.

Outcome of a set of tests: ``failed`` if any failed; else ``passed`` if any passed; else
``skipped`` if there are only skipped ones; ``uncovered`` if there is none.

Two counts are kept apart everywhere (see :class:`ReportSummary`): **tests** are the test items
that ran (one per pytest node ID), and **credits** are (test, scenario) pairs: a test naming two
scenarios is one test and two credits. A failed test is charged to the scenarios it names and to
no other.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Literal,
    Protocol,
    TypeAlias,
    final,
    runtime_checkable,
)

from .. import __version__
from .._generated.tables import BUDGET, LIFECYCLE, RETRY
from ._spec import ParsedSpec, Requirement, Scenario, SpecProblem, nearest_scenario

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .._machine import MachineTable

__all__ = [
    "CHECKED_KINDS",
    "OUTCOMES",
    "Checked",
    "ConformanceReport",
    "Counterexample",
    "CounterexampleStep",
    "CoverageData",
    "Identity",
    "Outcome",
    "ReportSummary",
    "RequirementReport",
    "RowCoverage",
    "ScenarioReport",
    "SupportsCounts",
    "TableCoverage",
    "TestOutcome",
    "TestResult",
    "UnknownMarker",
    "build_report",
    "coverage_counts",
    "default_tables",
    "fold_outcomes",
    "table_coverage",
]

TestOutcome = Literal["passed", "failed", "skipped"]
Outcome = Literal["passed", "failed", "skipped", "uncovered"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "uncovered")
TEST_OUTCOMES: tuple[TestOutcome, ...] = ("passed", "failed", "skipped")
_TEST_OUTCOMES = frozenset(TEST_OUTCOMES)
CheckedKind = Literal["sequences", "schedules", "examples", "properties"]
CHECKED_KINDS: tuple[CheckedKind, ...] = ("sequences", "schedules", "examples", "properties")


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    """What a model check went through: ``count`` event sequences, thread schedules, Hypothesis
    examples or Spin properties (``kind``). A test hands it over with
    ``record_property("checked", {"kind": ..., "count": ...})``."""

    kind: CheckedKind
    count: int

    def __post_init__(self) -> None:
        if self.kind not in CHECKED_KINDS:
            raise ValueError(f"Checked.kind must be one of {CHECKED_KINDS}, got {self.kind!r}")
        if self.count.__class__ is not int or self.count < 0:
            raise ValueError(f"Checked.count must be an int >= 0, got {self.count!r}")


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class CounterexampleStep:
    """One step of a counterexample: what was done, and what the model and the runtime said
    (``None`` where that side was not asked)."""

    index: int
    action: str
    model: str | None = None
    runtime: str | None = None


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Counterexample:
    """The minimal failing case of a model check, as steps a reader can replay.

    ``kind`` names its origin (a Hypothesis event sequence, a thread schedule, a Spin trail, an
    explored sequence); ``disagreement`` is the ``index`` of the step where the model's and the
    runtime's answers differ (``None`` when an invariant broke instead); ``replay`` is how to run
    it again. A test hands it over with ``record_property("counterexample", {...})``.
    """

    kind: str
    message: str
    steps: tuple[CounterexampleStep, ...]
    disagreement: int | None = None
    replay: str = ""

    def __post_init__(self) -> None:
        indices = {step.index for step in self.steps}
        if self.disagreement is not None and self.disagreement not in indices:
            raise ValueError(
                f"Counterexample.disagreement names step {self.disagreement}, which is not among "
                f"the steps {sorted(indices)}"
            )

    @property
    def disagreeing_step(self) -> CounterexampleStep | None:
        """The step where the model and the runtime disagree, if one does."""
        for step in self.steps:
            if step.index == self.disagreement:
                return step
        return None


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class TestResult:
    """One test's result for one scenario it names with ``@pytest.mark.spec(requirement,
    scenario)``. A test with two ``spec`` marks gives two results.

    ``model_check`` is true for a test that also carries ``@pytest.mark.model_check``.
    """

    __test__: ClassVar[bool] = False  # not a pytest test class, although it is called Test...

    nodeid: str
    requirement: str
    scenario: str
    outcome: TestOutcome
    model_check: bool = False
    duration: float = 0.0  # seconds
    message: str | None = None  # why it failed (its assertion message, trimmed)
    checked: Checked | None = None  # what a model check went through
    counterexample: Counterexample | None = None  # a failed model check's minimal case

    def __post_init__(self) -> None:
        if self.outcome not in _TEST_OUTCOMES:
            raise ValueError(
                f"TestResult.outcome must be 'passed', 'failed' or 'skipped', got {self.outcome!r}"
            )
        if self.model_check.__class__ is not bool:
            raise TypeError(f"TestResult.model_check must be a bool, got {self.model_check!r}")
        if not math.isfinite(self.duration) or self.duration < 0:
            raise ValueError(
                f"TestResult.duration must be finite seconds >= 0, got {self.duration!r}"
            )


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownMarker:
    """A ``spec`` mark that names no scenario of the spec, or that is malformed.

    ``requirement`` / ``scenario`` are what the mark said (``None`` where it said nothing
    usable); ``hint`` is a "did you mean" line when a scenario is close.
    """

    __test__: ClassVar[bool] = False

    nodeid: str
    requirement: str | None
    scenario: str | None
    message: str
    hint: str | None = None
    outcome: TestOutcome | None = None  # the test's own outcome, when it ran


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioReport:
    """One scenario, its tests and its outcomes."""

    scenario: Scenario
    tests: tuple[TestResult, ...]
    outcome: Outcome  # over all its tests
    tested_outcome: Outcome  # over its example tests (no model_check mark)
    model_checked_outcome: Outcome  # over its model checks

    @property
    def tested(self) -> bool:
        """An example test shows it: at least one passed and none failed."""
        return self.tested_outcome == "passed"

    @property
    def model_checked(self) -> bool:
        """A model check shows it: at least one passed and none failed."""
        return self.model_checked_outcome == "passed"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RowCoverage:
    """One row of a machine table and how often the stateful runs took it."""

    index: int
    source: str
    event: str
    target: str
    guard: str | None
    expect: bool  # the row applies when `guard` is this value
    requirement: str
    count: int

    @property
    def label(self) -> str:
        """``event``, ``event [guard]`` or ``event [!guard]``, as in docs/machines."""
        if self.guard is None:
            return self.event
        return f"{self.event} [{'' if self.expect else '!'}{self.guard}]"


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class TableCoverage:
    """A machine table as plain strings, with per-row counts.

    ``recorded`` is false when no coverage of this table was given: counts are then unknown
    ("—"), not zero ("never").
    """

    name: str
    source: str
    states: tuple[str, ...]  # in the enum's order
    initial: str
    terminal: frozenset[str]
    rows: tuple[RowCoverage, ...]
    recorded: bool

    @property
    def uncovered(self) -> tuple[RowCoverage, ...]:
        """The rows never taken (none, when nothing was recorded)."""
        if not self.recorded:
            return ()
        return tuple(row for row in self.rows if row.count == 0)

    @property
    def reached_states(self) -> frozenset[str]:
        """The initial state and every target of a row taken at least once."""
        return frozenset((self.initial, *(row.target for row in self.rows if row.count)))

    @property
    def total(self) -> int:
        return sum(row.count for row in self.rows)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class RequirementReport:
    """One requirement, its scenarios' reports and the table rows that serve it."""

    requirement: Requirement
    scenarios: tuple[ScenarioReport, ...]
    outcome: Outcome  # failed > uncovered > skipped > passed over its scenarios
    rows: tuple[tuple[str, RowCoverage], ...]  # (table name, row) for rows naming it


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ReportSummary:
    """The counts every rendering shows, each named for what it counts.

    - ``scenarios_by_outcome``: each scenario once, by the outcome over all its tests.
    - ``example_tested`` / ``model_checked``: the scenarios that have an example test / a model
      check, by the outcome over those tests alone (a scenario can be in both).
    - ``tests_by_outcome``: test items (pytest node IDs) that name a scenario of the spec, each
      counted once however many scenarios it names; ``model_check_tests`` of them are model
      checks.
    - ``credits_by_outcome``: (test, scenario) pairs; a test naming two scenarios gives two.
    """

    requirements: int
    requirements_by_outcome: Mapping[Outcome, int]
    scenarios: int
    scenarios_by_outcome: Mapping[Outcome, int]
    example_tested: Mapping[TestOutcome, int]
    model_checked: Mapping[TestOutcome, int]
    tests: int
    tests_by_outcome: Mapping[TestOutcome, int]
    model_check_tests: int
    credits: int
    credits_by_outcome: Mapping[TestOutcome, int]
    unknown: int
    errors: int
    warnings: int
    info: int


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Which code made the report, when and how: enough to reproduce it.

    ``commit`` / ``dirty`` are the git commit of the project and whether its working tree had
    changes, ``None`` when it is not a git checkout (an installed wheel) or git is missing.
    ``generated_at`` is UTC, ISO 8601 (``None`` keeps output stable, for tests).
    ``hypothesis_seed`` is the seed given, ``"derandomized"`` under a derandomized profile, or
    ``None`` (random).
    """

    version: str
    python: str
    commit: str | None = None
    dirty: bool | None = None
    generated_at: str | None = None
    hypothesis_profile: str | None = None
    hypothesis_seed: str | None = None


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ConformanceReport:
    """Everything the renderers show. Build it with :func:`build_report`."""

    parsed: ParsedSpec
    requirements: tuple[RequirementReport, ...]
    unknown: tuple[UnknownMarker, ...]
    coverage: tuple[TableCoverage, ...]
    coverage_problems: tuple[str, ...]  # coverage naming unknown tables or rows, ...
    summary: ReportSummary
    identity: Identity
    # scenario ID -> its report; built once.
    by_id: dict[str, ScenarioReport] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id = {s.scenario.id: s for r in self.requirements for s in r.scenarios}
        object.__setattr__(self, "by_id", by_id)

    @property
    def capability(self) -> str:
        return self.parsed.spec.capability

    @property
    def version(self) -> str:
        """diagnosis-harness's version (``identity.version``)."""
        return self.identity.version

    @property
    def generated_at(self) -> str | None:
        return self.identity.generated_at

    @property
    def problems(self) -> tuple[SpecProblem, ...]:
        return self.parsed.problems

    @property
    def valid(self) -> bool:
        """The spec itself validates (OpenSpec's verdict, strict when the parse was)."""
        return self.parsed.valid

    @property
    def scenarios(self) -> tuple[ScenarioReport, ...]:
        return tuple(s for r in self.requirements for s in r.scenarios)

    @property
    def failed(self) -> bool:
        """Some test of a scenario failed."""
        return self.summary.scenarios_by_outcome["failed"] > 0

    @property
    def all_passed(self) -> bool:
        """The spec is valid, every scenario passed and no mark names an unknown scenario."""
        return (
            self.valid
            and not self.unknown
            and self.summary.scenarios_by_outcome["passed"] == self.summary.scenarios
        )


def fold_outcomes(outcomes: Iterable[TestOutcome]) -> Outcome:
    """``failed`` if any failed, else ``passed`` if any passed, else ``skipped`` if any, else
    ``uncovered``."""
    seen = set(outcomes)
    if "failed" in seen:
        return "failed"
    if "passed" in seen:
        return "passed"
    if "skipped" in seen:
        return "skipped"
    return "uncovered"


_SEVERITY: dict[Outcome, int] = {"passed": 0, "skipped": 1, "uncovered": 2, "failed": 3}


def default_tables() -> tuple[MachineTable[Any, Any], ...]:
    """The generated tables of ``model/``: lifecycle, budget, retry."""
    return (LIFECYCLE, BUDGET, RETRY)


def table_coverage(
    table: MachineTable[Any, Any], counts: Mapping[int, int] | None
) -> TableCoverage:
    """``table`` as plain strings with ``counts`` (row index -> times taken) laid over it.

    ``counts=None`` means nothing was recorded for the table (each count unknown, shown "—");
    a row missing from ``counts`` was taken 0 times ("never").
    """
    rows = tuple(
        RowCoverage(
            index=row.index,
            source=row.source.name,
            event=str(row.event.value),
            target=row.target.name,
            guard=row.guard,
            expect=row.expect,
            requirement=row.requirement,
            count=0 if counts is None else _count(table.name, row.index, counts.get(row.index, 0)),
        )
        for row in table.rows
    )
    return TableCoverage(
        name=table.name,
        source=table.source,
        states=tuple(state.name for state in table.states),
        initial=table.initial.name,
        terminal=frozenset(state.name for state in table.terminal),
        rows=rows,
        recorded=counts is not None,
    )


def _count(table: str, index: int, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"coverage[{table!r}][{index}] must be an int >= 0, got {value!r}")
    return value


@runtime_checkable
class SupportsCounts(Protocol):
    """What :class:`diagnosis_harness.modelcheck.TransitionCoverage` offers: ``counts()``."""

    def counts(self) -> Mapping[tuple[str, int], int]: ...


CoverageData: TypeAlias = "SupportsCounts | Mapping[Any, Any]"
"""Transition coverage in any shape :func:`coverage_counts` reads."""


def coverage_counts(data: CoverageData) -> dict[str, dict[int, int]]:
    """``{table name: {row index: count}}`` from any shape the model checks hand over:

    - an object with ``counts() -> {(table, index): count}`` (``TransitionCoverage``);
    - ``{(table, index): count}`` (what ``counts()`` returns);
    - ``{"tables": {table: {"rows": [{"index": i, "count": n}, ...]}}}`` (``as_dict()``, also
      after a JSON round trip);
    - ``{table: {index: count}}``, indices as ints or, after a JSON round trip, digit strings.

    Counts are checked later, by :func:`build_report`. Raises :class:`ValueError` on any other
    shape.
    """
    if isinstance(data, SupportsCounts) and not isinstance(data, Mapping):
        data = data.counts()
    if not isinstance(data, Mapping):
        raise ValueError(f"coverage must be a mapping or have counts(), got {type(data).__name__}")
    out: dict[str, dict[int, int]] = {}
    tables = data.get("tables") if all(isinstance(k, str) for k in data) else None
    if isinstance(tables, Mapping):
        for name, table in tables.items():
            rows = table.get("rows") if isinstance(table, Mapping) else None
            if not isinstance(rows, list):
                raise ValueError(f"coverage['tables'][{name!r}] has no list of rows")
            out[str(name)] = {_index(name, row.get("index")): row.get("count") for row in rows}
        return out
    for key, value in data.items():
        if isinstance(key, tuple) and len(key) == 2:
            out.setdefault(str(key[0]), {})[_index(key[0], key[1])] = value
        elif isinstance(key, str) and isinstance(value, Mapping):
            out[key] = {_index(key, i): n for i, n in value.items()}
        else:
            raise ValueError(
                "coverage must map table names to {row index: count}, or (table, index) to a "
                f"count; got the key {key!r}"
            )
    return out


def _index(table: object, index: object) -> int:
    if isinstance(index, str) and index.isdigit():
        return int(index)
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    raise ValueError(f"coverage of table {table!r}: a row index must be an int, got {index!r}")


def build_report(
    spec: ParsedSpec,
    results: Iterable[TestResult],
    *,
    coverage: CoverageData | None = None,
    tables: Sequence[MachineTable[Any, Any]] | None = None,
    unknown_markers: Iterable[UnknownMarker] = (),
    identity: Identity | None = None,
) -> ConformanceReport:
    """Match ``results`` to the scenarios of ``spec`` and lay ``coverage`` over ``tables``.

    ``results`` naming no scenario go to ``unknown`` with a "did you mean" hint, after the
    ``unknown_markers`` the caller found itself (malformed marks, say). ``coverage`` is the
    transition coverage in any shape :func:`coverage_counts` reads (a ``TransitionCoverage``,
    its ``counts()`` or ``as_dict()``, or ``{table name: {row index: count}}``); a table it names
    is *recorded* (a row missing from it was taken 0 times: "never"), a table it does not name is
    not (its counts are unknown: "—"). ``None``: no stateful run recorded any. ``tables`` defaults
    to those of :func:`default_tables` whose rows serve a requirement of ``spec`` or that
    ``coverage`` names (none, for a spec of your own and no coverage). ``identity`` defaults to
    diagnosis-harness's version and this Python, with no commit and no time.
    """
    parsed = spec
    buckets, unknown = _sort_results(parsed, results, unknown_markers)
    counts = None if coverage is None else coverage_counts(coverage)
    tables = _report_tables(parsed, counts, tables)
    coverage_problems = _coverage_problems(parsed, counts, tables)
    machine_coverage = tuple(
        table_coverage(t, None if counts is None else counts.get(t.name)) for t in tables
    )
    rows_by_requirement: dict[str, list[tuple[str, RowCoverage]]] = {}
    for machine in machine_coverage:
        for row in machine.rows:
            rows_by_requirement.setdefault(row.requirement, []).append((machine.name, row))
    tally = _Tally()
    requirement_reports = tuple(
        tally.requirement(
            requirement,
            buckets,
            parsed.spec.index,
            tuple(rows_by_requirement.get(requirement.name, ())),
        )
        for requirement in parsed.spec.requirements
    )
    return ConformanceReport(
        parsed=parsed,
        requirements=requirement_reports,
        unknown=tuple(unknown),
        coverage=machine_coverage,
        coverage_problems=coverage_problems,
        summary=tally.summary(parsed, len(requirement_reports), len(unknown)),
        identity=(
            Identity(version=__version__, python=platform.python_version())
            if identity is None
            else identity
        ),
    )


def _sort_results(
    parsed: ParsedSpec, results: Iterable[TestResult], unknown_markers: Iterable[UnknownMarker]
) -> tuple[dict[tuple[str, str], list[TestResult]], list[UnknownMarker]]:
    """``results`` by the (requirement, scenario) they name; those naming no scenario of the
    spec become unknown markers (after ``unknown_markers``), each with its "did you mean"."""
    buckets: dict[tuple[str, str], list[TestResult]] = {key: [] for key in parsed.spec.index}
    unknown = list(unknown_markers)
    hints: dict[tuple[str, str], str | None] = {}
    for result in results:
        key = (result.requirement, result.scenario)
        bucket = buckets.get(key)
        if bucket is not None:
            bucket.append(result)
            continue
        if key not in hints:
            hints[key] = nearest_scenario(parsed.spec, *key)
        unknown.append(
            UnknownMarker(
                nodeid=result.nodeid,
                requirement=result.requirement,
                scenario=result.scenario,
                message="names no scenario of the spec",
                hint=hints[key],
                outcome=result.outcome,
            )
        )
    return buckets, unknown


def _report_tables(
    parsed: ParsedSpec,
    counts: Mapping[str, Mapping[int, int]] | None,
    tables: Sequence[MachineTable[Any, Any]] | None,
) -> tuple[MachineTable[Any, Any], ...]:
    """``tables``, or by default the harness's own tables that belong in this report."""
    if tables is not None:
        return tuple(tables)
    # The harness's own tables belong in a report of a spec their rows serve, or whose tests
    # recorded their coverage; not in the report of a user's own spec, where every row would
    # be listed as a coverage problem.
    return tuple(
        table
        for table in default_tables()
        if (counts is not None and table.name in counts)
        or any(row.requirement in parsed.spec.by_name for row in table.rows)
    )


@final
class _Tally:
    """The counts of a report's summary, added to as each requirement and scenario is judged.

    Invariant: each scenario is counted once (:meth:`scenario`), each requirement once
    (:meth:`requirement`), and :meth:`summary` is read after the last of them.
    """

    def __init__(self) -> None:
        self.scenarios: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
        self.requirements: dict[Outcome, int] = dict.fromkeys(OUTCOMES, 0)
        self.credits: dict[TestOutcome, int] = dict.fromkeys(TEST_OUTCOMES, 0)
        self.example_tested: dict[TestOutcome, int] = dict.fromkeys(TEST_OUTCOMES, 0)
        self.model_checked: dict[TestOutcome, int] = dict.fromkeys(TEST_OUTCOMES, 0)
        self.tests: dict[str, TestResult] = {}  # node ID -> one of its results (one outcome)

    def requirement(
        self,
        requirement: Requirement,
        buckets: Mapping[tuple[str, str], list[TestResult]],
        index: Mapping[tuple[str, str], Scenario],
        rows: tuple[tuple[str, RowCoverage], ...],
    ) -> RequirementReport:
        """Judge ``requirement`` by its scenarios: its outcome is the worst of theirs."""
        scenario_reports: list[ScenarioReport] = []
        worst: Outcome = "passed"
        for scenario in requirement.scenarios:
            results_of = buckets[requirement.name, scenario.name]
            if index[requirement.name, scenario.name] is not scenario:
                results_of = []  # a duplicate name: its tests went to the first one
            report = self.scenario(scenario, results_of)
            scenario_reports.append(report)
            if _SEVERITY[report.outcome] > _SEVERITY[worst]:
                worst = report.outcome
        if not scenario_reports:
            worst = "uncovered"
        self.requirements[worst] += 1
        return RequirementReport(
            requirement=requirement, scenarios=tuple(scenario_reports), outcome=worst, rows=rows
        )

    def scenario(self, scenario: Scenario, results_of: list[TestResult]) -> ScenarioReport:
        """Judge ``scenario`` by its tests, examples and model checks apart and together."""
        examples: set[TestOutcome] = set()
        checks: set[TestOutcome] = set()
        for test in results_of:
            (checks if test.model_check else examples).add(test.outcome)
            self.credits[test.outcome] += 1
            self.tests.setdefault(test.nodeid, test)
        report = ScenarioReport(
            scenario=scenario,
            tests=tuple(results_of),
            outcome=fold_outcomes(examples | checks),
            tested_outcome=fold_outcomes(examples),
            model_checked_outcome=fold_outcomes(checks),
        )
        self.scenarios[report.outcome] += 1
        if report.tested_outcome != "uncovered":
            self.example_tested[report.tested_outcome] += 1
        if report.model_checked_outcome != "uncovered":
            self.model_checked[report.model_checked_outcome] += 1
        return report

    def summary(self, parsed: ParsedSpec, requirements: int, unknown: int) -> ReportSummary:
        tests_by_outcome: dict[TestOutcome, int] = dict.fromkeys(TEST_OUTCOMES, 0)
        for test in self.tests.values():
            tests_by_outcome[test.outcome] += 1
        levels = [p.level for p in parsed.problems]
        return ReportSummary(
            requirements=requirements,
            requirements_by_outcome=self.requirements,
            scenarios=sum(self.scenarios.values()),
            scenarios_by_outcome=self.scenarios,
            example_tested=self.example_tested,
            model_checked=self.model_checked,
            tests=len(self.tests),
            tests_by_outcome=tests_by_outcome,
            model_check_tests=sum(test.model_check for test in self.tests.values()),
            credits=sum(self.credits.values()),
            credits_by_outcome=self.credits,
            unknown=unknown,
            errors=levels.count("ERROR"),
            warnings=levels.count("WARNING"),
            info=levels.count("INFO"),
        )


def _coverage_problems(
    parsed: ParsedSpec,
    coverage: Mapping[str, Mapping[int, int]] | None,
    tables: Sequence[MachineTable[Any, Any]],
) -> tuple[str, ...]:
    problems: list[str] = []
    by_name = {table.name: table for table in tables}
    for name, counts in (coverage or {}).items():
        table = by_name.get(name)
        if table is None:
            problems.append(f"coverage names table {name!r}, which is not among {sorted(by_name)}")
            continue
        indices = {row.index for row in table.rows}
        for index in sorted(set(counts) - indices):
            problems.append(f"coverage of table {name!r} names row {index}, which it does not have")
    for table in tables:
        for row in table.rows:
            if row.requirement not in parsed.spec.by_name:
                problems.append(
                    f"row {table.name} #{row.index} serves requirement {row.requirement!r}, "
                    "which the spec does not have"
                )
    return tuple(problems)
