"""The request parameters a governed call accepts: the SDK's, minus what the run decides."""

from __future__ import annotations

from typing import Any

__all__ = ["checked_params"]


def checked_params(
    params: dict[str, Any], required: tuple[str, ...], method: str, reserved: tuple[str, ...]
) -> dict[str, Any]:
    """``params`` if none is ``reserved`` and every ``required`` one is there; else a TypeError.

    Checked before the gate, so a call that could never be sent reserves nothing.
    """
    taken = [name for name in reserved if name in params]
    if taken:
        raise TypeError(
            f"{method}() does not take {', '.join(taken)}: the governed call sets stream by the "
            "method (create or stream) and timeout from the run's deadline"
        )
    missing = [name for name in required if name not in params]
    if missing:
        raise TypeError(f"{method}() is missing required parameter(s): {', '.join(missing)}")
    return params
