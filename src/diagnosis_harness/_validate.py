"""Argument checks shared by every public constructor: each names the argument and what is allowed.

``bool`` is an ``int`` to Python; it is never a count, a limit or a timestamp here.
"""

from __future__ import annotations

import math

__all__ = ["non_blank_str", "non_negative_int", "positive_int", "seconds"]


def positive_int(name: str, value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{name} must be a positive int (not bool), got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def non_negative_int(name: str, value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int >= 0 (not bool), got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def seconds(name: str, value: object) -> float:
    """A finite, non-negative number of seconds (int or float, not bool), returned unchanged.

    An ``int`` stays an ``int``: exact, and valid even past the float range (``10**400``), where
    ``float(value)`` would raise OverflowError instead of accepting or naming the argument.
    """
    if type(value) is int:
        if value < 0:
            raise ValueError(f"{name} must be finite and >= 0 seconds, got {value!r}")
        return value
    if type(value) is not float:
        raise TypeError(f"{name} must be a number of seconds (int or float), got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0 seconds, got {value!r}")
    return value


def non_blank_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{name} must not be blank, got {value!r}")
    return value
