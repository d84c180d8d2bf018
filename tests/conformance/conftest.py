"""Fixtures of the conformance tests (the plugin and report tests use ``small_spec``).

``pytester`` is enabled by each test module (``pytest_plugins``): pytest refuses a
``pytest_plugins`` in a conftest below the rootdir when the whole repository is collected.

The wheel of this checkout is built once per session (``built_wheel``) and installed into fresh
virtual environments outside the checkout: with the ``report`` extra (``report_venv``) and alone
(``bare_venv``). Building needs ``uv`` (next to this interpreter or on ``PATH``) and the build and
install requirements from uv's cache or the package index; without them every test that uses one
is skipped, saying which step failed. Deselect them with ``-m "not wheel"``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from ._support import ROOT, SMALL_SPEC, Venv, find_uv, step

if TYPE_CHECKING:
    from pathlib import Path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "wheel: builds a wheel and installs it into a fresh venv (network or cache)"
    )


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A ``wheel`` test is ``end_to_end`` and ``version_independent``: CI runs it once (``e2e``).

    It builds the wheel (pure Python, one for every version) and runs the report command from a
    virtual environment of its own: the env's Python version changes nothing it shows.
    """
    for item in items:
        if item.get_closest_marker("wheel") is not None:
            item.add_marker(pytest.mark.end_to_end)
            item.add_marker(pytest.mark.version_independent)


@pytest.fixture
def small_spec(pytester: pytest.Pytester) -> Path:
    """``specs/toy/spec.md`` in the pytester directory."""
    path = pytester.path / "specs" / "toy" / "spec.md"
    path.parent.mkdir(parents=True)
    path.write_text(SMALL_SPEC, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def uv() -> str:
    found = find_uv()
    if found is None:
        pytest.skip("uv is not installed: it builds the wheel and the virtual environments")
    return found


@pytest.fixture(scope="session")
def built_wheel(uv: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built once per session."""
    dist = tmp_path_factory.mktemp("dist")
    step("build the wheel", [uv, "build", "--wheel", "--quiet", "-o", str(dist), str(ROOT)], ROOT)
    (wheel,) = dist.glob("diagnosis_harness-*.whl")
    return wheel


def _venv(uv: str, requirement: str, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = Venv(tmp_path_factory.mktemp("venv"))
    create = [uv, "venv", "--quiet", "--python", sys.executable, str(venv.root)]
    step("create a venv", create, venv.root.parent)
    install = [uv, "pip", "install", "--quiet", "--python", str(venv.python), requirement]
    step(f"install {requirement}", install, venv.root.parent, offline_first=True)
    assert not venv.root.resolve().is_relative_to(ROOT.resolve())
    return venv


@pytest.fixture(scope="session")
def report_venv(uv: str, built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel with its ``report`` extra (pytest, Hypothesis, python-statemachine)."""
    return _venv(uv, f"{built_wheel}[report]", tmp_path_factory)


@pytest.fixture(scope="session")
def bare_venv(uv: str, built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel alone, no extra."""
    return _venv(uv, str(built_wheel), tmp_path_factory)
