"""Fixtures shared by every directory of ``tests/`` (the Hypothesis profiles are in the root
``conftest.py``, which the bundled suite in ``src/`` shares too)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from installed import Venv, WheelVenvs, build_wheel, find_uv
from racing import eager_switching

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def eager_thread_switching() -> Iterator[None]:
    """Make the interpreter switch threads far more often, so races would actually interleave.

    Not autouse: a module of racing tests opts in with
    ``pytestmark = pytest.mark.usefixtures("eager_thread_switching")``, a test by taking it.
    """
    with eager_switching():
        yield


# -- the installed wheel (tests/installed.py) ------------------------------------------------------


@pytest.fixture(scope="session")
def uv() -> str:
    found = find_uv()
    if found is None:
        pytest.skip("uv is not installed: it builds the wheel and the virtual environments")
    return found


@pytest.fixture(scope="session")
def built_wheel(uv: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built once per session."""
    return build_wheel(uv, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def wheel_venvs(uv: str, built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> WheelVenvs:
    """Environments outside the checkout with the wheel and chosen extras, one per distinct set."""
    return WheelVenvs(uv, built_wheel, tmp_path_factory)


@pytest.fixture(scope="session")
def bare_venv(wheel_venvs: WheelVenvs) -> Venv:
    """The wheel alone, no extra: ``pip install diagnosis-harness``."""
    return wheel_venvs.get()
