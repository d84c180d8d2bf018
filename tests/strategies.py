"""Shared Hypothesis strategies for bad input, and the small builders the Core tests share.

Every strategy here generates values that a public constructor or method must refuse; the
``expected_*`` helpers say which exception type a value deserves (wrong type: ``TypeError``,
right type but wrong value: ``ValueError``).
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    CancellationReason,
)

# One copy of the builders: the shipped conformance suite needs them without tests/.
from diagnosis_harness.conformance.suite._support import (
    GENEROUS,
    WHITESPACE,
    limits,
    new_run,
    state,
)

blank_text = st.text(alphabet=WHITESPACE, max_size=6)
"""The empty string and whitespace-only strings."""

non_str = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.binary(max_size=4),
    st.lists(st.text(max_size=2), max_size=2),
)
"""Anything but a ``str``."""

blank_or_non_str = st.one_of(blank_text, non_str)
"""What a name or ID must not be."""

non_int = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.decimals(allow_nan=False, allow_infinity=False),
)
"""Anything but an ``int`` (``bool`` included: it is never a count here)."""

not_positive_int = st.one_of(non_int, st.integers(max_value=0))
"""What a limit, a reservation size or an attempt count must not be."""

not_non_negative_int = st.one_of(non_int, st.integers(max_value=-1))
"""What a token count or a nanosecond amount must not be."""


def _valid_seconds(value: float) -> bool:
    return math.isfinite(value) and value >= 0


bad_seconds = st.one_of(
    st.booleans(),
    st.floats().filter(lambda x: not _valid_seconds(x)),
    st.integers(max_value=-1),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.decimals(allow_nan=False, allow_infinity=False),
)
"""What a duration in seconds must not be: NaN, infinities, negatives, non-numbers, bools.

``None`` is left out: for some parameters (``wait(timeout)``) it means "no timeout"."""

not_boundary = st.one_of(
    non_str,
    st.text(max_size=8),
    st.sampled_from([b.value for b in Boundary] + [b.name for b in Boundary]),
    st.sampled_from(list(CancellationReason)),
)
"""Anything but a ``Boundary`` member, including its names and values."""

not_reason = st.one_of(
    non_str,
    st.text(max_size=8),
    st.sampled_from([r.value for r in CancellationReason] + [r.name for r in CancellationReason]),
    st.sampled_from(list(Boundary)),
)
"""Anything but a ``CancellationReason`` member, including its names and values."""

not_callable = st.one_of(non_str, st.text(max_size=4)).filter(lambda x: not callable(x))
"""Anything that cannot be called."""


def expected_int_error(value: object) -> type[Exception]:
    """``TypeError`` for a value that is not an ``int`` (or is a ``bool``), else ``ValueError``."""
    return ValueError if type(value) is int else TypeError


def expected_seconds_error(value: object) -> type[Exception]:
    """``TypeError`` for a non-number (or ``bool``), ``ValueError`` for a bad number."""
    return ValueError if type(value) in (int, float) else TypeError


def expected_str_error(value: object) -> type[Exception]:
    """``TypeError`` for a non-``str``, ``ValueError`` for a blank one."""
    return ValueError if isinstance(value, str) else TypeError


# -- builders ---------------------------------------------------------------------------------

__all__ = [
    "GENEROUS",
    "WHITESPACE",
    "bad_seconds",
    "blank_or_non_str",
    "blank_text",
    "expected_int_error",
    "expected_seconds_error",
    "expected_str_error",
    "limits",
    "new_run",
    "non_int",
    "non_str",
    "not_boundary",
    "not_callable",
    "not_non_negative_int",
    "not_positive_int",
    "not_reason",
    "state",
]
