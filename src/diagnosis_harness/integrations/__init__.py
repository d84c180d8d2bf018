"""Wiring the ``openai`` and ``anthropic`` SDKs to the harness, with retries only in the harness.

Outside the Core: ``import diagnosis_harness`` never imports this package, and importing this
package imports neither SDK nor PyYAML -- each is imported by the first function that needs it,
and a missing one is an ``ImportError`` that names the extra to install
(``pip install 'diagnosis-harness[openai]'``, ``[anthropic]``, ``[config]``).

- Configuration: :func:`load_model_client_config` reads ``model_client`` from
  ``config/application.yaml`` into a :class:`ModelClientConfig`, whose ``max_attempts`` is 1.
- Clients: :func:`openai_client`, :func:`async_openai_client`, :func:`anthropic_client` and
  :func:`async_anthropic_client` build SDK clients with ``max_retries=0``;
  :func:`ensure_no_hidden_retries` refuses a client built elsewhere that still retries.
- Governed calls: :class:`GovernedOpenAI`, :class:`AsyncGovernedOpenAI`,
  :class:`GovernedAnthropic` and :class:`AsyncGovernedAnthropic` wrap a client for one run and one
  retry policy: each ``create``/``stream`` is gated, reserves a Model call per attempt, cuts the
  request's timeout to the deadline, records the actual token usage (:class:`TokenUsage`,
  :class:`UsageNotReported`), and retries only through ``HarnessRetryExecutor``.
- Money: given ``prices=`` (``diagnosis_harness.pricing``: ``GenaiPrices()``, a
  ``PriceTable``; required under a money limit), each attempt holds its request's worst case
  (:func:`input_bound` of its input, its ``max_tokens`` or :data:`DEFAULT_MAX_TOKENS`, lowered
  to what the money left can pay for) and settles the usage priced exactly; ``charges``
  journals each priced attempt (:class:`ModelCharge`). :class:`ModelRequest` describes a
  request to price, for an adapter of your own.
- Classification: :func:`classify_openai`, :func:`classify_anthropic` and :func:`classify_sdk`
  map SDK exceptions to :class:`~diagnosis_harness.FailureKind` for
  ``HarnessRetryExecutor(ctx, classifier=...)``.
- Tools: :class:`GovernedTools` governs any framework's Tool calls: each one reserved (per-Tool
  limits included), keyed by the framework's Tool Call ID unchanged, run under the Tool retry
  policy, its result's bytes counted, its price (``tool_prices=``) held and settled under the
  run's money limit (:class:`UnknownToolPrice` for a Tool without one).
  ``diagnosis_harness.integrations.pydantic_ai`` (the
  ``pydantic-ai`` extra, imported only by you) builds a pydantic-ai capability on it.
- Tracing: ``diagnosis_harness.integrations.otel.HarnessTracing`` (the ``otel`` extra, imported
  only by you) is passed as ``tracing=`` to the governed calls, ``GovernedTools`` and
  ``harness_run_config``: OpenTelemetry spans per run, model attempt and Tool call.

See ``docs/guides/wiring-sdk-clients.md`` for wiring a client, and ``docs/guides/hidden-retries.md``
for why the SDKs' own retries are off.
"""

from __future__ import annotations

from ._anthropic import AsyncGovernedAnthropic, GovernedAnthropic
from ._classify import classify_anthropic, classify_openai, classify_sdk, kind_of_status
from ._clients import (
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    ensure_no_hidden_retries,
    openai_client,
)
from ._config import (
    DEFAULT_CONFIG_PATH,
    ConfigurationError,
    ModelClientConfig,
    load_model_client_config,
)
from ._governed import AsyncGovernedStream, GovernedStream, TokenUsage, UsageNotReported
from ._model_call import DEFAULT_MAX_TOKENS, ModelCharge, ModelRequest, input_bound
from ._openai import AsyncGovernedOpenAI, GovernedOpenAI
from ._tools import GovernedTools, UnknownToolPrice, result_bytes

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_MAX_TOKENS",
    "AsyncGovernedAnthropic",
    "AsyncGovernedOpenAI",
    "AsyncGovernedStream",
    "ConfigurationError",
    "GovernedAnthropic",
    "GovernedOpenAI",
    "GovernedStream",
    "GovernedTools",
    "ModelCharge",
    "ModelClientConfig",
    "ModelRequest",
    "TokenUsage",
    "UnknownToolPrice",
    "UsageNotReported",
    "anthropic_client",
    "async_anthropic_client",
    "async_openai_client",
    "classify_anthropic",
    "classify_openai",
    "classify_sdk",
    "ensure_no_hidden_retries",
    "input_bound",
    "kind_of_status",
    "load_model_client_config",
    "openai_client",
    "result_bytes",
]
