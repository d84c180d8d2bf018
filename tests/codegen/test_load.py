"""Every table the generator must refuse is refused, naming the file, the row and the problem.

Each fixture under ``fixtures/`` is ``valid.toml`` with one defect (its first line says which).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis_harness.codegen import TableError, load_machine
from diagnosis_harness.codegen._emit import render_all
from diagnosis_harness.codegen._load import requirement_names

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_REQUIREMENTS = requirement_names(
    (REPO_ROOT / "specs" / "diagnosis-harness-run-context" / "spec.md").read_text(encoding="utf-8")
)

# (fixture, where, problem): `problem` is the TableError's whole problem text.
REFUSALS = [
    (
        "no_initial",
        "[states]",
        "exactly one initial state is required (found: none)",
    ),
    (
        "several_initials",
        "[states]",
        "exactly one initial state is required (found: IDLE, WORKING)",
    ),
    (
        "initial_and_terminal",
        "[states.IDLE]",
        "a state cannot be both initial and terminal",
    ),
    (
        "unreachable_state",
        "[states.LOST]",
        "state LOST cannot be reached from IDLE",
    ),
    (
        "terminal_exit",
        "transitions[4] (DONE, start)",
        "an exit from terminal state DONE",
    ),
    (
        "overlap_unguarded",
        "transitions[2] and transitions[3] (WORKING, finish)",
        "two rows for one (state, event) without disjoint guards",
    ),
    (
        "overlap_same_guard",
        "transitions[2] and transitions[3] (WORKING, finish)",
        "two rows for one (state, event) without disjoint guards",
    ),
    (
        "overlap_guard_and_unguarded",
        "transitions[2] and transitions[3] (WORKING, finish)",
        "two rows for one (state, event) without disjoint guards",
    ),
    (
        "overlap_different_guards",
        "transitions[2] and transitions[3] (WORKING, finish)",
        "two rows for one (state, event) without disjoint guards",
    ),
    (
        "unknown_source",
        "transitions[1] (PAUSED, start)",
        "unknown source state 'PAUSED'",
    ),
    (
        "unknown_target",
        "transitions[1] (IDLE, start)",
        "unknown target state 'PAUSED'",
    ),
    (
        "unknown_event",
        "transitions[1] (IDLE, begin)",
        "unknown event 'begin'",
    ),
    (
        "unknown_guard",
        "transitions[3] (WORKING, finish)",
        "unknown guard 'hurried'",
    ),
    (
        "missing_requirement",
        "transitions[1] (IDLE, start)",
        "missing requirement reference",
    ),
    (
        "requirement_not_in_spec",
        "transitions[1] (IDLE, start)",
        "requirement 'Jobs SHALL finish' is not in the spec",
    ),
    (
        "trap",
        "[states.WORKING]",
        "non-terminal state WORKING has no exit (a trap)",
    ),
    (
        "unused_event",
        "[events.pause]",
        "no row uses this event",
    ),
    (
        "unused_guard",
        "[guards.hurried]",
        "no row uses this guard",
    ),
]


def _fixture(name: str) -> Path:
    path = FIXTURES / f"{name}.toml"
    assert path.is_file(), path
    return path


def _refusal(path: Path) -> TableError:
    with pytest.raises(TableError) as info:
        load_machine(path, requirements=SPEC_REQUIREMENTS)
    return info.value


def test_every_fixture_is_covered() -> None:
    covered = {name for name, _, _ in REFUSALS} | {
        "valid",
        "invalid_toml",
        "reserved_name",
        "name_collision",
    }
    assert {path.stem for path in FIXTURES.glob("*.toml")} == covered


@pytest.mark.parametrize(
    ("fixture", "where", "problem"), REFUSALS, ids=[name for name, _, _ in REFUSALS]
)
def test_refusal(fixture: str, where: str, problem: str) -> None:
    path = _fixture(fixture)
    error = _refusal(path)
    assert Path(error.path) == path
    assert error.where == where
    assert error.problem == problem
    assert error.fix
    assert str(error) == f"{path}: {where}: {problem} -- {error.fix}"


def test_refusal_is_a_value_error() -> None:
    assert issubclass(TableError, ValueError)


def test_requirement_is_only_checked_against_a_given_spec() -> None:
    spec = load_machine(_fixture("requirement_not_in_spec"))
    assert spec.rows[0].requirement == "Jobs SHALL finish"
    with pytest.raises(TableError, match="is not in the spec"):
        load_machine(_fixture("requirement_not_in_spec"), requirements={"Jobs SHALL start"})


def test_invalid_toml() -> None:
    path = _fixture("invalid_toml")
    error = _refusal(path)
    assert Path(error.path) == path
    assert error.where == "file"
    assert error.problem.startswith("not valid TOML (")
    assert error.fix == "fix the TOML syntax"
    assert isinstance(error.__cause__, ValueError)  # tomllib.TOMLDecodeError


def test_valid_fixture_loads() -> None:
    path = _fixture("valid")
    spec = load_machine(path, requirements=SPEC_REQUIREMENTS)
    assert spec.path == path
    assert (spec.name, spec.class_name, spec.state_enum, spec.event_enum) == (
        "job",
        "JobModel",
        "JobState",
        "JobEvent",
    )
    assert spec.doc == "IDLE, WORKING, then DONE or BROKEN."
    assert [s.name for s in spec.states] == ["IDLE", "WORKING", "DONE", "BROKEN"]
    assert spec.initial.name == "IDLE"
    assert [s.name for s in spec.states if s.terminal] == ["DONE", "BROKEN"]
    assert [name for name, _ in spec.events] == ["start", "finish"]
    assert [g.name for g in spec.guards] == ["careful"]
    assert [(r.index, r.source, r.event, r.guard_text, r.target) for r in spec.rows] == [
        (1, "IDLE", "start", "", "WORKING"),
        (2, "WORKING", "finish", "careful", "DONE"),
        (3, "WORKING", "finish", "not careful", "BROKEN"),
    ]
    assert [(r.guard, r.expect) for r in spec.rows] == [
        (None, True),
        ("careful", True),
        ("careful", False),
    ]


def test_valid_fixture_renders() -> None:
    files = render_all([load_machine(_fixture("valid"))])
    assert set(files) == {
        "src/diagnosis_harness/_generated/__init__.py",
        "src/diagnosis_harness/_generated/tables.py",
        "src/diagnosis_harness/_generated/models.py",
        "docs/machines/job.md",
    }
    models = files["src/diagnosis_harness/_generated/models.py"]
    tables = files["src/diagnosis_harness/_generated/tables.py"]
    doc = files["docs/machines/job.md"]
    assert "class JobModel(StateMachine):" in models
    assert 'working.to(broken, unless="careful")' in models
    assert "JOB: MachineTable[JobState, JobEvent] = MachineTable(" in tables
    assert "| 3 | `WORKING` | `finish` | `not careful` | `BROKEN` |" in doc


@pytest.mark.parametrize(
    ("fixture", "where", "problem"),
    [
        (
            "reserved_name",
            "[events.send]",
            "'send' is a name python-statemachine's StateMachine uses",
        ),
        (
            "name_collision",
            "[guards.start]",
            "'start' is also [events.start] in the generated model",
        ),
    ],
    ids=["reserved_name", "name_collision"],
)
def test_render_refuses_model_name_clashes(fixture: str, where: str, problem: str) -> None:
    path = _fixture(fixture)
    spec = load_machine(path, requirements=SPEC_REQUIREMENTS)  # the table itself is fine
    with pytest.raises(TableError) as info:
        render_all([spec])
    assert Path(info.value.path) == path
    assert info.value.where == where
    assert info.value.problem == problem


def _with_value(tmp_path: Path, key: str, value: str) -> Path:
    """``valid.toml`` with its ``[key...]`` tables replaced by the line ``key = value``."""
    kept: list[str] = []
    dropping = False
    for line in _fixture("valid").read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            dropping = line == f"[{key}]" or line.startswith(f"[{key}.")
        if not dropping:
            kept.append(line)
    path = tmp_path / f"{key}_value.toml"
    path.write_text(f"{key} = {value}\n" + "\n".join(kept) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("key", ["states", "events", "guards"])
@pytest.mark.parametrize(
    ("value", "kind"),
    [("1", "an integer"), ('"x"', "a string"), ("[1]", "an array"), ("true", "a boolean")],
)
def test_a_section_given_a_value_instead_of_tables_is_refused_by_name(
    tmp_path: Path, key: str, value: str, kind: str
) -> None:
    """``states = 1`` where ``[states.<NAME>]`` tables belong: a TableError naming the section
    and what it must be (it was an AttributeError for [guards], "missing or empty" for the two
    others)."""
    path = _with_value(tmp_path, key, value)
    error = _refusal(path)
    assert error.where == f"[{key}]"
    assert error.problem == f"must be a table of [{key}.<name>] tables, not {kind}"
    assert f"[{key}.<name>]" in error.fix


def test_a_machine_given_a_value_instead_of_a_table_is_refused_by_name(tmp_path: Path) -> None:
    error = _refusal(_with_value(tmp_path, "machine", '"job"'))
    assert (error.where, error.problem) == ("[machine]", "must be a table, not a string")


def test_a_table_without_guards_still_loads(tmp_path: Path) -> None:
    """[guards] may be left out: only a value where its tables belong is refused."""
    path = tmp_path / "no_guards.toml"
    path.write_text(
        '[machine]\nname = "job"\nclass_name = "JobModel"\nstate_enum = "JobState"\n'
        'event_enum = "JobEvent"\ndoc = "IDLE, then DONE."\n\n'
        '[states.IDLE]\ninitial = true\ndoc = "Not started."\n\n'
        '[states.DONE]\nterminal = true\ndoc = "Finished."\n\n'
        '[events.finish]\ndoc = "Finish the job."\n\n'
        '[[transitions]]\nsource = "IDLE"\nevent = "finish"\ntarget = "DONE"\n'
        'requirement = "A Run SHALL have exactly one terminal outcome"\n',
        encoding="utf-8",
    )
    spec = load_machine(path, requirements=SPEC_REQUIREMENTS)
    assert spec.guards == ()
    assert [(r.source, r.target) for r in spec.rows] == [("IDLE", "DONE")]
