"""How an agent adapter words the ways an agent run ends: one wording for every framework.

The pydantic-ai and openai-agents adapters record the run's outcome from how the agent run ended,
and answer the model for a Tool call the run refused or a sub-agent whose run ended. What they
write is the same fact, so it is worded here once: a user reading ``termination.reason`` or a
model reading a refused call's answer sees the same text whichever framework ran the agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._endings import RunTermination
    from .._errors import RunTerminated

__all__ = ["REASON_LENGTH", "agent_run_ending", "refused_tool_call", "sub_agent_ended"]

REASON_LENGTH = 200  # how much of an exception's text a FAILED reason keeps


def agent_run_ending(error: Exception | None) -> str:
    """The reason the run records when the agent run ended: with its output (``error`` None,
    ``SUCCESS``) or by raising ``error`` (``FAILED``, at most :data:`REASON_LENGTH` characters)."""
    if error is None:
        return "the agent run produced its final output"
    return f"the agent run raised {type(error).__name__}: {error}"[:REASON_LENGTH]


def refused_tool_call(refused: RunTerminated) -> str:
    """What the model is told for a Tool call the run refused (it never ran, or its result was
    refused): the run's ending, as its ``RunTerminated`` words it."""
    return f"the diagnosis run refused this tool call: {refused}"


def sub_agent_ended(run_id: str, termination: RunTermination) -> str:
    """What the parent's model is told of a sub-agent whose run ended without its output while
    the parent's run goes on: the sub-agent's run, how it ended and why."""
    return f"sub-agent run {run_id!r} ended {termination.state.name}: {termination.reason}"
