"""The report from an installed wheel, outside the checkout, against the spec shipped in it.

The wheel of this checkout, installed with the ``report`` extra (pytest, Hypothesis,
python-statemachine; no PyYAML, no SDK) into a fresh virtual environment (``report_venv``, see
``conftest.py``: skipped without ``uv``), runs the report command from a directory outside the
checkout. Deselect it with ``-m "not wheel"``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from installed import STEP_TIMEOUT, clean_env

from ._support import ROOT, read_json, scenarios

if TYPE_CHECKING:
    from installed import Venv


@pytest.mark.wheel
def test_the_report_from_an_installed_wheel_outside_the_checkout(
    report_venv: Venv, tmp_path: Path
) -> None:
    venv, elsewhere = report_venv.root, tmp_path
    assert not elsewhere.resolve().is_relative_to(ROOT.resolve())

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return report_venv.run(*args, cwd=elsewhere)

    # The installed package, not the checkout; and without PyYAML (the `config` extra).
    where = run("-c", "import diagnosis_harness, sys; print(diagnosis_harness.__file__)")
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv)
    assert run("-c", "import yaml").returncode != 0

    done = run("-m", "diagnosis_harness.conformance", "--out", "reports")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(shipped)" in done.stdout
    assert done.stdout.rstrip().endswith("PASS: all 16 scenarios passed")

    data = read_json(elsewhere / "reports")
    assert data["summary"]["all_passed"] is True
    assert data["summary"]["scenarios"]["passed"] == data["summary"]["scenarios"]["total"] == 16
    item = data["items"][0]
    assert item["id"] == "diagnosis-harness-run-context"
    assert item["issues"] == []  # the shipped copy's path names its capability, as the checkout's
    # relative to the project root: here pytest's rootdir, the site-packages holding the package
    shipped = package / "conformance" / "_data" / "specs" / item["id"] / "spec.md"
    assert item["source"] == shipped.relative_to(package.parent).as_posix()
    assert data["identity"]["commit"] is None  # not a git checkout
    for name, scenario in scenarios(data).items():
        assert any(t["outcome"] == "passed" for t in scenario["tests"]), name
    for suffix in ("json", "md", "html"):
        assert (elsewhere / "reports" / f"conformance.{suffix}").is_file()

    # Once `report` is wired into the console script, it does the same.
    script = report_venv.script("diagnosis-harness")
    usage = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    if "report" in usage.stdout:
        wired = subprocess.run(
            [str(script), "report", "--out", "again"],
            cwd=elsewhere,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
        assert wired.returncode == 0, wired.stdout + wired.stderr
        assert read_json(elsewhere / "again")["summary"]["all_passed"] is True
    # Nothing but the --out directories: no .hypothesis/, .pytest_cache/ or __pycache__/.
    assert {p.name for p in elsewhere.iterdir()} <= {"reports", "again"}
