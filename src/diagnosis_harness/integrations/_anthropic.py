"""Governed Anthropic Messages: :class:`GovernedAnthropic` and :class:`AsyncGovernedAnthropic`.

Each wraps one ``anthropic`` client for one run and one retry policy. ``create(**params)`` is one
governed ``client.messages.create(**params)``; ``stream(**params)`` the same with
``stream=True``, whose raw events are handed over as they arrive. The input tokens counted are
``input_tokens`` plus the prompt-cache ones (``cache_creation_input_tokens``,
``cache_read_input_tokens``), which Anthropic reports apart: the run's input budget counts every
token the model read. See :mod:`._governed` for what one governed call is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from ._classify import classify_anthropic
from ._clients import ensure_no_hidden_retries
from ._extras import missing_extra
from ._governed import (
    AsyncGovernedStream,
    Governance,
    GovernedStream,
    TokenUsage,
    call,
    call_async,
    open_stream,
    open_stream_async,
)
from ._params import checked_params

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message, RawMessageStreamEvent

    from .._context import RunContext
    from .._retry import HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from .otel import HarnessTracing

__all__ = ["AsyncGovernedAnthropic", "GovernedAnthropic"]

_CALL = "anthropic messages.create"
_REQUIRED = ("model", "messages", "max_tokens")


def _anthropic() -> Any:
    try:
        import anthropic  # noqa: PLC0415 - lazy: the SDK is the optional `anthropic` extra
    except ModuleNotFoundError as error:
        if error.name != "anthropic":
            raise
        raise missing_extra("anthropic", "anthropic", "a governed anthropic call") from error
    return anthropic


def _checked_client(client: object, expected: str, other: str, wrapper: str) -> None:
    sdk = _anthropic()
    if not isinstance(client, getattr(sdk, expected)):
        hint = ""
        if isinstance(client, getattr(sdk, other)):
            hint = f" (an anthropic.{other} goes to {wrapper})"
        raise TypeError(f"client must be an anthropic.{expected}{hint}, got {client!r}")
    ensure_no_hidden_retries(client)


def _input_tokens(usage: Any) -> int | None:
    """Every input token the usage reports (the cache's included), or ``None`` if none is."""
    parts = [
        getattr(usage, name, None)
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    if parts[0] is None:
        return None
    return int(sum(part for part in parts if part is not None))


def _usage_of(message: Message) -> TokenUsage | None:
    usage = getattr(message, "usage", None)
    if usage is None:
        return None
    input_tokens = _input_tokens(usage)
    if input_tokens is None:
        return None
    return TokenUsage(input_tokens, usage.output_tokens)


@final
class _Meter:
    """Anthropic reports input usage in ``message_start`` and the output in ``message_delta``.

    ``message_delta``'s counts are cumulative (its ``input_tokens``, when present, replaces the
    start's); its usage makes the report final.
    """

    __slots__ = ("_final", "_input", "_output")

    def __init__(self) -> None:
        self._input: int | None = None
        self._output = 0
        self._final = False

    def observe(self, event: RawMessageStreamEvent) -> None:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = getattr(event.message, "usage", None)  # type: ignore[union-attr]  # by type
            if usage is not None:
                self._input = _input_tokens(usage)
                self._output = usage.output_tokens or 0
        elif kind == "message_delta":
            usage = getattr(event, "usage", None)
            if usage is not None and usage.output_tokens is not None:
                self._output = usage.output_tokens
                self._final = True
                input_tokens = _input_tokens(usage)
                if input_tokens is not None:
                    self._input = input_tokens

    @property
    def final(self) -> bool:
        return self._final and self._input is not None

    def usage(self) -> TokenUsage | None:
        if self._input is None:
            return None
        return TokenUsage(self._input, self._output)


@final
class GovernedAnthropic:
    """Governed Messages on an ``anthropic.Anthropic`` client, for one run and one policy.

    The arguments and refusals are those of ``GovernedOpenAI``: ``policy`` (a name or a
    ``RetryPolicy``), ``executor`` (by default a new one with ``classify_anthropic``),
    ``request_timeout``, ``tracing``; a client with ``max_retries`` other than 0 is a
    ``ValueError``, an ``AsyncAnthropic`` or anything else a ``TypeError``.
    """

    __slots__ = ("_client", "_gov")

    def __init__(
        self,
        client: anthropic.Anthropic,
        ctx: RunContext,
        *,
        policy: str | RetryPolicy,
        executor: HarnessRetryExecutor | None = None,
        request_timeout: float | None = None,
        tracing: HarnessTracing | None = None,
    ) -> None:
        _checked_client(client, "Anthropic", "AsyncAnthropic", "AsyncGovernedAnthropic")
        self._gov = Governance(
            ctx,
            policy=policy,
            executor=executor,
            request_timeout=request_timeout,
            classifier=classify_anthropic,
            tracing=tracing,
            provider="anthropic",
        )
        self._client = client

    @property
    def client(self) -> anthropic.Anthropic:
        return self._client

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs, and records, every attempt."""
        return self._gov.executor

    @property
    def policy(self) -> RetryPolicy:
        return self._gov.policy

    def create(self, **params: Any) -> Message:
        """One governed ``messages.create(**params)``; its usage recorded on the run.

        ``params`` are the SDK's, without ``stream`` (use :meth:`stream`) and ``timeout``.
        """
        params = checked_params(params, _REQUIRED, "create", ("stream", "timeout"))
        client = self._client

        def send(timeout: Any) -> Message:
            message: Message = client.messages.create(**params, timeout=timeout)
            return message

        return call(self._gov, send, _usage_of, client.timeout, _CALL, model=params["model"])

    def stream(self, **params: Any) -> GovernedStream[RawMessageStreamEvent]:
        """One governed ``messages.create(stream=True)``: its raw events, as they arrive.

        The usage is recorded from ``message_start`` and ``message_delta``; a stream that ends
        without ``message_delta``'s usage raises ``UsageNotReported`` after its last event.
        """
        params = checked_params(params, _REQUIRED, "stream", ("stream", "timeout"))
        client = self._client

        def open_(timeout: Any) -> Any:
            return client.messages.create(**params, stream=True, timeout=timeout)

        return open_stream(self._gov, open_, _Meter, client.timeout, _CALL, model=params["model"])


@final
class AsyncGovernedAnthropic:
    """:class:`GovernedAnthropic` for an ``anthropic.AsyncAnthropic`` client: the same, awaited.

    Every await of the SDK runs in ``ctx.scope()``: the run's cancellation or deadline cancels
    the request in flight, and the call raises the run's ``RunTerminated``.
    """

    __slots__ = ("_client", "_gov")

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        ctx: RunContext,
        *,
        policy: str | RetryPolicy,
        executor: HarnessRetryExecutor | None = None,
        request_timeout: float | None = None,
        tracing: HarnessTracing | None = None,
    ) -> None:
        _checked_client(client, "AsyncAnthropic", "Anthropic", "GovernedAnthropic")
        self._gov = Governance(
            ctx,
            policy=policy,
            executor=executor,
            request_timeout=request_timeout,
            classifier=classify_anthropic,
            tracing=tracing,
            provider="anthropic",
        )
        self._client = client

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        return self._client

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs, and records, every attempt."""
        return self._gov.executor

    @property
    def policy(self) -> RetryPolicy:
        return self._gov.policy

    async def create(self, **params: Any) -> Message:
        """One governed ``await messages.create(**params)``; see ``GovernedAnthropic``."""
        params = checked_params(params, _REQUIRED, "create", ("stream", "timeout"))
        client = self._client

        def send(timeout: Any) -> Any:
            return client.messages.create(**params, timeout=timeout)

        return await call_async(
            self._gov, send, _usage_of, client.timeout, _CALL, model=params["model"]
        )

    async def stream(self, **params: Any) -> AsyncGovernedStream[RawMessageStreamEvent]:
        """One governed streaming call; ``async for`` its raw events. See ``GovernedAnthropic``."""
        params = checked_params(params, _REQUIRED, "stream", ("stream", "timeout"))
        client = self._client

        def open_(timeout: Any) -> Any:
            return client.messages.create(**params, stream=True, timeout=timeout)

        return await open_stream_async(
            self._gov, open_, _Meter, client.timeout, _CALL, model=params["model"]
        )
