"""Fixtures of the conformance tests (the plugin and report tests use ``small_spec``).

``pytester`` is enabled by each test module (``pytest_plugins``): pytest refuses a
``pytest_plugins`` in a conftest below the rootdir when the whole repository is collected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ._support import SMALL_SPEC

if TYPE_CHECKING:
    from pathlib import Path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "wheel: builds a wheel and installs it into a fresh venv (network or cache)"
    )


@pytest.fixture
def small_spec(pytester: pytest.Pytester) -> Path:
    """``specs/toy/spec.md`` in the pytester directory."""
    path = pytester.path / "specs" / "toy" / "spec.md"
    path.parent.mkdir(parents=True)
    path.write_text(SMALL_SPEC, encoding="utf-8")
    return path
