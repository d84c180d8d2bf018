"""Immutable retry policies: how many attempts, and which typed failures may be retried.

Only technical failures (:data:`~._failure.TECHNICAL`) can ever be listed: asking the same model
again cannot undo a cancellation, a deadline, a spent budget, missing evidence, a business rule
or an error nobody classified.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import final

from ._failure import NEVER_RETRIED, TECHNICAL, FailureKind
from ._validate import non_blank_str, positive_int

__all__ = ["RetryPolicies", "RetryPolicy"]


@final
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` counts every invocation, the first included; 1 means no retry."""

    name: str
    max_attempts: int
    retryable: frozenset[FailureKind] = frozenset()

    def __post_init__(self) -> None:
        non_blank_str("name", self.name)
        positive_int("max_attempts", self.max_attempts)
        retryable: object = self.retryable
        if not isinstance(retryable, frozenset) or not all(
            type(kind) is FailureKind for kind in retryable
        ):
            raise TypeError(f"retryable must be a frozenset of FailureKind, got {self.retryable!r}")
        refused = sorted(kind.name for kind in self.retryable & NEVER_RETRIED)
        if refused:
            allowed = ", ".join(sorted(kind.name for kind in TECHNICAL))
            raise ValueError(
                f"retryable lists never-retried kind(s) {', '.join(refused)}; "
                f"only technical failures may be retried: {allowed}"
            )

    def may_retry(self, kind: FailureKind, attempt: int) -> bool:
        """Whether a failure of ``kind`` on attempt number ``attempt`` (from 1) may be retried."""
        return kind in self.retryable and attempt < self.max_attempts


_ROUTER_AND_GUARD_RETRYABLE = TECHNICAL  # see docs/retry.md for why each kind applies


@final
class RetryPolicies(Mapping[str, RetryPolicy]):
    """A read-only mapping of policy name to :class:`RetryPolicy`."""

    __slots__ = ("_policies",)

    def __init__(self, policies: Iterable[RetryPolicy]) -> None:
        if isinstance(policies, (str, Mapping)):
            raise TypeError(f"policies must be an iterable of RetryPolicy, got {policies!r}")
        by_name: dict[str, RetryPolicy] = {}
        for policy in policies:
            if type(policy) is not RetryPolicy:
                raise TypeError(f"policies must hold RetryPolicy instances, got {policy!r}")
            if policy.name in by_name:
                raise ValueError(f"policies: two policies are named {policy.name!r}")
            by_name[policy.name] = policy
        self._policies = MappingProxyType(by_name)

    @classmethod
    def defaults(cls) -> RetryPolicies:
        """The seed spec's policies.

        ``intent_router`` and ``semantic_guard``: at most 2 attempts for technical failures.
        ``diagnosis_agent``, ``tool_call``, ``evidence_repair``: 1 attempt (no retry).
        """
        return _DEFAULTS

    def __getitem__(self, name: str) -> RetryPolicy:
        try:
            return self._policies[name]
        except KeyError:
            known = ", ".join(sorted(self._policies))
            raise KeyError(f"no retry policy named {name!r}; known: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._policies)

    def __len__(self) -> int:
        return len(self._policies)

    def __repr__(self) -> str:
        return f"RetryPolicies({list(self._policies.values())!r})"


# Immutable, so one shared instance: RunContext.create uses it for every run by default.
_DEFAULTS = RetryPolicies(
    [
        RetryPolicy("intent_router", 2, _ROUTER_AND_GUARD_RETRYABLE),
        RetryPolicy("semantic_guard", 2, _ROUTER_AND_GUARD_RETRYABLE),
        RetryPolicy("diagnosis_agent", 1),
        RetryPolicy("tool_call", 1),
        RetryPolicy("evidence_repair", 1),
    ]
)
