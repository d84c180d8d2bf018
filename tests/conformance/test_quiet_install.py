"""Installing the wheel changes nothing for a project that does not use it.

The wheel alone (``bare_venv``) brings no other distribution and its core runs. With the
``report`` extra (``report_venv``) it brings pytest, and its plugin is loaded by every pytest run
of that environment through the ``pytest11`` entry point: two tiny projects of someone else's --
one plain, one with a ``spec`` marker of its own -- are run there with the plugin and without it
(``-p no:diagnosis_harness``), and pytest says the same; asked for (the ini switch, or an option),
the plugin does act. Skipped without ``uv`` (see ``conftest.py``); deselect with ``-m "not wheel"``.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from installed import Venv

pytestmark = pytest.mark.wheel

STRICT = "[pytest]\naddopts = --strict-markers --strict-config\n"
PROJECTS = {
    "plain": {
        "pytest.ini": STRICT,
        "test_plain.py": """
            import pytest

            def test_one():
                assert 1 + 1 == 2

            @pytest.mark.parametrize("n", [1, 2, 3])
            def test_many(n):
                assert n > 0

            @pytest.mark.skip(reason="not today")
            def test_skipped():
                pass
            """,
    },
    "own-spec-marker": {
        "pytest.ini": STRICT + "markers =\n    spec(name): the project's own spec marker\n",
        "test_specced.py": """
            import pytest

            @pytest.mark.spec("x")
            def test_marked(request):
                assert request.node.get_closest_marker("spec").args == ("x",)

            @pytest.mark.spec("y")
            class TestSpecced:
                def test_inside(self):
                    pass

            def test_unmarked():
                pass
            """,
    },
}
WITHOUT = ("-p", "no:diagnosis_harness")
# What each project's runs are compared on, besides the tests' outcomes: the markers pytest knows
# (the plugin's must not join the project's own) and the fixtures a test can ask for.
LISTINGS = {"plain": "--fixtures", "own-spec-marker": "--markers"}


def _project(tmp_path: Path, name: str) -> Path:
    project = tmp_path / name
    project.mkdir()
    for file, text in PROJECTS[name].items():
        (project / file).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return project


class _Run:
    """A pytest run in a project, its output as compared: the plugin list apart, no durations."""

    def __init__(self, venv: Venv, project: Path, *args: str) -> None:
        done = venv.run("-m", "pytest", "-p", "no:cacheprovider", *args, cwd=project)
        self.status = done.returncode
        self.stderr = done.stderr
        lines = done.stdout.splitlines()
        # The header's list of the distributions whose plugins were loaded: the one line that
        # must differ between a run with the plugin and one without it.
        self.plugins = [line for line in lines if line.startswith("plugins:")]
        # Durations vary from run to run, and so does the width of the "=" padding around them.
        self.lines = [
            re.sub(r" in \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))?", " in Ns", line).strip("= ")
            for line in lines
            if not line.startswith("plugins:")
        ]

    def compared(self) -> tuple[int, list[str], str]:
        return self.status, self.lines, self.stderr

    @property
    def output(self) -> str:
        """What to show when an assertion on the run fails."""
        return "\n".join(self.lines) + "\n" + self.stderr


def test_the_wheel_alone_installs_nothing_else_and_runs(bare_venv: Venv, tmp_path: Path) -> None:
    names = bare_venv.run(
        "-c",
        "import importlib.metadata as m, json; "
        "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))",
        cwd=tmp_path,
    )
    assert names.returncode == 0, names.stderr
    assert json.loads(names.stdout) == ["diagnosis-harness"]
    demo = bare_venv.run("-m", "diagnosis_harness", "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr


@pytest.mark.parametrize("name", sorted(PROJECTS))
def test_a_project_of_someone_elses_runs_as_without_the_plugin(
    report_venv: Venv, tmp_path: Path, name: str
) -> None:
    project = _project(tmp_path, name)
    for args in (("-v", "-rA"), (LISTINGS[name],)):
        with_it = _Run(report_venv, project, *args)
        without = _Run(report_venv, project, *args, *WITHOUT)
        assert with_it.compared() == without.compared(), args
        assert with_it.status == pytest.ExitCode.OK, with_it.output
        if args[0] == "-v":
            # Loaded in one run and not in the other: not a comparison of two runs without it.
            assert "diagnosis-harness" in " ".join(with_it.plugins)
            assert "diagnosis-harness" not in " ".join(without.plugins)


def test_asked_for_the_plugin_acts(report_venv: Venv, tmp_path: Path) -> None:
    # The project's own marks, read as the plugin's: `spec("x")` names no scenario of its spec.
    project = _project(tmp_path, "own-spec-marker")
    run = _Run(report_venv, project, "-o", "diagnosis_harness_conformance=true")
    assert run.status == pytest.ExitCode.INTERRUPTED, run.output
    assert any(line.endswith("::test_marked: unknown @pytest.mark.spec") for line in run.lines)

    # An option alone: the shipped spec, none of whose scenarios the plain project shows.
    run = _Run(report_venv, _project(tmp_path, "plain"), "--spec-strict")
    assert run.status == pytest.ExitCode.TESTS_FAILED, run.output
    assert any("- spec conformance -" in line for line in run.lines), run.output
    assert "conformance of diagnosis-harness-run-context" in run.lines, run.output
    assert "FAIL: 16 of 16 scenarios have no test" in run.lines, run.output
