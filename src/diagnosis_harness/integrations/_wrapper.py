"""What the four governed SDK wrappers share: :class:`GovernedClient`, described by an :class:`Sdk`.

``GovernedOpenAI``, ``AsyncGovernedOpenAI``, ``GovernedAnthropic`` and ``AsyncGovernedAnthropic``
are each this base with three class attributes: the SDK they wrap, the SDK's client class they
take, and where the SDK's other client goes instead. The base checks the client, builds the
:class:`~._model_call.ModelCall` and prepares each call's :class:`~._governed.GovernedCall`; a
wrapper's own methods only choose the world (``call`` or ``call_async``, ``open_stream`` or
``open_stream_async``) and say what its response and its stream's usage are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, final

from ._chat import server_of
from ._clients import ensure_no_hidden_retries
from ._extras import missing_extra
from ._governed import GovernedCall
from ._model_call import DEFAULT_MAX_TOKENS, ChargeSlot, Chat, ModelCall
from ._params import checked_params

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from .._context import RunContext
    from .._retry import Classifier, HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from ..pricing import Prices
    from ._chat import ChatResponse, Server
    from ._model_call import ModelCharge, ModelRequest
    from .otel import HarnessTracing

__all__ = ["GovernedClient", "Sdk", "not_input"]

# Request options the SDKs send as headers or query, or use themselves: not the model's input.
_NOT_INPUT = frozenset({"extra_headers", "extra_query", "timeout", "stream", "stream_options"})


def not_input(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without the options that are not the model's input (headers, query, the
    client's timeout): what :func:`~._model_call.input_bound` is given. What is left is sent in
    the request's body; bounding all of it only raises the bound."""
    return {name: value for name, value in params.items() if name not in _NOT_INPUT}


def _as_given(params: dict[str, Any]) -> dict[str, Any]:
    return params


def _no_answer(_result: object) -> ChatResponse | None:
    return None


def _unpriced(_params: dict[str, Any], _server: Server | None) -> ModelRequest:
    raise TypeError("this SDK's calls cannot be priced")  # every Sdk gives its own


def _uncapped(params: dict[str, Any], _max_tokens: int) -> dict[str, Any]:
    return params


@final
@dataclass(frozen=True, slots=True)
class Sdk:
    """One provider's SDK as its two wrappers, sync and async, use it."""

    package: str  # the module, its extra, and the chat spans' gen_ai.provider.name
    classifier: Classifier  # the default executor's
    call_name: str  # one call, as errors name it: "openai chat.completions.create"
    required: tuple[str, ...]  # the request parameters no call goes without
    endpoint: Callable[[Any], Callable[..., Any]]  # a client -> the method one request calls
    # A stream's parameters from the checked ones (``stream=True`` is added after it).
    stream_params: Callable[[dict[str, Any]], dict[str, Any]] = _as_given
    # What the chat spans report of an answer (None for what is not one: an opened stream).
    response_of: Callable[[Any], ChatResponse | None] = _no_answer
    # A priced call's request, from its checked parameters and the client's server.
    request_of: Callable[[dict[str, Any], Server | None], ModelRequest] = _unpriced
    # The parameters with the request's output limit set to the reservation's max_tokens.
    capped: Callable[[dict[str, Any], int], dict[str, Any]] = _uncapped

    def module(self) -> ModuleType:
        """The SDK, imported when a wrapper is built; if it is missing, the extra to install."""
        try:
            return importlib.import_module(self.package)
        except ModuleNotFoundError as error:
            if error.name != self.package:  # a broken install, not a missing one
                raise
            raise missing_extra(
                self.package, self.package, f"a governed {self.package} call"
            ) from error


class _SdkClient(Protocol):
    """What the base reads of an SDK client itself: its timeout (its retries are checked apart)."""

    @property
    def timeout(self) -> object: ...

    @property
    def base_url(self) -> object: ...


SdkClient = TypeVar("SdkClient", bound=_SdkClient)


class GovernedClient(Generic[SdkClient]):
    """Governed calls on one SDK client, for one run and one policy: the wrappers' shared part.

    A subclass names its :class:`Sdk` (``_sdk``), the SDK's client class it takes
    (``_client_class``) and the SDK's other client class with the wrapper that takes that one
    (``_other``, for the hint in the ``TypeError``). Every refusal happens in the constructor,
    before any request: the SDK installed, the client's class, its retries, the run's arguments.
    """

    __slots__ = ("_client", "_model_call", "_server")

    _sdk: ClassVar[Sdk]
    _client_class: ClassVar[str]
    _other: ClassVar[tuple[str, str]]

    def __init__(
        self,
        client: SdkClient,
        ctx: RunContext,
        *,
        policy: str | RetryPolicy,
        executor: HarnessRetryExecutor | None = None,
        request_timeout: float | None = None,
        tracing: HarnessTracing | None = None,
        prices: Prices | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        self._check(client)
        self._server = server_of(client.base_url)
        self._model_call = ModelCall(
            ctx,
            policy=policy,
            executor=executor,
            default_classifier=self._sdk.classifier,
            request_timeout=request_timeout,
            tracing=tracing,
            provider=self._sdk.package,
            server=self._server,
            prices=prices,
            default_max_tokens=default_max_tokens,
        )
        self._client = client

    @property
    def client(self) -> SdkClient:
        return self._client

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs, and records, every attempt."""
        return self._model_call.executor

    @property
    def policy(self) -> RetryPolicy:
        return self._model_call.policy

    @property
    def charges(self) -> tuple[ModelCharge, ...]:
        """The journal of the priced attempts (empty without ``prices``): see
        :attr:`~._model_call.ModelCall.charges`."""
        return self._model_call.charges

    def _check(self, client: object) -> None:
        package = self._sdk.package
        module = self._sdk.module()
        if not isinstance(client, getattr(module, self._client_class)):
            other, wrapper = self._other
            hint = ""
            if isinstance(client, getattr(module, other)):
                hint = f" (an {package}.{other} goes to {wrapper})"
            raise TypeError(
                f"client must be an {package}.{self._client_class}{hint}, got {client!r}"
            )
        ensure_no_hidden_retries(client)

    def _call(self, method: Literal["create", "stream"], params: dict[str, Any]) -> GovernedCall:
        """``params`` checked (before the gate: a refused call reserves nothing), and how to send.

        ``stream`` sends them with the SDK's stream parameters and ``stream=True``; every request
        carries the ``timeout`` the run cuts for its attempt.
        """
        sdk = self._sdk
        params = checked_params(params, sdk.required, method, ("stream", "timeout"))
        if method == "stream":
            params = {**sdk.stream_params(params), "stream": True}
        client = self._client
        model = str(params["model"])
        if self._model_call.prices is None:

            def send(timeout: object) -> Any:
                return sdk.endpoint(client)(**params, timeout=timeout)

            chat = Chat(model, response_of=sdk.response_of)
            return GovernedCall(self._model_call, send, client.timeout, sdk.call_name, chat)

        # Priced: the request described before the gate (bad parameters reserve nothing), and
        # sent with the output limit its reservation allows.
        request = sdk.request_of(params, self._server)

        def send_capped(timeout: object, max_tokens: int | None) -> Any:
            sent = params if max_tokens is None else sdk.capped(params, max_tokens)
            return sdk.endpoint(client)(**sent, timeout=timeout)

        chat = Chat(model, response_of=sdk.response_of, charges=ChargeSlot())
        subject = self._model_call.subject(sdk.call_name, model)
        return GovernedCall(
            self._model_call,
            send_capped,
            client.timeout,
            sdk.call_name,
            chat,
            request=request,
            subject=subject,
        )
