"""The four governed wrappers' constructors and accessors, which they share: one case per wrapper.

The calls themselves are tested in ``test_governed_calls.py``; here, what each wrapper takes
(its SDK's client of its own world, the other world's client named with the wrapper it goes to,
the SDK installed) and what it gives back (the client, the policy, the executor and its
classifier).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
import openai
import pytest

from diagnosis_harness import (
    BudgetLimits,
    FailureKind,
    HarnessRetryExecutor,
    RetryPolicy,
    RunContext,
    RunState,
)
from diagnosis_harness._limits import COUNTED_DIMENSIONS
from diagnosis_harness.integrations import (
    AsyncGovernedAnthropic,
    AsyncGovernedOpenAI,
    GovernedAnthropic,
    GovernedOpenAI,
    classify_sdk,
)
from diagnosis_harness.testing import ManualClock

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

KEY = "test-key-not-a-secret"
URL = "http://127.0.0.1:9/v1"
_REQUEST = httpx2.Request("POST", f"{URL}/chat/completions")


@dataclass(frozen=True)
class Wrapper:
    """One governed wrapper, the SDK client class it takes, and the other one's own wrapper."""

    cls: Callable[..., Any]
    client_class: Callable[..., Any]
    other_class: Callable[..., Any]
    other_wrapper: str

    @property
    def sdk(self) -> str:
        return str(self.client_class.__module__).partition(".")[0]

    def client(self) -> Any:
        return self.client_class(api_key=KEY, base_url=URL, max_retries=0)

    def other(self) -> Any:
        return self.other_class(api_key=KEY, base_url=URL, max_retries=0)


WRAPPERS = [
    Wrapper(GovernedOpenAI, openai.OpenAI, openai.AsyncOpenAI, "AsyncGovernedOpenAI"),
    Wrapper(AsyncGovernedOpenAI, openai.AsyncOpenAI, openai.OpenAI, "GovernedOpenAI"),
    Wrapper(
        GovernedAnthropic, anthropic.Anthropic, anthropic.AsyncAnthropic, "AsyncGovernedAnthropic"
    ),
    Wrapper(
        AsyncGovernedAnthropic, anthropic.AsyncAnthropic, anthropic.Anthropic, "GovernedAnthropic"
    ),
]
wrappers = pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.cls.__name__)
CONNECTION_ERRORS = {
    "openai": openai.APIConnectionError(request=_REQUEST),
    "anthropic": anthropic.APIConnectionError(request=_REQUEST),
}


def _run() -> RunContext:
    every_limit: dict[str, Any] = {dimension.value: 10 for dimension in COUNTED_DIMENSIONS}
    limits = BudgetLimits(**every_limit)
    return RunContext.create(
        session_id="s-1", run_id="r-1", limits=limits, timeout=30, clock=ManualClock()
    )


def _close(client: Any) -> None:
    closing = client.close()
    if asyncio.iscoroutine(closing):
        asyncio.run(closing)


@wrappers
def test_the_wrapper_gives_back_its_client_policy_and_executor(wrapper: Wrapper) -> None:
    ctx = _run()
    client = wrapper.client()
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    governed = wrapper.cls(client, ctx, policy="tool_call", executor=executor)
    assert governed.client is client
    assert governed.policy is ctx.retry_policies["tool_call"]
    assert governed.executor is executor
    _close(client)


@wrappers
def test_the_default_executor_classifies_with_the_wrappers_own_sdk(wrapper: Wrapper) -> None:
    """By default a new executor, whose classifier is the wrapper's SDK's; a policy as given."""
    client = wrapper.client()
    policy = RetryPolicy("own", max_attempts=3, retryable=frozenset({FailureKind.TRANSPORT}))
    governed = wrapper.cls(client, _run(), policy=policy)
    assert governed.policy is policy
    executor = governed.executor
    for sdk, error in CONNECTION_ERRORS.items():  # its own SDK's errors only
        kind = FailureKind.TRANSPORT if sdk == wrapper.sdk else FailureKind.UNKNOWN
        assert executor.classify(error) is kind
    assert executor.attempts == ()
    _close(client)


@wrappers
def test_the_other_worlds_client_is_refused_with_the_wrapper_it_goes_to(wrapper: Wrapper) -> None:
    ctx = _run()
    other = wrapper.other()
    sdk, expected, given = wrapper.sdk, wrapper.client_class.__name__, wrapper.other_class.__name__
    message = (
        f"client must be an {sdk}.{expected} (an {sdk}.{given} goes to {wrapper.other_wrapper}), "
        f"got {other!r}"
    )
    with pytest.raises(TypeError) as raised:
        wrapper.cls(other, ctx, policy="tool_call")
    assert str(raised.value) == message
    assert ctx.budget.snapshot().model_calls == 0
    assert ctx.lifecycle.state is RunState.RUNNING
    _close(other)


@wrappers
def test_a_missing_sdk_names_the_extra(wrapper: Wrapper, monkeypatch: pytest.MonkeyPatch) -> None:
    client = wrapper.client()
    monkeypatch.setitem(sys.modules, wrapper.sdk, None)  # `import <sdk>` fails as if not installed
    with pytest.raises(ImportError) as raised:
        wrapper.cls(client, _run(), policy="tool_call")
    assert str(raised.value).startswith(
        f"a governed {wrapper.sdk} call needs the {wrapper.sdk!r} package, which is not installed"
    )
    assert str(raised.value).endswith(f"pip install 'diagnosis-harness[{wrapper.sdk}]'")
    monkeypatch.undo()
    _close(client)


@wrappers
def test_a_broken_sdk_install_is_not_reported_as_missing(
    wrapper: Wrapper, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the SDK itself missing means "install the extra"; its own missing import propagates."""
    client = wrapper.client()
    fake = tmp_path / wrapper.sdk
    fake.mkdir()
    (fake / "__init__.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.delitem(sys.modules, wrapper.sdk)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        wrapper.cls(client, _run(), policy="tool_call")
    assert raised.value.name == "a_dependency_that_is_not_installed"
    monkeypatch.undo()
    _close(client)
