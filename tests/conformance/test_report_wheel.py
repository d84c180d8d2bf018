"""The report from an installed wheel, outside the checkout, against the spec shipped in it.

Builds the wheel of this checkout, installs it with the ``report`` extra (pytest, Hypothesis;
no PyYAML, no SDK) into a fresh virtual environment and runs the report command from a
directory outside the checkout. Needs ``uv`` (next to this interpreter or on ``PATH``) and the
build and install requirements from uv's cache or the package index; without them the test is
skipped, saying which step failed. Deselect it with ``-m "not wheel"``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ._support import ROOT, read_json, scenarios

STEP_TIMEOUT = 120  # seconds per step; the whole test takes a few seconds with a warm cache


def _uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file():
        return str(beside)
    return shutil.which("uv")


def _clean_env() -> dict[str, str]:
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PY_IGNORE_IMPORTMISMATCH", "HYPOTHESIS_PROFILE"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def _step(what: str, command: list[str], cwd: Path, *, offline_first: bool = False) -> None:
    """Run a build or install step; skip the test, saying why, when it cannot be done."""
    attempts = [[*command, "--offline"], command] if offline_first else [command]
    for attempt in attempts:
        try:
            done = subprocess.run(
                attempt,
                cwd=cwd,
                env=_clean_env(),
                capture_output=True,
                text=True,
                timeout=STEP_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            pytest.skip(f"cannot {what}: {error}")
        if done.returncode == 0:
            return
    tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
    pytest.skip(f"cannot {what} (offline, or no index?): " + " | ".join(tail))


@pytest.mark.wheel
def test_the_report_from_an_installed_wheel_outside_the_checkout(tmp_path: Path) -> None:
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed: it builds the wheel and the virtual environment")
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not elsewhere.resolve().is_relative_to(ROOT.resolve())

    _step("build the wheel", [uv, "build", "--wheel", "--quiet", "-o", str(dist), str(ROOT)], ROOT)
    (wheel,) = dist.glob("diagnosis_harness-*.whl")
    _step("create a venv", [uv, "venv", "--quiet", "--python", sys.executable, str(venv)], tmp_path)
    python = venv / "bin" / "python"
    install = [uv, "pip", "install", "--quiet", "--python", str(python), f"{wheel}[report]"]
    _step("install the wheel with its report extra", install, tmp_path, offline_first=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), *args],
            cwd=elsewhere,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )

    # The installed package, not the checkout; and without PyYAML (the `config` extra).
    where = run("-c", "import diagnosis_harness, sys; print(diagnosis_harness.__file__)")
    assert where.returncode == 0, where.stderr
    package = Path(where.stdout.strip()).parent
    assert package.is_relative_to(venv)
    assert run("-c", "import yaml").returncode != 0

    done = run("-m", "diagnosis_harness.conformance", "--out", "reports")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(shipped)" in done.stdout
    assert done.stdout.rstrip().endswith("PASS: every one of the 16 scenarios has a passing test")

    data = read_json(elsewhere / "reports")
    assert data["summary"]["all_passed"] is True
    assert data["summary"]["scenarios"]["passed"] == data["summary"]["scenarios"]["total"] == 16
    item = data["items"][0]
    assert item["id"] == "diagnosis-harness-run-context"
    assert item["issues"] == []  # the shipped copy's path names its capability, as the checkout's
    assert Path(item["source"]) == package / "conformance" / "_data" / "specs" / item["id"] / (
        "spec.md"
    )
    for name, scenario in scenarios(data).items():
        assert any(t["outcome"] == "passed" for t in scenario["tests"]), name
    for suffix in ("json", "md", "html"):
        assert (elsewhere / "reports" / f"conformance.{suffix}").is_file()

    # Once `report` is wired into the console script, it does the same.
    script = venv / "bin" / "diagnosis-harness"
    usage = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    if "report" in usage.stdout:
        wired = subprocess.run(
            [str(script), "report", "--out", "again"],
            cwd=elsewhere,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
        assert wired.returncode == 0, wired.stdout + wired.stderr
        assert read_json(elsewhere / "again")["summary"]["all_passed"] is True
