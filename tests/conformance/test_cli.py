"""The ``diagnosis-harness`` command line as a user meets it: bad invocations, statuses, pipes.

Each invocation runs as a subprocess (``python -m diagnosis_harness``, a fresh interpreter) in a
scratch directory. A bad invocation must stop before the suite runs, which is shown by its
effects, not by its speed: pytest printed nothing (a run prints its dots and "N passed" on
stdout), no report directory was made, and the scratch directory holds only what the test put
there (a run used to leave ``.hypothesis/`` behind). The runs of the whole suite, and of the
model checks, are ``end_to_end`` and ``version_independent``, as in ``test_report_suite.py``.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis_harness import __version__
from diagnosis_harness.__main__ import CLOSED_PIPE_STATUS
from diagnosis_harness.conformance import load_spec
from diagnosis_harness.conformance._cli import EXIT_STATUSES, UsageProblem, check_spec
from installed import clean_env

from ._support import SMALL_SPEC, SPEC, read_json

TIMEOUT = 300  # seconds; a run of the whole suite takes about 15 s here
# ``python -m diagnosis_harness`` with model-check's scheduler cut to one race per scenario.
SMALL_RUN = (str(Path(__file__).resolve().parents[1] / "small_model_check.py"),)

# A spec with four problems OpenSpec's validator reports: two warnings, which --strict counts
# (a short purpose, a requirement without SHALL or MUST), a scenario without steps and so a
# requirement without a scenario.
BAD_SPEC = """\
# toy Specification

## Purpose

Too short.

## Requirements

### Requirement: Things work

The system does things.

#### Scenario: First thing

- **WHEN** the first thing happens
- **THEN** it works

### Requirement: Other things SHALL work

The system SHALL do other things.

#### Scenario: Empty
"""


def _command(
    cwd: Path,
    *args: str,
    stdout: int = subprocess.PIPE,
    env: dict[str, str] | None = None,
    entry: tuple[str, ...] = ("-m", "diagnosis_harness"),
) -> subprocess.CompletedProcess[str]:
    """``python -m diagnosis_harness *args`` in ``cwd`` (or ``python *entry *args``), stderr
    captured (stdout unless given), in this environment less ``HYPOTHESIS_*`` and what would
    change the child's pytest run, plus ``env``."""
    environment = {k: v for k, v in clean_env().items() if not k.startswith("HYPOTHESIS_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, *entry, *args],
        cwd=cwd,
        env=environment,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _listing(directory: Path) -> list[str]:
    """Every path under ``directory``, relative, sorted (hidden ones included)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """An empty working directory holding only ``README.md`` (a file to misuse as ``--out``)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "README.md").write_text("# a project\n", encoding="utf-8")
    return cwd


def _refused(done: subprocess.CompletedProcess[str], cwd: Path, *before: str) -> str:
    """Assert ``done`` stopped with status 2 without running the suite; its stderr."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""  # pytest wrote nothing: no dots, no "passed"
    assert "Traceback" not in done.stderr
    assert _listing(cwd) == sorted(["README.md", *before])  # no reports/, no .hypothesis/
    assert (cwd / "README.md").read_text(encoding="utf-8") == "# a project\n"
    return done.stderr


# -- --out -----------------------------------------------------------------------------------------


def test_an_out_that_is_a_file_is_refused_before_the_suite_runs(scratch: Path) -> None:
    err = _refused(_command(scratch, "report", "--out", "README.md"), scratch)
    assert err.startswith("diagnosis-harness report: --out: README.md is a file, not a directory")
    assert "conformance.json" in err  # says what --out is for


def test_an_out_below_a_file_cannot_be_written(scratch: Path) -> None:
    err = _refused(_command(scratch, "report", "--out", "README.md/reports"), scratch)
    assert err.startswith("diagnosis-harness report: --out: cannot write to README.md/reports:")


def test_an_out_whose_report_file_is_a_directory_is_refused(scratch: Path) -> None:
    (scratch / "out" / "conformance.md").mkdir(parents=True)
    done = _command(scratch, "report", "--out", "out")
    err = _refused(done, scratch, "out", "out/conformance.md")
    assert "--out: out/conformance.md is a directory" in err


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="root writes to a read-only directory"
)
def test_a_read_only_out_is_refused(scratch: Path) -> None:
    locked = scratch / "locked"
    locked.mkdir(mode=0o555)
    try:
        err = _refused(_command(scratch, "report", "--out", "locked"), scratch, "locked")
    finally:
        locked.chmod(0o755)
    assert "--out: cannot write to locked: Permission denied" in err


# -- --spec ----------------------------------------------------------------------------------------


def test_an_invalid_spec_is_refused_listing_each_problem(scratch: Path, tmp_path: Path) -> None:
    bad = tmp_path / "specs" / "toy" / "spec.md"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD_SPEC, encoding="utf-8")
    problems = [p for p in load_spec(bad).problems if p.level in ("ERROR", "WARNING")]
    assert len(problems) == 4  # the planted ones, so the listing below is all of them
    err = _refused(_command(scratch, "report", "--spec", str(bad)), scratch)
    assert f"{bad} is not a valid spec (2 error(s), 2 warning(s)" in err
    for problem in problems:
        first = problem.message.splitlines()[0]
        assert f"\n  {bad}:{problem.line}: {problem.level} ({problem.path}): {first}\n" in err
    assert "\n      #### Scenario: Short name\n" in err  # a message's further lines, indented


def test_a_file_that_is_no_spec_is_refused_saying_why(scratch: Path) -> None:
    err = _refused(_command(scratch, "report", "--spec", "README.md"), scratch)
    assert "--spec: README.md is not a valid spec (2 error(s), 0 warning(s)" in err
    assert "README.md: ERROR (file): Spec must have a Purpose section." in err
    assert "README.md: ERROR (file): Spec must have a Requirements section." in err
    assert err.count("#### Scenario: Descriptive name") == 1  # OpenSpec's example, shown once


def test_a_missing_spec_is_refused(scratch: Path) -> None:
    err = _refused(_command(scratch, "report", "--spec", "nowhere.md"), scratch)
    assert "--spec: no such spec file or directory: nowhere.md" in err


def test_a_directory_without_a_spec_is_refused(scratch: Path) -> None:
    (scratch / "empty").mkdir()
    err = _refused(_command(scratch, "report", "--spec", "empty"), scratch, "empty")
    assert "--spec: no spec in the directory empty: expected OpenSpec's layout" in err


def test_a_directory_of_two_specs_is_refused_naming_both(scratch: Path) -> None:
    for name in ("one", "two"):
        path = scratch / "specs" / name / "spec.md"
        path.parent.mkdir(parents=True)
        path.write_text(SMALL_SPEC, encoding="utf-8")
    done = _command(scratch, "report", "--spec", "specs")
    layout = ["specs", "specs/one", "specs/one/spec.md", "specs/two", "specs/two/spec.md"]
    err = _refused(done, scratch, *layout)
    assert "--spec: specs holds 2 specs (specs/one/spec.md, specs/two/spec.md)" in err


@pytest.mark.parametrize(
    "layout",
    [
        "specs/{capability}/spec.md",  # --spec specs
        "{capability}/spec.md",  # --spec specs/<capability>... as a directory of one
        "openspec/specs/{capability}/spec.md",  # OpenSpec's own project layout
        "spec.md",
    ],
)
def test_a_directory_in_openspecs_layout_names_its_spec(tmp_path: Path, layout: str) -> None:
    path = tmp_path / layout.format(capability="toy")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SMALL_SPEC, encoding="utf-8")
    parsed, found, origin = check_spec(str(tmp_path))
    assert (found, origin) == (path, "given")
    assert parsed.spec.capability == "toy"


def test_the_repositorys_specs_directory_is_accepted() -> None:
    _, found, _ = check_spec(str(SPEC.parents[1]))
    assert found == SPEC


def test_check_spec_raises_a_usage_problem_not_an_os_error(tmp_path: Path) -> None:
    unreadable = tmp_path / "spec.md"
    unreadable.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(UsageProblem, match=r"--spec: cannot read .*spec\.md: 'utf-8' codec"):
        check_spec(str(unreadable))


def test_a_run_pytest_cannot_make_is_status_2_not_pytests_own(scratch: Path) -> None:
    """An unknown ``HYPOTHESIS_PROFILE`` stops pytest loading the suite (its status 4, a usage
    error): the command says so and exits 2, the status of an environment error."""
    done = _command(scratch, "report", env={"HYPOTHESIS_PROFILE": "nosuch"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Profile 'nosuch' is not registered" in done.stdout + done.stderr
    assert done.stderr.rstrip().endswith(
        "diagnosis-harness report: no conformance report: pytest exited with status 4"
    )
    assert _listing(scratch) == ["README.md", "reports"]  # made by the check of --out
    assert _listing(scratch / "reports") == []


# -- the parsers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "usage", "message"),
    [
        (
            ["report", "--bogus"],
            "usage: diagnosis-harness report [-h] [--out DIR]",
            "diagnosis-harness report: error: unrecognized arguments: --bogus",
        ),
        (
            ["--bogus"],
            "usage: diagnosis-harness [-h] [-V] COMMAND ...",
            "diagnosis-harness: error: unrecognized arguments: --bogus",
        ),
        (
            ["--bogus", "report"],
            "usage: diagnosis-harness [-h] [-V] COMMAND ...",
            "diagnosis-harness: error: unrecognized arguments: --bogus",
        ),
        (
            ["demo", "--bogus"],
            "usage: diagnosis-harness demo [-h]",
            "diagnosis-harness demo: error: unrecognized arguments: --bogus",
        ),
        (
            ["model-check", "--bogus"],
            "usage: diagnosis-harness model-check [-h]",
            "diagnosis-harness model-check: error: unrecognized arguments: --bogus",
        ),
        (
            [],
            "usage: diagnosis-harness [-h] [-V] COMMAND ...",
            "diagnosis-harness: error: a command is required: report, model-check, demo",
        ),
        (
            ["bogus"],
            "usage: diagnosis-harness [-h] [-V] COMMAND ...",
            "diagnosis-harness: error: argument COMMAND: invalid choice: 'bogus'",
        ),
    ],
)
def test_a_bad_word_is_named_in_the_usage_of_its_command(
    scratch: Path, args: list[str], usage: str, message: str
) -> None:
    err = _refused(_command(scratch, *args), scratch)
    first, second = err.splitlines()[0], err.splitlines()[-1]
    assert first.startswith(usage)
    assert second.startswith(message)
    assert "arguments are required" not in err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(scratch: Path, flag: str) -> None:
    done = _command(scratch, flag)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"diagnosis-harness {__version__}\n"
    assert __version__ == importlib.metadata.version("diagnosis-harness")  # what pip shows


def test_the_report_help_documents_the_exit_statuses(scratch: Path) -> None:
    done = _command(scratch, "report", "--help")
    assert done.returncode == 0
    assert "exit status:" in done.stdout
    for status, meaning in EXIT_STATUSES.items():
        assert f"  {status:<5}{meaning.split()[0]}" in done.stdout
    assert "OpenSpec's layout (specs/<capability>/spec.md)" in " ".join(done.stdout.split())


# -- a closed pipe ---------------------------------------------------------------------------------


def _into_a_closed_pipe(
    cwd: Path, *args: str, entry: tuple[str, ...] = ("-m", "diagnosis_harness")
) -> subprocess.CompletedProcess[str]:
    """Run the command with stdout a pipe whose reader has already gone, as after ``| head``:
    its first write fails, whatever the timing (``head`` racing the writer would not)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return _command(cwd, *args, stdout=write_end, entry=entry)
    finally:
        os.close(write_end)


def _quiet(done: subprocess.CompletedProcess[str], *, progress: str | None = None) -> None:
    """Exit 141 and nothing on stderr (no BrokenPipeError traceback, no "Exception ignored")
    but, for a command that reports progress there, its progress lines (``progress`` first)."""
    assert done.returncode == CLOSED_PIPE_STATUS, done.stderr
    others = [
        line
        for line in done.stderr.splitlines()
        if progress is None or not line.startswith(progress)
    ]
    assert others == [], done.stderr


def test_the_demo_into_a_closed_pipe_ends_quietly(scratch: Path) -> None:
    _quiet(_into_a_closed_pipe(scratch, "demo"))


@pytest.mark.parametrize("args", [["report", "--help"], ["--version"]])
def test_help_and_version_into_a_closed_pipe_end_quietly(scratch: Path, args: list[str]) -> None:
    done = _into_a_closed_pipe(scratch, *args)
    assert done.stderr == ""
    # argparse itself ignores an OSError writing help or the version (then exits 0); were it
    # to raise, the command would end with the closed-pipe status.
    assert done.returncode in (0, CLOSED_PIPE_STATUS)


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_model_check_into_a_closed_pipe_ends_quietly(scratch: Path) -> None:
    # The summary is written once every check has run, so what is checked is not the point:
    # the smallest run, and the scheduler's plan cut to one race per scenario (SMALL_RUN).
    args = ["model-check", "--depth", "1", "--max-examples", "1", "--steps", "1"]
    _quiet(_into_a_closed_pipe(scratch, *args, entry=SMALL_RUN), progress="model-check: ")


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_the_report_into_a_closed_pipe_ends_quietly(scratch: Path) -> None:
    _quiet(_into_a_closed_pipe(scratch, "report", "--out", "out"))


# -- a passing run ---------------------------------------------------------------------------------


@pytest.mark.version_independent
@pytest.mark.end_to_end
def test_a_passing_run_leaves_nothing_but_its_out_directory(tmp_path: Path) -> None:
    """In a scratch cwd, against a copy of the spec given as a directory in OpenSpec's layout:
    status 0, and afterwards the cwd holds the three reports and nothing else (no
    ``.hypothesis/``, ``.pytest_cache/``, ``__pycache__/``); the temporary directory the run
    kept Hypothesis's files in is gone too."""
    project = tmp_path / "project"
    copy = project / "specs" / SPEC.parent.name / "spec.md"
    copy.parent.mkdir(parents=True)
    copy.write_text(SPEC.read_text(encoding="utf-8"), encoding="utf-8")
    cwd, temp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temp.mkdir()
    done = _command(
        cwd, "report", "--spec", str(project / "specs"), "--out", "out", env={"TMPDIR": str(temp)}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _listing(cwd) == [
        "out",
        "out/conformance.html",
        "out/conformance.json",
        "out/conformance.md",
    ]
    assert _listing(temp) == []
    # The spec lies outside the project root, so the report names it by its file name alone
    # (a report shows no absolute path).
    assert f"  spec          {copy.name} (given)" in done.stdout
    assert read_json(cwd / "out")["summary"]["all_passed"] is True
