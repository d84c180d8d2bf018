"""The Hypothesis profiles ``ci``, ``dev`` and ``deep``: defined here once.

The repository's ``conftest.py``, the bundled suite's ``conftest.py`` and the ``model-check``
command all register these (:func:`register_profiles`) and load one (:func:`load_profile`), so a
profile means the same everywhere. Hypothesis registers a built-in ``ci`` profile of its own;
registering ours replaces it.

* ``ci``: derandomized (a failure reproduces on any machine), no example database (nothing is
  written where the checks run), no per-example deadline (shared, noisy cores), 100 examples x
  30 steps.
* ``dev``: the same sizes, random seeds, Hypothesis's default database.
* ``deep``: 5,000 examples x 150 steps; its database is in the user's cache, never in a
  repository.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PROFILES", "load_profile", "register_profiles", "settings_for"]

PROFILES: Final = ("ci", "dev", "deep")


def _deep_database() -> DirectoryBasedExampleDatabase:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return DirectoryBasedExampleDatabase(str(Path(cache) / "diagnosis-harness" / "hypothesis-deep"))


def settings_for(profile: str) -> settings:
    """The Hypothesis settings of ``profile`` (``ci``, ``dev`` or ``deep``)."""
    if profile == "ci":
        return settings(
            derandomize=True,
            database=None,
            deadline=None,
            max_examples=100,
            stateful_step_count=30,
            suppress_health_check=[HealthCheck.too_slow],
            print_blob=True,
        )
    if profile == "dev":
        return settings(deadline=None, max_examples=100, stateful_step_count=30)
    if profile == "deep":
        return settings(
            deadline=None,
            max_examples=5_000,
            stateful_step_count=150,
            suppress_health_check=[HealthCheck.too_slow],
            database=_deep_database(),
        )
    raise ValueError(f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}")


def register_profiles(register: Callable[[str, settings], object] | None = None) -> None:
    """Register every profile (``register`` defaults to ``settings.register_profile``)."""
    for name in PROFILES:
        (register or settings.register_profile)(name, settings_for(name))


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load ``name``; by default ``HYPOTHESIS_PROFILE``, else ``ci``
    when ``CI`` is set, else ``dev``. Returns the name loaded."""
    register_profiles()
    chosen = (
        name or os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    )
    settings.load_profile(chosen)  # an unknown name is Hypothesis's InvalidArgument, naming it
    return chosen
