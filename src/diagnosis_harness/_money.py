"""Money's one representation change: ``Decimal`` US dollars outside, integer picodollars inside.

The one owner of the conversion, both ways: :func:`to_units` / :func:`from_units` (public through
:mod:`diagnosis_harness.pricing`), :func:`dollars` (units as a reader writes dollars),
:func:`tidy` (an amount without trailing zeros) and :func:`units_up` (a checked amount, rounded up
to a picodollar: what a hold or a settle records). Standard library only; the core imports this
module lazily, when an amount is given or read, so ``import diagnosis_harness`` does not load
``decimal``.

Invariant: ``units_up(name, a) == to_units(a, rounding="up")`` for every amount ``a`` it accepts,
and ``from_units(to_units(a)) >= a``: rounding never lets a hold fall below the dollars it stands
for. Its cache maps an amount to its units; a cached value is the value ``to_units`` computed, and
an equal amount (``Decimal("0.10")``, ``Decimal("0.1")``) has the same units.
"""

from __future__ import annotations

from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    ROUND_CEILING,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
)
from typing import Literal

from ._validate import non_negative_int

__all__ = [
    "EXACT",
    "USD_PER_UNIT",
    "checked_money",
    "checked_price",
    "dollars",
    "from_units",
    "tidy",
    "to_units",
    "units_up",
]

# Every computation goes through this one explicit context, never the thread's current decimal
# context (which a user may have changed, and which the library must not touch): precision as
# large as decimal allows, so a product or sum of finite Decimals is never rounded, and Inexact
# trapped, so that if one ever were, it would raise rather than be silently off.
EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, InvalidOperation])

_ONE = Decimal(1)

USD_PER_UNIT = Decimal("1E-12")
"""One unit of :func:`to_units`: a picodollar. Fine enough for genai-prices' data, where some
prices are below a nanodollar per token: in genai-prices 0.2.3, every price per token or per
request is a whole number of picodollars but 28 of 7,930, which carry a float's or a repeating
decimal's digits (``0.13999999999999999``, ``0.0416666666666667`` per million tokens) and which
no finer unit that fits an integer store would make whole. 2**53 picodollars (a double's exact
integers, Lua's numbers in Redis) is about $9,007."""

_UNIT_EXPONENT = 12


def checked_price(name: str, value: object) -> Decimal:
    """A finite, non-negative Decimal of US dollars; anything else raises, naming ``name``."""
    if isinstance(value, float):
        raise TypeError(
            f"{name} must be a Decimal of US dollars, not a float (money is exact): "
            f"write Decimal({str(value)!r}), got {value!r}"
        )
    if not isinstance(value, Decimal):
        raise TypeError(
            f"{name} must be a Decimal of US dollars, e.g. Decimal('0.1'), got {value!r}"
        )
    if not value.is_finite():
        raise ValueError(f"{name} must be a finite Decimal >= 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be a Decimal >= 0, got {value!r}")
    return value


def checked_money(name: str, value: object, *, positive: bool = False, hint: str = "") -> Decimal:
    """A finite ``decimal.Decimal`` of US dollars, >= 0 (> 0 when ``positive``); anything else
    (a float, an int, a bool, a str, NaN, Infinity, a negative amount) raises, naming ``name``."""
    bound = "> 0" if positive else ">= 0"
    if type(value) is not Decimal:
        exact = " (money is exact: not a float)" if isinstance(value, float) else ""
        raise TypeError(
            f"{name} must be a decimal.Decimal of US dollars {bound}, e.g. Decimal('2.00'){hint}"
            f"{exact}; got {value!r}"
        )
    if not value.is_finite() or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite Decimal of US dollars {bound}, got {value!r}")
    return value


def tidy(amount: Decimal) -> Decimal:
    """``amount`` without trailing zeros (``0.0028800`` as ``0.00288``), and never in exponent
    notation for a whole number (``10``, not ``1E+1``): the same value, as a reader writes it."""
    normal = amount.normalize(EXACT)
    whole = normal == normal.to_integral_value(context=EXACT)
    return normal.quantize(_ONE, context=EXACT) if whole else normal


def to_units(amount: Decimal, *, rounding: Literal["up", "exact"] = "up") -> int:
    """``amount`` US dollars as a whole number of picodollars (:data:`USD_PER_UNIT`).

    ``rounding="up"`` (the default) rounds a fraction of a unit up: for a hold, so that the
    integer held is never below the dollars it stands for. ``rounding="exact"`` raises
    ValueError when ``amount`` is not a whole number of units.
    """
    checked_price("amount", amount)
    if rounding not in ("up", "exact"):
        raise ValueError(f"rounding must be 'up' or 'exact', got {rounding!r}")
    units = amount.scaleb(_UNIT_EXPONENT, EXACT)
    whole = units.to_integral_value(rounding=ROUND_CEILING, context=EXACT)
    if rounding == "exact" and whole != units:
        raise ValueError(
            f"amount {amount} is not a whole number of picodollars (10**-12 USD); "
            "use rounding='up' to hold it rounded up"
        )
    return int(whole)


def from_units(units: int) -> Decimal:
    """``units`` picodollars (an int >= 0) as exact US dollars: ``to_units``' inverse."""
    non_negative_int("units", units)
    return Decimal(units).scaleb(-_UNIT_EXPONENT, EXACT)


def dollars(units: int) -> Decimal:
    """``units`` picodollars as exact US dollars, written as a reader writes them (``0.4``,
    ``0``, ``2``: no trailing zeros, no exponent)."""
    return tidy(from_units(units))


# The units of the amounts holds and settles were given lately. A Tool's price, a fixed
# max_cost, a cost the same as its hold: the same few amounts recur, and a hit costs a dict
# lookup instead of a check and three decimal operations. Bounded: once full it stops growing
# (the amounts a model call's worst case takes vary with its tokens, and would only churn it).
# Reads and inserts are single dict operations, atomic under the GIL and in free-threaded
# builds; two threads that miss the same amount insert the same value.
_UNITS: dict[Decimal, int] = {}
_UNITS_MAX = 512


def units_up(name: str, value: object) -> int:
    """``value`` (a ``Decimal`` of US dollars >= 0, checked; anything else raises, naming
    ``name``) as picodollars rounded up: ``to_units(value, rounding="up")``."""
    if type(value) is Decimal:  # an int equal to a cached Decimal must not hit: it is refused
        try:
            return _UNITS[value]
        except (KeyError, TypeError):  # TypeError: a signalling NaN has no hash; refused below
            pass
    amount = checked_money(name, value)
    units = amount.scaleb(_UNIT_EXPONENT, EXACT).to_integral_value(ROUND_CEILING, EXACT)
    result = int(units)
    if len(_UNITS) < _UNITS_MAX:
        _UNITS[amount] = result
    return result
