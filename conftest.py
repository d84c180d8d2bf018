"""Hypothesis profiles for the whole repository.

Hypothesis loads a built-in ``ci`` profile whenever the ``CI`` environment variable is set, so
ours is registered under the same name explicitly: derandomized (a CI failure reproduces on any
machine), no per-example deadline (2 noisy cores), a bounded number of examples.
``HYPOTHESIS_PROFILE=deep`` explores much further; its example database stays out of git.
"""

from __future__ import annotations

import os

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
