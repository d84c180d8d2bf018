"""Governed Anthropic Messages: :class:`GovernedAnthropic` and :class:`AsyncGovernedAnthropic`.

Each wraps one ``anthropic`` client for one run and one retry policy. ``create(**params)`` is one
governed ``client.messages.create(**params)``; ``stream(**params)`` the same with
``stream=True``, whose raw events are handed over as they arrive. The input tokens counted are
``input_tokens`` plus the prompt-cache ones (``cache_creation_input_tokens``,
``cache_read_input_tokens``), which Anthropic reports apart: the run's input budget counts every
token the model read. See :mod:`._governed` for what one governed call is, and :mod:`._wrapper`
for what the wrappers share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

from ._chat import ChatResponse, Server
from ._classify import classify_anthropic
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
    import anthropic  # noqa: F401 - in the quoted bases: GovernedClient["anthropic.Anthropic"]
    from anthropic.types import Message, RawMessageStreamEvent

__all__ = ["AsyncGovernedAnthropic", "GovernedAnthropic"]


def _input_tokens(usage: Any) -> int | None:
    """Every input token the usage reports (the cache's included), or ``None`` if none is."""
    parts = [
        getattr(usage, name, None)
        for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    if parts[0] is None:
        return None
    return int(sum(part for part in parts if part is not None))


def _cache(usage: Any) -> dict[str, int]:
    """The prompt cache's parts of the input: read, written, and written for an hour."""
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    written = getattr(usage, "cache_creation_input_tokens", None) or 0
    creation = getattr(usage, "cache_creation", None)
    hour = getattr(creation, "ephemeral_1h_input_tokens", None) or 0
    return {
        "cache_read_tokens": int(read),
        "cache_write_tokens": int(written),
        "cache_write_1h_tokens": min(int(hour), int(written)),
    }


def _usage_of(message: Message) -> TokenUsage | None:
    usage = getattr(message, "usage", None)
    if usage is None:
        return None
    input_tokens = _input_tokens(usage)
    if input_tokens is None:
        return None
    return TokenUsage(input_tokens, usage.output_tokens, **_cache(usage))


def _response_of(result: object) -> ChatResponse | None:
    """What an Anthropic message says of itself; ``None`` for an opened stream."""
    from anthropic.types import Message  # noqa: PLC0415 - loaded: the SDK answered

    if not isinstance(result, Message):
        return None
    reasons = () if result.stop_reason is None else (result.stop_reason,)
    return ChatResponse(model=result.model, id=result.id, finish_reasons=reasons)


@final
class _Meter:
    """Anthropic reports input usage in ``message_start`` and the output in ``message_delta``.

    ``message_delta``'s counts are cumulative (its ``input_tokens``, when present, replaces the
    start's); its usage makes the report final.
    """

    __slots__ = ("_cache", "_final", "_input", "_output")

    def __init__(self) -> None:
        self._input: int | None = None
        self._output = 0
        self._final = False
        self._cache: dict[str, int] = {}

    def observe(self, event: RawMessageStreamEvent) -> None:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = getattr(event.message, "usage", None)  # type: ignore[union-attr]  # by type
            if usage is not None:
                self._input = _input_tokens(usage)
                self._output = usage.output_tokens or 0
                self._cache = _cache(usage)
        elif kind == "message_delta":
            usage = getattr(event, "usage", None)
            if usage is not None and usage.output_tokens is not None:
                self._output = usage.output_tokens
                self._final = True
                input_tokens = _input_tokens(usage)
                if input_tokens is not None:
                    self._input = input_tokens
                    self._cache = _cache(usage)

    @property
    def final(self) -> bool:
        return self._final and self._input is not None

    def usage(self) -> TokenUsage | None:
        if self._input is None:
            return None
        return TokenUsage(self._input, self._output, **self._cache)


TOOLS_PROMPT_TOKENS = 1024
"""Added to a priced request's input bound when it gives ``tools``: Anthropic adds a tool-use
system prompt the request does not send (346 tokens at most in its documentation's table), so
the request's own bytes do not bound it."""


def _writes_cache(value: object) -> bool:
    """Whether ``value`` marks anything for the prompt cache (a ``cache_control`` anywhere)."""
    if isinstance(value, dict):
        return "cache_control" in value or any(_writes_cache(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_writes_cache(v) for v in value)
    return getattr(value, "cache_control", None) is not None  # an SDK's typed block


def _request_of(params: dict[str, Any], server: Server | None) -> ModelRequest:
    """A priced Message's request: its model, a bound on its input (every parameter sent in the
    body: system, messages, tools; plus :data:`TOOLS_PROMPT_TOKENS` with tools), its
    ``max_tokens``, and whether it may write to the prompt cache (a ``cache_control`` in it)."""
    body = not_input(params)
    bound = input_bound(body) + (TOOLS_PROMPT_TOKENS if params.get("tools") else 0)
    anthropic = server is not None and server.address == "api.anthropic.com"
    return ModelRequest(
        model=str(params["model"]),
        input_bound=bound,
        max_tokens=params["max_tokens"],
        provider="anthropic" if anthropic else None,
        writes_cache=_writes_cache(body),
    )


def _capped(params: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    return {**params, "max_tokens": max_tokens}


_ANTHROPIC = Sdk(
    package="anthropic",
    classifier=classify_anthropic,
    call_name="anthropic messages.create",
    required=("model", "messages", "max_tokens"),
    endpoint=lambda client: client.messages.create,
    response_of=_response_of,
    request_of=_request_of,
    capped=_capped,
)


@final
class GovernedAnthropic(GovernedClient["anthropic.Anthropic"]):
    """Governed Messages on an ``anthropic.Anthropic`` client, for one run and one policy.

    The arguments and refusals are those of ``GovernedOpenAI``: ``policy`` (a name or a
    ``RetryPolicy``), ``executor`` (by default a new one with ``classify_anthropic``),
    ``request_timeout``, ``tracing``, ``prices`` and ``default_max_tokens``; a client with
    ``max_retries`` other than 0 is a ``ValueError``, an ``AsyncAnthropic`` or anything else a
    ``TypeError``. Priced, each attempt holds its worst case (the input bound includes
    :data:`TOOLS_PROMPT_TOKENS` when ``tools`` are given; the cache-write prices count only when
    the request has a ``cache_control``) and is sent with ``max_tokens`` lowered, under a money
    limit, to what the money left can pay for.
    """

    __slots__ = ()
    _sdk = _ANTHROPIC
    _client_class = "Anthropic"
    _other = ("AsyncAnthropic", "AsyncGovernedAnthropic")

    def create(self, **params: Any) -> Message:
        """One governed ``messages.create(**params)``; its usage recorded on the run.

        ``params`` are the SDK's, without ``stream`` (use :meth:`stream`) and ``timeout``.
        """
        return call(self._call("create", params), _usage_of)

    def stream(self, **params: Any) -> GovernedStream[RawMessageStreamEvent]:
        """One governed ``messages.create(stream=True)``: its raw events, as they arrive.

        The usage is recorded from ``message_start`` and ``message_delta``; a stream that ends
        without ``message_delta``'s usage raises ``UsageNotReported`` after its last event.
        """
        return open_stream(self._call("stream", params), _Meter)


@final
class AsyncGovernedAnthropic(GovernedClient["anthropic.AsyncAnthropic"]):
    """:class:`GovernedAnthropic` for an ``anthropic.AsyncAnthropic`` client: the same, awaited.

    Every await of the SDK runs in ``ctx.scope()``: the run's cancellation or deadline cancels
    the request in flight, and the call raises the run's ``RunTerminated``.
    """

    __slots__ = ()
    _sdk = _ANTHROPIC
    _client_class = "AsyncAnthropic"
    _other = ("Anthropic", "GovernedAnthropic")

    async def create(self, **params: Any) -> Message:
        """One governed ``await messages.create(**params)``; see ``GovernedAnthropic``."""
        return await call_async(self._call("create", params), _usage_of)

    async def stream(self, **params: Any) -> AsyncGovernedStream[RawMessageStreamEvent]:
        """One governed streaming call; ``async for`` its raw events. See ``GovernedAnthropic``."""
        return await open_stream_async(self._call("stream", params), _Meter)
