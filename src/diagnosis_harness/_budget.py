"""``ctx.budget``: the run's seven limits, its counters against them, one consistent snapshot.

A view over the run's state (:mod:`._local_run`). The ACTIVE -> EXHAUSTED decision is the generated
budget table (``model/budget.toml``), its guard ``within_limits`` computed from the counters. A
reservation is all or nothing across the total and per-Tool counters: the call that would pass a
limit reserves nothing, so total Tool calls always equal the sum per Tool. Reported token usage
is different: the tokens were spent, so they are recorded as reported even past a limit, and that
exhausts the budget for good. Reservations go through the run (``ctx.reserve_*``), which checks
the run's deadline and outcome in the same decision.

Money. A Model or Tool call's reservation returns a :class:`CallHold`: the call's worst case
(``max_cost``), held against the money limit in the reservation's own decision, until
:meth:`CallHold.settle` records the actual cost and releases the rest. The amounts are integer
picodollars (rounded up, by :mod:`._money`, the one owner of that conversion) inside, ``Decimal``
US dollars outside; ``decimal`` is imported only when a hold or a settle is given an amount.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, final

from ._boundary import Boundary
from ._validate import non_negative_int

if TYPE_CHECKING:
    from collections.abc import Callable
    from decimal import Decimal

    from ._backend import RunBackend
    from ._clock import Clock
    from ._generated.tables import BudgetState
    from ._limits import BudgetDimension, BudgetLimits, BudgetUsage

__all__ = ["Budget", "CallHold", "granted_hold", "money_units"]


@final
class Budget:
    """The run's counters against its :class:`BudgetLimits`. Read it with :meth:`snapshot`."""

    __slots__ = ("_owner",)

    def __init__(self, run: RunBackend) -> None:
        self._owner = run

    @property
    def limits(self) -> BudgetLimits:
        return self._owner.limits

    @property
    def priced(self) -> bool:
        """The run or one of its ancestors has a money limit: every Model and Tool call must
        hold its worst case (``max_cost``) when it is reserved."""
        return self._owner.priced

    @property
    def state(self) -> BudgetState:
        return self._owner.budget_state

    @property
    def exhausted(self) -> BudgetDimension | None:
        """The first limit that exhausted the budget, or ``None`` while ACTIVE."""
        return self._owner.exhausted

    def snapshot(self) -> BudgetUsage:
        """Every counter, read in one decision: ``tool_calls == sum(per_tool_calls.values())``."""
        return self._owner.snapshot()

    def __repr__(self) -> str:
        return f"Budget(state={self.state.name}, exhausted={self.exhausted})"


_units_up: Callable[[str, object], int] | None = None  # ._money.units_up, once loaded


def _load_units() -> Callable[[str, object], int]:
    """``._money.units_up``, bound here on the first amount: an import statement in a function
    costs microseconds on every call, a global read nothing; and decimal loads only now."""
    global _units_up  # noqa: PLW0603 - the one lazily bound reference
    from ._money import units_up  # noqa: PLC0415 - lazily: it loads decimal

    _units_up = units_up
    return units_up


def money_units(name: str, value: object) -> int:
    """``value`` (a ``Decimal`` of US dollars >= 0, checked) as picodollars rounded up."""
    convert = _units_up
    if convert is None:
        convert = _load_units()
    return convert(name, value)


# Settling once is a test-and-set of the hold's own flag, made under this one lock shared by
# every hold: a lock of each hold's own would be built with every reservation, settled or not
# (most of what a reservation cost), while this one is taken only by a settle, for one read and
# one write, never around a call.
_SETTLING = threading.Lock()
_new = object.__new__


def granted_hold(owner: RunBackend, clock: Clock, tool: str | None, hold: int) -> CallHold:
    """The :class:`CallHold` of a call ``owner`` has granted -- a call of ``tool``, or a Model
    call when ``tool`` is ``None`` -- holding ``hold`` picodollars. For ``RunContext`` only."""
    self: CallHold = _new(CallHold)
    self._owner = owner
    self._clock = clock
    self._tool = tool
    self._hold = hold
    self._settled = False
    return self


@final
class CallHold:
    """The money one granted Model or Tool call holds: returned by ``ctx.reserve_model_call()``
    and ``ctx.reserve_tool_call(tool)``, never built directly (a direct call raises TypeError).

    It holds ``max_cost`` (zero when the reservation gave none) until :meth:`settle` records the
    call's actual cost and releases the hold. A hold settles once; a hold never settled stays
    charged at its worst case (a call cut off in flight may still be billed). Thread-safe: of
    racing settles exactly one turns ``_settled`` True (one test-and-set under ``_SETTLING``) and
    records; it turns back False only when that settle recorded nothing (its store refused).
    """

    __slots__ = ("_clock", "_hold", "_owner", "_settled", "_tool")

    _clock: Clock
    _hold: int
    _owner: RunBackend
    _settled: bool
    _tool: str | None

    def __init__(self, *args: object, **kwargs: object) -> None:  # noqa: ARG002
        raise TypeError(
            "a CallHold is returned by ctx.reserve_model_call(...) or "
            "ctx.reserve_tool_call(...); it cannot be built"
        )

    @property
    def boundary(self) -> Boundary:
        """``Boundary.MODEL`` for a Model call's hold, ``Boundary.TOOL`` for a Tool call's."""
        return Boundary.MODEL if self._tool is None else Boundary.TOOL

    @property
    def tool(self) -> str | None:
        """The Tool a Tool call's hold is for; ``None`` for a Model call's."""
        return self._tool

    @property
    def max_cost(self) -> Decimal:
        """The amount held, in US dollars: the reservation's ``max_cost`` (rounded up to a
        picodollar), or the part of it granted when the reservation gave ``min_cost``; zero when
        it gave none."""
        from ._money import dollars  # noqa: PLC0415 - lazily: it loads decimal

        return dollars(self._hold)

    @property
    def settled(self) -> bool:
        """Whether :meth:`settle` was called (or is being called) on this hold."""
        return self._settled

    def settle(
        self,
        *,
        cost: Decimal,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """Record the call's actual ``cost`` (US dollars, a ``Decimal`` >= 0, rounded up to a
        picodollar) and, for a Model call, its tokens, and release the rest of the hold, in one
        decision of the run.

        The actual is recorded as reported, even above ``max_cost`` or past a limit (the run
        then ends ``BUDGET_EXHAUSTED`` on ``COST``, or on a token limit, and the next controlled
        operation is refused; this call does not raise for it), and even after the run ended (the
        call it paid for happened). Bad input (a float or negative cost, negative tokens, tokens
        on a Tool call's hold) raises and changes nothing; a second settle raises RuntimeError
        and changes nothing.
        """
        convert = _units_up  # money_units(), one call less on the settle of every hold
        if convert is None:
            convert = _load_units()
        units = convert("cost", cost)
        tool = self._tool
        if tool is not None:
            if input_tokens is not None or output_tokens is not None:
                raise ValueError(
                    f"a Tool call's hold ({tool!r}) records no tokens: settle(cost=...) only"
                )
            boundary = Boundary.TOOL
            tokens_in = tokens_out = 0
        else:
            boundary = Boundary.MODEL
            tokens_in = (
                0 if input_tokens is None else non_negative_int("input_tokens", input_tokens)
            )
            tokens_out = (
                0 if output_tokens is None else non_negative_int("output_tokens", output_tokens)
            )
        with _SETTLING:
            again = self._settled
            self._settled = True
        if again:
            raise RuntimeError(f"{self!r} is settled already: a hold settles once")
        try:
            self._owner.settle(
                boundary,
                self._hold,
                units,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                now_ns=self._clock.monotonic_ns(),
            )
        except BaseException:
            self._settled = False  # nothing was recorded (a store refused): it may settle again
            raise

    def __repr__(self) -> str:
        call = "Model call" if self._tool is None else f"Tool call {self._tool!r}"
        state = "settled" if self._settled else "held"
        return f"CallHold({call}, max_cost={self.max_cost}, {state})"
