"""Classifiers for the ``openai`` and ``anthropic`` SDK exceptions, for ``HarnessRetryExecutor``.

========================================  ======================
SDK exception                             kind
========================================  ======================
``APITimeoutError``                       ``TIMEOUT``
``APIConnectionError`` (other)            ``TRANSPORT``
``APIResponseValidationError``            ``MALFORMED_RESPONSE``
``APIStatusError``, status 429            ``RATE_LIMITED``
``APIStatusError``, status 500-599        ``SERVER_ERROR``
any other status (400-499), any other     ``None`` (``UNKNOWN``)
========================================  ======================

``APITimeoutError`` subclasses ``APIConnectionError`` in both SDKs, so it is checked first.
``None`` means "not a kind this classifier knows": the executor records ``UNKNOWN`` and never
retries it. That includes 408 and 409, which the SDKs' own retries would repeat: a 408 is the
server giving up on a slow request and a 409 a conflict, and whether asking again is safe depends
on the call, so wrap a classifier to opt in. Statuses are read from ``status_code``, not from
the exception's class, so a status the SDK has no class for is classified all the same.

A classifier never imports its SDK: until the SDK is imported, none of its exceptions can exist,
and the answer is ``None``.
"""

from __future__ import annotations

import sys

from .._failure import FailureKind

__all__ = ["classify_anthropic", "classify_openai", "classify_sdk", "kind_of_status"]


def kind_of_status(status: int) -> FailureKind | None:
    """429 is ``RATE_LIMITED``, 500-599 ``SERVER_ERROR``; any other status ``None``."""
    if status == 429:
        return FailureKind.RATE_LIMITED
    if 500 <= status <= 599:
        return FailureKind.SERVER_ERROR
    return None


def classify_openai(error: Exception) -> FailureKind | None:
    """The kind of an ``openai`` exception (see the module's table), else ``None``."""
    if sys.modules.get("openai") is None:
        return None
    import openai  # noqa: PLC0415 - already imported (checked above): this only binds the name

    if isinstance(error, openai.APITimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(error, openai.APIConnectionError):
        return FailureKind.TRANSPORT
    if isinstance(error, openai.APIResponseValidationError):
        return FailureKind.MALFORMED_RESPONSE
    if isinstance(error, openai.APIStatusError):
        return kind_of_status(error.status_code)
    return None


def classify_anthropic(error: Exception) -> FailureKind | None:
    """The kind of an ``anthropic`` exception (see the module's table), else ``None``."""
    if sys.modules.get("anthropic") is None:
        return None
    import anthropic  # noqa: PLC0415 - already imported (checked above): this only binds the name

    if isinstance(error, anthropic.APITimeoutError):
        return FailureKind.TIMEOUT
    if isinstance(error, anthropic.APIConnectionError):
        return FailureKind.TRANSPORT
    if isinstance(error, anthropic.APIResponseValidationError):
        return FailureKind.MALFORMED_RESPONSE
    if isinstance(error, anthropic.APIStatusError):
        return kind_of_status(error.status_code)
    return None


def classify_sdk(error: Exception) -> FailureKind | None:
    """:func:`classify_openai`, then :func:`classify_anthropic`: for a run that uses both."""
    kind = classify_openai(error)
    return kind if kind is not None else classify_anthropic(error)
