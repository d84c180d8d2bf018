"""The pytest plugin: ``@pytest.mark.spec(requirement, scenario)`` checked against the spec.

Registered through the ``pytest11`` entry point, so it loads in every pytest run of an
environment where diagnosis-harness is installed -- including the runs of projects that know
nothing of it, and may have a ``spec`` marker of their own. So it acts only in a run that opts in
(:func:`opted_in`): one of its command-line options (``--spec``, ``--spec-report``,
``--spec-strict``, ``--spec-unknown``), the ``spec_files`` ini option, or the ini switch
``diagnosis_harness_conformance = true`` (``-o diagnosis_harness_conformance=true`` on the
command line). Any other run sees its options in ``--help`` and nothing else: no marker, no
fixture, no hook, so no collection error, no output, no file.

In a run that opted in, the ``spec`` and ``model_check`` markers are registered (unless the
configuration already has them), the ``transition_coverage`` fixture is provided, and the marks
are checked. The report is made when a spec is configured (``--spec``, ``spec_files``,
``--spec-report`` or ``--spec-strict``) or a collected test carries a ``spec`` mark.

Theory of operation. At the end of collection (after deselection, so only tests that will run
count) every ``spec`` mark of every item is read: ``spec(requirement, scenario)``, two non-blank
strings, positionally or by keyword; several marks per test are allowed. Each pair is looked up
in the spec(s) with :func:`find_scenario`. A pair naming no scenario (or a malformed mark) is an
unknown mark: by default (``--spec-unknown=error``) it becomes a failed collection report naming
the test, the names it gave and the nearest scenario ("did you mean ..."), and pytest stops with
"errors during collection"; with ``--spec-unknown=report`` the test runs and the mark is listed
in the report instead. The outcome of each tagged test is folded from its reports
(``pytest_runtest_logreport``): a failed phase (setup, call or teardown) is ``failed``; a skip in
any phase, an xfail or a non-strict xpass is ``skipped``; a passed call is ``passed``. At session
end :func:`build_report` matches the results to the scenarios, with the transition coverage of
the session fixture ``transition_coverage`` (:mod:`._fixtures`) when a test used it (a table
counts as recorded once a check took one of its rows, whether that check passed or failed), and
``--spec-report=DIR`` writes ``conformance.{json,md,html}`` (one subdirectory per capability when
several specs are given).
``--spec-strict`` turns a report that is not :attr:`ConformanceReport.all_passed` (a scenario
without a passing test, an unknown mark, an invalid spec) into a failed run. ``--collect-only``
checks the marks and reports nothing (no test ran).

Each result carries what the report shows of it: a failed test's message (the exception pytest
reports for its first failed phase, trimmed to :data:`MESSAGE_LINES` lines), and what a model
check handed over with ``record_property``: ``"checked"`` (``{"kind", "count"}``) and, when it
failed, ``"counterexample"`` (``{"kind", "message", "steps", "disagreement", "replay"}``, see
:class:`~._report.Counterexample`). A property of the wrong shape is not dropped silently: the
test's message says what was wrong with it. A test is credited to the scenarios its own ``spec``
marks name and to no other: a failure is charged to those scenarios only.

The report's identity (:mod:`._identity`) is the package version, the git commit and dirty flag of
the project root (the git checkout holding the rootdir, else the rootdir), the UTC time, the
Python version and Hypothesis's profile and seed; every path in it is relative to that root.

Default spec, when none is configured: ``specs/*/spec.md`` under the rootdir, else the spec
shipped with diagnosis-harness (:func:`._bundle.spec_path`). All state lives on the
:class:`pytest.Config` (``config.stash``), none in this module, so in-process runs (pytester)
do not leak into one another.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, final

import pytest

from . import write_reports
from ._bundle import spec_path as shipped_spec_path
from ._identity import collect_identity, project_root, shown_path
from ._report import (
    Checked,
    ConformanceReport,
    Counterexample,
    CounterexampleStep,
    TestResult,
    UnknownMarker,
    build_report,
    coverage_counts,
)
from ._spec import ParsedSpec, find_scenario, load_spec, nearest_scenario
from ._summary import console_summary

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..modelcheck._coverage import TransitionCoverage

__all__ = [
    "MESSAGE_LINES",
    "OPT_IN",
    "STATE_KEY",
    "ConformanceState",
    "failure_message",
    "opted_in",
    "read_checked",
    "read_counterexample",
]

OPT_IN: Final = "diagnosis_harness_conformance"  # the ini switch (a bool)
UnknownMode = Literal["error", "report"]
UNKNOWN_MODES: Final = ("error", "report")
SPEC_MARKER: Final = "spec"
MODEL_CHECK_MARKER: Final = "model_check"
_MARKER_LINES: Final = {
    SPEC_MARKER: (
        "spec(requirement, scenario): the spec requirement and scenario a test shows, "
        "names verbatim"
    ),
    MODEL_CHECK_MARKER: (
        "model_check: a model check (stateful, exhaustive, scheduled or Spin) rather than an "
        "example test"
    ),
}
MESSAGE_LINES: Final = 15  # lines of a failure message kept in the report
_MESSAGE_CHARS: Final = 2_000  # and characters


# -- options ----------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spec conformance", "spec conformance (diagnosis-harness)")
    group.addoption(
        "--spec",
        action="append",
        dest="spec_files",
        default=None,
        metavar="PATH",
        help="spec file that @pytest.mark.spec names must exist in (repeatable); default: the "
        "spec_files ini option, else specs/*/spec.md under the rootdir, else the spec shipped "
        "with diagnosis-harness",
    )
    group.addoption(
        "--spec-report",
        dest="spec_report",
        default=None,
        metavar="DIR",
        help="write the conformance report (conformance.json, .md, .html) into DIR",
    )
    group.addoption(
        "--spec-strict",
        dest="spec_strict",
        action="store_true",
        default=False,
        help="fail the run unless every scenario has a passing test, no spec mark is unknown "
        "and the spec is valid",
    )
    group.addoption(
        "--spec-unknown",
        dest="spec_unknown",
        default=None,
        choices=UNKNOWN_MODES,
        help="a spec mark naming no scenario: 'error' fails the collection (default), "
        "'report' runs the test and lists the mark in the report",
    )
    parser.addini(
        "spec_files",
        type="paths",
        default=[],
        help="spec file(s) for @pytest.mark.spec (relative to the configuration file); --spec "
        "overrides",
    )
    parser.addini(
        "spec_unknown",
        default="error",
        help="default of --spec-unknown: 'error' or 'report'",
    )
    parser.addini(
        OPT_IN,
        type="bool",
        default=False,
        help="check @pytest.mark.spec in every run, without a --spec* option (the plugin is "
        "inert in a run with neither, or spec_files)",
    )


def opted_in(config: pytest.Config) -> bool:
    """Whether this run asked for the plugin: a ``--spec*`` option, ``spec_files`` or the switch.

    ``spec_unknown`` in an ini file alone does not count: it only sets a default.
    """
    return bool(
        config.getini(OPT_IN)
        or config.getini("spec_files")
        or config.getoption("spec_files")
        or config.getoption("spec_report") is not None
        or config.getoption("spec_strict")
        or config.getoption("spec_unknown") is not None
    )


# -- per-run state ----------------------------------------------------------------------------


@final
@dataclasses.dataclass(frozen=True, slots=True)
class _Mark:
    """One well-formed spec mark of one test."""

    requirement: str
    scenario: str


@final
@dataclasses.dataclass(slots=True)
class _Phases:
    """What a test's reports said so far."""

    failed: bool = False
    skipped: bool = False
    passed: bool = False  # the call phase passed
    duration: float = 0.0
    message: str | None = None  # of the first failed phase
    properties: dict[str, object] = dataclasses.field(default_factory=dict)  # record_property

    def outcome(self) -> Literal["passed", "failed", "skipped"] | None:
        if self.failed:
            return "failed"
        if self.skipped:
            return "skipped"
        if self.passed:
            return "passed"
        return None  # it never got to a verdict (interrupted run)


@final
@dataclasses.dataclass(slots=True)
class _Unknown:
    """A spec mark of a test that names no scenario of any spec, or is malformed."""

    nodeid: str
    requirement: str | None
    scenario: str | None
    message: str
    hint: str | None


@final
class ConformanceState:
    """Everything the plugin knows about one pytest run; ``config.stash[STATE_KEY]``."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        given: list[str] | None = config.getoption("spec_files")
        ini: list[Path] = config.getini("spec_files")
        base = config.invocation_params.dir
        self.explicit_specs: list[Path] = (
            [Path(base, p).resolve() for p in given] if given else [Path(p) for p in ini]
        )
        report: str | None = config.getoption("spec_report")
        self.report_dir: Path | None = None if report is None else Path(base, report)
        self.strict: bool = bool(config.getoption("spec_strict"))
        mode = config.getoption("spec_unknown") or config.getini("spec_unknown")
        if mode not in UNKNOWN_MODES:
            raise pytest.UsageError(f"spec_unknown must be 'error' or 'report', got {mode!r}")
        self.unknown_mode: UnknownMode = mode
        # Configured explicitly: active from the start. Otherwise a spec mark activates it.
        self.active = bool(self.explicit_specs or self.report_dir or self.strict)
        self.specs: list[ParsedSpec] = []
        self.spec_names: list[str] = []  # each spec's path as shown: relative to the rootdir
        self.collection_failed = False  # unknown marks failed the collection: nothing ran
        self.matched: dict[str, list[tuple[int, _Mark]]] = {}  # nodeid -> (spec index, mark)
        self.unknown: list[_Unknown] = []
        self.model_checks: set[str] = set()
        self.tracked: set[str] = set()  # nodeids of the tagged tests
        self.phases: dict[str, _Phases] = {}
        self.coverage: TransitionCoverage | None = None
        self.root = project_root(config.rootpath)  # every path of the report is relative to it
        self.reports: list[ConformanceReport] = []
        self.written: list[dict[str, Path]] = []
        self.strict_failed = False
        self.terminal_summary = True  # diagnosis-harness report prints its own

    # -- specs ---------------------------------------------------------------------------------

    def spec_paths(self) -> list[Path]:
        """The spec files of this run: explicit, else the rootdir's, else the shipped one."""
        if self.explicit_specs:
            return self.explicit_specs
        found = sorted(self.config.rootpath.glob("specs/*/spec.md"))
        if found:
            return found
        try:
            return [shipped_spec_path()]
        except FileNotFoundError as error:
            raise pytest.UsageError(
                f"@pytest.mark.spec is used but no spec is configured: pass --spec PATH ({error})"
            ) from None

    def load_specs(self) -> None:
        if self.specs:
            return
        for path in self.spec_paths():
            if not path.is_file():
                raise pytest.UsageError(f"--spec: no such spec file: {path}")
            parsed = load_spec(path)
            shown = shown_path(path, self.root)
            self.specs.append(dataclasses.replace(parsed, source=shown))
            self.spec_names.append(shown)

    # -- collection ----------------------------------------------------------------------------

    def collect(self, items: list[pytest.Item]) -> None:
        tagged = [item for item in items if item.get_closest_marker(SPEC_MARKER) is not None]
        if not tagged and not self.active:
            return
        self.active = True
        self.load_specs()
        errors: dict[str, list[_Unknown]] = {}
        for item in tagged:
            nodeid = item.nodeid
            self.tracked.add(nodeid)
            if item.get_closest_marker(MODEL_CHECK_MARKER) is not None:
                self.model_checks.add(nodeid)
            seen: set[_Mark] = set()
            for mark in item.iter_markers(SPEC_MARKER):
                parsed = _read_mark(mark)
                if isinstance(parsed, str):
                    unknown = _Unknown(nodeid, *_mark_names(mark), parsed, None)
                    self.unknown.append(unknown)
                    errors.setdefault(nodeid, []).append(unknown)
                    continue
                if parsed in seen:
                    continue  # the same mark on the class and the function, say
                seen.add(parsed)
                index = self._find(parsed)
                if index is not None:
                    self.matched.setdefault(nodeid, []).append((index, parsed))
                    continue
                unknown = _Unknown(
                    nodeid,
                    parsed.requirement,
                    parsed.scenario,
                    "names no scenario of " + " or ".join(self.spec_names),
                    self._hint(parsed),
                )
                self.unknown.append(unknown)
                errors.setdefault(nodeid, []).append(unknown)
        if self.unknown_mode == "error" and errors:
            self.collection_failed = not self.config.option.continue_on_collection_errors
            for nodeid, unknowns in errors.items():
                report = pytest.CollectReport(
                    nodeid, "failed", _collection_error(nodeid, unknowns), []
                )
                self.config.hook.pytest_collectreport(report=report)

    def _find(self, mark: _Mark) -> int | None:
        for index, parsed in enumerate(self.specs):
            if find_scenario(parsed.spec, mark.requirement, mark.scenario) is not None:
                return index
        return None

    def _hint(self, mark: _Mark) -> str | None:
        for parsed in self.specs:
            hint = nearest_scenario(parsed.spec, mark.requirement, mark.scenario)
            if hint is not None:
                return hint
        return None

    # -- outcomes ------------------------------------------------------------------------------

    def record(self, report: pytest.TestReport) -> None:
        phases = self.phases.setdefault(report.nodeid, _Phases())
        phases.duration += report.duration
        phases.properties.update(report.user_properties)  # each report carries all so far
        if report.failed:
            if phases.message is None:
                phases.message = failure_message(report)
            phases.failed = True
        elif report.skipped or hasattr(report, "wasxfail"):
            phases.skipped = True  # a skip, an xfail, or a non-strict xpass
        elif report.when == "call":
            phases.passed = True

    def outcome(self, nodeid: str) -> Literal["passed", "failed", "skipped"] | None:
        phases = self.phases.get(nodeid)
        return None if phases is None else phases.outcome()

    # -- the report ----------------------------------------------------------------------------

    def build(self) -> list[ConformanceReport]:
        coverage = None
        if self.coverage is not None:
            # A table no check took a row of was not recorded ("—"), rather than never taken.
            counts = coverage_counts(self.coverage)
            coverage = {name: rows for name, rows in counts.items() if any(rows.values())}
        unknown = [
            UnknownMarker(
                nodeid=u.nodeid,
                requirement=u.requirement,
                scenario=u.scenario,
                message=u.message,
                hint=u.hint,
                outcome=self.outcome(u.nodeid),
            )
            for u in self.unknown
        ]
        per_spec: list[list[TestResult]] = [[] for _ in self.specs]
        for nodeid, marks in self.matched.items():
            outcome = self.outcome(nodeid)
            if outcome is None:
                continue  # deselected late, or the run stopped before it: no evidence
            phases = self.phases[nodeid]
            checked, checked_problem = read_checked(phases.properties.get("checked"))
            counterexample, problem = read_counterexample(phases.properties.get("counterexample"))
            notes = [n for n in (checked_problem, problem) if n]
            message = phases.message if outcome == "failed" else None
            if notes:
                message = "\n".join([*([message] if message else []), *notes])
            for index, mark in marks:
                per_spec[index].append(
                    TestResult(
                        nodeid=nodeid,
                        requirement=mark.requirement,
                        scenario=mark.scenario,
                        outcome=outcome,
                        model_check=nodeid in self.model_checks,
                        duration=max(phases.duration, 0.0),
                        message=message,
                        checked=checked,
                        counterexample=counterexample,
                    )
                )
        profile, seed = _hypothesis(self.config)
        identity = collect_identity(self.root, hypothesis_profile=profile, hypothesis_seed=seed)
        return [
            build_report(
                parsed, results, coverage=coverage, unknown_markers=unknown, identity=identity
            )
            for parsed, results in zip(self.specs, per_spec, strict=True)
        ]

    def finish(self, session: pytest.Session) -> None:
        if not self.active or self.config.option.collectonly:
            return  # --collect-only checks the marks; with nothing run there is nothing to report
        self.load_specs()  # a no-op unless configured and the collection never finished
        self.reports = self.build()
        if self.report_dir is not None:
            targets = _report_dirs(self.report_dir, self.reports)
            self.written = [
                write_reports(report, target)
                for report, target in zip(self.reports, targets, strict=True)
            ]
        if self.strict and not all(report.all_passed for report in self.reports):
            self.strict_failed = True
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def summary_lines(self) -> list[str]:
        lines: list[str] = []
        for n, report in enumerate(self.reports):
            if self.collection_failed:
                lines.append(
                    f"{report.capability}: not run: {len(self.unknown)} unknown spec mark(s) "
                    "failed the collection (see the errors above)"
                )
            else:
                written = self.written[n] if n < len(self.written) else {}
                lines.extend(console_summary(report, written=written))
        if self.strict_failed:
            lines.append("--spec-strict: the run fails: not every scenario has a passing test")
        return lines

    # -- hooks (the instance is registered as a plugin for its run) ----------------------------

    def pytest_report_header(self) -> str | None:
        if not (self.explicit_specs or self.report_dir):
            return None
        specs = ", ".join(str(p) for p in self.explicit_specs) or "the default spec"
        report = f"; report: {self.report_dir}" if self.report_dir else ""
        return f"spec conformance: {specs}{report}"

    @pytest.hookimpl(trylast=True)  # after -k / -m deselection: only tests that will run count
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.collect(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid in self.tracked:
            self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.active or not self.reports or not self.terminal_summary:
            return
        terminalreporter.write_sep("-", "spec conformance")
        for line in self.summary_lines():
            terminalreporter.write_line(line)


STATE_KEY: Final = pytest.StashKey[ConformanceState]()
_STATE_PLUGIN: Final = "diagnosis_harness-conformance-state"
_FIXTURES_PLUGIN: Final = "diagnosis_harness-conformance-fixtures"


def failure_message(report: pytest.TestReport) -> str:
    """What a failed phase of a test says, trimmed: pytest's crash message (the assertion with
    its explanation) when it has one, else the end of its long report; prefixed with the phase
    unless it is the call."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None)
    if not isinstance(text, str) or not text.strip():
        text = report.longreprtext or f"the {report.when} phase failed"
    lines = text.strip().splitlines()
    if crash is None and len(lines) > MESSAGE_LINES:
        lines = lines[-MESSAGE_LINES:]  # a long report ends with the error
    if len(lines) > MESSAGE_LINES:
        more = len(lines) - MESSAGE_LINES
        lines = [*lines[:MESSAGE_LINES], f"... ({more} more line(s))"]
    message = "\n".join(line.rstrip() for line in lines)
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS].rstrip() + " ..."
    return message if report.when == "call" else f"error in {report.when}: {message}"


def read_checked(value: object) -> tuple[Checked | None, str | None]:
    """The ``checked`` property as a :class:`Checked`, or what is wrong with it."""
    if value is None:
        return None, None
    try:
        if not isinstance(value, dict):
            raise TypeError(f"a dict, got {type(value).__name__}")
        return Checked(kind=value["kind"], count=value["count"]), None
    except (KeyError, TypeError, ValueError) as error:
        return None, f"record_property('checked', ...) is malformed: {error!s}"


def read_counterexample(value: object) -> tuple[Counterexample | None, str | None]:
    """The ``counterexample`` property as a :class:`Counterexample`, or what is wrong with it."""
    if value is None:
        return None, None
    try:
        if not isinstance(value, dict):
            raise TypeError(f"a dict, got {type(value).__name__}")
        steps = tuple(
            CounterexampleStep(
                index=_int(step["index"]),
                action=str(step["action"]),
                model=_text(step.get("model")),
                runtime=_text(step.get("runtime")),
            )
            for step in value.get("steps", ())
        )
        disagreement = value.get("disagreement")
        return (
            Counterexample(
                kind=str(value["kind"]),
                message=str(value.get("message", "")),
                steps=steps,
                disagreement=None if disagreement is None else _int(disagreement),
                replay=str(value.get("replay") or ""),
            ),
            None,
        )
    except (KeyError, TypeError, ValueError) as error:
        return None, f"record_property('counterexample', ...) is malformed: {error!s}"


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a step index must be an int, got {value!r}")
    return value


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _hypothesis(config: pytest.Config) -> tuple[str | None, str | None]:
    """Hypothesis's (profile, seed) in this run, when it is loaded (the model checks load it)."""
    hypothesis = sys.modules.get("hypothesis")
    if hypothesis is None:
        return None, None
    settings = hypothesis.settings
    seed = config.getoption("hypothesis_seed", None)
    if seed is None and settings.default.derandomize:
        seed = "derandomized"
    return settings.get_current_profile_name(), None if seed is None else str(seed)


def _report_dirs(base: Path, reports: list[ConformanceReport]) -> list[Path]:
    """``base`` for one report; ``base/<capability>`` (made unique) for each of several."""
    if len(reports) == 1:
        return [base]
    taken: set[str] = set()
    targets: list[Path] = []
    for report in reports:
        name, n = report.capability, 1
        while name in taken:
            n += 1
            name = f"{report.capability}-{n}"
        taken.add(name)
        targets.append(base / name)
    return targets


def _read_mark(mark: pytest.Mark) -> _Mark | str:
    """The mark's (requirement, scenario), or what is wrong with it."""
    args: tuple[Any, ...] = mark.args
    kwargs: Mapping[str, Any] = mark.kwargs
    usage = "takes two strings: @pytest.mark.spec(requirement, scenario)"
    unexpected = set(kwargs) - {"requirement", "scenario"}
    if unexpected:
        return f"{usage}; unexpected keyword(s) {', '.join(sorted(unexpected))}"
    values: list[object] = list(args)
    for name in ("requirement", "scenario"):
        if name in kwargs:
            values.append(kwargs[name])
    if len(values) != 2:
        return f"{usage}; got {len(values)} value(s)"
    requirement, scenario = values
    if not isinstance(requirement, str) or not isinstance(scenario, str):
        return f"{usage}; got {type(requirement).__name__} and {type(scenario).__name__}"
    if not requirement.strip() or not scenario.strip():
        return f"{usage}; got a blank name"
    return _Mark(requirement, scenario)


def _mark_names(mark: pytest.Mark) -> tuple[str | None, str | None]:
    """What a malformed mark said, where it is a string."""
    values = [*mark.args, mark.kwargs.get("requirement"), mark.kwargs.get("scenario")]
    strings = [v for v in values if isinstance(v, str)]
    return (
        strings[0] if strings else None,
        strings[1] if len(strings) > 1 else None,
    )


def _collection_error(nodeid: str, unknowns: Iterable[_Unknown]) -> str:
    lines = [f"{nodeid}: unknown @pytest.mark.spec"]
    for unknown in unknowns:
        named = f"spec({unknown.requirement!r}, {unknown.scenario!r})"
        lines.append(f"  @pytest.mark.{named} {unknown.message}")
        if unknown.hint:
            lines.append(f"  {unknown.hint}")
    lines.append(
        "  (name the requirement and scenario verbatim; --spec-unknown=report lists unknown "
        "marks in the report instead of failing the collection)"
    )
    return "\n".join(lines)


# -- hooks ------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    if not opted_in(config):
        return  # inert: the run is someone else's, and may have a `spec` marker of its own
    registered = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    for name, line in _MARKER_LINES.items():
        if name not in registered:
            config.addinivalue_line("markers", line)
    state = ConformanceState(config)
    for path in state.explicit_specs:
        if not path.is_file():
            raise pytest.UsageError(f"spec file not found: {path}")
    config.stash[STATE_KEY] = state
    # The state's own hook methods see this run only (a pytester run in-process has its own).
    config.pluginmanager.register(state, _STATE_PLUGIN)
    # The fixture is in a module of its own, registered here: this module is loaded in every
    # run, and a run that did not opt in must not find a fixture of ours under a name it may use.
    from . import _fixtures  # noqa: PLC0415 - a plugin of an opted-in run only

    config.pluginmanager.register(_fixtures, _FIXTURES_PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    for name in (_STATE_PLUGIN, _FIXTURES_PLUGIN):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
