"""``import diagnosis_harness.redis`` without redis-py names the extra to install.

Each check runs in a fresh interpreter, redis-py blocked (``sys.modules["redis"] = None``, as if
it were not installed) or replaced by a broken one: in this one, other tests imported it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from fresh import run_fresh

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.version_independent


def test_without_redis_py_the_error_names_the_extra() -> None:
    code = """
        import sys
        sys.modules["redis"] = None  # as if redis-py were not installed
        import diagnosis_harness
        try:
            import diagnosis_harness.redis
        except ImportError as error:
            print(error)
    """
    assert run_fresh(code) == (
        "diagnosis_harness.redis needs the 'redis' package, which is not installed; "
        "install it with: pip install 'diagnosis-harness[redis]'"
    )


def test_a_broken_redis_py_is_not_reported_as_missing(tmp_path: Path) -> None:
    """Only redis-py itself missing means "install the extra"; its own missing import
    propagates as it is."""
    fake = tmp_path / "redis"
    fake.mkdir()
    (fake / "__init__.py").write_text("import a_dependency_that_is_not_installed\n")
    code = """
        try:
            import diagnosis_harness.redis
        except ModuleNotFoundError as error:
            print(error.name)
    """
    assert run_fresh(code, extra_path=tmp_path) == "a_dependency_that_is_not_installed"
