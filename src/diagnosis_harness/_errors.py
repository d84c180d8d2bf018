"""Every exception the harness raises, in one hierarchy rooted at :class:`HarnessError`.

None of the run-ending exceptions subclasses ``TimeoutError`` or ``asyncio.CancelledError``: a
generic ``except TimeoutError`` written for an SDK call must not swallow the end of the run, and a
run's cancellation is not the cancellation of an asyncio task unless ``ctx.scope()`` says so.
"""

from __future__ import annotations

from typing import final

__all__ = ["HarnessError", "IllegalTransition"]


class HarnessError(Exception):
    """Base class of every error this library raises on purpose."""


@final
class IllegalTransition(HarnessError):
    """An event that no row of the table allows from the current (non-terminal) state."""

    def __init__(self, machine: str, state: str, event: str, *, detail: str = "") -> None:
        self.machine = machine
        self.state = state
        self.event = event
        message = f"{machine}: event {event!r} is not allowed in state {state}"
        super().__init__(f"{message} ({detail})" if detail else message)
