"""SDK clients without hidden retries: built, and checked, with ``max_retries=0``.

The ``openai`` and ``anthropic`` clients retry 408, 409, 429, 5xx, timeouts and connection errors
on their own, twice by default, with their own backoff. Those requests happen inside one call of
the operation, so the executor would record one attempt for three requests. Here every client is
built with ``max_retries=0``, and a client built elsewhere can be checked before it is used.
The SDKs are imported when a builder is first called, never before.

What is not checked: a ``client.with_options(max_retries=...)`` made later, and an
``http_client=`` whose transport retries connections itself (``HTTPTransport(retries=...)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ._config import ModelClientConfig
from ._extras import missing_extra

if TYPE_CHECKING:
    import anthropic
    import openai

__all__ = [
    "anthropic_client",
    "async_anthropic_client",
    "async_openai_client",
    "ensure_no_hidden_retries",
    "openai_client",
]


class _RetryingClient(Protocol):
    """An SDK client with the ``max_retries`` setting of the openai and anthropic SDKs."""

    @property
    def max_retries(self) -> int: ...


C = TypeVar("C", bound=_RetryingClient)


def ensure_no_hidden_retries(client: C) -> C:
    """Return ``client`` if it makes exactly one request per call; raise ``ValueError`` if not.

    Accepts the ``openai`` and ``anthropic`` clients, sync or async (``OpenAI``, ``AsyncOpenAI``,
    ``AzureOpenAI``, ``Anthropic``, ``AsyncAnthropic``, ``AnthropicBedrock``, ...), and any client
    with the same ``max_retries`` setting; anything without one is a ``TypeError``. The error says
    how to fix it: ``client.with_options(max_retries=0)``.
    """
    max_retries: object = getattr(client, "max_retries", None)
    if type(max_retries) is not int:
        raise TypeError(
            f"{type(client).__qualname__} has no integer max_retries setting: "
            "ensure_no_hidden_retries checks openai and anthropic SDK clients, "
            f"got {client!r}"
        )
    if max_retries != 0:
        raise ValueError(
            f"{type(client).__qualname__} has max_retries={max_retries}: the SDK would retry "
            "inside one attempt, hidden from HarnessRetryExecutor and its records "
            f"(one 500 would become {max_retries + 1} requests). "
            "Use client.with_options(max_retries=0), or build it with "
            "diagnosis_harness.integrations.openai_client / anthropic_client."
        )
    return client


def client_options(config: ModelClientConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The SDK constructor's arguments: ``kwargs`` plus what the configuration sets.

    The configuration sets ``max_retries`` (0), ``timeout`` and ``base_url`` (if not ``None``);
    ``max_retries`` other than 0 is a ``ValueError``, ``timeout`` or ``base_url`` among ``kwargs``
    a ``TypeError`` (change the configuration, e.g. with ``dataclasses.replace``).
    """
    if type(config) is not ModelClientConfig:
        raise TypeError(
            f"config must be a ModelClientConfig (see load_model_client_config), got {config!r}"
        )
    if "max_retries" in kwargs:
        given = kwargs["max_retries"]
        if type(given) is not int or given != 0:
            raise ValueError(
                f"max_retries={given!r} refused: SDK clients are built with max_retries=0, so "
                "that only HarnessRetryExecutor retries and every retry is a recorded attempt; "
                "set retries in the run's RetryPolicy instead"
            )
    for name, setting in (("timeout", "timeout_seconds"), ("base_url", "base_url")):
        if name in kwargs:
            raise TypeError(
                f"{name}= is set by the configuration (model_client.{setting}); change it "
                f"there, or pass dataclasses.replace(config, {setting}=...)"
            )
    options = dict(kwargs)
    options["max_retries"] = config.sdk_max_retries
    options["timeout"] = config.timeout_seconds
    if config.base_url is not None:
        options["base_url"] = config.base_url
    return options


def _openai_classes() -> tuple[type[openai.OpenAI], type[openai.AsyncOpenAI]]:
    try:
        import openai  # noqa: PLC0415 - lazy: the SDK is the optional `openai` extra
    except ModuleNotFoundError as error:
        if error.name != "openai":
            raise
        raise missing_extra("openai", "openai", "an openai client") from error
    return openai.OpenAI, openai.AsyncOpenAI


def _anthropic_classes() -> tuple[type[anthropic.Anthropic], type[anthropic.AsyncAnthropic]]:
    try:
        import anthropic  # noqa: PLC0415 - lazy: the SDK is the optional `anthropic` extra
    except ModuleNotFoundError as error:
        if error.name != "anthropic":
            raise
        raise missing_extra("anthropic", "anthropic", "an anthropic client") from error
    return anthropic.Anthropic, anthropic.AsyncAnthropic


def openai_client(config: ModelClientConfig, **kwargs: Any) -> openai.OpenAI:
    """An ``openai.OpenAI`` with ``max_retries=0`` and the configuration's timeout and base URL.

    ``kwargs`` go to the constructor (``api_key=``, ``http_client=``, ...); see
    ``client_options`` for what is refused there.
    """
    client_class, _ = _openai_classes()
    return ensure_no_hidden_retries(client_class(**client_options(config, kwargs)))


def async_openai_client(config: ModelClientConfig, **kwargs: Any) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` built like :func:`openai_client`."""
    _, client_class = _openai_classes()
    return ensure_no_hidden_retries(client_class(**client_options(config, kwargs)))


def anthropic_client(config: ModelClientConfig, **kwargs: Any) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` with ``max_retries=0`` and the configuration's timeout and URL.

    ``kwargs`` go to the constructor (``api_key=``, ``http_client=``, ...); see
    ``client_options`` for what is refused there.
    """
    client_class, _ = _anthropic_classes()
    return ensure_no_hidden_retries(client_class(**client_options(config, kwargs)))


def async_anthropic_client(config: ModelClientConfig, **kwargs: Any) -> anthropic.AsyncAnthropic:
    """An ``anthropic.AsyncAnthropic`` built like :func:`anthropic_client`."""
    _, client_class = _anthropic_classes()
    return ensure_no_hidden_retries(client_class(**client_options(config, kwargs)))
