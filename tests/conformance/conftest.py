"""Fixtures of the conformance tests (the plugin and report tests use ``small_spec``).

``pytester`` is enabled by each test module (``pytest_plugins``): pytest refuses a
``pytest_plugins`` in a conftest below the rootdir when the whole repository is collected.

The wheel of this checkout, built once per session, is installed into fresh virtual environments
outside the checkout (``tests/installed.py``; ``bare_venv`` is ``tests/conftest.py``'s): with the
``report`` extra (``report_venv``) and alone (``bare_venv``). Without ``uv`` or the requirements
every test that uses one is skipped, saying which step failed. Deselect them with
``-m "not wheel"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._support import SMALL_SPEC

if TYPE_CHECKING:
    from pathlib import Path

    from installed import Venv, WheelVenvs


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
def report_venv(wheel_venvs: WheelVenvs) -> Venv:
    """The wheel with its ``report`` extra (pytest, Hypothesis, python-statemachine)."""
    return wheel_venvs.get(frozenset({"report"}))
