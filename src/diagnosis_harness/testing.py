"""What you need to test your own boundaries: a manual clock, a Fake Model and a Fake Tool.

Both fakes are boundaries done right: they take the :class:`RunContext` as an argument, pass the
gate and reserve before doing anything (``ctx.reserve_model_call()`` / ``ctx.reserve_tool_call``),
and record what was actually invoked, so a test can assert that a refused call never ran.

>>> from diagnosis_harness import BudgetLimits, RunContext
>>> from diagnosis_harness.testing import FakeModel, FakeResponse, ManualClock
>>> limits = BudgetLimits(model_calls=5, tool_calls=5, per_tool_calls=5, input_tokens=100,
...                       output_tokens=100, total_tokens=150, run_bytes=1024)
>>> ctx = RunContext.create(session_id="s-1", run_id="r-1", limits=limits, timeout=30,
...                         clock=ManualClock())
>>> model = FakeModel([FakeResponse("root cause: disk full", input_tokens=40, output_tokens=20)])
>>> model.complete(ctx, "why is the service down?").text
'root cause: disk full'
>>> ctx.budget.snapshot().total_tokens
60

On a run with a money limit (``BudgetLimits(cost=...)``) each call must know its worst case: give
``FakeModel(..., max_cost=...)`` and each ``FakeResponse(..., cost=...)``, and
``FakeTool(..., price=...)``. The fakes hold the worst case before the call and settle the actual
after it, as a governed adapter does.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Generic, TypeVar, final

from ._clock import ManualClock
from ._money import checked_money
from ._validate import non_blank_str, non_negative_int

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._context import RunContext

__all__ = ["FakeModel", "FakeResponse", "FakeTool", "ManualClock", "ToolInvocation"]

T = TypeVar("T")

_ZERO = Decimal(0)


@final
@dataclass(frozen=True, slots=True)
class FakeResponse:
    """A scripted Model response, the token usage it reports and, for a money budget, what it
    cost (``cost``, a ``Decimal`` of US dollars >= 0; ``None``: nothing to settle)."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None

    def __post_init__(self) -> None:
        non_negative_int("input_tokens", self.input_tokens)
        non_negative_int("output_tokens", self.output_tokens)
        if self.cost is not None:
            checked_money("cost", self.cost)


@final
class FakeModel:
    """Answers from a script: each item is a :class:`FakeResponse` or an exception to raise.

    ``complete(ctx, prompt)`` reserves a Model call and its ``max_cost`` (raising the run's
    ``RunTerminated`` if it is over or the call is over budget), takes the next item, and for a
    response settles the call with its token usage and its ``cost`` (zero when it has none) --
    the actual, even past a limit -- before returning it. A scripted exception settles nothing:
    its hold stays at ``max_cost``, as a real call cut off in flight may still be billed.

    ``max_cost`` (a ``Decimal`` of US dollars >= 0, or ``None``) is each call's worst case; a run
    with a money limit refuses a Model call without one (``ValueError``).
    """

    __slots__ = ("_lock", "_max_cost", "_script", "prompts")

    def __init__(
        self, script: Iterable[FakeResponse | BaseException], *, max_cost: Decimal | None = None
    ) -> None:
        items = list(script)
        for item in items:
            if not isinstance(item, (FakeResponse, BaseException)):
                raise TypeError(f"script items must be FakeResponse or exceptions, got {item!r}")
        self._max_cost = None if max_cost is None else checked_money("max_cost", max_cost)
        self._script = deque(items)
        self._lock = threading.Lock()  # protects _script and prompts
        self.prompts: list[str] = []  # every prompt actually sent, in order

    def complete(self, ctx: RunContext, prompt: str) -> FakeResponse:
        hold = ctx.reserve_model_call(max_cost=self._max_cost)
        with self._lock:
            if not self._script:
                raise AssertionError("FakeModel script is exhausted: add more responses")
            item = self._script.popleft()
            self.prompts.append(prompt)
        if isinstance(item, BaseException):
            raise item
        hold.settle(
            cost=_ZERO if item.cost is None else item.cost,
            input_tokens=item.input_tokens,
            output_tokens=item.output_tokens,
        )
        return item

    @property
    def calls(self) -> int:
        return len(self.prompts)


@final
@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One actual invocation of a :class:`FakeTool`: what it was given and where it ran."""

    tool_call_id: str
    arguments: dict[str, object]
    context: RunContext
    thread_id: int


@final
class FakeTool(Generic[T]):
    """A Tool that records its invocations, returns ``result`` or raises ``error``.

    With ``barrier``, every invocation waits on it after reserving and recording, so a test can
    hold several invocations in flight at once. With ``price`` (a ``Decimal`` of US dollars >= 0
    a call), each invocation holds its price at the reservation and settles it once invoked,
    also when it raises ``error`` (the call ran); a run with a money limit refuses a Tool call
    without a price (``ValueError``).
    """

    __slots__ = ("_barrier", "_error", "_lock", "_price", "_result", "invocations", "name")

    def __init__(
        self,
        name: str,
        result: T,
        *,
        error: BaseException | None = None,
        barrier: threading.Barrier | None = None,
        price: Decimal | None = None,
    ) -> None:
        self.name = non_blank_str("name", name)
        self._price = None if price is None else checked_money("price", price)
        self._result = result
        self._error = error
        self._barrier = barrier
        self._lock = threading.Lock()  # protects invocations
        self.invocations: list[ToolInvocation] = []

    def __call__(self, ctx: RunContext, tool_call_id: str, **arguments: object) -> T:
        hold = ctx.reserve_tool_call(self.name, max_cost=self._price)
        invocation = ToolInvocation(tool_call_id, dict(arguments), ctx, threading.get_ident())
        with self._lock:
            self.invocations.append(invocation)
        try:
            if self._barrier is not None:
                self._barrier.wait()
            if self._error is not None:
                raise self._error
            return self._result
        finally:  # invoked: the call ran, and is paid for
            hold.settle(cost=_ZERO if self._price is None else self._price)

    @property
    def calls(self) -> int:
        return len(self.invocations)
