"""OpenTelemetry spans for a governed run: :class:`HarnessTracing`.

Needs the ``otel`` extra (``pip install 'diagnosis-harness[otel]'``, ``opentelemetry-api`` only);
importing this module imports OpenTelemetry, and nothing else in the library imports it unless
you give it a :class:`HarnessTracing`. Without an OpenTelemetry SDK configured, every span is a
no-op.

Theory of operation. A ``HarnessTracing`` is a tracer and the span the harness's spans are
children of: it is passed explicitly (``tracing=``) to the governed SDK calls, to
:class:`~._tools.GovernedTools` and to the openai-agents ``harness_run_config``, and every span
it starts gets its parent from it -- never from OpenTelemetry's current span, and no span is
made current. The spans follow the GenAI semantic conventions:

- ``invoke_agent {agent}`` for a run (:meth:`HarnessTracing.run`): the run's session ID as the
  conversation's, the run's ID and, for a child run (a sub-agent's), its parent's, the provider
  when given, and at its end the run's termination state and, for ``BUDGET_EXHAUSTED``, the
  budget dimension that ended it. A sub-agent's run span is a child of the ``execute_tool`` span
  of the tool call that delegated to it (:meth:`HarnessTracing.tool_call_nesting_async`);
- ``chat {model}`` for each attempt of a governed model call: the server the client sends to, the
  attempt's number and outcome, its failure kind (the executor's own classification), and of
  the answer the usage the provider reported, the model that answered, its ID and finish
  reasons; for a priced call (``prices=``), its money: the cost settled
  (``gen_ai.usage.cost``, US dollars, the name the open semantic-conventions proposal gives it;
  absent while the worst case stays held, as for a stream, whose span ends when it opens), the
  worst case held (``diagnosis_harness.cost.held``), the ``max_tokens`` sent
  (``gen_ai.request.max_tokens``), whether the money left lowered it
  (``diagnosis_harness.max_tokens.lowered``) and the prices' data version
  (``diagnosis_harness.prices.data``, when the prices give one). Amounts are doubles, as
  OpenTelemetry's attributes are: the exact ``Decimal`` is in ``ModelCall.charges``;
- ``execute_tool {tool}`` for each governed Tool call: its name, type (``function``) and the
  framework's Tool Call ID, the number of attempts made, the outcome and failure kind.

Tool Call keys are never exported: the framework's ID is (``gen_ai.tool.call.id``), the key built
from it is not, and an exception's message (which may carry one) is not recorded -- only its type
(``error.type``).

A framework that emits these spans itself (pydantic-ai) gets the harness's attributes on its own
spans instead, and no span of the harness's: :class:`CurrentSpan`, called from the framework's
hooks, sets them on OpenTelemetry's current span -- OpenTelemetry's context, set by the
framework, never the harness's (for pydantic-ai:
``integrations.pydantic_ai.HarnessSpanAttributes``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, TypeVar, final

from .._retry import AttemptOutcome
from ._extras import missing_extra

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as error:  # pragma: no cover - the extra is installed wherever tests run
    if error.name is None or not error.name.startswith("opentelemetry"):
        raise
    raise missing_extra("opentelemetry", "otel", "diagnosis_harness tracing") from error

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from opentelemetry.util.types import AttributeValue

    from .._context import RunContext
    from ._chat import ChatResponse, Server
    from ._governed import TokenUsage
    from ._model_call import ModelCharge

__all__ = [
    "ATTEMPT_NUMBER",
    "ATTEMPT_OUTCOME",
    "BUDGET_EXHAUSTED",
    "COST",
    "COST_HELD",
    "FAILURE_KIND",
    "MAX_TOKENS_LOWERED",
    "PARENT_RUN_ID",
    "PRICE_DATA",
    "RUN_ID",
    "TERMINATION_STATE",
    "CurrentSpan",
    "HarnessTracing",
    "annotate_ending",
]

T = TypeVar("T")
R = TypeVar("R")  # an attempt's result, or its awaitable

# The harness's own attributes.
ATTEMPT_NUMBER = "diagnosis_harness.attempt.number"
"""A ``chat`` span: its attempt's number, from 1. An ``execute_tool`` span: the attempts made."""
ATTEMPT_OUTCOME = "diagnosis_harness.attempt.outcome"
"""``succeeded``, ``failed`` or ``interrupted`` (an ``AttemptOutcome`` value)."""
FAILURE_KIND = "diagnosis_harness.failure.kind"
"""A failed attempt's ``FailureKind`` name, as the retry executor classified it."""
TERMINATION_STATE = "diagnosis_harness.termination.state"
"""The run's terminal ``RunState`` name, on the run span, once the run has ended."""
BUDGET_EXHAUSTED = "diagnosis_harness.budget.exhausted"
"""The ``BudgetDimension`` value that exhausted the run's budget, on the run span."""
RUN_ID = "diagnosis_harness.run.id"
"""The run's ID, on the run span (``invoke_agent``)."""
PARENT_RUN_ID = "diagnosis_harness.run.parent_id"
"""A sub-agent's run span: the ID of the run it is a child of (``ctx.parent_run_id``); absent
for a root run. The span itself nests under the parent's ``execute_tool`` span."""
COST_HELD = "diagnosis_harness.cost.held"
"""A priced ``chat`` span: the worst case its attempt held, in US dollars."""
MAX_TOKENS_LOWERED = "diagnosis_harness.max_tokens.lowered"
"""A priced ``chat`` span: whether the money left lowered the request's ``max_tokens``."""
PRICE_DATA = "diagnosis_harness.prices.data"
"""A priced ``chat`` span: the version of the price data (``GenaiPrices.data_version``)."""
COST = "gen_ai.usage.cost"
"""A priced ``chat`` span: the attempt's actual cost settled, in US dollars (the name the open
semantic-conventions proposal gives it); absent while the worst case stays held."""

# The GenAI semantic conventions' attributes (all "Development" in the conventions).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
AGENT_NAME = "gen_ai.agent.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
ERROR_TYPE = "error.type"


def _run_attributes(ctx: RunContext) -> dict[str, AttributeValue]:
    """The run's ID and, for a child run (a sub-agent's), its parent's."""
    attributes: dict[str, AttributeValue] = {RUN_ID: ctx.run_id}
    if ctx.parent_run_id is not None:
        attributes[PARENT_RUN_ID] = ctx.parent_run_id
    return attributes


def annotate_ending(span: trace.Span, ctx: RunContext) -> None:
    """Set the run's termination state and exhausted dimension on ``span``, if the run ended."""
    termination = ctx.lifecycle.termination
    if termination is None:
        return
    span.set_attribute(TERMINATION_STATE, termination.state.name)
    exhausted = ctx.budget.exhausted
    if exhausted is not None:
        span.set_attribute(BUDGET_EXHAUSTED, exhausted.value)


def _failed(
    span: trace.Span, error: BaseException, classify: Callable[[Exception], object]
) -> None:
    """An attempt or call that raised: its outcome, kind and the error's type, not its text."""
    span.set_attribute(ERROR_TYPE, type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR))
    if isinstance(error, Exception):
        span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.FAILED.value)
        kind = classify(error)
        span.set_attribute(FAILURE_KIND, getattr(kind, "name", "UNKNOWN"))
    else:  # a task cancelled, Ctrl-C: the executor records it INTERRUPTED, unclassified
        span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.INTERRUPTED.value)


def _usage(span: trace.Span, usage: TokenUsage | None) -> None:
    if usage is not None:
        span.set_attribute(INPUT_TOKENS, usage.input_tokens)
        span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)


def _money(span: trace.Span, charge: ModelCharge | None) -> None:
    """A priced attempt's money on its span: held, lowered, the ``max_tokens`` sent, the cost."""
    if charge is None:
        return
    span.set_attribute(COST_HELD, float(charge.held))
    span.set_attribute(MAX_TOKENS_LOWERED, charge.lowered)
    if charge.max_tokens is not None:
        span.set_attribute(REQUEST_MAX_TOKENS, charge.max_tokens)
    if charge.price_data is not None:
        span.set_attribute(PRICE_DATA, charge.price_data)
    if charge.cost is not None:
        span.set_attribute(COST, float(charge.cost))


def _response(span: trace.Span, response: ChatResponse | None) -> None:
    """The answer's model, ID and finish reasons, those it states."""
    if response is None:
        return
    if response.model is not None:
        span.set_attribute(RESPONSE_MODEL, response.model)
    if response.id is not None:
        span.set_attribute(RESPONSE_ID, response.id)
    if response.finish_reasons:
        span.set_attribute(FINISH_REASONS, list(response.finish_reasons))


def _answered(
    span: trace.Span,
    result: T,
    usage_of: Callable[[T], TokenUsage | None] | None,
    response_of: Callable[[T], ChatResponse | None] | None,
) -> None:
    """A succeeded attempt: its outcome, the usage and the answer it reported."""
    span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.SUCCEEDED.value)
    _usage(span, None if usage_of is None else usage_of(result))
    _response(span, None if response_of is None else response_of(result))


def _counted(attempts: list[int], attempt: Callable[[], R]) -> Callable[[], R]:
    """``attempt``, counting its calls in ``attempts[0]``; for a sync or an async attempt alike
    (an async one is counted when its awaitable is made, which is when the executor starts it)."""

    def counted() -> R:
        attempts[0] += 1
        return attempt()

    return counted


@final
class HarnessTracing:
    """A tracer, and the span (``parent``) every span the harness starts is a child of.

    ``tracer`` is an OpenTelemetry ``Tracer`` (``provider.get_tracer("diagnosis_harness")``);
    ``parent`` a span, or ``None`` for spans that start a trace of their own. Immutable: the
    spans of a run come from ``with tracing.run(ctx, agent) as run_tracing:``, a new
    ``HarnessTracing`` whose parent is the run's span.
    """

    __slots__ = ("_parent", "_tracer")

    def __init__(self, tracer: trace.Tracer, *, parent: trace.Span | None = None) -> None:
        if not isinstance(tracer, trace.Tracer):
            raise TypeError(f"tracer must be an opentelemetry.trace.Tracer, got {tracer!r}")
        if parent is not None and not isinstance(parent, trace.Span):
            raise TypeError(f"parent must be an opentelemetry.trace.Span or None, got {parent!r}")
        self._tracer = tracer
        self._parent = parent

    @property
    def tracer(self) -> trace.Tracer:
        return self._tracer

    @property
    def parent(self) -> trace.Span | None:
        """The span the harness's spans are children of; ``None``: each starts a trace."""
        return self._parent

    def _start(
        self, name: str, kind: SpanKind, attributes: dict[str, AttributeValue]
    ) -> trace.Span:
        # The parent is given explicitly: an empty Context means "no parent", never "the current".
        parent = Context() if self._parent is None else trace.set_span_in_context(self._parent)
        return self._tracer.start_span(name, context=parent, kind=kind, attributes=attributes)

    @contextmanager
    def run(
        self, ctx: RunContext, agent: str, *, provider: str | None = None
    ) -> Iterator[HarnessTracing]:
        """An ``invoke_agent {agent}`` span around the block; yields the tracing of its children.

        The span names the run's session ID as its ``gen_ai.conversation.id``, the run's ID
        (:data:`RUN_ID`; a sub-agent's run also its parent's, :data:`PARENT_RUN_ID`) and
        ``provider`` (``"openai"``, ``"anthropic"``: the GenAI conventions'
        ``gen_ai.provider.name``) when given -- give it when the agent talks to one provider.
        At the block's end the span gets the run's termination state and exhausted dimension
        (if the run has ended by then); an exception leaving the block marks it an error.
        """
        if type(agent) is not str or not agent.strip():
            raise ValueError(f"agent must be a non-blank str naming the agent, got {agent!r}")
        if provider is not None and (type(provider) is not str or not provider.strip()):
            raise ValueError(
                f"provider must be a non-blank str naming the GenAI provider (gen_ai.provider."
                f"name, e.g. 'openai') or None, got {provider!r}"
            )
        attributes: dict[str, AttributeValue] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: agent,
            CONVERSATION_ID: ctx.session_id,
            **_run_attributes(ctx),
        }
        if provider is not None:
            attributes[PROVIDER] = provider
        span = self._start(f"invoke_agent {agent}", SpanKind.INTERNAL, attributes)
        try:
            yield HarnessTracing(self._tracer, parent=span)
        except BaseException as error:
            span.set_attribute(ERROR_TYPE, type(error).__qualname__)
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            annotate_ending(span, ctx)
            span.end()

    # -- spans for the governed calls (hooks of _governed and _tools) ------------------------------

    def _chat_spans(
        self,
        *,
        provider: str,
        model: str,
        classify: Callable[[Exception], object],
        usage_of: Callable[[T], TokenUsage | None] | None,
        response_of: Callable[[T], ChatResponse | None] | None,
        server: Server | None,
        charge_of: Callable[[], ModelCharge | None] | None,
    ) -> Callable[[], AbstractContextManager[Callable[[T], T]]]:
        """One execution's ``chat`` spans: each call opens the next attempt's, numbered from 1.

        The one decision both :meth:`chat_attempts` and :meth:`chat_attempts_async` drive: the
        block runs the attempt and hands its result to the yielded function (which marks the
        span answered, with the usage and the answer it reports); an exception leaving the block
        marks it failed, classified as the executor classifies it. The span ends either way.
        """
        attributes: dict[str, AttributeValue] = {
            OPERATION: "chat",
            PROVIDER: provider,
            REQUEST_MODEL: model,
        }
        if server is not None:
            attributes[SERVER_ADDRESS] = server.address
            attributes[SERVER_PORT] = server.port
        number = 0  # one execution's attempts run one after another

        def answered_by(span: trace.Span) -> Callable[[T], T]:
            def answered(result: T) -> T:
                _answered(span, result, usage_of, response_of)
                return result

            return answered

        @contextmanager
        def attempt_span() -> Iterator[Callable[[T], T]]:
            nonlocal number
            number += 1
            span = self._start(
                f"chat {model}", SpanKind.CLIENT, {**attributes, ATTEMPT_NUMBER: number}
            )
            try:
                yield answered_by(span)
            except BaseException as error:
                _failed(span, error, classify)
                raise
            finally:
                if charge_of is not None:  # what the attempt held, and settled by now
                    _money(span, charge_of())
                span.end()

        return attempt_span

    def chat_attempts(
        self,
        attempt: Callable[[], T],
        *,
        provider: str,
        model: str,
        classify: Callable[[Exception], object],
        usage_of: Callable[[T], TokenUsage | None] | None,
        response_of: Callable[[T], ChatResponse | None] | None = None,
        server: Server | None = None,
        charge_of: Callable[[], ModelCharge | None] | None = None,
    ) -> Callable[[], T]:
        """``attempt`` with a ``chat`` span around each call, numbered as the executor does.

        ``server`` is where the client sends its requests; ``usage_of`` and ``response_of`` read
        the usage and the answer off a succeeded attempt's result (``None`` for a result that is
        not an answer, as an opened stream is); ``charge_of`` gives, when the attempt ends, the
        money its priced reservation held and settled (``None``: not priced).
        """
        spans = self._chat_spans(
            provider=provider,
            model=model,
            classify=classify,
            usage_of=usage_of,
            response_of=response_of,
            server=server,
            charge_of=charge_of,
        )

        def traced() -> T:
            with spans() as answered:
                return answered(attempt())

        return traced

    def chat_attempts_async(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        provider: str,
        model: str,
        classify: Callable[[Exception], object],
        usage_of: Callable[[T], TokenUsage | None] | None,
        response_of: Callable[[T], ChatResponse | None] | None = None,
        server: Server | None = None,
        charge_of: Callable[[], ModelCharge | None] | None = None,
    ) -> Callable[[], Awaitable[T]]:
        """:meth:`chat_attempts` for an async attempt: the same spans, the attempt awaited."""
        spans = self._chat_spans(
            provider=provider,
            model=model,
            classify=classify,
            usage_of=usage_of,
            response_of=response_of,
            server=server,
            charge_of=charge_of,
        )

        async def traced() -> T:
            with spans() as answered:
                return answered(await attempt())

        return traced

    @contextmanager
    def _tool_span(
        self, tool: str, tool_call_id: str, classify: Callable[[Exception], object]
    ) -> Iterator[tuple[list[int], trace.Span]]:
        """The Tool call's ``execute_tool`` span around the block.

        Yields a one-item list the block counts its attempts in, and the span.
        """
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: tool,
            TOOL_TYPE: "function",  # a governed Tool is a function the application runs
            TOOL_CALL_ID: tool_call_id,
        }
        span = self._start(f"execute_tool {tool}", SpanKind.INTERNAL, attributes)
        attempts = [0]
        try:
            yield attempts, span
        except BaseException as error:
            _failed(span, error, classify)
            raise
        else:
            span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.SUCCEEDED.value)
        finally:
            span.set_attribute(ATTEMPT_NUMBER, attempts[0])
            span.end()

    def tool_call(
        self,
        tool: str,
        tool_call_id: str,
        classify: Callable[[Exception], object],
        run: Callable[[Callable[[], T]], T],
        attempt: Callable[[], T],
    ) -> T:
        """``run(attempt)`` in the Tool call's ``execute_tool`` span, its attempts counted."""
        with self._tool_span(tool, tool_call_id, classify) as (attempts, _span):
            return run(_counted(attempts, attempt))

    async def tool_call_async(
        self,
        tool: str,
        tool_call_id: str,
        classify: Callable[[Exception], object],
        run: Callable[[Callable[[], Awaitable[T]]], Awaitable[T]],
        attempt: Callable[[], Awaitable[T]],
    ) -> T:
        """:meth:`tool_call` for an async Tool: the same span and count, the run awaited."""
        return await self.tool_call_nesting_async(
            tool, tool_call_id, classify, run, lambda _within: attempt
        )

    async def tool_call_nesting_async(
        self,
        tool: str,
        tool_call_id: str,
        classify: Callable[[Exception], object],
        run: Callable[[Callable[[], Awaitable[T]]], Awaitable[T]],
        attempt_within: Callable[[HarnessTracing], Callable[[], Awaitable[T]]],
    ) -> T:
        """:meth:`tool_call_async` for a Tool whose work has spans of its own (a sub-agent's run):
        its attempt is ``attempt_within(tracing)``, ``tracing`` the one whose parent is the
        call's ``execute_tool`` span, so the sub-agent's ``invoke_agent`` nests under it."""
        with self._tool_span(tool, tool_call_id, classify) as (attempts, span):
            within = HarnessTracing(self._tracer, parent=span)
            return await run(_counted(attempts, attempt_within(within)))

    def __repr__(self) -> str:
        return f"HarnessTracing(tracer={self._tracer!r}, parent={self._parent!r})"


@final
class CurrentSpan:
    """The harness's attributes on OpenTelemetry's current span: a framework's own span.

    For a framework that emits the GenAI spans itself (pydantic-ai) and calls the harness's hooks
    inside them. The current span is OpenTelemetry's context, set by the framework -- the harness
    neither reads nor writes context of its own. Starts no span; stateless.
    """

    __slots__ = ()

    def run(self, ctx: RunContext) -> None:
        """Set the run's ID (and its parent's, for a sub-agent's run) and its ending on
        OpenTelemetry's current span: the framework's run span."""
        span = trace.get_current_span()
        span.set_attributes(_run_attributes(ctx))
        annotate_ending(span, ctx)

    def tool(
        self, number: int, error: BaseException | None, classify: Callable[[Exception], object]
    ) -> None:
        """Set a Tool attempt's number and outcome on the current span: the framework's tool,
        and its type (``function``), which the framework's span lacks (pydantic-ai's does)."""
        span = trace.get_current_span()
        span.set_attribute(TOOL_TYPE, "function")
        span.set_attribute(ATTEMPT_NUMBER, number)
        if error is None:
            span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.SUCCEEDED.value)
        else:
            _failed(span, error, classify)

    def chat(
        self,
        error: BaseException | None,
        classify: Callable[[Exception], object],
        charge: ModelCharge | None = None,
    ) -> None:
        """Set a model request's outcome on OpenTelemetry's current span: the framework's chat;
        and its money, for a priced request (``charge``: its reservation's ``charge()``)."""
        span = trace.get_current_span()
        if error is None:
            span.set_attribute(ATTEMPT_OUTCOME, AttemptOutcome.SUCCEEDED.value)
        else:
            _failed(span, error, classify)
        _money(span, charge)


def check_tracing(tracing: object) -> HarnessTracing | None:
    """``tracing`` if it is a ``HarnessTracing`` or ``None``, else a clear ``TypeError``."""
    if tracing is not None and type(tracing) is not HarnessTracing:
        raise TypeError(f"tracing must be a HarnessTracing or None, got {tracing!r}")
    return tracing
