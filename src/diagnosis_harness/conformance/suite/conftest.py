"""The suite's Hypothesis profile: the one ``HYPOTHESIS_PROFILE`` names, when it is set.

In the repository the root ``conftest.py`` registers the ``ci`` / ``dev`` / ``deep`` profiles and
loads one; an installed wheel has no such file, so this one loads the named profile itself
(``diagnosis-harness report`` sets ``HYPOTHESIS_PROFILE=ci`` unless it is set). Hypothesis
registers its own ``ci`` profile; ``dev`` and ``deep`` come from
:func:`diagnosis_harness.modelcheck._stateful.register_profiles` when Hypothesis is installed.
Without Hypothesis (the example tests do not need it) this does nothing.
"""

from __future__ import annotations

import os


def _load_hypothesis_profile() -> None:
    name = os.environ.get("HYPOTHESIS_PROFILE")
    if not name:
        return
    try:
        from hypothesis import settings  # noqa: PLC0415 - optional: only the model checks need it
        from hypothesis.errors import InvalidArgument  # noqa: PLC0415
    except ImportError:
        return
    try:
        settings.get_profile(name)
    except InvalidArgument:
        try:
            from diagnosis_harness.modelcheck._stateful import (  # noqa: PLC0415
                register_profiles,
            )
        except ImportError:
            pass
        else:
            register_profiles()
    settings.load_profile(name)  # an unknown name is Hypothesis's InvalidArgument, naming it


_load_hypothesis_profile()
