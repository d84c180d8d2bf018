"""Real SDK clients against a local HTTP server on 127.0.0.1 that fails with 500, then succeeds.

With the repository's configuration every request the server sees is an attempt the executor
recorded; with the SDKs' defaults (``max_retries=2``) it sees requests no record shows -- the
reason for the rule. The server answers failures with ``retry-after-ms: 1``, which both SDKs
honour as their backoff (``0`` would not do: they ignore a non-positive delay and back off 0.5 s),
so the SDK-default cases stay fast. Each request carries the SDK's ``x-stainless-retry-count``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from diagnosis_harness import (
    AttemptOutcome,
    BudgetLimits,
    Classifier,
    FailureKind,
    HarnessRetryExecutor,
    RunContext,
    StopReason,
)
from diagnosis_harness.conformance.suite._support import HIDDEN_RETRY
from diagnosis_harness.integrations import (
    ModelClientConfig,
    anthropic_client,
    async_anthropic_client,
    async_openai_client,
    classify_anthropic,
    classify_openai,
    load_model_client_config,
    openai_client,
)
from diagnosis_harness.testing import ManualClock

APPLICATION_YAML = Path(__file__).resolve().parents[2] / "config" / "application.yaml"
KEY = "test-key-not-a-secret"
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
ANSWER = "root cause: disk full"

_OK_BODIES: dict[str, dict[str, object]] = {
    OPENAI_PATH: {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
                "finish_reason": "stop",
            }
        ],
    },
    ANTHROPIC_PATH: {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": ANSWER}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 5},
    },
}
_ERROR_BODY: dict[str, object] = {
    "type": "error",
    "error": {"type": "api_error", "message": "scripted failure"},
}


class ScriptedServer(ThreadingHTTPServer):
    """Answers 500 to the first ``failures`` requests, then a minimal valid body for the path."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._lock = threading.Lock()  # protects failures and seen
        self.failures = 0
        self.seen: list[tuple[str, str | None]] = []  # (path, x-stainless-retry-count)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self.seen)

    @property
    def sdk_retry_counts(self) -> list[str | None]:
        with self._lock:
            return [count for _, count in self.seen]

    def answer(self, path: str, retry_count: str | None) -> tuple[int, dict[str, object]]:
        with self._lock:
            self.seen.append((path, retry_count))
            if path not in _OK_BODIES:
                return 404, _ERROR_BODY
            if self.failures > 0:
                self.failures -= 1
                return 500, _ERROR_BODY
            return 200, _OK_BODIES[path]


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, body = self.server.answer(self.path, self.headers.get("x-stainless-retry-count"))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if status != 200:
            self.send_header("retry-after-ms", "1")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test asserts on what the server saw."""


@pytest.fixture(autouse=True)
def _direct_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDKs' HTTP clients honour proxy variables; requests to 127.0.0.1 must go direct."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    httpd = ScriptedServer()
    # A short poll interval: shutdown() waits for the loop's next poll (0.5 s by default).
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="scripted-llm-server"
    )
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        thread.join()
        httpd.server_close()


def _context() -> RunContext:
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=10,
        per_tool_calls=10,
        input_tokens=1_000,
        output_tokens=1_000,
        total_tokens=2_000,
        run_bytes=1 << 20,
    )
    return RunContext.create(
        session_id="s-1", run_id="r-1", limits=limits, timeout=30, clock=ManualClock()
    )


def _configuration(server: ScriptedServer, path: str) -> ModelClientConfig:
    """The repository's configuration, pointed at the local server."""
    base_url = f"{server.url}/v1" if path == OPENAI_PATH else server.url
    return dataclasses.replace(load_model_client_config(APPLICATION_YAML), base_url=base_url)


Ask = Callable[[], str]


def _ask_openai(client: openai.OpenAI) -> Ask:
    def ask() -> str:
        completion = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "why is the service down?"}]
        )
        return completion.choices[0].message.content or ""

    return ask


def _ask_anthropic(client: anthropic.Anthropic) -> Ask:
    def ask() -> str:
        message = client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "why is the service down?"}],
        )
        block = message.content[0]
        assert isinstance(block, anthropic.types.TextBlock)
        return block.text

    return ask


@contextmanager
def _openai_configured(server: ScriptedServer) -> Iterator[Ask]:
    with openai_client(_configuration(server, OPENAI_PATH), api_key=KEY) as client:
        yield _ask_openai(client)


@contextmanager
def _openai_sdk_defaults(server: ScriptedServer) -> Iterator[Ask]:
    with openai.OpenAI(api_key=KEY, base_url=f"{server.url}/v1") as client:
        assert client.max_retries == 2
        yield _ask_openai(client)


@contextmanager
def _anthropic_configured(server: ScriptedServer) -> Iterator[Ask]:
    with anthropic_client(_configuration(server, ANTHROPIC_PATH), api_key=KEY) as client:
        yield _ask_anthropic(client)


@contextmanager
def _anthropic_sdk_defaults(server: ScriptedServer) -> Iterator[Ask]:
    with anthropic.Anthropic(api_key=KEY, base_url=server.url) as client:
        assert client.max_retries == 2
        yield _ask_anthropic(client)


@dataclass(frozen=True)
class Sdk:
    name: str
    path: str
    configured: Callable[[ScriptedServer], AbstractContextManager[Ask]]
    sdk_defaults: Callable[[ScriptedServer], AbstractContextManager[Ask]]
    classifier: Classifier
    server_error: type[Exception]


SDKS = [
    Sdk(
        "openai",
        OPENAI_PATH,
        _openai_configured,
        _openai_sdk_defaults,
        classify_openai,
        openai.InternalServerError,
    ),
    Sdk(
        "anthropic",
        ANTHROPIC_PATH,
        _anthropic_configured,
        _anthropic_sdk_defaults,
        classify_anthropic,
        anthropic.InternalServerError,
    ),
]
sdks = pytest.mark.parametrize("sdk", SDKS, ids=[s.name for s in SDKS])


def _boundary(ctx: RunContext, ask: Ask) -> Callable[[], str]:
    """A Model boundary done right: reserve a Model call on the run, then one SDK call."""

    def call() -> str:
        ctx.reserve_model_call()
        return ask()

    return call


def _outcomes(executor: HarnessRetryExecutor) -> list[tuple[AttemptOutcome, FailureKind | None]]:
    return [(a.outcome, a.failure) for a in executor.attempts]


FAILED_500 = (AttemptOutcome.FAILED, FailureKind.SERVER_ERROR)
SUCCEEDED = (AttemptOutcome.SUCCEEDED, None)


@pytest.mark.spec(HIDDEN_RETRY, "Retry configuration is loaded")
@sdks
def test_intent_router_retry_is_one_more_request_and_one_more_recorded_attempt(
    server: ScriptedServer, sdk: Sdk
) -> None:
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=sdk.classifier)
    server.failures = 1
    with sdk.configured(server) as ask:
        assert executor.execute("intent_router", _boundary(ctx, ask)) == ANSWER
    assert server.requests == 2
    assert _outcomes(executor) == [FAILED_500, SUCCEEDED]
    assert [e.stop for e in executor.executions] == [StopReason.SUCCEEDED]
    assert ctx.budget.snapshot().model_calls == 2
    # Both requests are first tries as far as the SDK knows: the retry was the executor's.
    assert server.sdk_retry_counts == ["0", "0"]
    assert server.seen[0][0] == sdk.path


@sdks
def test_tool_call_policy_sends_one_request(server: ScriptedServer, sdk: Sdk) -> None:
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=sdk.classifier)
    server.failures = 1
    with sdk.configured(server) as ask, pytest.raises(sdk.server_error):
        executor.execute("tool_call", _boundary(ctx, ask))
    assert server.requests == 1
    assert _outcomes(executor) == [FAILED_500]
    assert [e.stop for e in executor.executions] == [StopReason.NOT_RETRYABLE]


@sdks
def test_intent_router_stops_after_two_attempts_and_two_requests(
    server: ScriptedServer, sdk: Sdk
) -> None:
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=sdk.classifier)
    server.failures = 100
    with sdk.configured(server) as ask, pytest.raises(sdk.server_error):
        executor.execute("intent_router", _boundary(ctx, ask))
    assert server.requests == 2
    assert _outcomes(executor) == [FAILED_500, FAILED_500]
    assert [e.stop for e in executor.executions] == [StopReason.ATTEMPTS_EXHAUSTED]


@sdks
def test_sdk_defaults_turn_one_500_into_three_requests(server: ScriptedServer, sdk: Sdk) -> None:
    """Why the rule exists: one call of a default client, three requests."""
    server.failures = 100
    with sdk.sdk_defaults(server) as ask, pytest.raises(sdk.server_error):
        ask()
    assert server.requests == 3
    assert server.sdk_retry_counts == ["0", "1", "2"]


@sdks
def test_sdk_defaults_hide_requests_from_the_executor(server: ScriptedServer, sdk: Sdk) -> None:
    """With the SDK's retries on, the records undercount what the provider saw."""
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=sdk.classifier)
    server.failures = 1
    with sdk.sdk_defaults(server) as ask:
        assert executor.execute("intent_router", _boundary(ctx, ask)) == ANSWER
    assert server.requests == 2
    assert _outcomes(executor) == [SUCCEEDED]  # one attempt recorded for two requests
    assert ctx.budget.snapshot().model_calls == 1

    server.failures = 100  # and stacked layers multiply: 2 attempts x 3 requests
    with sdk.sdk_defaults(server) as ask, pytest.raises(sdk.server_error):
        executor.execute("intent_router", _boundary(ctx, ask))
    assert server.requests == 2 + 6
    assert _outcomes(executor)[1:] == [FAILED_500, FAILED_500]


def test_async_openai_client_under_execute_async(server: ScriptedServer) -> None:
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    server.failures = 1

    async def run() -> str:
        config = _configuration(server, OPENAI_PATH)
        async with async_openai_client(config, api_key=KEY) as client:

            async def call() -> str:
                ctx.reserve_model_call()
                completion = await client.chat.completions.create(
                    model="gpt-test", messages=[{"role": "user", "content": "why?"}]
                )
                return completion.choices[0].message.content or ""

            return await executor.execute_async("intent_router", call)

    assert asyncio.run(run()) == ANSWER
    assert server.requests == 2
    assert _outcomes(executor) == [FAILED_500, SUCCEEDED]


def test_async_anthropic_client_under_execute_async(server: ScriptedServer) -> None:
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=classify_anthropic)
    server.failures = 1

    async def run() -> str:
        config = _configuration(server, ANTHROPIC_PATH)
        async with async_anthropic_client(config, api_key=KEY) as client:

            async def call() -> str:
                ctx.reserve_model_call()
                message = await client.messages.create(
                    model="claude-test",
                    max_tokens=64,
                    messages=[{"role": "user", "content": "why?"}],
                )
                block = message.content[0]
                assert isinstance(block, anthropic.types.TextBlock)
                return block.text

            return await executor.execute_async("intent_router", call)

    assert asyncio.run(run()) == ANSWER
    assert server.requests == 2
    assert _outcomes(executor) == [FAILED_500, SUCCEEDED]


def test_a_refused_connection_is_transport_and_retried_under_intent_router() -> None:
    """No server at all: the SDK's connection error is TRANSPORT, one request per attempt."""
    with ScriptedServer() as closed:
        url = closed.url  # bound, then closed: nothing listens on this port any more
    ctx = _context()
    executor = HarnessRetryExecutor(ctx, classifier=classify_openai)
    config = dataclasses.replace(load_model_client_config(APPLICATION_YAML), base_url=url)
    with openai_client(config, api_key=KEY) as client, pytest.raises(openai.APIConnectionError):
        executor.execute("intent_router", _boundary(ctx, _ask_openai(client)))
    assert _outcomes(executor) == [(AttemptOutcome.FAILED, FailureKind.TRANSPORT)] * 2
