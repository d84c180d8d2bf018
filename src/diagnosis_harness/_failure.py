"""The typed kinds of failure an attempt can end with, which of them may ever be retried, and
:class:`HarnessFailure`, the exception that carries one."""

from __future__ import annotations

import enum
from typing import final

from ._errors import HarnessError

__all__ = ["NEVER_RETRIED", "TECHNICAL", "FailureKind", "HarnessFailure"]


class FailureKind(enum.Enum):
    """Why an attempt failed. Only technical kinds may be listed as retryable by a policy."""

    TRANSPORT = "transport"
    """The connection failed or was reset before a response arrived."""
    TIMEOUT = "timeout"
    """The call's own timeout (not the run's deadline) expired."""
    RATE_LIMITED = "rate_limited"
    """The provider answered 429."""
    SERVER_ERROR = "server_error"
    """The provider answered 5xx."""
    MALFORMED_RESPONSE = "malformed_response"
    """A response arrived but could not be parsed into the expected shape."""
    NO_EVIDENCE = "no_evidence"
    """The answer had no evidence to stand on; asking again would not create any."""
    BUSINESS_REJECTION = "business_rejection"
    """A rule of the domain refused the request; it would refuse it again."""
    CANCELLED = "cancelled"
    """The run was cancelled."""
    DEADLINE_EXCEEDED = "deadline_exceeded"
    """The run's deadline passed."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """A budget limit of the run was reached."""
    UNKNOWN = "unknown"
    """Anything not classified; never retried, because nobody knows it is safe to."""


TECHNICAL: frozenset[FailureKind] = frozenset(
    {
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED_RESPONSE,
    }
)
"""The kinds a policy may list as retryable."""

NEVER_RETRIED: frozenset[FailureKind] = frozenset(FailureKind) - TECHNICAL
"""The kinds no policy may retry: cancellation, deadline, budget, no evidence, rejection, unknown.
"""


@final
class HarnessFailure(HarnessError):
    """An operation's failure with its typed :class:`FailureKind`; the retry executor reads it."""

    def __init__(self, kind: FailureKind, message: str = "") -> None:
        if type(kind) is not FailureKind:
            raise TypeError(f"kind must be a FailureKind, got {kind!r}")
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, got {message!r}")
        self.kind = kind
        self.message = message
        super().__init__(f"{kind.name}: {message}" if message else kind.name)
