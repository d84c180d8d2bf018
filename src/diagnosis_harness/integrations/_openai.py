"""Governed OpenAI Chat Completions: :class:`GovernedOpenAI` and :class:`AsyncGovernedOpenAI`.

Each wraps one ``openai`` client for one run and one retry policy (the boundary's: the Intent
Router's, the Diagnosis Agent's, ...). ``create(**params)`` is one governed
``client.chat.completions.create(**params)``; ``stream(**params)`` the same with ``stream=True``
and ``stream_options={"include_usage": True}``, so the provider ends the stream with its usage.
See :mod:`._governed` for what one governed call is, and :mod:`._wrapper` for what the wrappers
share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from ._chat import ChatResponse
from ._classify import classify_openai
from ._governed import (
    AsyncGovernedStream,
    GovernedStream,
    TokenUsage,
    call,
    call_async,
    open_stream,
    open_stream_async,
)
from ._wrapper import GovernedClient, Sdk

if TYPE_CHECKING:
    import openai  # noqa: F401 - in the quoted bases: GovernedClient["openai.OpenAI"]
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["AsyncGovernedOpenAI", "GovernedOpenAI"]


def _usage_of(completion: ChatCompletion) -> TokenUsage | None:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    return TokenUsage(usage.prompt_tokens, usage.completion_tokens)


def _response_of(result: object) -> ChatResponse | None:
    """What a Chat Completion says of itself; ``None`` for an opened stream."""
    from openai.types.chat import ChatCompletion  # noqa: PLC0415 - loaded: the SDK answered

    if not isinstance(result, ChatCompletion):
        return None
    reasons = tuple(choice.finish_reason for choice in result.choices)
    return ChatResponse(model=result.model, id=result.id, finish_reasons=reasons)


@final
class _Meter:
    """OpenAI reports a stream's usage once, in a last chunk without choices."""

    __slots__ = ("_usage",)

    def __init__(self) -> None:
        self._usage: TokenUsage | None = None

    def observe(self, chunk: ChatCompletionChunk) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self._usage = TokenUsage(usage.prompt_tokens, usage.completion_tokens)

    @property
    def final(self) -> bool:
        return self._usage is not None

    def usage(self) -> TokenUsage | None:
        return self._usage


def _stream_params(params: dict[str, Any]) -> dict[str, Any]:
    options = params.get("stream_options")
    if options is None:
        options = {}
    elif not isinstance(options, dict):
        raise TypeError(f"stream_options must be a dict, got {options!r}")
    if options.get("include_usage", True) is not True:
        raise ValueError(
            "stream_options.include_usage must be True (or left out): a governed stream records "
            "the usage the provider reports in its last chunk"
        )
    return {**params, "stream_options": {**options, "include_usage": True}}


_OPENAI = Sdk(
    package="openai",
    classifier=classify_openai,
    call_name="openai chat.completions.create",
    required=("model", "messages"),
    endpoint=lambda client: client.chat.completions.create,
    stream_params=_stream_params,
    response_of=_response_of,
)


@final
class GovernedOpenAI(GovernedClient["openai.OpenAI"]):
    """Governed Chat Completions on an ``openai.OpenAI`` client, for one run and one policy.

    ``policy`` is the name of one of the run's retry policies (``"intent_router"``) or a
    ``RetryPolicy``. ``executor`` is the run's ``HarnessRetryExecutor`` whose journal records
    the attempts (give one built with ``classify_openai`` or ``classify_sdk``); by default a new
    one with ``classify_openai``, read from :attr:`executor`. ``request_timeout`` (seconds)
    replaces the client's timeout; either is cut to the time left before the run's deadline.
    ``tracing`` (a :class:`~diagnosis_harness.integrations.HarnessTracing`, the ``otel`` extra)
    gives each attempt a ``chat {model}`` span, a child of its parent span.

    The client must send one request per call: a client with ``max_retries`` other than 0 is a
    ``ValueError`` (pass ``client.with_options(max_retries=0)``), an ``AsyncOpenAI`` or anything
    else a ``TypeError``. Every refusal happens here, before any request.
    """

    __slots__ = ()
    _sdk = _OPENAI
    _client_class = "OpenAI"
    _other = ("AsyncOpenAI", "AsyncGovernedOpenAI")

    def create(self, **params: Any) -> ChatCompletion:
        """One governed ``chat.completions.create(**params)``; its usage recorded on the run.

        ``params`` are the SDK's, without ``stream`` (use :meth:`stream`) and ``timeout`` (the
        run sets it). A response without usage raises ``UsageNotReported``.
        """
        return call(self._call("create", params), _usage_of)

    def stream(self, **params: Any) -> GovernedStream[ChatCompletionChunk]:
        """One governed streaming ``chat.completions.create``: its chunks, as they arrive.

        The request asks for ``stream_options.include_usage``; the usage is recorded from the
        provider's last chunk, and a stream that ends without one raises ``UsageNotReported``
        after its last chunk.
        """
        return open_stream(self._call("stream", params), _Meter)


@final
class AsyncGovernedOpenAI(GovernedClient["openai.AsyncOpenAI"]):
    """:class:`GovernedOpenAI` for an ``openai.AsyncOpenAI`` client: the same, awaited.

    Every await of the SDK runs in ``ctx.scope()``: the run's cancellation (from any thread) or
    its deadline cancels the request in flight, and the call raises the run's ``RunTerminated``.
    """

    __slots__ = ()
    _sdk = _OPENAI
    _client_class = "AsyncOpenAI"
    _other = ("OpenAI", "GovernedOpenAI")

    async def create(self, **params: Any) -> ChatCompletion:
        """One governed ``await chat.completions.create(**params)``; see ``GovernedOpenAI``."""
        return await call_async(self._call("create", params), _usage_of)

    async def stream(self, **params: Any) -> AsyncGovernedStream[ChatCompletionChunk]:
        """One governed streaming call; ``async for`` its chunks. See ``GovernedOpenAI``."""
        return await open_stream_async(self._call("stream", params), _Meter)
