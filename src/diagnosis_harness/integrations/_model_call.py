"""One governed model call, whatever the SDK: :class:`ModelCall`, the one owner of its steps.

Every adapter -- the governed openai/anthropic clients, the openai-agents model, the pydantic-ai
model -- sends its requests through one ``ModelCall``, and only translates its SDK's shapes
(how to send, where the usage is). What a governed model call is, decided here once:

1. the arguments: the run (``ctx``), the retry policy, the executor, checked when the adapter is
   built (:mod:`._arguments`, the same checks as the Tool calls');
2. the reservation (:meth:`ModelCall.reserve`, held around the attempt's request): the gate and
   one Model call in one decision -- a refusal reserves nothing and the request is never sent.
   It gives the attempt's :class:`ModelReservation`, on which the response's usage is recorded
   exactly once (:meth:`ModelReservation.record`, or :meth:`ModelReservation.end_stream` for a
   stream, also when it was cut by a cancellation or the deadline: the tokens received were
   spent);
3. the request under the run's deadline: its timeout cut to the time the run has left
   (:meth:`ModelCall.timeout`), an awaited request in ``ctx.scope()``
   (:meth:`ModelCall.request_async`), and after a failure the run's ending wins over the SDK's
   error (:meth:`ModelCall.ended_wins`);
4. the failure classified by the retry policy, and each attempt journaled: the executor's
   (:meth:`ModelCall.execute` and :meth:`ModelCall.execute_async` drive the same attempts, with
   a ``chat`` span each when tracing).

A money budget (a hold placed before each call, settled by its actual usage after it) is one
change here: the hold in :meth:`ModelCall.reserve`, its settlement in
:meth:`ModelReservation._settle`, through which every record goes, and its release when the
attempt failed unsettled in :meth:`ModelReservation._release`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final

from .._boundary import Boundary
from .._errors import HarnessError
from ._arguments import checked_ctx, executor_of, policy_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from .._context import RunContext
    from .._retry import Classifier, HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from ._chat import ChatResponse, Server
    from .otel import HarnessTracing

__all__ = [
    "ModelCall",
    "ModelReservation",
    "TokenUsage",
    "UsageMeter",
    "UsageNotReported",
]

R = TypeVar("R")
A = TypeVar("A")  # an attempt, sync or async
C_contra = TypeVar("C_contra", contravariant=True)


@final
@dataclass(frozen=True, slots=True)
class TokenUsage:
    """The tokens one response used, as the provider reported them and as the run recorded them."""

    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@final
class UsageNotReported(HarnessError):
    """The provider answered without token usage, so the run's token budget cannot count it.

    Raised by a governed call whose response has no usage, and at the end of a governed stream
    that ended without reporting it (an OpenAI-compatible server that ignores
    ``stream_options.include_usage``). Inside an attempt it is not retried (its kind is
    ``UNKNOWN``): the request was answered, and asking again would spend twice. ``response`` is
    the answer that came without usage (``None`` for a stream, whose chunks were delivered).
    """

    def __init__(self, message: str, response: object = None) -> None:
        super().__init__(message)
        self.response = response


class UsageMeter(Protocol[C_contra]):
    """Reads a stream's chunks as they pass; knows the usage once the provider has reported it."""

    def observe(self, chunk: C_contra, /) -> None: ...

    @property
    def final(self) -> bool:
        """Whether the provider has reported the response's whole usage."""
        ...

    def usage(self) -> TokenUsage | None:
        """The usage known so far (the whole of it once :attr:`final`), or ``None``."""
        ...


# -- the arguments -------------------------------------------------------------------------------


def _positive_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


# -- what the chat spans say of a call -----------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Chat:
    """What one call's ``chat`` spans report: the model asked for, and readers of its answer.

    ``usage_of`` and ``response_of`` read a succeeded attempt's result; ``None`` when the result
    is not the answer (an opened stream, whose usage comes at its end).
    """

    model: str
    usage_of: Callable[[Any], TokenUsage | None] | None = None
    response_of: Callable[[Any], ChatResponse | None] | None = None


# -- one call: the reservation, the request under the deadline, the attempts --------------------


@final
class ModelReservation:
    """One attempt's reserved Model call; the response's usage is recorded on it exactly once.

    Invariant: ``_usage`` is written once, by :meth:`_settle`, the one place every record goes
    through; a second record is a ``RuntimeError`` (a usage counted twice would spend the run's
    tokens twice). Recorded by one thread: the one that reads the response (a sync client's
    worker, which may still record after its caller left; the caller then reads :attr:`usage`
    only once the worker has ended the stream).
    """

    __slots__ = ("_call", "_name", "_settled", "_usage")

    def __init__(self, call: ModelCall, name: str) -> None:
        self._call = call
        self._name = name
        self._settled = False
        self._usage: TokenUsage | None = None  # what was recorded; None: nothing (yet)

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded on this reservation, once it is; else ``None``."""
        return self._usage

    @property
    def settled(self) -> bool:
        """Whether the attempt's usage has been recorded (or its stream ended without any)."""
        return self._settled

    def record(self, usage: TokenUsage) -> TokenUsage:
        """Record the response's actual usage on the run (even past a limit: it was spent)."""
        self._settle(usage)
        return usage

    def record_response(self, response: R, usage_of: Callable[[R], TokenUsage | None]) -> R:
        """Record the usage ``response`` reports; :class:`UsageNotReported` if it reports none."""
        self._settle(self.reported(response, usage_of))
        return response

    def reported(self, response: R, usage_of: Callable[[R], TokenUsage | None]) -> TokenUsage:
        """The usage ``response`` reports, not recorded yet; :class:`UsageNotReported` if none."""
        usage = usage_of(response)
        if usage is None:
            raise UsageNotReported(f"{self._name}: the response reports no token usage", response)
        return usage

    def end_stream(self, meter: UsageMeter[Any], *, complete: bool) -> TokenUsage | None:
        """A stream ended: record the usage its chunks reported, whole or as far as it went.

        ``complete``: the stream was read to its end (not cut by a cancellation, the deadline,
        a failure or the consumer). A stream cut short records what it received; one read to
        its end without the provider's whole usage raises :class:`UsageNotReported`, after
        recording what it knows.
        """
        known = meter.usage()
        self._settle(known)
        if complete and not meter.final:
            raise UsageNotReported(f"{self._name}: the stream ended without token usage")
        return known

    def __enter__(self) -> ModelReservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._release()

    def _release(self) -> None:
        """The attempt's block failed: give back what the reservation holds, if unsettled.

        Nothing is held today beyond the Model call, which the failed attempt spent (a retry
        reserves anew). A money hold placed by :meth:`ModelCall.reserve` is released here; a
        sync worker whose answer arrives after its caller left still settles it (:meth:`_settle`
        may follow this), so such a hold needs a lock shared by the two.
        """

    def _settle(self, usage: TokenUsage | None) -> None:
        if self._settled:
            raise RuntimeError(f"{self._name}: the usage of one Model call was recorded twice")
        self._settled = True
        if usage is not None:
            self._usage = usage
            self._call.ctx.record_token_usage(
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
            )


@final
class ModelCall:
    """One adapter's governed model calls: a run, its executor and policy, checked once.

    ``policy`` is the retry policy the attempts run under (a name in ``ctx.retry_policies`` or a
    ``RetryPolicy``), or ``None`` for a framework that retries model requests itself (pydantic-ai:
    each of its requests is reserved and recorded here, :meth:`execute` is not used).
    ``executor`` records every attempt (a new one classifying with ``classifier``, else
    ``default_classifier``, if not given); ``request_timeout`` replaces the client's timeout;
    ``tracing`` gives each attempt a ``chat`` span, which names ``provider`` and ``server``.
    Immutable once built: calls on it may run on many threads and tasks at once.
    """

    __slots__ = (
        "_ctx",
        "_executor",
        "_policy",
        "_provider",
        "_request_timeout",
        "_server",
        "_tracing",
    )

    def __init__(
        self,
        ctx: RunContext,
        *,
        policy: RetryPolicy | str | None,
        executor: HarnessRetryExecutor | None = None,
        classifier: Classifier | None = None,
        default_classifier: Classifier | None = None,
        request_timeout: float | None = None,
        tracing: HarnessTracing | None = None,
        provider: str = "",
        server: Server | None = None,
    ) -> None:
        self._ctx = checked_ctx(ctx)
        self._policy = None if policy is None else policy_of(ctx, policy)
        self._executor = executor_of(ctx, executor, classifier, default=default_classifier)
        self._request_timeout = _positive_seconds("request_timeout", request_timeout)
        if tracing is not None:  # OpenTelemetry is imported only when tracing is asked for
            from .otel import check_tracing  # noqa: PLC0415 - lazy: the optional `otel` extra

            check_tracing(tracing)
        self._tracing = tracing
        self._provider = provider  # gen_ai.provider.name of the chat spans
        self._server = server  # server.address and server.port of the chat spans

    @property
    def ctx(self) -> RunContext:
        return self._ctx

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs, and records, every attempt."""
        return self._executor

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy the attempts run under (``ValueError`` if the framework retries)."""
        if self._policy is None:
            raise ValueError("this model call's framework retries itself: it has no policy")
        return self._policy

    # -- the steps of one attempt -------------------------------------------------------------

    def reserve(self, name: str = "model call") -> ModelReservation:
        """Reserve the attempt's Model call; the run's ``RunTerminated`` if refused (sends nothing).

        ``name`` names the call in the errors of its reservation
        (``"openai chat.completions.create"``). Every adapter's attempt holds its reservation
        around the block that sends the request (``with model_call.reserve(name) as r:``), in
        both loops: a block that fails leaves it to :meth:`ModelReservation._release`.
        """
        self._ctx.reserve_model_call()
        return ModelReservation(self, name)

    def timeout(self, client_timeout: object) -> object:
        """The request's ``timeout=``: the client's (or ``request_timeout``), cut to the deadline.

        An ``httpx`` ``Timeout`` (the SDKs' default: 5 s to connect, 600 s for the rest) keeps its
        shape, each part cut; a number or ``None`` becomes a number.
        """
        left = self._ctx.deadline.remaining_seconds(self._ctx.clock)
        if self._request_timeout is not None:
            return min(self._request_timeout, left)
        if isinstance(client_timeout, (int, float)) and not isinstance(client_timeout, bool):
            return min(float(client_timeout), left)
        parts = ("connect", "read", "write", "pool")
        if client_timeout is not None and all(hasattr(client_timeout, p) for p in parts):

            def cut(part: str) -> float:
                value = getattr(client_timeout, part)
                return left if value is None else min(float(value), left)

            return type(client_timeout)(**{part: cut(part) for part in parts})
        return left

    def ended_wins(self) -> None:
        """After a failure: if the run ended meanwhile, raise its ``RunTerminated`` instead."""
        self._ctx.check(Boundary.MODEL)

    async def request_async(self, send: Callable[[], Awaitable[R]]) -> R:
        """``await send()`` in ``ctx.scope()``: the run's cancellation or deadline cuts it.

        After a failure, the run's ending wins over the SDK's error.
        """
        try:
            async with self._ctx.scope(Boundary.MODEL):
                return await send()
        except Exception:
            self.ended_wins()
            raise

    # -- the attempts: one decision (policy, journal, span), driven by a sync and an async loop --

    def execute(self, attempt: Callable[[], R], chat: Chat) -> R:
        """``attempt`` under the executor and the policy; in a ``chat`` span each, when tracing."""
        if self._tracing is not None:
            attempt = self._traced(self._tracing.chat_attempts, attempt, chat)
        return self._executor.execute(self.policy, attempt)

    async def execute_async(self, attempt: Callable[[], Awaitable[R]], chat: Chat) -> R:
        """:meth:`execute` for an async attempt: the same decisions, awaited."""
        if self._tracing is not None:
            attempt = self._traced(self._tracing.chat_attempts_async, attempt, chat)
        return await self._executor.execute_async(self.policy, attempt)

    def _traced(self, wrap: Callable[..., A], attempt: A, chat: Chat) -> A:
        """``attempt`` wrapped in its ``chat`` spans: the provider and server here, the rest
        the call's (``wrap`` is the tracing's sync or async wrapper: they take the same)."""
        return wrap(
            attempt,
            provider=self._provider,
            model=chat.model,
            classify=self._executor.classify,
            usage_of=chat.usage_of,
            response_of=chat.response_of,
            server=self._server,
        )

    def __repr__(self) -> str:
        policy = None if self._policy is None else self._policy.name
        return f"ModelCall(run_id={self._ctx.run_id!r}, policy={policy!r})"
