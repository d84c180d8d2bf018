"""Hypothesis profiles for the whole repository, and the suite checks CI runs only once.

Hypothesis loads a built-in ``ci`` profile whenever the ``CI`` environment variable is set, so
ours is registered under the same name explicitly: derandomized (a CI failure reproduces on any
machine), no per-example deadline (2 noisy cores), a bounded number of examples.
``HYPOTHESIS_PROFILE=deep`` explores much further; its example database stays out of git.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    stateful_step_count=30,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", deadline=None, max_examples=100, stateful_step_count=30)
settings.register_profile(
    "deep",
    deadline=None,
    max_examples=5_000,
    stateful_step_count=150,
    database=DirectoryBasedExampleDatabase(".hypothesis/deep"),
)
_default = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or _default)


# The bundled suite's schedule check enumerates every schedule of the races (as
# tests/modelcheck/test_scheduled_races.py does), which does not depend on the Python version, so
# the py3* envs leave it out. In CI it runs in every run of the suite by tox -e e2e (three, and one
# from the wheel); tox -e coverage runs the same checks in-process through test_scheduled_races.
# The marker is this repository's, so it is added here rather than in the shipped suite, whose own
# configuration (suite.ini) does not know it.
_ONCE_IN_THE_SUITE = frozenset({"diagnosis_harness.conformance.suite.model_checks.test_schedules"})


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ in _ONCE_IN_THE_SUITE:
            item.add_marker(pytest.mark.version_independent)
