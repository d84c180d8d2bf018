"""Client builders make one request per call; a client that would retry on its own is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from diagnosis_harness.integrations import (
    ModelClientConfig,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    ensure_no_hidden_retries,
    load_model_client_config,
    openai_client,
)

APPLICATION_YAML = Path(__file__).resolve().parents[2] / "config" / "application.yaml"
KEY = "test-key-not-a-secret"
CONFIG = ModelClientConfig(timeout_seconds=7.5, base_url="http://127.0.0.1:9/v1")


def test_openai_client_from_the_repository_configuration() -> None:
    config = load_model_client_config(APPLICATION_YAML)
    with openai_client(config, api_key=KEY) as client:
        assert type(client) is openai.OpenAI
        assert client.max_retries == 0
        assert client.timeout == config.timeout_seconds


def test_anthropic_client_from_the_repository_configuration() -> None:
    config = load_model_client_config(APPLICATION_YAML)
    with anthropic_client(config, api_key=KEY) as client:
        assert type(client) is anthropic.Anthropic
        assert client.max_retries == 0
        assert client.timeout == config.timeout_seconds


def test_sync_builders_apply_the_configuration_and_pass_other_arguments() -> None:
    with openai_client(CONFIG, api_key=KEY, default_headers={"x-team": "sre"}) as client:
        assert (client.max_retries, client.timeout) == (0, 7.5)
        assert str(client.base_url) == "http://127.0.0.1:9/v1/"
        assert client.default_headers["x-team"] == "sre"
        assert client.api_key == KEY
    with anthropic_client(CONFIG, api_key=KEY, default_headers={"x-team": "sre"}) as other:
        assert (other.max_retries, other.timeout) == (0, 7.5)
        assert str(other.base_url) == "http://127.0.0.1:9/v1/"
        assert other.default_headers["x-team"] == "sre"


def test_async_builders() -> None:
    async def build() -> None:
        async with async_openai_client(CONFIG, api_key=KEY) as client:
            assert type(client) is openai.AsyncOpenAI
            assert (client.max_retries, client.timeout) == (0, 7.5)
        async with async_anthropic_client(CONFIG, api_key=KEY) as other:
            assert type(other) is anthropic.AsyncAnthropic
            assert (other.max_retries, other.timeout) == (0, 7.5)

    asyncio.run(build())


BUILDERS: list[Any] = [openai_client, async_openai_client, anthropic_client, async_anthropic_client]


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("max_retries", [1, 2, True, -1, "0", None])
def test_builders_refuse_sdk_retries(build: Any, max_retries: object) -> None:
    with pytest.raises(ValueError, match=r"only HarnessRetryExecutor retries") as raised:
        build(CONFIG, api_key=KEY, max_retries=max_retries)
    assert f"max_retries={max_retries!r} refused" in str(raised.value)


def _close(client: Any) -> None:
    closing = client.close()
    if asyncio.iscoroutine(closing):
        asyncio.run(closing)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_builders_accept_an_explicit_zero(build: Any) -> None:
    client = build(CONFIG, api_key=KEY, max_retries=0)
    assert client.max_retries == 0
    _close(client)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
@pytest.mark.parametrize(
    ("argument", "setting"), [("timeout", "timeout_seconds"), ("base_url", "base_url")]
)
def test_configured_settings_are_not_overridden_by_arguments(
    build: Any, argument: str, setting: str
) -> None:
    with pytest.raises(TypeError, match=rf"model_client\.{setting}") as raised:
        build(CONFIG, api_key=KEY, **{argument: "http://elsewhere/"})
    assert f"dataclasses.replace(config, {setting}=...)" in str(raised.value)


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_builders_need_a_model_client_config(build: Any) -> None:
    with pytest.raises(TypeError, match="config must be a ModelClientConfig"):
        build({"max_attempts": 1}, api_key=KEY)


def test_a_changed_configuration_is_the_way_to_another_endpoint() -> None:
    config = dataclasses.replace(CONFIG, base_url="http://127.0.0.1:10/v1", timeout_seconds=3)
    with openai_client(config, api_key=KEY) as client:
        assert (str(client.base_url), client.timeout) == ("http://127.0.0.1:10/v1/", 3.0)


def test_sdk_defaults_are_refused_with_the_fix() -> None:
    with openai.OpenAI(api_key=KEY) as client:
        assert client.max_retries == 2  # the SDK default this rule exists for
        with pytest.raises(ValueError, match=r"OpenAI has max_retries=2") as raised:
            ensure_no_hidden_retries(client)
        message = str(raised.value)
        assert "hidden from HarnessRetryExecutor" in message
        assert "one 500 would become 3 requests" in message
        assert "client.with_options(max_retries=0)" in message
        fixed = client.with_options(max_retries=0)
        assert ensure_no_hidden_retries(fixed) is fixed


def test_every_client_kind_is_checked() -> None:
    clients: list[Any] = [
        openai.OpenAI(api_key=KEY),
        openai.AsyncOpenAI(api_key=KEY),
        openai.AzureOpenAI(
            api_key=KEY, api_version="2024-10-21", azure_endpoint="https://example.invalid"
        ),
        anthropic.Anthropic(api_key=KEY),
        anthropic.AsyncAnthropic(api_key=KEY),
        anthropic.AnthropicBedrock(
            aws_access_key="test", aws_secret_key="test", aws_region="us-east-1"
        ),
    ]
    for client in clients:
        with pytest.raises(ValueError, match=rf"{type(client).__qualname__} has max_retries=2"):
            ensure_no_hidden_retries(client)
        quiet = client.with_options(max_retries=0)
        assert ensure_no_hidden_retries(quiet) is quiet
        assert type(quiet) is type(client)
        _close(client)


def test_retries_turned_back_on_later_are_refused() -> None:
    with anthropic_client(CONFIG, api_key=KEY) as client:
        assert ensure_no_hidden_retries(client) is client
        with pytest.raises(ValueError, match=r"Anthropic has max_retries=5"):
            ensure_no_hidden_retries(client.with_options(max_retries=5))


class _NotAClient:
    max_retries = True


@pytest.mark.parametrize("thing", [object(), _NotAClient(), "openai"], ids=repr)
def test_something_that_is_not_an_sdk_client_is_a_type_error(thing: object) -> None:
    with pytest.raises(TypeError, match="no integer max_retries setting"):
        ensure_no_hidden_retries(thing)  # type: ignore[type-var]


@pytest.mark.parametrize(
    ("build", "extra"),
    [
        (openai_client, "openai"),
        (async_openai_client, "openai"),
        (anthropic_client, "anthropic"),
        (async_anthropic_client, "anthropic"),
    ],
    ids=["openai", "async_openai", "anthropic", "async_anthropic"],
)
def test_a_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, build: Any, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, extra, None)  # `import <sdk>` fails as if not installed
    with pytest.raises(ImportError, match=rf"pip install 'diagnosis-harness\[{extra}\]'"):
        build(CONFIG, api_key=KEY)
