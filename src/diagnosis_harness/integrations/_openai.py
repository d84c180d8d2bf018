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

from ._chat import ChatResponse, Server
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
from ._model_call import ModelRequest, input_bound
from ._wrapper import GovernedClient, Sdk, not_input

if TYPE_CHECKING:
    import openai  # noqa: F401 - in the quoted bases: GovernedClient["openai.OpenAI"]
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["AsyncGovernedOpenAI", "GovernedOpenAI"]


def _usage(usage: Any) -> TokenUsage:
    """OpenAI's usage: ``prompt_tokens`` counts the cached ones, reported apart as read."""
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return TokenUsage(
        usage.prompt_tokens,
        usage.completion_tokens,
        cache_read_tokens=min(int(cached), usage.prompt_tokens),
    )


def _usage_of(completion: ChatCompletion) -> TokenUsage | None:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    return _usage(usage)


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
            self._usage = _usage(usage)

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


_OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens")  # the current name, the deprecated one


def _request_of(params: dict[str, Any], server: Server | None) -> ModelRequest:
    """A priced Chat Completion's request: its model, a bound on its input (every parameter
    sent in the body, the messages and tools among them), its output limit (the smaller of
    ``max_completion_tokens`` and the deprecated ``max_tokens``, when given). ``n`` other than 1
    is refused: its choices' outputs would multiply the worst case."""
    n = params.get("n")
    if n is not None and n != 1:
        raise ValueError(
            f"n={n!r} is refused on a priced call: each of its choices may use max_tokens, so "
            "ask for one choice per call (n=1, or leave n out)"
        )
    limits = [params[name] for name in _OUTPUT_LIMITS if params.get(name) is not None]
    for limit in limits:
        if type(limit) is not int or limit < 1:
            raise ValueError(
                f"max_completion_tokens and max_tokens must be ints >= 1, got {limit!r}"
            )
    openai = server is not None and server.address == "api.openai.com"
    return ModelRequest(
        model=str(params["model"]),
        input_bound=input_bound(not_input(params)),
        max_tokens=min(limits) if limits else None,
        provider="openai" if openai else None,  # elsewhere the prices match the model's name
    )


def _capped(params: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The output limit set: on each of the two names the request gives, else on the current
    one (``max_completion_tokens``, which OpenAI's reasoning models require)."""
    given = [name for name in _OUTPUT_LIMITS if params.get(name) is not None]
    return {**params, **dict.fromkeys(given or _OUTPUT_LIMITS[:1], max_tokens)}


_OPENAI = Sdk(
    package="openai",
    classifier=classify_openai,
    call_name="openai chat.completions.create",
    required=("model", "messages"),
    endpoint=lambda client: client.chat.completions.create,
    stream_params=_stream_params,
    response_of=_response_of,
    request_of=_request_of,
    capped=_capped,
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

    ``prices`` (``GenaiPrices()``, a ``PriceTable``; required when the run has a money limit)
    prices every call: each attempt holds its worst case -- :func:`input_bound` of the request's
    body times the dearest input price, plus its ``max_completion_tokens`` (or ``max_tokens``;
    ``default_max_tokens`` when it gives neither) times the output price -- and settles the
    usage priced exactly. Under a money limit the request is sent with the output limit the
    money left can pay for (``max_completion_tokens``, or the name the request used), lowered if
    need be; :attr:`charges` journals each attempt.

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
