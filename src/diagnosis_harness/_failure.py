"""The typed kinds of failure an attempt can end with, and which of them may ever be retried."""

from __future__ import annotations

import enum

__all__ = ["NEVER_RETRIED", "TECHNICAL", "FailureKind"]


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
