"""Hypothesis profiles for the whole repository, and the suite checks CI runs only once.

The profiles (``ci``, ``dev``, ``deep``) are defined once, in
``diagnosis_harness.modelcheck._profiles``, which the bundled suite and the ``model-check``
command load too. ``HYPOTHESIS_PROFILE`` picks one; by default ``ci`` when ``CI`` is set, else
``dev``.
"""

from __future__ import annotations

import pytest

from diagnosis_harness.modelcheck._profiles import load_profile

load_profile()


# The bundled suite's schedule check enumerates every schedule of the races (as
# tests/modelcheck/test_scheduled_races.py does), which does not depend on the Python version, so
# the py3* envs leave it out. In CI it runs in every run of the suite by tox -e e2e, which also runs
# the same checks in-process through test_scheduled_races (and so deselects this module).
# The marker is this repository's, so it is added here rather than in the shipped suite, whose own
# configuration (suite.ini) does not know it.
_ONCE_IN_THE_SUITE = frozenset({"diagnosis_harness.conformance.suite.model_checks.test_schedules"})


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ in _ONCE_IN_THE_SUITE:
            item.add_marker(pytest.mark.version_independent)
