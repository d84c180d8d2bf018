"""The package as a user installs it: the wheel of this checkout in virtual environments outside
the checkout (``tests/conftest.py``'s session fixtures ``built_wheel``, ``wheel_venvs``,
``bare_venv``).

The wheel is built once per session; :class:`WheelVenvs` makes one environment per distinct set
of extras and other requirements, and hands the same one to every test asking for that set.
Building and installing need ``uv`` (next to this interpreter or on ``PATH``) and the
requirements from uv's cache (tried first, offline) or the package index; without them a test
that asks is skipped, saying which step failed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["ROOT", "STEP_TIMEOUT", "Venv", "WheelVenvs", "clean_env", "find_uv", "step"]

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT = 120  # seconds per step; the whole build takes a few seconds with a warm cache


def find_uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file():
        return str(beside)
    return shutil.which("uv")


def clean_env() -> dict[str, str]:
    """This environment less what would point a child at the checkout or change its pytest run
    (``PYTEST_ADDOPTS``, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``, ...)."""
    dropped = {"PYTHONPATH", "VIRTUAL_ENV", "PY_IGNORE_IMPORTMISMATCH", "HYPOTHESIS_PROFILE"}
    return {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("PYTEST_")}


def step(what: str, command: list[str], cwd: Path, *, offline_first: bool = False) -> None:
    """Run a build or install step; skip the test, saying why, when it cannot be done."""
    attempts = [[*command, "--offline"], command] if offline_first else [command]
    for attempt in attempts:
        try:
            done = subprocess.run(
                attempt,
                cwd=cwd,
                env=clean_env(),
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


@dataclasses.dataclass(frozen=True)
class Venv:
    """A virtual environment outside the checkout with the built wheel installed in it."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.root / "bin" / name

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        """``python *args`` of this environment, in ``cwd``."""
        return subprocess.run(
            [str(self.python), *args],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )


def build_wheel(uv: str, dist: Path) -> Path:
    """The wheel of this checkout, built into ``dist``."""
    step("build the wheel", [uv, "build", "--wheel", "--quiet", "-o", str(dist), str(ROOT)], ROOT)
    (wheel,) = dist.glob("diagnosis_harness-*.whl")
    return wheel


@dataclasses.dataclass
class WheelVenvs:
    """One environment per distinct (extras, other requirements), made on first demand."""

    uv: str
    wheel: Path
    factory: pytest.TempPathFactory
    made: dict[tuple[frozenset[str], frozenset[str]], Venv] = dataclasses.field(
        default_factory=dict
    )

    def get(
        self, extras: frozenset[str] = frozenset(), packages: frozenset[str] = frozenset()
    ) -> Venv:
        """The wheel with ``extras`` (``"otel"``, ...) and ``packages`` (requirement strings)."""
        key = (extras, packages)
        if key not in self.made:
            self.made[key] = self._make(extras, packages)
        return self.made[key]

    def _make(self, extras: frozenset[str], packages: frozenset[str]) -> Venv:
        venv = Venv(self.factory.mktemp("venv"))
        create = [self.uv, "venv", "--quiet", "--python", sys.executable, str(venv.root)]
        step("create a venv", create, venv.root.parent)
        wheel = f"{self.wheel}[{','.join(sorted(extras))}]" if extras else str(self.wheel)
        requirements = [wheel, *sorted(packages)]
        install = [self.uv, "pip", "install", "--quiet", "--python", str(venv.python)]
        step(
            f"install {' '.join(requirements)}",
            [*install, *requirements],
            venv.root.parent,
            offline_first=True,
        )
        assert not venv.root.resolve().is_relative_to(ROOT.resolve())
        return venv
