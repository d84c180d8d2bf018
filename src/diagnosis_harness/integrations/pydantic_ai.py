"""A pydantic-ai agent governed by a run: ``Agent(..., capabilities=[HarnessCapability(ctx)])``.

Needs the ``pydantic-ai`` extra (``pip install 'diagnosis-harness[pydantic-ai]'``); importing
this module imports pydantic-ai, and nothing else in the library does.

Theory of operation. pydantic-ai runs a run's hooks in a task of their own, each model request in
a child task, and each tool call in a task of its own, all the calls of one model answer started
together; when one of those tasks raises, it cancels the others. So the capability works inside
those tasks, and never refuses a tool call by raising in one:

- ``wrap_run`` refuses an agent run on a run that has already ended, with the run's
  ``RunTerminated``; ``after_run`` / ``on_run_error`` record the run's one terminal outcome:
  ``SUCCESS`` with an output, ``FAILED`` on an exception -- unless the harness ended the run
  first (cancelled, timed out, budget exhausted), in which case ``agent.run`` raises that
  ending's ``RunTerminated`` (``BudgetExhausted``, ...), never a wrapper of it.
- ``wrap_model_request`` runs the request inside ``ctx.scope()``: the run's deadline, or a
  ``ctx.cancellation.cancel(...)`` from any thread, cancels a request in flight, streamed or not.
  ``get_wrapper_model`` (called for every attempt, with the model that serves it: another
  capability's retry or fallback model included) refuses a model whose SDK client retries on its
  own (``max_retries`` not 0), and wraps it: the wrapper reserves the Model call right before the
  request is sent and records the response's actual ``RequestUsage`` after it -- a stream's when
  it closes -- then checks every function tool call of the answer -- its name a budget key, its ID
  a safe key segment -- before any of them runs. (A wrapper rather than the
  ``prepare_model_request`` / ``after_model_request`` hooks: it stands right at the model, so it
  sees each request the model is asked to send, the streamed ones included.) With ``prices``,
  the reservation also holds the request's worst case in money and the wrapper sends the
  ``max_tokens`` it was held for (the default, or lowered to what the money left pays for); the
  response's usage, priced, settles it.
- ``wrap_tool_execute`` runs each tool call through :class:`~._tools.GovernedTools`: reserved
  (total and per-tool limits) right before it starts, run under the Tool retry policy, its
  result's bytes reserved. A refused reservation raises pydantic-ai's ``SkipToolExecution``
  instead of the refusal, so the calls that fit run and their siblings are not cancelled; the run
  has ended, and its next boundary (the next model request, or the end of the agent run) raises
  the run's ``RunTerminated`` out of ``agent.run``. No tool call starts after the run's end.
- A tool call in flight when the run's deadline passes or it is cancelled (from any thread, or
  another process through its store) is cut: each attempt runs in ``ctx.scope()``, so an async
  tool's task is cancelled. A sync tool, which a thread cannot be made to stop, runs in a new
  daemon thread of the harness (pydantic-ai's ``Agent.using_thread_executor``, around the call
  only) instead of anyio's worker threads, which the interpreter would wait for at exit: the
  call is abandoned, its thread left to finish, its late result discarded, and the attempt
  journaled ``ABANDONED``. Either way the call is skipped like a refused one, so its siblings
  are cut by the run's end too, not by pydantic-ai cancelling them, and ``agent.run`` raises the
  run's ``RunTimedOut`` / ``RunCancelled`` at its next boundary, at once.
- :meth:`HarnessCapability.delegate` runs a sub-agent from a tool (pydantic-ai's agent
  delegation) on a child run (``ctx.child``) with a capability of its own: its requests and tools
  are granted only if the child and every ancestor can grant them; the child's ending alone is a
  failed tool result for the parent's model (:class:`SubAgentEnded`), the parent's ending is
  raised as the parent's.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, final

from .._boundary import Boundary
from .._errors import RunTerminated
from .._generated.tables import RunState
from ._agent_endings import agent_run_ending, refused_tool_call, sub_agent_ended
from ._anthropic import TOOLS_PROMPT_TOKENS
from ._extras import missing_extra
from ._model_call import (
    DEFAULT_MAX_TOKENS,
    ModelCall,
    ModelCharge,
    ModelRequest,
    ModelReservation,
    TokenUsage,
    input_bound,
)
from ._tools import DEFAULT_KEY_PREFIX, DEFAULT_TOOL_POLICY, GovernedTools

try:
    import pydantic_core
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
    from pydantic_ai.exceptions import SkipToolExecution, ToolFailed
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelResponse,
        ToolCallPart,
    )
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import merge_model_settings
except ImportError as error:  # pragma: no cover - the extra is installed wherever tests run
    if error.name not in ("pydantic_ai", "pydantic_core"):
        raise
    raise missing_extra(
        "pydantic_ai",
        "pydantic-ai",
        "diagnosis_harness.integrations.pydantic_ai",
        python=(3, 11),  # the extra's marker: pydantic-ai supports 3.11+
    ) from error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from concurrent.futures import Executor
    from decimal import Decimal

    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.capabilities.abstract import (
        ValidatedToolArgs,
        WrapModelRequestHandler,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.messages import UserContent
    from pydantic_ai.models import (
        Model,
        ModelRequestContext,
        ModelRequestParameters,
        StreamedResponse,
    )
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import RunContext as AgentRunContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RequestUsage

    from .._clock import Deadline
    from .._context import RunContext
    from .._endings import RunTermination
    from .._failure import FailureKind
    from .._limits import BudgetLimits
    from .._retry import Classifier, HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from ..pricing import Prices
    from .otel import CurrentSpan

__all__ = ["HarnessCapability", "HarnessSpanAttributes", "SubAgentEnded", "tool_result_bytes"]

# The endings the harness decides itself; SUCCESS and FAILED follow how the agent run ended.
_HARNESS_ENDINGS = frozenset({RunState.CANCELLED, RunState.TIMED_OUT, RunState.BUDGET_EXHAUSTED})


def tool_result_bytes(result: object) -> int:
    """A tool result's size as pydantic-ai sends it: a ``str`` as UTF-8, anything else as JSON."""
    if isinstance(result, str):
        return len(result.encode("utf-8", "surrogatepass"))
    return len(pydantic_core.to_json(result, fallback=str))


def _refuse_hidden_retries(model: object) -> None:
    """Refuse a model whose SDK client retries on its own (pydantic-ai's OpenAI, Anthropic, Groq
    and other models hold one, as ``model.client``, with the SDK's ``max_retries``).

    Those retries happen inside one request: the run would reserve one Model call for up to three
    sent, and no attempt of theirs would be recorded. A model without such a client passes.
    """
    client = getattr(model, "client", None)
    retries = getattr(client, "max_retries", None)
    if type(retries) is int and retries != 0:
        raise ValueError(
            f"{type(model).__name__}'s {type(client).__qualname__} retries on its own "
            f"(max_retries={retries}): give its provider a client built with max_retries=0, "
            "e.g. OpenAIProvider(openai_client=async_openai_client(config))"
        )


@final
@dataclass(eq=False)
class HarnessCapability(AbstractCapability[Any]):
    """Governs every model request and tool call of a pydantic-ai agent run by ``ctx``.

    Use it on the agent (``Agent(..., capabilities=[HarnessCapability(ctx)])``) or for one run
    (``agent.run(..., capabilities=[...])``). One capability serves one ``RunContext``: the run's
    one terminal outcome is recorded by the first agent run that ends, and a later agent run on
    the ended run is refused with its termination.

    ``finishes_run=False`` makes it govern a sub-agent: its requests, tools, deadline and
    cancellation are the run's as always, but how the sub-agent's run ends records nothing -- the
    run's terminal outcome is its parent's to decide (a harness ending is still raised).

    ``tool_policy`` is the retry policy tool calls run under (a name in ``ctx.retry_policies``),
    ``key_prefix`` the first segment of their Tool Call keys, ``classifier`` maps a tool's
    exceptions to kinds for that policy. All are checked here: a bad one raises at construction.

    ``prices`` (``GenaiPrices()``, a ``PriceTable``) prices every model request: before it is
    sent, its worst case -- a bound on its input (the UTF-8 bytes of its messages, instructions
    and tool definitions) at the input price, plus its ``max_tokens`` at the output price -- is
    held against the run's money limit (``BudgetLimits(cost=...)``), and the response's usage,
    priced exactly, settles it. Required when the run has a money limit (a ``ValueError`` here).
    Under a money limit a request without ``max_tokens`` (pydantic-ai's ``model_settings``) is
    sent with ``default_max_tokens``, and one whose ``max_tokens`` the money left cannot pay for
    is sent with it lowered to what it can (:attr:`charges` says so). ``tool_prices`` gives the
    tools their price per call (``{"search": Decimal("0.10")}``), held when each call is
    reserved and settled when it ends; under a money limit a tool without one is refused
    before the call (:class:`~diagnosis_harness.integrations.GovernedTools`).
    """

    ctx: RunContext
    tool_policy: RetryPolicy | str = DEFAULT_TOOL_POLICY
    key_prefix: str = DEFAULT_KEY_PREFIX
    classifier: Classifier | None = None
    finishes_run: bool = True
    prices: Prices | None = None
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    tool_prices: Mapping[str, Decimal] | None = None
    # The parent run's model call, for a sub-agent's capability built by delegate() only: the
    # sub-agent's priced requests are journaled in the parent's charges too.
    _parent_call: ModelCall | None = field(default=None, repr=False)
    _tools: GovernedTools = field(init=False, repr=False)
    _model_call: ModelCall = field(init=False, repr=False)
    _charges: _ResponseCharges = field(init=False, repr=False)
    _sub_agents: _SubAgents = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if type(self.finishes_run) is not bool:
            raise TypeError(f"finishes_run must be a bool, got {self.finishes_run!r}")
        self._tools = GovernedTools(
            self.ctx,
            policy=self.tool_policy,
            key_prefix=self.key_prefix,
            classifier=self.classifier,
            measure=tool_result_bytes,
            tool_prices=self.tool_prices,
        )
        # pydantic-ai retries model requests itself: no policy; the executor is the tools'.
        self._model_call = ModelCall(
            self.ctx,
            policy=None,
            executor=self._tools.executor,
            prices=self.prices,
            default_max_tokens=self.default_max_tokens,
            parent=self._parent_call,
        )
        self._charges = _ResponseCharges()
        self._sub_agents = _SubAgents()

    @property
    def tools(self) -> GovernedTools:
        """The governed-tool wrapper every tool call goes through."""
        return self._tools

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor the tool calls run under: its ``executions`` are their attempts."""
        return self._tools.executor

    @property
    def charges(self) -> tuple[ModelCharge, ...]:
        """The priced model requests, in order: what each held, the ``max_tokens`` it was sent
        with (and whether the money left lowered it), what it settled. Empty without ``prices``.

        With those of every sub-agent run through :meth:`delegate` (and theirs), in the order
        they were reserved, each tagged with its ``run_id``: the journal of the run's spending,
        as ``ctx.budget.snapshot()`` counts it."""
        return self._model_call.charges

    @property
    def sub_agents(self) -> Mapping[str, HarnessCapability]:
        """The capability of each sub-agent run through :meth:`delegate`, by its run ID, in the
        order they were started: each one's :attr:`executor` journals its tool calls' attempts,
        its :attr:`charges` its priced requests, its :attr:`sub_agents` its own delegations."""
        return self._sub_agents.read()

    def charge_of(self, response: ModelResponse) -> ModelCharge | None:
        """The money of the priced request that answered ``response`` (``None``: not priced, not
        answered through this capability, or streamed: pydantic-ai hands on a stream's answer as
        a new snapshot of it, which no request answered). Read once: a second read gives
        ``None``. A streamed request's money is in :attr:`charges`."""
        return self._charges.take(response)

    def tool_call_key(self, tool_call_id: str) -> str:
        """The Tool Call key of a tool call (a tool reads its ID from ``ctx.tool_call_id``)."""
        return self._tools.key(tool_call_id)

    async def delegate(
        self,
        agent: AbstractAgent[Any, Any],
        user_prompt: str | Sequence[UserContent] | None = None,
        *,
        run_id: str,
        limits: BudgetLimits | None = None,
        timeout: float | None = None,
        deadline: Deadline | None = None,
        tool_prices: Mapping[str, Decimal] | None = None,
        span_attributes: bool = False,
        **run_kw: Any,
    ) -> AgentRunResult[Any]:
        """Run ``agent`` as a sub-agent on a child run of this capability's run; its result.

        Call it from a tool of the agent this capability governs (pydantic-ai's "agent
        delegation")::

            @parent_agent.tool
            async def search_logs(ctx: AgentRunContext[Deps], question: str) -> str:
                result = await ctx.deps.harness.delegate(
                    logs_agent, question, run_id=f"logs-{ctx.tool_call_id}",
                    limits=BudgetLimits(...),  # the sub-agent's share; None: the parent's
                )
                return result.output

        The child run is ``ctx.child(run_id=run_id, limits=limits, timeout=timeout,
        deadline=deadline)``: every model request and tool call of the sub-agent is granted only
        if the child and every ancestor can grant it, in one decision, and counts in all of them;
        its deadline is the earlier of its own and the parent's; the parent's end cancels it.
        The sub-agent runs with a ``HarnessCapability`` of its own on that run -- added before
        ``capabilities`` of ``run_kw`` -- with this one's tool policy, key prefix, classifier,
        ``prices`` and ``default_max_tokens`` (``tool_prices`` replaces this one's when given),
        and with :class:`HarnessSpanAttributes` on it when ``span_attributes``. ``run_kw`` goes
        to ``agent.run`` (``deps``, ``usage=ctx.usage``, ``message_history``, ...); ``timeout``
        and ``deadline`` are the child run's, which cut its requests and tools in flight.

        How it returns:

        - the sub-agent's output: its ``AgentRunResult``, and the child run ``SUCCESS``;
        - the parent's run has ended -- cancelled, timed out, its budget exhausted by this
          sub-agent or by another, before or during the delegation -- the parent's
          ``RunTerminated``, as a refused tool call would (the parent's next boundary ends the
          parent's agent run with it); the child ended ``CANCELLED`` (``PARENT_ENDED``) or with
          the parent;
        - the child alone has ended -- its own limit or deadline, a cancel of the child, an
          exception of the sub-agent (``FAILED``) -- :class:`SubAgentEnded`, a pydantic-ai
          ``ToolFailed``: the parent's model is told, and the parent's run goes on. A task
          cancellation passes through, and a child it left running is ended ``FAILED``.

        Bad input -- a ``run_id`` used before in the run's tree, a bad limit, both ``timeout``
        and ``deadline`` -- raises from ``ctx.child`` before the sub-agent starts.
        """
        if type(span_attributes) is not bool:
            raise TypeError(f"span_attributes must be a bool, got {span_attributes!r}")
        child_ctx = self.ctx.child(run_id=run_id, limits=limits, timeout=timeout, deadline=deadline)
        child = HarnessCapability(
            child_ctx,
            tool_policy=self.tool_policy,
            key_prefix=self.key_prefix,
            classifier=self.classifier,
            prices=self.prices,
            default_max_tokens=self.default_max_tokens,
            tool_prices=self.tool_prices if tool_prices is None else tool_prices,
            _parent_call=self._model_call,
        )
        self._sub_agents.add(child)
        capabilities: list[Any] = [child]
        if span_attributes:
            capabilities.append(HarnessSpanAttributes(child))
        capabilities.extend(run_kw.pop("capabilities", None) or ())
        try:
            return await agent.run(user_prompt, capabilities=capabilities, **run_kw)
        except Exception as error:
            # The child's capability recorded its ending (or the harness had); an exception
            # raised before the sub-agent's run started leaves it to be recorded here.
            child_ctx.lifecycle.fail(agent_run_ending(error))
            self.ctx.check(Boundary.TOOL)  # the parent has ended: its own ending, as it is
            termination = child_ctx.lifecycle.termination
            assert termination is not None  # the child ended above, if not before
            raise SubAgentEnded(child_ctx.run_id, termination) from error
        finally:
            # A task cancellation (the parent's tool cut, pydantic-ai cancelling its siblings)
            # leaves no child running without a delegation to end it.
            if child_ctx.lifecycle.termination is None:
                child_ctx.lifecycle.fail("the delegation was cancelled before the sub-agent ended")

    def get_ordering(self) -> CapabilityOrdering:
        # Outermost: the run's deadline and cancellation enclose every other capability's work,
        # and what another capability retries is still reserved and recorded here.
        return CapabilityOrdering(position="outermost")

    # -- the agent run: refused on an ended run, then its one terminal outcome ---------------------

    async def wrap_run(
        self, ctx: AgentRunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        self.ctx.check(Boundary.MODEL)  # an ended run refuses the agent run: its first step
        return await handler()

    async def after_run(
        self, ctx: AgentRunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        if self.finishes_run:
            finish = self.ctx.lifecycle.succeed(agent_run_ending(None))
            if finish.changed or finish.termination.state is RunState.SUCCESS:
                return result
        self.ctx.check(Boundary.GUARD)  # an ended run withholds the output: raises its ending
        return result

    async def on_run_error(
        self, ctx: AgentRunContext[Any], *, error: BaseException
    ) -> AgentRunResult[Any]:
        if isinstance(error, RunTerminated) or not isinstance(error, Exception):
            raise error  # the run's own ending, or a task cancellation: nothing to record
        if self.finishes_run:
            self.ctx.lifecycle.fail(agent_run_ending(error))
        if self.ctx.lifecycle.state in _HARNESS_ENDINGS:
            try:
                self.ctx.check(Boundary.GUARD)  # the harness ended the run first: its ending
            except RunTerminated as ending:
                raise ending from error
        raise error

    # -- model requests: in the run's scope, one Model call per attempt, usage recorded ---------

    async def wrap_model_request(
        self,
        ctx: AgentRunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        # The scope's entry is the gate: an ended run refuses the request there, before the
        # handler runs (ctx.scope checks the MODEL boundary and raises every ending).
        async with self.ctx.scope(Boundary.MODEL):
            return await handler(request_context)

    def get_wrapper_model(self, model: Model) -> Model:
        # Called for every attempt, with the model that serves it (another capability's retry or
        # fallback included): the attempt's Model call is reserved by the wrapper, not a hook.
        _refuse_hidden_retries(model)
        return _GovernedAttemptModel(model, self._model_call, self._tools, self._charges)

    # -- tool calls: governed, and a refusal skips the call instead of cancelling its siblings --

    async def wrap_tool_execute(
        self,
        ctx: AgentRunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        async def execute(threads: Executor) -> Any:
            # A sync tool runs in the attempt's daemon threads: abandoned, not waited for, when
            # the run ends while it runs. (pydantic-ai's own setting, for this call only.)
            with Agent.using_thread_executor(threads):
                return await handler(args)

        try:
            return await self._tools.call_with_threads(call.tool_name, call.tool_call_id, execute)
        except RunTerminated as refused:
            # Refused before it started, cut or abandoned by the run's end, or its result refused:
            # the run has ended, and its next boundary raises that. Raising here would make
            # pydantic-ai cancel sibling calls that were granted and have not started.
            raise SkipToolExecution(refused_tool_call(refused)) from refused


@final
class SubAgentEnded(ToolFailed):
    """A sub-agent's run ended without its output while its parent's run goes on.

    Raised by :meth:`HarnessCapability.delegate` in the parent's tool: a pydantic-ai
    ``ToolFailed``, so the parent's model is told (its ``message``: ``sub-agent run 'logs-1'
    ended BUDGET_EXHAUSTED: tool_calls limit ...``) and can adapt, and the parent's run is not
    ended by it. ``run_id`` is the child run's, ``termination`` its one terminal outcome; the
    exception the sub-agent's run raised is the ``__cause__``. Catch it in the tool to answer
    something else, or to re-raise the cause.
    """

    def __init__(self, run_id: str, termination: RunTermination) -> None:
        self.run_id = run_id
        self.termination = termination
        super().__init__(sub_agent_ended(run_id, termination))


@final
class _SubAgents:
    """The capabilities of one capability's sub-agents, by run ID, in the order they started.

    A parent's tools may delegate from several tasks at once: ``_by_run`` is guarded by
    ``_lock``; a read is a copy.
    """

    __slots__ = ("_by_run", "_lock")

    def __init__(self) -> None:
        self._by_run: dict[str, HarnessCapability] = {}
        self._lock = threading.Lock()

    def add(self, capability: HarnessCapability) -> None:
        with self._lock:
            self._by_run[capability.ctx.run_id] = capability

    def read(self) -> Mapping[str, HarnessCapability]:
        with self._lock:
            return MappingProxyType(dict(self._by_run))


_CALL_NAME = "pydantic-ai model request"


@final
class _GovernedAttemptModel(WrapperModel):
    """The model serving one attempt of a governed run's model request.

    Each ``request`` (or ``request_stream``) reserves the attempt's Model call on the run's
    :class:`ModelCall` before the wrapped model sends anything, and records the response's
    actual usage on that reservation after it -- a stream's when it closes, also when its
    consumer stops early or it fails, with the usage its chunks reported. (pydantic-ai retries
    model requests itself, and ``wrap_model_request`` holds the run's scope: neither is done
    here.) Every function tool call of a whole answer is checked -- its name a budget key, its
    ID a safe key segment, its price known under a money limit -- before any of them starts: a
    bad one fails the agent run here, not in its own task where its siblings may have run.
    """

    def __init__(
        self,
        wrapped: Model,
        model_call: ModelCall,
        tools: GovernedTools,
        charges: _ResponseCharges,
    ) -> None:
        super().__init__(wrapped)
        self._model_call = model_call
        self._tools = tools
        self._charges = charges

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        request = self._priced(messages, model_settings, model_request_parameters)
        with self._model_call.reserve(_CALL_NAME, request) as reservation:
            response = await self.wrapped.request(
                messages, _sent_settings(model_settings, reservation), model_request_parameters
            )
            # Priced, a response without usage is UsageNotReported (never silently free), and
            # its hold stays; unpriced, its tokens are recorded as pydantic-ai reports them.
            reservation.record_response(
                response, _priced_usage_of if request is not None else _usage_of
            )
        if request is not None:
            self._charges.note(response, reservation)
        self._check_tool_calls(response, model_request_parameters)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: AgentRunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        request = self._priced(messages, model_settings, model_request_parameters)
        with self._model_call.reserve(_CALL_NAME, request) as reservation:
            async with self.wrapped.request_stream(
                messages,
                _sent_settings(model_settings, reservation),
                model_request_parameters,
                run_context,
            ) as stream:
                try:
                    yield stream
                finally:  # what the stream received so far: also when cut, or its consumer left
                    reservation.end_stream(_StreamUsage(stream.usage), complete=False)
                self._check_tool_calls(stream.get(), model_request_parameters)

    def _priced(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
    ) -> ModelRequest | None:
        """What a priced request's worst case is computed from; ``None`` when not priced.

        The input bound covers what the request sends: the messages (the instructions are in
        them) and the request's parameters (the tool definitions and their schemas, the output
        tools), plus, for a Claude model given tools, the tool-use system prompt Anthropic adds
        (:data:`~._anthropic.TOOLS_PROMPT_TOKENS`); ``max_tokens`` is the one the wrapped model
        would send (its own settings, under the run's).
        """
        if self._model_call.prices is None:
            return None
        payload = {
            "messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
            "parameters": pydantic_core.to_jsonable_python(parameters, fallback=str),
        }
        settings = merge_model_settings(self.wrapped.settings, model_settings) or {}
        model, provider = self.wrapped.model_name, self.wrapped.system
        bound = input_bound(payload)
        claude = provider == "anthropic" or "claude" in model.lower()
        if claude and (parameters.function_tools or parameters.output_tools):
            bound += TOOLS_PROMPT_TOKENS  # Anthropic's tool-use system prompt, never sent
        return ModelRequest(
            model=model,
            input_bound=bound,
            max_tokens=settings.get("max_tokens"),
            provider=provider or None,
        )

    def _check_tool_calls(
        self, response: ModelResponse, parameters: ModelRequestParameters
    ) -> None:
        tools: set[str] | None = None  # built for an answer that calls a tool, once
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                if tools is None:
                    tools = {tool.name for tool in parameters.function_tools}
                if part.tool_name in tools:
                    self._tools.key_for(part.tool_name, part.tool_call_id)
                    self._tools.price_of(part.tool_name)  # unpriced under a money limit: raises


@final
class _ResponseCharges:
    """Which priced request answered which response: for the response's ``chat`` span.

    pydantic-ai's ``after_model_request`` hook sees the response, not the wrapper's reservation;
    the wrapper notes it here, keyed by the response object (a capability may serve concurrent
    runs, so no "last request" would do). An entry leaves when it is read or when its response
    is collected (``weakref.finalize``), so a run without span attributes keeps none for long.
    ``_by_response`` is guarded by ``_lock``.
    """

    __slots__ = ("_by_response", "_lock")

    def __init__(self) -> None:
        self._by_response: dict[int, ModelReservation] = {}
        self._lock = threading.Lock()

    def note(self, response: ModelResponse, reservation: ModelReservation) -> None:
        key = id(response)
        with self._lock:
            self._by_response[key] = reservation
        # The id is free for reuse only once the response is collected: forget it then.
        weakref.finalize(response, self._forget, key, reservation)

    def take(self, response: ModelResponse) -> ModelCharge | None:
        with self._lock:
            reservation = self._by_response.pop(id(response), None)
        return None if reservation is None else reservation.charge()

    def _forget(self, key: int, reservation: ModelReservation) -> None:
        with self._lock:
            if self._by_response.get(key) is reservation:
                del self._by_response[key]


def _sent_settings(
    settings: ModelSettings | None, reservation: ModelReservation
) -> ModelSettings | None:
    """The request's settings with the reservation's ``max_tokens`` (the default, or lowered to
    what the money left can pay for); unchanged when it adds nothing."""
    max_tokens = reservation.max_tokens
    if max_tokens is None:
        return settings
    sent: ModelSettings = {**(settings or {}), "max_tokens": max_tokens}
    return sent


def _reported(usage: RequestUsage) -> TokenUsage | None:
    """A ``RequestUsage`` as the run records it; ``None`` when the provider omitted it."""
    if usage.unmeasured_requests:
        return None
    # pydantic-ai counts the prompt cache's tokens inside input_tokens, as the prices do.
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
    )


def _priced_usage_of(response: ModelResponse) -> TokenUsage | None:
    return _reported(response.usage)


def _usage_of(response: ModelResponse) -> TokenUsage:
    """An unpriced response's usage as pydantic-ai reports it (zeros when the provider omitted
    it, as before money budgets: the token budget counts what it is told)."""
    usage = response.usage
    return TokenUsage(usage.input_tokens, usage.output_tokens)


@final
class _StreamUsage:
    """A pydantic-ai stream's usage when it ends: what its chunks reported, if anything.

    ``None`` when nothing was received (a stream cut before the provider's usage chunk): a
    priced hold then stays at its worst case. The stream ends with ``complete=False`` whatever
    its end: pydantic-ai's consumer may stop reading once it has its output, and a stream
    records what it received rather than raising for a usage it lacks.
    """

    __slots__ = ("_usage",)

    def __init__(self, usage: RequestUsage) -> None:
        self._usage = _reported(usage) if usage.has_values() else None

    def observe(self, chunk: object, /) -> None:
        """The stream's usage is read once, at its end."""

    @property
    def final(self) -> bool:
        return self._usage is not None

    def usage(self) -> TokenUsage | None:
        return self._usage


@final
@dataclass(eq=False)
class HarnessSpanAttributes(AbstractCapability[Any]):
    """The harness's attributes on the OpenTelemetry spans pydantic-ai emits itself.

    Needs the ``otel`` extra. Give it after the run's :class:`HarnessCapability`, to an agent that
    pydantic-ai instruments (its ``Instrumentation`` capability, or ``Agent.instrument_all()``)::

        Agent(model, capabilities=[HarnessCapability(ctx), HarnessSpanAttributes(capability)])

    It starts no span -- nothing is doubled -- and sets, on pydantic-ai's ``invoke_agent`` span,
    the run's termination state and exhausted dimension; on each ``chat`` span, the request's
    outcome (and failure kind) and, for a priced request that was not streamed, its money
    (``gen_ai.usage.cost``, the hold, the ``max_tokens`` sent and whether it was lowered: see
    :mod:`~diagnosis_harness.integrations.otel`); on each ``execute_tool`` span (one per
    attempt), the attempt's number, outcome and failure kind, as the capability's executor
    classifies them. A Tool call the budget refused never starts, so pydantic-ai opens no span
    for it.

    It runs inside pydantic-ai's spans (its ordering is the default one, inside pydantic-ai's
    ``Instrumentation``, which is outermost) and finds each as OpenTelemetry's current span: that
    is OpenTelemetry's context, set by pydantic-ai, not the harness's. A separate capability, so
    that an agent without tracing pays for none of its hooks.
    """

    capability: HarnessCapability
    # tool_call_id -> the attempts started so far; written and read in wrap_tool_execute only
    _attempts: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _span: CurrentSpan = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if type(self.capability) is not HarnessCapability:
            raise TypeError(f"capability must be a HarnessCapability, got {self.capability!r}")
        from .otel import CurrentSpan  # noqa: PLC0415 - lazy: the optional `otel` extra

        self._span = CurrentSpan()

    def _kind(self, error: Exception) -> FailureKind:
        return self.capability.executor.classify(error)

    async def wrap_run(
        self, ctx: AgentRunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:  # the run's after_run / on_run_error hooks, which record its outcome, have run
            self._span.run(self.capability.ctx)
            self._attempts.clear()  # a call whose last attempt failed left its count

    async def after_model_request(
        self,
        ctx: AgentRunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        self._span.chat(None, self._kind, self.capability.charge_of(response))
        return response

    async def on_model_request_error(
        self, ctx: AgentRunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        self._span.chat(error, self._kind)
        raise error

    async def wrap_tool_execute(
        self,
        ctx: AgentRunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        number = self._attempts.get(call.tool_call_id, 0) + 1
        self._attempts[call.tool_call_id] = number
        try:
            result = await handler(args)
        except BaseException as error:
            self._span.tool(number, error, self._kind)
            raise
        self._span.tool(number, None, self._kind)
        del self._attempts[call.tool_call_id]  # the call is done: its last attempt succeeded
        return result
