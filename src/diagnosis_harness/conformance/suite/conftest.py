"""The suite's Hypothesis profile: the one ``HYPOTHESIS_PROFILE`` names, when it is set.

The profiles are defined once, in :mod:`diagnosis_harness.modelcheck._profiles` (the
repository's ``conftest.py`` and the ``model-check`` command load the same);
``diagnosis-harness report`` sets ``HYPOTHESIS_PROFILE=ci`` unless it is set. Without
Hypothesis (the example tests do not need it) this does nothing.
"""

from __future__ import annotations

import os


def _load_hypothesis_profile() -> None:
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if not name:
        return
    try:
        from diagnosis_harness.modelcheck._profiles import load_profile  # noqa: PLC0415
    except ImportError:  # no Hypothesis: only the model checks need it
        return
    load_profile(name)  # an unknown name is Hypothesis's InvalidArgument, naming it


_load_hypothesis_profile()
