"""Governed Tool calls: one wrapper between any agent framework's Tool call and the run.

Theory of operation. A framework hands over a Tool call as a Tool name and its own Tool Call ID.
:class:`GovernedTools` turns it into the run's decisions, in this order, each one able to stop it:

1. check the input -- the name is a budget key (a non-blank ``str``) and the ID a safe key segment
   -- and build the Tool Call key ``{prefix}:{run_id}:{tool_call_id}`` from the ID unchanged
   (:class:`~diagnosis_harness.ToolCallKeyFactory`). Bad input changes no state;
2. run it under the run's Tool retry policy (``tool_call`` unless told otherwise) with a
   :class:`~diagnosis_harness.HarnessRetryExecutor`, which records every attempt; the first
   attempt starts by reserving the Tool call with ``ctx.reserve_tool_call`` -- the run's deadline
   and outcome, the total and the per-Tool limits, in one decision of the run -- and the Tool
   starts right after it is granted;
3. check the TOOL boundary again -- a deadline that passed while the Tool ran is the Tool
   call's, not its result's -- and reserve the result's size in bytes against the run's byte
   budget (``ctx.reserve_bytes``).

Money. A Tool may have a price per call (``tool_prices={"search": Decimal("0.10")}``, US dollars,
exact). A priced call holds its price in its reservation (``ctx.reserve_tool_call(tool,
max_cost=price)``, the same all-or-nothing decision as the call counters, so parallel calls never
hold more than the run's money limit), and settles it at that price when the call ends, however
it ends: a call that was granted started its Tool, and a Tool that failed, timed out or was
abandoned was still called (and, for a paid API, billed). A call refused before it ran holds and
pays nothing. Its attempts are one call (one key, one reservation), so one price. Under a money
limit (``BudgetLimits.cost``) a Tool without a price is refused before anything is reserved
(:class:`UnknownToolPrice`): a Tool is never silently free.

These decisions are one :class:`_ToolCall`'s, the same for :meth:`GovernedTools.call` and the
async calls, which only call, wait and await. The executor's journal names each call's Tool
(``harness retry [tool_call] Tool 'logs': ...``).

A Tool call is one reservation however many attempts its policy allows: the attempts are the same
call, under the same key, which is what lets a Tool use the key for idempotency. A refusal at step
2 or 3 is the run's ``RunTerminated`` (``BudgetExhausted``, ``RunTimedOut``, ...); a framework
adapter decides how the framework sees it (see ``integrations.pydantic_ai``).

No Tool call holds its caller past the run's end (the deadline, or a cancel from any thread or
process). An async attempt runs inside ``ctx.scope()``: the run's end cancels it, and the attempt
fails with the run's ``RunTerminated``. A sync Tool cannot be stopped, so it never runs on the
caller's thread: each attempt runs it in a new daemon thread (:class:`~.._threads.WorkerThreads`)
and waits for it or for the run's end, whichever comes first. When the run ends first the call is
*abandoned*: the caller gets the run's ``RunTerminated`` at once, the attempt is journaled
``ABANDONED``, and the Tool's late result is discarded -- not returned, its bytes not reserved.
Its thread runs on until the Tool returns, and does not keep the process from exiting.
"""

from __future__ import annotations

import functools
import inspect
import json
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, ParamSpec, TypeVar, final

from .._boundary import Boundary
from .._errors import HarnessError, RunTerminated
from .._keys import ToolCallKeyFactory
from .._retry import AttemptAbandoned, HarnessRetryExecutor
from .._threads import WorkerThreads, wait
from ._arguments import checked_ctx, executor_of, policy_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from concurrent.futures import Executor
    from decimal import Decimal

    from .._budget import CallHold
    from .._context import RunContext
    from .._retry import Classifier
    from .._retry_policy import RetryPolicy
    from .otel import HarnessTracing

__all__ = ["GovernedTools", "UnknownToolPrice", "budget_key", "checked_tool_prices", "result_bytes"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_TOOL_POLICY = "tool_call"
DEFAULT_KEY_PREFIX = "tool"


def result_bytes(result: object) -> int:
    """The size in bytes of a Tool result as a model would receive it.

    ``bytes``-like values count as they are, ``str`` as UTF-8, anything else as its JSON text
    (``json.dumps(..., default=str)``): a rough measure, but the same one for every Tool.
    """
    if isinstance(result, (bytes, bytearray)):
        return len(result)
    if isinstance(result, memoryview):
        return result.nbytes
    if isinstance(result, str):
        return len(result.encode("utf-8", "surrogatepass"))
    return len(json.dumps(result, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def budget_key(tool: object) -> str:
    """``tool`` unchanged if it can name a Tool in the budget, else a clear error."""
    if type(tool) is not str:
        raise TypeError(f"tool must be a str naming the Tool in the run's budget, got {tool!r}")
    if not tool.strip():
        raise ValueError(
            f"tool must be a non-blank str naming the Tool in the run's budget, got {tool!r}"
        )
    return tool


class UnknownToolPrice(HarnessError, LookupError):
    """A Tool call under a run's money limit, of a Tool without a price: it is not made.

    Raised by :class:`GovernedTools` before anything is reserved; ``tool`` names the Tool, and
    the message says how to give its price. A Tool is never priced as free by default.
    """

    def __init__(self, tool: str) -> None:
        self.tool = tool
        super().__init__(
            f"Tool {tool!r} has no price, and the run has a money limit (BudgetLimits.cost): "
            "each call must hold its worst case before it is made. Give its price per call: "
            f"GovernedTools(ctx, tool_prices={{{tool!r}: Decimal('0.10')}}) (Decimal('0') for a "
            "Tool that costs nothing)"
        )


def checked_tool_prices(prices: object) -> dict[str, Decimal]:
    """A private copy of ``prices``, each key a Tool's budget key and each value a ``Decimal``
    of US dollars >= 0; anything else raises, naming ``tool_prices`` and what is allowed."""
    from .._money import checked_money  # noqa: PLC0415 - lazily: it loads decimal

    if not isinstance(prices, Mapping):
        raise TypeError(
            "tool_prices must be a mapping of Tool name to its price per call, a Decimal of US "
            f"dollars, e.g. {{'search': Decimal('0.10')}}, got {prices!r}"
        )
    copy: dict[str, Decimal] = {}
    for tool, price in prices.items():
        if type(tool) is not str or not tool.strip():
            error = TypeError if type(tool) is not str else ValueError
            raise error(
                f"tool_prices keys must be non-blank str naming a Tool in the run's budget, "
                f"got {tool!r}"
            )
        copy[tool] = checked_money(f"tool_prices[{tool!r}]", price)
    return copy


def _sync(fn: object) -> None:
    """Refuses an ``fn`` that cannot be a sync Tool: not callable, or a coroutine function."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    if inspect.iscoroutinefunction(fn):
        raise TypeError(f"fn must not be a coroutine function, got {fn!r}: use call_async")


@final
class GovernedTools:
    """One run's Tool calls, governed: reserved, keyed, retried by policy, their results counted.

    ``policy`` is the retry policy every Tool call runs under (a name in ``ctx.retry_policies``
    or a :class:`RetryPolicy`); ``key_prefix`` the first segment of every Tool Call key;
    ``executor`` the :class:`HarnessRetryExecutor` whose journal records the attempts (a new one
    with ``classifier`` by default); ``measure`` the size of a result in bytes
    (:func:`result_bytes` by default); ``tracing`` (a ``HarnessTracing``, the ``otel`` extra) an
    ``execute_tool {tool}`` span per Tool call; ``tool_prices`` each Tool's price per call, a
    ``Decimal`` of US dollars >= 0 (held at the call's reservation, settled when it ends: see the
    module's "Money"; required, under a money limit, of every Tool called). Everything is checked
    here, before any Tool call.

    Holds no state of its own beyond that configuration: the counters are the run's, the journal
    the executor's. Thread- and task-safe as those are.
    """

    __slots__ = (
        "_ctx",
        "_executor",
        "_keys",
        "_measure",
        "_money_limited",
        "_policy",
        "_prices",
        "_tracing",
    )

    def __init__(
        self,
        ctx: RunContext,
        *,
        policy: RetryPolicy | str = DEFAULT_TOOL_POLICY,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        executor: HarnessRetryExecutor | None = None,
        classifier: Classifier | None = None,
        measure: Callable[[object], int] | None = None,
        tracing: HarnessTracing | None = None,
        tool_prices: Mapping[str, Decimal] | None = None,
    ) -> None:
        self._ctx = checked_ctx(ctx)
        self._prices = {} if tool_prices is None else checked_tool_prices(tool_prices)
        self._money_limited = ctx.budget.priced  # the run's or an ancestor's; fixed
        self._policy = policy_of(ctx, policy)
        self._keys = ToolCallKeyFactory(key_prefix)
        self._executor = executor_of(ctx, executor, classifier)
        if measure is not None and not callable(measure):
            raise TypeError(f"measure must be callable (result -> bytes), got {measure!r}")
        self._measure = result_bytes if measure is None else measure
        if tracing is not None:  # OpenTelemetry is imported only when tracing is asked for
            from .otel import check_tracing  # noqa: PLC0415 - lazy: the optional `otel` extra

            check_tracing(tracing)
        self._tracing = tracing

    @property
    def ctx(self) -> RunContext:
        return self._ctx

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy every Tool call runs under."""
        return self._policy

    @property
    def tool_prices(self) -> Mapping[str, Decimal]:
        """Each priced Tool's price per call, in US dollars (a read-only view of a copy)."""
        from types import MappingProxyType  # noqa: PLC0415 - only this property needs it

        return MappingProxyType(self._prices)

    def price_of(self, tool: str) -> Decimal | None:
        """What a call of ``tool`` holds and settles: its price; ``None`` when it has none and
        the run has no money limit (the call holds nothing). Raises :class:`UnknownToolPrice`
        when it has none under a money limit, ``TypeError``/``ValueError`` for a ``tool`` that
        cannot name a Tool in the budget."""
        price = self._prices.get(budget_key(tool))
        if price is None and self._money_limited:
            raise UnknownToolPrice(tool)
        return price

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs the Tool calls; its ``executions`` are their attempts journal."""
        return self._executor

    def key(self, tool_call_id: str) -> str:
        """The Tool Call key of the framework's ``tool_call_id``, the ID in it unchanged.

        Raises ``UnsafeKeySegment`` (a ``ValueError``) for an ID that is not a safe key segment.
        """
        return self._keys.key(self._ctx.run_id, tool_call_id)

    def key_for(self, tool: str, tool_call_id: str) -> str:
        """The Tool Call key of the call ``tool_call_id`` of ``tool``; reserves nothing.

        Checks the call's input as :meth:`call` does before anything changes: raises
        ``TypeError`` / ``ValueError`` for a ``tool`` that cannot name a Tool in the budget (not
        a non-blank ``str``), ``UnsafeKeySegment`` for an ID that is not a safe key segment.
        """
        budget_key(tool)
        return self.key(tool_call_id)

    def check(self, tool: str, tool_call_id: str) -> str:
        """Deprecated alias of :meth:`key_for`, which returns the same key.

        ``check`` named three things (the run's gate ``ctx.check``, the model checks, this).
        """
        warnings.warn(
            "GovernedTools.check is deprecated: use GovernedTools.key_for, which returns the "
            "same Tool Call key",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.key_for(tool, tool_call_id)

    def record_result(self, result: object) -> None:
        """Reserve the size of ``result`` against the run's byte budget (nothing for 0 bytes)."""
        size = self._measure(result)
        if type(size) is not int or size < 0:
            raise TypeError(f"measure must return an int >= 0 (bytes), got {size!r}")
        if size:
            self._ctx.reserve_bytes(size)

    def call(
        self, tool: str, tool_call_id: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(*args, **kwargs)`` as the governed call ``tool_call_id`` of ``tool``.

        Each attempt runs ``fn`` in a new daemon thread, and this thread waits for it or for the
        run's end: returns its result; raises bad input before anything changes, the run's
        ``RunTerminated`` when the reservation (of the call or of its result's bytes) is refused
        or the run ends while ``fn`` runs (the call abandoned), or ``fn``'s own last exception.
        """
        _sync(fn)
        call = _ToolCall(self, tool, tool_call_id)
        ctx = self._ctx

        def attempt() -> T:
            threads = call.begin()
            try:
                return wait(ctx, threads.submit(fn, *args, **kwargs))
            except RunTerminated as ending:
                call.interrupted(ending, threads)
                raise

        def run(attempt: Callable[[], T]) -> T:
            try:
                result = self._executor.execute_named(call.subject, self._policy, attempt)
            finally:
                call.settle()
            return call.finish(result)

        if self._tracing is None:
            return run(attempt)
        classify = self._executor.classify
        return self._tracing.tool_call(tool, tool_call_id, classify, run, attempt)

    async def call_async(
        self,
        tool: str,
        tool_call_id: str,
        fn: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``await fn(*args, **kwargs)`` as the governed call ``tool_call_id`` of ``tool``.

        The run's end cancels it: it raises the run's ``RunTerminated`` (see :meth:`call`).
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return await self.call_with_threads(
            tool, tool_call_id, lambda _threads: fn(*args, **kwargs)
        )

    async def call_in_thread(
        self, tool: str, tool_call_id: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """A sync ``fn(*args, **kwargs)`` as the governed call, awaited without blocking the loop.

        ``fn`` runs in a new daemon thread; the run's end abandons it (see :meth:`call`).
        """
        _sync(fn)
        call = functools.partial(fn, *args, **kwargs)

        def in_thread(threads: Executor) -> Awaitable[T]:
            import asyncio  # noqa: PLC0415 - lazy: only the async paths need asyncio

            return asyncio.get_running_loop().run_in_executor(threads, call)

        return await self.call_with_threads(tool, tool_call_id, in_thread)

    async def call_with_threads(
        self, tool: str, tool_call_id: str, fn: Callable[[Executor], Awaitable[T]]
    ) -> T:
        """``await fn(threads)`` as the governed call, ``fn`` handing its sync work to ``threads``.

        For a framework that runs a sync Tool in an executor of its own choosing (pydantic-ai's
        ``Agent.using_thread_executor``): ``threads`` is the attempt's
        :class:`~.._threads.WorkerThreads`. The run's end cancels the attempt's task; what still
        runs in ``threads`` then is abandoned, and the attempt journaled ``ABANDONED``.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return await self.call_nesting(tool, tool_call_id, lambda threads, _tracing: fn(threads))

    async def call_nesting(
        self,
        tool: str,
        tool_call_id: str,
        fn: Callable[[Executor, HarnessTracing | None], Awaitable[T]],
    ) -> T:
        """:meth:`call_with_threads` for a Tool whose work has spans of its own (a sub-agent's
        run): ``fn(threads, tracing)``, ``tracing`` the one whose parent is the call's
        ``execute_tool`` span (``None`` when this wrapper has no tracing)."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        call = _ToolCall(self, tool, tool_call_id)
        ctx = self._ctx

        def attempt_within(tracing: HarnessTracing | None) -> Callable[[], Awaitable[T]]:
            async def attempt() -> T:
                threads = call.begin()
                try:
                    # The deadline or a cancel cancels this task, and the Tool with it; a
                    # sibling's refusal that exhausted the budget does not: this call was
                    # granted, it finishes.
                    async with ctx.scope(Boundary.TOOL, cut_on_budget=False):
                        return await fn(threads, tracing)
                except RunTerminated as ending:
                    call.interrupted(ending, threads)
                    raise

            return attempt

        async def run(attempt: Callable[[], Awaitable[T]]) -> T:
            executor = self._executor
            try:
                result = await executor.execute_named_async(call.subject, self._policy, attempt)
            finally:
                call.settle()
            return call.finish(result)

        if self._tracing is None:
            return await run(attempt_within(None))
        classify = self._executor.classify
        return await self._tracing.tool_call_nesting_async(
            tool, tool_call_id, classify, run, attempt_within
        )

    def __repr__(self) -> str:
        return (
            f"GovernedTools(run_id={self._ctx.run_id!r}, policy={self._policy.name!r}, "
            f"key_prefix={self._keys.prefix!r})"
        )


@final
class _ToolCall:
    """One governed Tool call's decisions, written once for :meth:`GovernedTools.call` and the
    async calls: their attempts and runs only call, wait and await, and ask this what to do.

    Built only after the call's input passed (:meth:`GovernedTools.key_for`): bad input changes
    no state. Invariants: the Tool call is reserved at most once, when its first attempt begins
    (:meth:`begin`) -- after the executor's gate, so that nothing stands between a granted
    reservation and the Tool starting: a call is counted exactly when it runs (reserved before
    the gate, it could be counted and then refused there, when a concurrent refusal ended the run
    in between); a refused reservation is the attempt's failure, the run's ending its kind, and
    the Tool does not run. A result is returned only by :meth:`finish`, after the TOOL gate and
    its bytes' reservation. A priced call's hold is settled once, at its price, by :meth:`settle`
    when the executor has returned or raised -- the Tool was called -- and only if the
    reservation was granted (``_hold`` set). Owned by the one thread or task making the call:
    unlocked.
    """

    __slots__ = ("_hold", "_price", "_tools", "subject", "tool")

    def __init__(self, tools: GovernedTools, tool: str, tool_call_id: str) -> None:
        tools.key_for(tool, tool_call_id)
        self._price = tools.price_of(tool)  # an unpriced Tool under a money limit raises here
        self._tools = tools
        self.tool = tool
        self.subject = f"Tool {tool!r}"  # what the executor's journal names
        self._hold: CallHold | None = None

    def begin(self) -> WorkerThreads:
        """An attempt begins: the first reserves the Tool call and holds its price (retries
        reserve nothing); the attempt's own threads, for its sync work."""
        if self._hold is None:
            self._hold = self._tools.ctx.reserve_tool_call(self.tool, max_cost=self._price)
        return WorkerThreads(self.tool)

    def settle(self) -> None:
        """The call has ended, however: a granted, priced call pays its price (an unpriced one
        held nothing, and settles nothing); a call refused before it ran has no hold."""
        hold, price = self._hold, self._price
        if hold is not None and price is not None:
            hold.settle(cost=price)

    @staticmethod
    def interrupted(ending: RunTerminated, threads: WorkerThreads) -> None:
        """The run's ``ending`` interrupted an attempt: raises ``AttemptAbandoned`` when the
        attempt's work still runs in ``threads`` (the executor journals it ``ABANDONED``, and
        raises ``ending``); returns otherwise, for the attempt to raise ``ending`` itself."""
        if threads.running:
            raise AttemptAbandoned(ending) from None

    def finish(self, result: T) -> T:
        """The executor returned ``result``: a deadline that passed while the Tool ran is the
        Tool call's (the TOOL gate), not its result's; then the result's bytes are reserved."""
        tools = self._tools
        tools.ctx.check(Boundary.TOOL)
        tools.record_result(result)
        return result
