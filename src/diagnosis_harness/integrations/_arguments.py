"""The arguments every governed adapter takes, checked one way for all of them.

A model call (:mod:`._model_call`) and the Tool calls (:mod:`._tools`) are built on a run
(``ctx``), a retry policy (a ``RetryPolicy`` or a name among the run's) and a retry executor (or
a classifier for a new one). Each check runs when the adapter is built, before anything is sent,
and gives the same error whichever adapter is given the bad argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from .._context import RunContext
from .._retry import HarnessRetryExecutor
from .._retry_policy import RetryPolicy

if TYPE_CHECKING:
    from .._retry import Classifier

__all__ = ["checked_ctx", "executor_of", "policy_of"]


def checked_ctx(ctx: object) -> RunContext:
    """``ctx`` if it is a ``RunContext``; else a ``TypeError`` before anything is built."""
    if type(ctx) is not RunContext:
        raise TypeError(f"ctx must be a RunContext, got {ctx!r}")
    return ctx


def policy_of(ctx: RunContext, policy: object) -> RetryPolicy:
    """The retry policy ``policy`` is, or names among ``ctx.retry_policies``.

    An unknown name is a ``ValueError`` (also a ``KeyError``: a lookup that missed) listing the
    run's policies; anything else but a name or a ``RetryPolicy`` a ``TypeError``.
    """
    if type(policy) is RetryPolicy:
        return policy
    if not isinstance(policy, str):
        raise TypeError(
            f"policy must be the name of one of the run's retry policies or a RetryPolicy, "
            f"got {policy!r}"
        )
    if policy not in ctx.retry_policies:
        known = ", ".join(sorted(ctx.retry_policies))
        raise _UnknownPolicy(
            f"policy must name one of the run's retry policies ({known}), got {policy!r}: "
            f"no retry policy named {policy!r}"
        )
    return ctx.retry_policies[policy]


@final
class _UnknownPolicy(ValueError, KeyError):
    """A policy name the run does not have: a bad value, and a lookup that missed."""

    def __str__(self) -> str:  # KeyError's own quotes its message; a ValueError's reads plainly
        return str(self.args[0])


def executor_of(
    ctx: RunContext,
    executor: object,
    classifier: Classifier | None,
    *,
    default: Classifier | None = None,
) -> HarnessRetryExecutor:
    """``executor``, or a new one for ``ctx`` classifying with ``classifier`` (else ``default``).

    Giving both an executor and a classifier is a ``ValueError``: the executor has its own.
    """
    if executor is None:
        return HarnessRetryExecutor(ctx, classifier=default if classifier is None else classifier)
    if classifier is not None:
        raise ValueError("give executor or classifier, not both: the executor has its own")
    if type(executor) is not HarnessRetryExecutor:
        raise TypeError(f"executor must be a HarnessRetryExecutor or None, got {executor!r}")
    return executor
