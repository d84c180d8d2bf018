"""Classifiers for SDK exceptions, built the way each SDK builds them."""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest

from diagnosis_harness import (
    AttemptOutcome,
    BudgetLimits,
    FailureKind,
    HarnessRetryExecutor,
    RunContext,
    StopReason,
)
from diagnosis_harness.integrations import (
    classify_anthropic,
    classify_openai,
    classify_sdk,
    kind_of_status,
)
from diagnosis_harness.testing import ManualClock

TRANSPORT, TIMEOUT, RATE_LIMITED, SERVER_ERROR, MALFORMED = (
    FailureKind.TRANSPORT,
    FailureKind.TIMEOUT,
    FailureKind.RATE_LIMITED,
    FailureKind.SERVER_ERROR,
    FailureKind.MALFORMED_RESPONSE,
)

_REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def _response(status: int) -> httpx2.Response:
    return httpx2.Response(status, request=_REQUEST, json={"error": {"message": "scripted"}})


def _openai_status(cls: type[openai.APIStatusError], status: int) -> openai.APIStatusError:
    return cls(f"Error code: {status}", response=_response(status), body=None)


def _anthropic_status(cls: type[anthropic.APIStatusError], status: int) -> anthropic.APIStatusError:
    return cls(f"Error code: {status}", response=_response(status), body=None)


OPENAI_TABLE: list[tuple[Exception, FailureKind | None]] = [
    (openai.APITimeoutError(request=_REQUEST), TIMEOUT),
    (openai.APIConnectionError(request=_REQUEST), TRANSPORT),
    (openai.APIConnectionError(message="reset by peer", request=_REQUEST), TRANSPORT),
    (openai.APIResponseValidationError(response=_response(200), body={"id": 1}), MALFORMED),
    (_openai_status(openai.RateLimitError, 429), RATE_LIMITED),
    (_openai_status(openai.InternalServerError, 500), SERVER_ERROR),
    (_openai_status(openai.InternalServerError, 502), SERVER_ERROR),
    (_openai_status(openai.InternalServerError, 503), SERVER_ERROR),
    (_openai_status(openai.InternalServerError, 599), SERVER_ERROR),
    (_openai_status(openai.BadRequestError, 400), None),
    (_openai_status(openai.AuthenticationError, 401), None),
    (_openai_status(openai.PermissionDeniedError, 403), None),
    (_openai_status(openai.NotFoundError, 404), None),
    (_openai_status(openai.APIStatusError, 408), None),
    (_openai_status(openai.ConflictError, 409), None),
    (_openai_status(openai.UnprocessableEntityError, 422), None),
    (_openai_status(openai.APIStatusError, 499), None),
    (openai.APIError("stream error event", _REQUEST, body=None), None),
    (openai.OpenAIError("no api key"), None),
]

ANTHROPIC_TABLE: list[tuple[Exception, FailureKind | None]] = [
    (anthropic.APITimeoutError(request=_REQUEST), TIMEOUT),
    (anthropic.APIConnectionError(request=_REQUEST), TRANSPORT),
    (anthropic.APIResponseValidationError(response=_response(200), body={"id": 1}), MALFORMED),
    (_anthropic_status(anthropic.RateLimitError, 429), RATE_LIMITED),
    (_anthropic_status(anthropic.InternalServerError, 500), SERVER_ERROR),
    (_anthropic_status(anthropic.HTTPNotImplementedError, 501), SERVER_ERROR),
    (_anthropic_status(anthropic.ServiceUnavailableError, 503), SERVER_ERROR),
    (_anthropic_status(anthropic.GatewayTimeoutError, 504), SERVER_ERROR),
    (_anthropic_status(anthropic.OverloadedError, 529), SERVER_ERROR),
    (_anthropic_status(anthropic.BadRequestError, 400), None),
    (_anthropic_status(anthropic.AuthenticationError, 401), None),
    (_anthropic_status(anthropic.PaymentRequiredError, 402), None),
    (_anthropic_status(anthropic.PermissionDeniedError, 403), None),
    (_anthropic_status(anthropic.NotFoundError, 404), None),
    (_anthropic_status(anthropic.RequestTimeoutError, 408), None),
    (_anthropic_status(anthropic.ConflictError, 409), None),
    (_anthropic_status(anthropic.ContentTooLargeError, 413), None),
    (_anthropic_status(anthropic.UnprocessableEntityError, 422), None),
    (_anthropic_status(anthropic.ClientClosedRequestError, 499), None),
    (anthropic.APIError("stream error event", _REQUEST, body=None), None),
    (anthropic.RetryableError("middleware asked the SDK to retry"), None),
    (anthropic.AnthropicError("no api key"), None),
]

FOREIGN: list[Exception] = [ValueError("x"), TimeoutError(), ConnectionError(), RuntimeError()]


def _id(case: tuple[Exception, FailureKind | None]) -> str:
    error, kind = case
    status = getattr(error, "status_code", None)
    return f"{type(error).__name__}{'' if status is None else f'-{status}'}->{kind}"


@pytest.mark.parametrize(("error", "kind"), OPENAI_TABLE, ids=[_id(c) for c in OPENAI_TABLE])
def test_openai_exceptions(error: Exception, kind: FailureKind | None) -> None:
    assert classify_openai(error) is kind
    assert classify_sdk(error) is kind
    assert classify_anthropic(error) is None


@pytest.mark.parametrize(("error", "kind"), ANTHROPIC_TABLE, ids=[_id(c) for c in ANTHROPIC_TABLE])
def test_anthropic_exceptions(error: Exception, kind: FailureKind | None) -> None:
    assert classify_anthropic(error) is kind
    assert classify_sdk(error) is kind
    assert classify_openai(error) is None


@pytest.mark.parametrize("error", FOREIGN, ids=lambda e: type(e).__name__)
def test_other_exceptions_are_not_classified(error: Exception) -> None:
    assert classify_openai(error) is None
    assert classify_anthropic(error) is None
    assert classify_sdk(error) is None


def test_timeout_is_checked_before_the_connection_error_it_subclasses() -> None:
    assert issubclass(openai.APITimeoutError, openai.APIConnectionError)
    assert issubclass(anthropic.APITimeoutError, anthropic.APIConnectionError)
    assert classify_openai(openai.APITimeoutError(request=_REQUEST)) is TIMEOUT
    assert classify_anthropic(anthropic.APITimeoutError(request=_REQUEST)) is TIMEOUT


def test_response_validation_error_is_not_mistaken_for_a_status() -> None:
    # It carries the 2xx status of the response that did not fit the schema.
    error = openai.APIResponseValidationError(response=_response(200), body=None)
    assert error.status_code == 200
    assert classify_openai(error) is MALFORMED


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, RATE_LIMITED), (500, SERVER_ERROR), (529, SERVER_ERROR), (599, SERVER_ERROR)]
    + [(s, None) for s in (200, 400, 404, 408, 409, 428, 499, 600)],
)
def test_kind_of_status(status: int, kind: FailureKind | None) -> None:
    assert kind_of_status(status) is kind


def _executor() -> HarnessRetryExecutor:
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=10,
        per_tool_calls=10,
        input_tokens=100,
        output_tokens=100,
        total_tokens=200,
        run_bytes=1024,
    )
    ctx = RunContext.create(
        session_id="s-1", run_id="r-1", limits=limits, timeout=30, clock=ManualClock()
    )
    return HarnessRetryExecutor(ctx, classifier=classify_sdk)


def test_the_executor_retries_a_classified_rate_limit_under_intent_router() -> None:
    executor = _executor()
    errors: list[Exception] = [_openai_status(openai.RateLimitError, 429)]

    def call() -> str:
        if errors:
            raise errors.pop()
        return "ok"

    assert executor.execute("intent_router", call) == "ok"
    assert [(a.outcome, a.failure) for a in executor.attempts] == [
        (AttemptOutcome.FAILED, RATE_LIMITED),
        (AttemptOutcome.SUCCEEDED, None),
    ]


def test_the_executor_never_retries_an_unclassified_4xx() -> None:
    executor = _executor()
    error = _anthropic_status(anthropic.BadRequestError, 400)

    def call() -> str:
        raise error

    with pytest.raises(anthropic.BadRequestError) as raised:
        executor.execute("intent_router", call)
    assert raised.value is error
    (execution,) = executor.executions
    assert execution.stop is StopReason.NOT_RETRYABLE
    assert [(a.outcome, a.failure) for a in execution.attempts] == [
        (AttemptOutcome.FAILED, FailureKind.UNKNOWN)
    ]
