"""openai-agents under a diagnosis run: a ``RunConfig`` whose Model and Tool calls are the run's.

Theory of operation. openai-agents (0.24) limits a run by ``max_turns`` only, and its
``RunConfig`` carries no run hooks and no tool guardrails of its own. What it does carry, and what
every Model call of a run goes through, is the model provider. :func:`harness_run_config` builds a
``RunConfig`` whose provider wraps yours (and whose ``model``, if you give a ``Model``, is wrapped
the same way); each wrapped Model call is, in order:

1. the check that every function tool the agent offers is governed (:func:`governed_tool`), and
   that the run is still live -- a run config built on a run that already ended refuses here,
   with the run's own ``RunTerminated``, before anything is sent;
2. one execution under the run's Model retry policy
   (:class:`~diagnosis_harness.HarnessRetryExecutor` records each attempt); each attempt reserves
   one Model call (``ctx.reserve_model_call``) and sends the request inside ``ctx.scope()``, so
   the run's deadline or a cancellation from any thread cuts a request in flight; a streamed
   request is cut the same way, event by event;
3. the actual usage of the response recorded (``ctx.record_token_usage``); with ``prices``,
   the attempt's reservation also held the request's worst case in money, the request was sent
   with the ``max_tokens`` it was held for, and the usage, priced, settles the hold;
4. every tool call the answer asks for checked -- its name a budget key, its call ID a safe
   segment of a Tool Call key -- before the SDK can start any of them: a bad one is a clear
   ``ValueError`` and no tool runs.

The SDK's own retries are off: the config's ``model_settings.retry`` is
``ModelRetrySettings(max_retries=0)``, which also makes the SDK send each request with the openai
client's ``max_retries=0`` -- only the harness retries, and every request is a recorded attempt.

A function tool wrapped by :func:`governed_tool` runs through the run's
:class:`~diagnosis_harness.integrations.GovernedTools`, found through the ``RunConfig`` the SDK
hands each tool call: the Tool call is reserved (per-Tool limits included) right before the tool
starts, keyed by the SDK's tool call ID unchanged, run under the Tool policy, its result's bytes
reserved. When a model answer asks for more parallel calls than the run has left, exactly as many
start as fit; each refused one never starts and answers the model with the refusal, and the run
has ended (``BUDGET_EXHAUSTED``), so the SDK's next Model call raises the harness's
``BudgetExhausted`` -- the tools that fit finish first, rather than being cancelled mid-call.
A tool call in flight when the run's deadline passes or it is cancelled (from any thread, or
another process through its store) is cut, with or without :func:`run_governed`: an async tool's
task is cancelled; a sync tool (``@function_tool`` over a ``def``), which a thread cannot be made
to stop, is abandoned -- the SDK would run it with ``asyncio.to_thread`` in the loop's default
executor, which ``asyncio.run`` and the interpreter's exit both wait for, so a governed sync
tool's whole invocation runs instead in a daemon thread of the harness, on an event loop of its
own whose default executor starts daemon threads too. Its late result is discarded, the attempt
journaled ``ABANDONED``, and the SDK's next Model call raises the run's ``RunTimedOut`` /
``RunCancelled``.

:func:`run_governed` and :func:`run_governed_streamed` run an agent under the run: the whole agent
run inside ``ctx.scope()`` (a cancel from another thread stops it promptly, tools included), and
the run's one terminal outcome recorded from how the agent run ended -- ``SUCCESS`` with a final
output, ``FAILED`` on an exception, or the harness's own ending, whose ``RunTerminated`` reaches
the caller itself, never wrapped in an SDK exception.

:func:`governed_agent_tool` is ``Agent.as_tool`` for a sub-agent on a child run
(``ctx.child``): each call of the tool runs the sub-agent under a run config of its own, built
from the parent's, whose every Model and Tool call is granted only if the child and every
ancestor can grant it.

The core never imports this module; it imports ``agents`` (the ``openai-agents`` extra).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, final

from .._boundary import Boundary
from .._errors import RunTerminated
from .._generated.tables import RunState
from .._limits import BudgetLimits
from .._threads import WorkerThreads
from .._validate import seconds
from ._agent_endings import agent_run_ending, refused_tool_call, sub_agent_ended
from ._arguments import checked_ctx
from ._chat import ChatResponse
from ._classify import classify_openai
from ._extras import missing_extra
from ._model_call import (
    DEFAULT_MAX_TOKENS,
    ChargeSlot,
    Chat,
    ModelCall,
    ModelCharge,
    ModelRequest,
    ModelReservation,
    TokenUsage,
    input_bound,
)
from ._tools import GovernedTools, budget_key, checked_tool_prices

try:
    from agents import (
        Agent,
        FunctionTool,
        Model,
        ModelProvider,
        ModelRetrySettings,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        RunResult,
        RunResultStreaming,
    )
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseCompletedEvent, ResponseFunctionToolCall
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    if error.name not in ("agents", "openai"):
        raise
    raise missing_extra(
        "agents", "openai-agents", "diagnosis_harness.integrations.openai_agents"
    ) from error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
    from concurrent.futures import Executor
    from decimal import Decimal

    from agents import StreamEvent
    from agents.agent_output import AgentOutputSchemaBase
    from agents.handoffs import Handoff
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.models.interface import ModelTracing
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import Tool
    from openai.types.responses.response_prompt_param import ResponsePromptParam

    from .._context import RunContext
    from .._retry import Classifier, HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from ..pricing import Prices
    from .otel import HarnessTracing

__all__ = [
    "governed_agent_tool",
    "governed_tool",
    "harness_run_config",
    "model_charges",
    "run_governed",
    "run_governed_streamed",
]

DEFAULT_MODEL_POLICY = "diagnosis_agent"
DEFAULT_TOOL_POLICY = "tool_call"

T = TypeVar("T")
P = ParamSpec("P")

# What the SDK sets on the on_invoke_tool of a @function_tool over a plain `def` (it reads it itself
# to refuse timeout_seconds for such a tool): its invocation runs the function via to_thread.
_SYNC_TOOL_MARKER = "__agents_sync_function_tool__"

# RunConfig fields the harness sets itself: given in **kw they would be silently replaced.
_OWNED_KEYS = frozenset({"call_model_input_filter"})


@final
@dataclasses.dataclass(frozen=True, slots=True)
class _Recipe:
    """What :func:`harness_run_config` was given, but for the run, its executor and tracing: a
    sub-agent's run config is built from its parent's recipe (:func:`governed_agent_tool`)."""

    model_policy: RetryPolicy | str
    tool_policy: RetryPolicy | str
    classifier: Classifier | None
    prices: Prices | None
    default_max_tokens: int
    tool_prices: Mapping[str, Decimal] | None
    kw: Mapping[str, Any]


@final
class _Governance:
    """One run config's link to its run: its Model calls (:class:`ModelCall`), its Tool calls,
    and the recipe it was built from."""

    __slots__ = ("model_call", "recipe", "tools")

    def __init__(self, model_call: ModelCall, tools: GovernedTools, recipe: _Recipe) -> None:
        self.model_call = model_call
        self.tools = tools
        self.recipe = recipe

    def child_config(
        self,
        child: RunContext,
        tracing: HarnessTracing | None,
        tool_prices: Mapping[str, Decimal] | None,
    ) -> RunConfig:
        """The run config of a sub-agent on ``child``, a child run of this one: this config's
        provider, model, settings, policies and prices (``tool_prices`` replacing its own when
        given), attempts classified as this config's executor classifies them, its priced
        requests journaled in this config's :func:`model_charges` too, its spans under
        ``tracing``."""
        recipe = self.recipe
        if tool_prices is not None:
            recipe = dataclasses.replace(recipe, tool_prices=tool_prices)
        recipe = dataclasses.replace(recipe, classifier=self.model_call.executor.classify)
        return _run_config(child, recipe, executor=None, tracing=tracing, parent=self.model_call)

    @property
    def ctx(self) -> RunContext:
        return self.model_call.ctx

    def check_tools(self, tools: list[Tool]) -> None:
        """Refuse, before any request, an agent offering a function tool the harness cannot see."""
        for tool in tools:
            if isinstance(tool, FunctionTool) and not isinstance(
                tool.on_invoke_tool, _GovernedInvoke
            ):
                raise ValueError(
                    f"function tool {tool.name!r} is not governed: its calls would escape the "
                    "run's budget; wrap it with diagnosis_harness.integrations.openai_agents."
                    "governed_tool(tool)"
                )

    def check_calls(self, output: list[Any]) -> None:
        """Check every function call of a model answer before the SDK can start any of them:
        its name a budget key, its call ID a safe key segment, its price known under a money
        limit (``UnknownToolPrice``)."""
        for item in output:
            if isinstance(item, ResponseFunctionToolCall):
                self.tools.key_for(item.name, item.call_id)
                self.tools.price_of(item.name)

    def priced(self, model: Model, request: _Request) -> ModelRequest | None:
        """What a priced request's worst case is computed from; ``None`` when not priced.

        The input bound covers everything the request sends as input: the instructions, the
        input items, the tools' names, descriptions and schemas, the handoffs' and the output
        schema. A request that continues a conversation the provider keeps
        (``previous_response_id``, ``conversation_id``) or a stored prompt (``prompt``) sends
        input the request does not carry, which nothing here can bound: refused, priced.
        """
        if self.model_call.prices is None:
            return None
        unbounded = [
            name
            for name, value in (
                ("previous_response_id", request.previous_response_id),
                ("conversation_id", request.conversation_id),
                ("prompt", request.prompt),
            )
            if value is not None
        ]
        if unbounded:
            raise ValueError(
                f"a priced request cannot be sent with {', '.join(unbounded)}: the provider adds "
                "input the request does not carry, so its worst case has no bound; send the "
                "whole conversation as the input (the SDK's default), or run without prices"
            )
        output = request.output_schema
        payload = {
            "instructions": request.system_instructions,
            "input": request.input,
            "tools": [_tool_payload(tool) for tool in request.tools],
            "handoffs": [
                [handoff.tool_name, handoff.tool_description, handoff.input_json_schema]
                for handoff in request.handoffs
            ],
            "output": None if output is None or output.is_plain_text() else output.json_schema(),
        }
        openai = isinstance(model, (OpenAIChatCompletionsModel, OpenAIResponsesModel))
        return ModelRequest(
            model=_model_name(model),
            input_bound=input_bound(payload),
            max_tokens=request.model_settings.max_tokens,
            provider="openai" if openai else None,
        )


@final
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    """One call of the SDK's ``Model`` interface: what it sends, as the SDK hands it over."""

    system_instructions: str | None
    input: str | list[TResponseInputItem]
    model_settings: ModelSettings
    tools: list[Tool]
    output_schema: AgentOutputSchemaBase | None
    handoffs: list[Handoff]
    tracing: ModelTracing
    previous_response_id: str | None
    conversation_id: str | None
    prompt: ResponsePromptParam | None

    def settings(self, reservation: ModelReservation) -> ModelSettings:
        """The settings to send: with the reservation's ``max_tokens`` (the default, or lowered
        to what the money left can pay for), or unchanged when it adds nothing."""
        max_tokens = reservation.max_tokens
        if max_tokens is None or max_tokens == self.model_settings.max_tokens:
            return self.model_settings
        return dataclasses.replace(self.model_settings, max_tokens=max_tokens)


def _tool_payload(tool: Tool) -> object:
    """What a tool adds to a request's input: a function tool's name, description and schema;
    another (hosted) tool's fields as its dataclass holds them."""
    if isinstance(tool, FunctionTool):
        return [tool.name, tool.description, tool.params_json_schema]
    if dataclasses.is_dataclass(tool):
        return {
            field.name: getattr(tool, field.name)
            for field in dataclasses.fields(tool)
            if not callable(getattr(tool, field.name))
        }
    return repr(tool)


def _token_usage(usage: Any) -> TokenUsage:
    """The SDK's ``Usage`` (or a completed response's ``ResponseUsage``) as the run records it:
    its cached input tokens (OpenAI counts them inside ``input_tokens``) as the cache's reads."""
    details = getattr(usage, "input_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        cache_read_tokens=min(int(cached), usage.input_tokens),
    )


def _usage_of(response: Any) -> TokenUsage:
    return _token_usage(response.usage)


def _priced_usage_of(response: Any) -> TokenUsage | None:
    """A priced response's usage; ``None`` (``UsageNotReported``) when the provider reported
    none: the SDK then gives zeros, and a request that was answered always had input."""
    usage = _token_usage(response.usage)
    return None if usage.input_tokens == 0 and usage.output_tokens == 0 else usage


def _response_of(response: Any) -> ChatResponse:
    # The SDK's ModelResponse keeps the answer's ID (Responses API), not its model or reasons.
    return ChatResponse(model=None, id=response.response_id, finish_reasons=())


def _model_name(model: object) -> str:
    """The model's name (the SDK's OpenAI models keep it as ``model``), else its class's name."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name.strip() else type(model).__name__


_CALL_NAME = "openai-agents Model call"


@final
class _GovernedAgentsModel(Model):
    """A ``Model`` whose every request is one reserved, recorded, cuttable attempt of the run.

    Only the SDK's shapes are translated here: each attempt is the run's :class:`ModelCall`'s
    (reserved, sent in ``ctx.scope()``, its usage recorded once, run under the Model policy).
    """

    def __init__(self, inner: Model, governance: _Governance) -> None:
        self._inner = inner
        self._governance = governance

    async def close(self) -> None:
        await self._inner.close()

    async def get_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        governance = self._governance
        model_call = governance.model_call
        governance.check_tools(tools)
        request = _Request(
            system_instructions=system_instructions,
            input=input,
            model_settings=model_settings,
            tools=tools,
            output_schema=output_schema,
            handoffs=handoffs,
            tracing=tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        priced = governance.priced(self._inner, request)
        model = _model_name(self._inner)
        charges = ChargeSlot()  # the attempt's chat span reports its money
        chat = Chat(model, usage_of=_usage_of, response_of=_response_of, charges=charges)

        async def attempt() -> ModelResponse:
            with model_call.reserve(_CALL_NAME, priced) as reservation:
                charges.put(reservation)
                settings = request.settings(reservation)
                response = await model_call.request_async(
                    lambda: self._inner.get_response(
                        system_instructions,
                        input,
                        settings,
                        tools,
                        output_schema,
                        handoffs,
                        tracing,
                        previous_response_id=previous_response_id,
                        conversation_id=conversation_id,
                        prompt=prompt,
                    )
                )
                usage_of = _usage_of if priced is None else _priced_usage_of
                return reservation.record_response(response, usage_of)

        subject = model_call.subject(_CALL_NAME, model)
        response = await model_call.execute_async(attempt, chat, subject=subject)
        governance.check_calls(response.output)
        return response

    async def stream_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """One attempt per stream: opened (and its first event received) under the Model policy.

        A retry can only happen before the first event: after it, events have reached the agent
        and a second request would repeat them. A failure later in the stream is the stream's.
        The usage is recorded from the completed response's event, when the stream ends; a
        stream cut before it (by a cancellation, the deadline, a failure or its consumer) ends
        its reservation with no usage -- the SDK reports none before the end -- so a money hold
        stays at its worst case (the cut request may still be billed). A priced stream read to its
        end without usage raises :class:`~diagnosis_harness.integrations.UsageNotReported`, as
        every governed stream does (unpriced, it records nothing, as before money budgets).
        """
        governance = self._governance
        model_call = governance.model_call
        governance.check_tools(tools)
        request = _Request(
            system_instructions=system_instructions,
            input=input,
            model_settings=model_settings,
            tools=tools,
            output_schema=output_schema,
            handoffs=handoffs,
            tracing=tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        priced = governance.priced(self._inner, request)
        model = _model_name(self._inner)
        # A stream's span ends when it opens: it reports the hold; the cost settles later.
        charges = ChargeSlot()
        chat = Chat(model, charges=charges)
        events: AsyncIterator[TResponseStreamEvent] | None = None
        reservation: ModelReservation | None = None

        async def attempt() -> TResponseStreamEvent:
            nonlocal events, reservation
            with model_call.reserve(_CALL_NAME, priced) as reservation:
                charges.put(reservation)
                events = opened = self._inner.stream_response(
                    system_instructions,
                    input,
                    request.settings(reservation),
                    tools,
                    output_schema,
                    handoffs,
                    tracing,
                    previous_response_id=previous_response_id,
                    conversation_id=conversation_id,
                    prompt=prompt,
                )
                try:
                    return await model_call.request_async(lambda: anext(opened))
                except BaseException:
                    await _close(opened)  # a failed attempt's stream is done; a retry opens anew
                    raise

        event: TResponseStreamEvent | None = await model_call.execute_async(
            attempt, chat, subject=model_call.subject(_CALL_NAME, model)
        )
        assert events is not None
        assert reservation is not None
        meter = _CompletedUsage()
        try:
            while event is not None:
                meter.observe(event)
                if isinstance(event, ResponseCompletedEvent):
                    governance.check_calls(event.response.output)
                yield event
                event = await model_call.request_async(lambda: anext(events, None))
        finally:
            try:
                await _close(events)
            finally:
                # Read to its end (event None) or cut: either way the reservation ends here,
                # once, with the usage the completed event reported, if it came. Priced, a
                # stream read to its end without usage is UsageNotReported (never silently
                # free); unpriced, it records nothing, as before money budgets.
                reservation.end_stream(meter, complete=event is None and priced is not None)


@final
class _CompletedUsage:
    """A stream's usage meter: the SDK reports a response's usage in its completed event only.

    Written by the one task that reads the stream; read by it when the stream ends.
    """

    __slots__ = ("_usage",)

    def __init__(self) -> None:
        self._usage: TokenUsage | None = None

    def observe(self, event: TResponseStreamEvent, /) -> None:
        if isinstance(event, ResponseCompletedEvent) and event.response.usage is not None:
            self._usage = _token_usage(event.response.usage)

    @property
    def final(self) -> bool:
        return self._usage is not None

    def usage(self) -> TokenUsage | None:
        return self._usage


async def _close(events: AsyncIterator[TResponseStreamEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


@final
class _HarnessModelProvider(ModelProvider):
    """Wraps the user's provider: every ``Model`` it hands out is governed by the run."""

    def __init__(self, inner: ModelProvider, governance: _Governance) -> None:
        self._inner = inner
        self.governance = governance

    def get_model(self, model_name: str | None) -> Model:
        model = self._inner.get_model(model_name)
        return (
            model
            if isinstance(model, _GovernedAgentsModel)
            else _GovernedAgentsModel(model, self.governance)
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


@final
class _DaemonDefaultExecutor(ThreadPoolExecutor):
    """A loop's default executor whose every call runs in a new daemon thread (WorkerThreads).

    A ``ThreadPoolExecutor`` only because ``loop.set_default_executor`` accepts nothing else; it
    starts none of the pool's threads, which the interpreter would join at exit.
    """

    def __init__(self, name: str) -> None:
        super().__init__(max_workers=1)
        # Not `_threads`: that is the pool's own attribute (its worker threads, none here).
        self._harness_threads = WorkerThreads(name)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._harness_threads.submit(fn, *args, **kwargs)


def _invoke_on_own_loop(name: str, invoke: Callable[[], Awaitable[T]]) -> T:
    """Run a sync tool's SDK invocation to its end on an event loop of this (daemon) thread.

    The SDK's ``asyncio.to_thread`` then puts the tool's function in another daemon thread: if
    the run abandons the call, no thread of it is one that anybody waits for.
    """
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_DaemonDefaultExecutor(name))
    try:
        return loop.run_until_complete(invoke())
    finally:
        loop.close()


@final
class _GovernedInvoke:
    """A governed tool's ``on_invoke_tool``: the SDK's call, through the run's GovernedTools.

    ``sync``: the tool's function is a plain ``def`` (the SDK's own marker says so), and its
    whole invocation runs in the attempt's daemon threads, so the run's end can abandon it.
    ``delegation``: the tool runs a sub-agent (:func:`governed_agent_tool`), on a child run.
    """

    __slots__ = ("_delegation", "_invoke", "_name", "_sync")

    def __init__(
        self,
        name: str,
        invoke: Callable[[ToolContext[Any], str], Awaitable[Any]],
        *,
        sync: bool,
        delegation: _Delegation | None = None,
    ) -> None:
        self._name = name
        self._invoke = invoke
        self._sync = sync
        self._delegation = delegation

    async def __call__(self, tool_context: ToolContext[Any], arguments: str) -> Any:
        governance = _governance_of(tool_context.run_config, "the tool's run_config")
        invoke, name, delegation = self._invoke, self._name, self._delegation

        def execute(threads: Executor, tracing: HarnessTracing | None) -> Awaitable[Any]:
            if delegation is not None:
                return delegation.run(governance, invoke, tool_context, arguments, tracing)
            if not self._sync:
                return invoke(tool_context, arguments)
            # No context variable is carried over (the library touches none): the SDK's tool span
            # is opened around this call, on the agent's loop, and stays where it is.
            call = functools.partial(invoke, tool_context, arguments)
            in_thread = functools.partial(_invoke_on_own_loop, name, call)
            return asyncio.get_running_loop().run_in_executor(threads, in_thread)

        try:
            return await governance.tools.call_nesting(name, tool_context.tool_call_id, execute)
        except RunTerminated as refused:
            # The tool never started, was cut or abandoned by the run's end, or its result did
            # not fit: the run has ended, and the SDK's next Model call raises this same ending
            # (no model sees this answer). Siblings granted before a budget refusal finish first.
            return refused_tool_call(refused)


@final
class _Delegation:
    """How a :func:`governed_agent_tool` runs its sub-agent: on a child run of the tool's run.

    Fixed when the tool is made; each call makes its own child run and run config.
    """

    __slots__ = ("_agent", "_limits", "_run_id", "_timeout", "_tool_prices")

    def __init__(
        self,
        agent: Agent[Any],
        run_id: Callable[[ToolContext[Any]], str] | None,
        limits: BudgetLimits | None,
        timeout: float | None,
        tool_prices: Mapping[str, Decimal] | None,
    ) -> None:
        self._agent = agent
        self._run_id = run_id
        self._limits = limits
        self._timeout = timeout
        self._tool_prices = tool_prices

    def child_run_id(self, parent: RunContext, tool_context: ToolContext[Any]) -> str:
        if self._run_id is None:
            return f"{parent.run_id}.{tool_context.tool_call_id}"
        run_id = self._run_id(tool_context)
        if type(run_id) is not str:
            raise TypeError(f"run_id must return the child run's ID as a str, got {run_id!r}")
        return run_id

    async def run(
        self,
        governance: _Governance,
        invoke: Callable[[ToolContext[Any], str], Awaitable[Any]],
        tool_context: ToolContext[Any],
        arguments: str,
        tracing: HarnessTracing | None,
    ) -> Any:
        """The sub-agent's output; the parent's ``RunTerminated`` if the parent has ended; what
        the parent's model is told (a ``str``) if the child alone ended without its output."""
        parent = governance.ctx
        child = parent.child(
            run_id=self.child_run_id(parent, tool_context),
            limits=self._limits,
            timeout=self._timeout,
        )
        if tracing is None:
            return await self._run_child(
                governance, child, invoke, tool_context=tool_context, arguments=arguments
            )
        with tracing.run(child, self._agent.name, provider="openai") as child_tracing:
            return await self._run_child(
                governance,
                child,
                invoke,
                tool_context=tool_context,
                arguments=arguments,
                tracing=child_tracing,
            )

    async def _run_child(
        self,
        governance: _Governance,
        child: RunContext,
        invoke: Callable[[ToolContext[Any], str], Awaitable[Any]],
        *,
        tool_context: ToolContext[Any],
        arguments: str,
        tracing: HarnessTracing | None = None,
    ) -> Any:
        config = governance.child_config(child, tracing, self._tool_prices)
        # The SDK's as_tool runs the agent with the run config of the context it is given (the
        # tool was made without one): a copy of the tool's context, the child's config in it.
        nested: ToolContext[Any] = ToolContext(
            context=tool_context.context,
            usage=tool_context.usage,
            tool_name=tool_context.tool_name,
            tool_call_id=tool_context.tool_call_id,
            tool_arguments=tool_context.tool_arguments,
            tool_call=tool_context.tool_call,
            tool_namespace=tool_context.tool_namespace,
            agent=tool_context.agent,
            run_config=config,
        )
        error: Exception | None = None
        try:
            # The child's end cuts the sub-agent's run -- but for a budget refusal, which leaves
            # the child's granted tool calls to finish, as every governed run does.
            async with child.scope(Boundary.MODEL, cut_on_budget=False):
                result = await invoke(nested, arguments)
        except Exception as raised:
            error = raised
        except BaseException:
            # A task cancellation (the parent's end cut this call): no child is left running.
            child.lifecycle.fail("the delegation was cancelled before the sub-agent ended")
            raise
        # The one outcome of the child: absorbed when the harness ended it first.
        if error is None:
            child.lifecycle.succeed(agent_run_ending(None))
        else:
            child.lifecycle.fail(agent_run_ending(error))
        termination = child.lifecycle.termination
        assert termination is not None  # ended just above, if not before
        if termination.state is RunState.SUCCESS:
            return result
        parent = governance.ctx
        parent.check(Boundary.TOOL)  # the parent has ended: its own ending, as it is
        return sub_agent_ended(child.run_id, termination)


def governed_tool(tool: FunctionTool) -> FunctionTool:
    """A copy of ``tool`` whose every call is governed by the run of the config it runs under.

    Wrap each function tool once, where the agent is defined; the copy finds its run through the
    ``RunConfig`` of each agent run (:func:`harness_run_config`), and refuses to run under any
    other. The name must be a budget key: a non-blank ``str`` (per-Tool limits use it).
    """
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"tool must be an agents.FunctionTool, got {tool!r}")
    if isinstance(tool.on_invoke_tool, _GovernedInvoke):
        return tool
    name = budget_key(tool.name)
    sync = getattr(tool.on_invoke_tool, _SYNC_TOOL_MARKER, False) is True
    invoke = _GovernedInvoke(name, tool.on_invoke_tool, sync=sync)
    return dataclasses.replace(tool, on_invoke_tool=invoke)


def governed_agent_tool(
    agent: Agent[Any],
    *,
    tool_name: str | None = None,
    tool_description: str | None = None,
    run_id: Callable[[ToolContext[Any]], str] | None = None,
    limits: BudgetLimits | None = None,
    timeout: float | None = None,
    tool_prices: Mapping[str, Decimal] | None = None,
    **as_tool_kw: Any,
) -> FunctionTool:
    """``agent.as_tool(...)`` whose every call runs ``agent`` on a child run of the tool's run.

    Give it to the parent agent as any tool (``Agent(..., tools=[governed_agent_tool(logs)])``).
    Each call is a governed Tool call of the parent's run (reserved, its result's bytes counted,
    under the parent's Tool policy) that creates ``ctx.child(run_id=..., limits=limits,
    timeout=timeout)`` -- ``run_id(tool_context)`` when given, else ``"{parent run}.{tool call
    ID}"`` -- and runs the sub-agent under a run config of its own on that child: the parent's
    config's provider, model, settings, policies and ``prices`` (``tool_prices`` replaces the
    parent's when given), its priced requests in the parent's :func:`model_charges` too, and
    with the parent's ``tracing`` its ``invoke_agent`` span nested under the call's
    ``execute_tool`` span. Every model request and tool call of the sub-agent is granted only if
    the child and every ancestor can grant it, in one decision, and counts in all of them; the
    child's deadline is the earlier of ``timeout`` (from the call) and the parent's; the
    parent's end cancels it. The sub-agent's own tools are governed tools, as always.

    What the parent's model gets: the sub-agent's output (the SDK's ``as_tool`` extraction,
    ``custom_output_extractor`` included), the child ``SUCCESS``; when the child alone ended
    without it -- its own limit or deadline, a cancel of the child, an exception (``FAILED``)
    -- a message naming the child run, its state and reason (``sub-agent run 'run-7.call_1'
    ended BUDGET_EXHAUSTED: ...``), and the parent's run goes on; when the parent's run has
    ended, the refusal every governed tool answers, and the parent's next Model call raises the
    parent's ending. ``as_tool_kw`` goes to ``agent.as_tool``; ``run_config`` (the harness
    makes the child's) and ``failure_error_function`` (the harness answers for a child's
    ending) are refused. Everything is checked here.
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"agent must be an agents.Agent, got {agent!r}")
    refused = sorted({"run_config", "failure_error_function"}.intersection(as_tool_kw))
    if refused:
        raise TypeError(
            f"governed_agent_tool sets {', '.join(refused)} itself: the sub-agent runs under a "
            "run config on its child run, and a child's ending is answered by the harness"
        )
    if run_id is not None and not callable(run_id):
        raise TypeError(f"run_id must be None or a callable (tool_context) -> str, got {run_id!r}")
    if limits is not None and type(limits) is not BudgetLimits:
        raise TypeError(f"limits must be BudgetLimits or None, got {limits!r}")
    if timeout is not None:
        seconds("timeout", timeout)
    if tool_prices is not None:  # a bad price raises here, not at the sub-agent's first call
        checked_tool_prices(tool_prices)
    tool = agent.as_tool(tool_name, tool_description, failure_error_function=None, **as_tool_kw)
    delegation = _Delegation(agent, run_id, limits, timeout, tool_prices)
    invoke = _GovernedInvoke(
        budget_key(tool.name), tool.on_invoke_tool, sync=False, delegation=delegation
    )
    return dataclasses.replace(tool, on_invoke_tool=invoke)


def _governance_of(run_config: object, what: str) -> _Governance:
    provider = getattr(run_config, "model_provider", None)
    if not isinstance(run_config, RunConfig) or not isinstance(provider, _HarnessModelProvider):
        raise ValueError(
            f"{what} must be built by diagnosis_harness.integrations.openai_agents."
            f"harness_run_config(ctx), got {type(run_config).__name__} with model_provider "
            f"{type(provider).__name__}"
        )
    return provider.governance


def harness_run_config(
    ctx: RunContext,
    *,
    model_policy: RetryPolicy | str = DEFAULT_MODEL_POLICY,
    tool_policy: RetryPolicy | str = DEFAULT_TOOL_POLICY,
    executor: HarnessRetryExecutor | None = None,
    classifier: Classifier | None = None,
    tracing: HarnessTracing | None = None,
    prices: Prices | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    tool_prices: Mapping[str, Decimal] | None = None,
    **kw: Any,
) -> RunConfig:
    """A ``RunConfig`` under which an agent run's Model and Tool calls are the run's ``ctx``'s.

    ``model_policy`` and ``tool_policy`` are the run's retry policies (a name in
    ``ctx.retry_policies`` or a :class:`RetryPolicy`) for Model requests and Tool calls;
    ``executor`` records every attempt of both (a new one with ``classifier``, by default
    :func:`~diagnosis_harness.integrations.classify_openai`, if not given). ``kw`` goes to
    ``RunConfig``: ``model_provider`` (default the SDK's ``MultiProvider``) and a ``Model``
    given as ``model`` are wrapped; ``model_settings`` gets
    ``retry=ModelRetrySettings(max_retries=0)`` (any other retry setting is refused) and usage in
    streams. ``call_model_input_filter`` is the harness's and refused. ``tracing`` (a
    ``HarnessTracing``, the ``otel`` extra) gives each Model attempt a ``chat`` span and each Tool
    call an ``execute_tool`` span (the SDK's own tracing is not OpenTelemetry's: nothing doubles).

    ``prices`` (``GenaiPrices()``, a ``PriceTable``) prices every Model call: before each
    request its worst case -- a bound on its input (the UTF-8 bytes of its instructions, input
    items, tools, handoffs and output schema) at the input price, plus its ``max_tokens`` at the
    output price -- is held against the run's money limit (``BudgetLimits(cost=...)``), and the
    response's usage, priced exactly, settles it (a stream's at its end; one cut before its
    usage arrived keeps its worst case). Required when the run has a money limit. Under a money
    limit a request without ``model_settings.max_tokens`` is sent with ``default_max_tokens``,
    and one whose ``max_tokens`` the money left cannot pay for is sent with it lowered to what it
    can (:func:`model_charges` says so). A priced request that continues a conversation the
    provider keeps (``previous_response_id``, ``conversation_id``) or uses a stored ``prompt`` is
    refused (``ValueError``): its input cannot be bounded. ``tool_prices`` gives the governed
    tools their price per call (``{"search": Decimal("0.10")}``), held when each call is reserved
    and settled when it ends; under a money limit a tool without one is refused before the call.

    Everything is checked here; nothing changes the run.
    """
    checked_ctx(ctx)
    owned = sorted(_OWNED_KEYS.intersection(kw))
    if owned:
        raise TypeError(
            f"harness_run_config sets {', '.join(owned)} itself; it cannot be passed in kw"
        )
    recipe = _Recipe(
        model_policy=model_policy,
        tool_policy=tool_policy,
        classifier=classifier,
        prices=prices,
        default_max_tokens=default_max_tokens,
        tool_prices=tool_prices,
        kw=dict(kw),
    )
    return _run_config(ctx, recipe, executor=executor, tracing=tracing, parent=None)


def _run_config(
    ctx: RunContext,
    recipe: _Recipe,
    *,
    executor: HarnessRetryExecutor | None,
    tracing: HarnessTracing | None,
    parent: ModelCall | None,
) -> RunConfig:
    """:func:`harness_run_config`'s config; ``parent`` the model call of the run ``ctx`` is a
    child of (a sub-agent's run), whose journal this config's priced requests join."""
    model_call = ModelCall(
        ctx,
        policy=recipe.model_policy,
        executor=executor,
        classifier=recipe.classifier,
        default_classifier=classify_openai,
        tracing=tracing,
        provider="openai",
        prices=recipe.prices,
        default_max_tokens=recipe.default_max_tokens,
        parent=parent,
    )
    tools = GovernedTools(
        ctx,
        policy=recipe.tool_policy,
        executor=model_call.executor,
        tracing=tracing,
        tool_prices=recipe.tool_prices,
    )
    governance = _Governance(model_call, tools, recipe)

    config = RunConfig(**recipe.kw)  # the SDK checks and coerces the user's settings
    settings = config.model_settings or ModelSettings()
    retry = settings.retry
    if retry is not None and (retry.max_retries not in (None, 0) or retry.policy is not None):
        raise ValueError(
            "model_settings.retry must leave retries to the harness (max_retries=0), "
            f"got {retry!r}: "
            "set the run's retry policy instead (model_policy=...)"
        )
    settings = settings.resolve(
        ModelSettings(
            retry=ModelRetrySettings(max_retries=0),
            include_usage=True if settings.include_usage is None else settings.include_usage,
        )
    )
    provider = config.model_provider
    if not isinstance(provider, _HarnessModelProvider):
        provider = _HarnessModelProvider(provider, governance)
    model = config.model
    if isinstance(model, Model) and not isinstance(model, _GovernedAgentsModel):
        model = _GovernedAgentsModel(model, governance)

    def check_agent_model(data: CallModelData[Any]) -> ModelInputData:
        # A Model instance on the agent bypasses the provider unless the config names a model.
        agent_model = data.agent.model
        if (
            model is None
            and isinstance(agent_model, Model)
            and not isinstance(agent_model, _GovernedAgentsModel)
        ):
            raise ValueError(
                f"agent {data.agent.name!r} has its own Model instance, which bypasses the "
                "harness's model provider: pass it as harness_run_config(ctx, model=...) "
                "or give the agent a model name"
            )
        return data.model_data

    return dataclasses.replace(
        config,
        model_provider=provider,
        model=model,
        model_settings=settings,
        call_model_input_filter=check_agent_model,
    )


def model_charges(run_config: RunConfig) -> tuple[ModelCharge, ...]:
    """The priced Model calls of ``run_config`` (:func:`harness_run_config` with ``prices``), in
    order: what each held, the ``max_tokens`` it was sent with (and whether the money left
    lowered it), what it settled. Empty without ``prices``."""
    return _governance_of(run_config, "run_config").model_call.charges


def _harness_error(error: BaseException) -> RunTerminated | None:
    """The harness's own ending inside an SDK exception (its cause chain), if there is one."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, RunTerminated):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _finish(ctx: RunContext, error: BaseException | None) -> None:
    """Record the run's one outcome from how the agent run ended; raise the harness's ending."""
    if error is None:
        if ctx.lifecycle.succeed(agent_run_ending(None)).changed:
            return
        ctx.check(Boundary.MODEL)  # the run had already ended: raise its own RunTerminated
        return
    harness = _harness_error(error)
    if harness is error:
        return  # the caller re-raises it as it is
    if harness is not None:
        # Unwrapped from the SDK's exception, its own cause kept (the SDK's names it already).
        raise harness from harness.__cause__
    if isinstance(error, Exception):
        ctx.lifecycle.fail(agent_run_ending(error))


async def run_governed(
    agent: Agent[Any],
    input: str | list[TResponseInputItem],
    *,
    run_config: RunConfig,
    **runner_kw: Any,
) -> RunResult:
    """``Runner.run`` under the run of ``run_config`` (:func:`harness_run_config`).

    The whole agent run is inside ``ctx.scope()``; the run's outcome is recorded from how it
    ended (see the module). A run that already ended is refused with its ``RunTerminated``
    before the agent starts.
    """
    ctx = _governance_of(run_config, "run_config").ctx
    ctx.check(Boundary.MODEL)
    try:
        async with ctx.scope(Boundary.MODEL):  # an agent run: its Model calls, as checked above
            result = await Runner.run(agent, input, run_config=run_config, **runner_kw)
    except BaseException as error:
        _finish(ctx, error)
        raise
    _finish(ctx, None)
    return result


async def run_governed_streamed(
    agent: Agent[Any],
    input: str | list[TResponseInputItem],
    *,
    run_config: RunConfig,
    on_event: Callable[[StreamEvent], object] | None = None,
    **runner_kw: Any,
) -> RunResultStreaming:
    """``Runner.run_streamed`` under the run, its events handed to ``on_event`` as they come.

    Returns the completed ``RunResultStreaming`` (``final_output`` set). ``on_event`` may be a
    plain or an async function. A cancellation or the deadline stops the stream and the SDK's run
    task (``result.cancel()``); the outcome is recorded as for :func:`run_governed`.
    """
    ctx = _governance_of(run_config, "run_config").ctx
    if on_event is not None and not callable(on_event):
        raise TypeError(f"on_event must be callable (event -> None), got {on_event!r}")
    ctx.check(Boundary.MODEL)
    result = Runner.run_streamed(agent, input, run_config=run_config, **runner_kw)
    try:
        async with ctx.scope(Boundary.MODEL):
            async for event in result.stream_events():
                if on_event is not None:
                    handled = on_event(event)
                    if inspect.isawaitable(handled):
                        await handled
    except BaseException as error:
        result.cancel()
        _finish(ctx, error)
        raise
    _finish(ctx, None)
    return result
