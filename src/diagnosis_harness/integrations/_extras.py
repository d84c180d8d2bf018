"""The one message for an optional package that is not installed."""

from __future__ import annotations

import sys

__all__ = ["missing_extra"]


def missing_extra(
    module: str, extra: str, purpose: str, *, python: tuple[int, int] | None = None
) -> ImportError:
    """The ``ImportError`` to raise (``from`` the original) when ``module`` itself is missing.

    Callers check ``error.name == module`` first: a broken install of the package (one of *its*
    imports missing) is re-raised as it is, never reported as "not installed". ``python`` is the
    oldest Python the package supports, when it is newer than ours: on an older one the extra
    installs nothing, so the message says which Python it needs instead of a command that would
    not help.
    """
    if python is not None and sys.version_info[:2] < python:
        running = ".".join(map(str, sys.version_info[:2]))
        return ImportError(
            f"{purpose} needs the {module!r} package, which supports Python "
            f"{python[0]}.{python[1]}+ only (this is Python {running}): on Python "
            f"{python[0]}.{python[1]}+, install it with: pip install 'diagnosis-harness[{extra}]'"
        )
    return ImportError(
        f"{purpose} needs the {module!r} package, which is not installed; "
        f"install it with: pip install 'diagnosis-harness[{extra}]'"
    )
