"""The generated modules are already formatted: ``ruff format`` and ``ruff check`` accept them.

The generator does not run ruff (``codegen --check`` must work without it), so its own layout has
to be ruff's. These tests run ruff, when it is installed, on what the generator emits for the
repository's tables and for a table whose long names push every line past the line length.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnosis_harness.codegen import generate, load_machine
from diagnosis_harness.codegen._emit import render_all

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _ruff() -> list[str] | None:
    # The interpreter's own ruff first: a ruff on PATH may be another version.
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    path = shutil.which("ruff")
    return None if path is None else [path]


RUFF = _ruff()

pytestmark = pytest.mark.skipif(
    RUFF is None, reason="ruff is not installed (it is in the `lint` dependency group)"
)

# valid.toml renamed so that no row, state, transition or event Literal fits on one line, while
# each of their items still does; the terminal set fits on a line of its own, to the character.
LONG_NAMES = {
    "WORKING": "WORKING_ON_EVERY_SINGLE_STEP_OF_THE_JOB",
    "DONE": "DONE_CAREFULLY_AND_COMPLETELY_CHECKED",
    "BROKEN": "BROKEN_BY_A_CARELESS_FINISH_OF_IT",
    "careful": "careful_with_every_part_of_the_job",
    "start": "start_the_job_at_the_very_beginning_of_it",
    "finish": "finish_the_job_one_way_or_another",
}
# Each layout the long names must produce, in the module that shows it.
LONG_LAYOUTS = {
    "tables.py": [
        "        _row(\n            1,\n",
        "    terminal=frozenset(\n        {JobState.DONE_",
    ],
    "models.py": [
        "JobEventName = Literal[\n",
        "    working_on_every_single_step_of_the_job = State(\n",
        " = idle.to(\n        working_on_every_single_step_of_the_job,\n    )  # row 1\n",
        "_another = (\n        working_on_every_single_step_of_the_job.to(\n            done_",
    ],
}


def _long_names_table(tmp_path: Path) -> Path:
    text = (FIXTURES / "valid.toml").read_text(encoding="utf-8")
    for old, new in LONG_NAMES.items():
        text = text.replace(f'"{old}"', f'"{new}"').replace(f"not {old}", f"not {new}")
        text = text.replace(f"[states.{old}]", f"[states.{new}]")
        text = text.replace(f"[events.{old}]", f"[events.{new}]")
        text = text.replace(f"[guards.{old}]", f"[guards.{new}]")
    path = tmp_path / "job.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _write_python(files: dict[str, str], directory: Path) -> list[Path]:
    written = []
    for relative, content in files.items():
        if relative.endswith(".py"):
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
            written.append(path)
    return written


def _run_ruff(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert RUFF is not None
    config = REPO_ROOT / "pyproject.toml"  # the project's own rules, as CI applies them
    return subprocess.run(
        [*RUFF, *map(str, args), "--no-cache", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("tables", ["repository", "long names"])
def test_generated_modules_pass_ruff_format_and_ruff_check(tables: str, tmp_path: Path) -> None:
    if tables == "repository":
        files = generate(REPO_ROOT)
    else:
        files = render_all([load_machine(_long_names_table(tmp_path))])
        for module, layouts in LONG_LAYOUTS.items():
            text = files[f"src/diagnosis_harness/_generated/{module}"]
            assert all(layout in text for layout in layouts), text
    paths = _write_python(files, tmp_path / "out")
    assert len(paths) == 3

    formatted = _run_ruff("format", "--check", "--diff", *paths)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    checked = _run_ruff("check", *paths)
    assert checked.returncode == 0, checked.stdout + checked.stderr
