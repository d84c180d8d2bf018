"""The one message for an optional package that is not installed."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(module: str, extra: str, purpose: str) -> ImportError:
    """The ``ImportError`` to raise (``from`` the original) when ``module`` itself is missing.

    Callers check ``error.name == module`` first: a broken install of the package (one of *its*
    imports missing) is re-raised as it is, never reported as "not installed".
    """
    return ImportError(
        f"{purpose} needs the {module!r} package, which is not installed; "
        f"install it with: pip install 'diagnosis-harness[{extra}]'"
    )
