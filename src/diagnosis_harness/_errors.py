"""Every exception the harness raises, in one hierarchy rooted at :class:`HarnessError`.

:class:`RunTerminated` is the exception a boundary raises once the run is over; it carries the
run's :class:`~diagnosis_harness.RunTermination`, the record of how it ended (``.termination``).

None of the run-ending exceptions subclasses ``TimeoutError`` or ``asyncio.CancelledError``: a
generic ``except TimeoutError`` written for an SDK call must not swallow the end of the run, and a
run's cancellation is not the cancellation of an asyncio task unless ``ctx.scope()`` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

if TYPE_CHECKING:  # annotations only: at run time this module imports nothing of the library
    from ._boundary import Boundary
    from ._endings import RunTermination
    from ._limits import BudgetDimension

__all__ = [
    "BudgetExhausted",
    "HarnessError",
    "IllegalTransition",
    "InvalidRunIdentity",
    "InvalidRunIdentityType",
    "RunCancelled",
    "RunFinished",
    "RunStoreConflict",
    "RunStoreError",
    "RunStoreUnavailable",
    "RunTerminated",
    "RunTimedOut",
    "UnknownRun",
    "UnsafeKeySegment",
]


class HarnessError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidRunIdentity(HarnessError, ValueError):
    """A blank, whitespace-only or non-``str`` session or run ID given to ``RunContext.create``.

    For a non-``str`` ID it is also a ``TypeError``, as every wrong type is in this library.
    Subclassed only by :class:`InvalidRunIdentityType`.
    """


@final
class InvalidRunIdentityType(InvalidRunIdentity, TypeError):
    """A session or run ID that is not a ``str``: both an ``InvalidRunIdentity`` and a TypeError."""


@final
class UnsafeKeySegment(HarnessError, ValueError):
    """A key segment that is blank, too long, or holds a character outside ``[A-Za-z0-9_.-]``."""


class RunStoreError(HarnessError):
    """A run store (where a run shared by several processes lives) could not do what was asked.

    ``store`` describes the store (``RedisRunStore(namespace='diag', ...)``, say); the message
    starts with it. :class:`RunStoreUnavailable` is the store not answering; the others are a
    request the store refuses: a run ID that exists already, an unknown run, a session ID or
    limits that differ from the stored ones (those are also ``ValueError`` or ``LookupError``).
    """

    def __init__(self, store: str, message: str) -> None:
        self.store = store
        super().__init__(f"{store}: {message}")


@final
class RunStoreUnavailable(RunStoreError):
    """The store could not be reached or did not answer in time: no work was granted.

    Nothing was recorded in this process as if it had been; the operation may be tried again.
    """


@final
class RunStoreConflict(RunStoreError, ValueError):
    """The store refuses the request: the run exists already, or its stored session ID or limits
    differ from the ones given."""


@final
class UnknownRun(RunStoreError, LookupError):
    """No run with that ID is stored (never created, or expired after it ended)."""


@final
class IllegalTransition(HarnessError):
    """An event that no row of the table allows from the current (non-terminal) state."""

    def __init__(self, machine: str, state: str, event: str, *, detail: str = "") -> None:
        self.machine = machine
        self.state = state
        self.event = event
        message = f"{machine}: event {event!r} is not allowed in state {state}"
        super().__init__(f"{message} ({detail})" if detail else message)


class RunTerminated(HarnessError):
    """The run is over; no further controlled work may start. The *exception*, raised at a gate.

    Not :class:`~diagnosis_harness.RunTermination` (no ``d``): that is the *record* of how the run
    ended -- state, reason, time, boundary -- which every ended run has, raised or not, and which
    ``ctx.lifecycle.termination`` returns. This exception is raised only when work is attempted
    after the ending, and carries that record: ``termination`` is the run's one terminal outcome,
    the same object ``ctx.lifecycle.termination`` returns in this process (``error.termination is
    ctx.lifecycle.termination``). ``boundary`` is the gate that refused the work, or ``None`` when
    the refusal did not come from a gate. Catch this class to handle every way a run can end; its
    subclasses say which way it ended, as ``termination.state`` does.

    The message names the boundary at which the run ended (``termination.boundary``), whichever
    gate refuses later work (``boundary`` says which): a per-Tool limit reads ``TOOL boundary
    refused: run is BUDGET_EXHAUSTED (per_tool_calls limit ...)`` also when an agent framework's
    next Model call is what raises it. An ending decided outside any boundary (``cancel``,
    ``succeed``, ``fail``) names the refusing gate.
    """

    def __init__(self, termination: RunTermination, boundary: Boundary | None = None) -> None:
        self.termination = termination
        self.boundary = boundary
        super().__init__(_refusal_message(termination, boundary))


def _refusal_message(termination: RunTermination, boundary: Boundary | None) -> str:
    ending = f"run is {termination.state.name} ({termination.reason})"
    where = boundary if termination.boundary is None else termination.boundary
    return ending if where is None else f"{where.name} boundary refused: {ending}"


@final
class RunCancelled(RunTerminated):
    """The run was cancelled (client disconnect, user request, shutdown)."""


@final
class RunTimedOut(RunTerminated):
    """A boundary read the clock at or after the run's deadline."""


@final
class BudgetExhausted(RunTerminated):
    """A budget limit was reached; ``dimension`` names it (``None`` if cancelled for budget)."""

    def __init__(
        self,
        termination: RunTermination,
        boundary: Boundary | None = None,
        *,
        dimension: BudgetDimension | None = None,
    ) -> None:
        super().__init__(termination, boundary)
        self.dimension = dimension


@final
class RunFinished(RunTerminated):
    """Work was attempted after the run recorded ``SUCCESS`` or ``FAILED``."""
