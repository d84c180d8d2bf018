"""Requirement: Deadline and cancellation SHALL stop subsequent controlled work."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from diagnosis_harness import (
    Boundary,
    CancellationReason,
    ManualClock,
    RunCancelled,
    RunState,
    RunTimedOut,
)
from diagnosis_harness.testing import FakeModel, FakeResponse, FakeTool

from ._support import DEADLINE, new_run

if TYPE_CHECKING:
    from collections.abc import Callable


# -- Scenario: Deadline expires before a Tool call --------------------------------------------


@pytest.mark.spec(DEADLINE, "Deadline expires before a Tool call")
def test_deadline_expires_before_a_tool_call() -> None:
    clock = ManualClock()
    ctx = new_run(clock=clock, timeout=10)
    tool = FakeTool("logs", result="lines")
    clock.advance(10)  # the ManualClock reaches the deadline

    with pytest.raises(RunTimedOut) as at_gate:
        ctx.check(Boundary.TOOL)
    with pytest.raises(RunTimedOut) as at_tool:
        tool(ctx, "call-1")

    assert tool.calls == 0  # the Tool was not invoked
    assert ctx.budget.snapshot().tool_calls == 0
    termination = ctx.lifecycle.termination
    assert termination is not None
    assert termination.state is RunState.TIMED_OUT
    assert at_gate.value.termination is termination
    assert at_tool.value.termination is termination
    # Later checks report the same terminal outcome, whatever happens next.
    clock.advance(100)
    assert not ctx.lifecycle.succeed().changed
    for _ in range(3):
        with pytest.raises(RunTimedOut) as later:
            ctx.check(Boundary.TOOL)
        assert later.value.termination is termination
    assert ctx.lifecycle.termination is termination


# -- Scenario: Client disconnects -------------------------------------------------------------


@pytest.mark.spec(DEADLINE, "Client disconnects")
def test_client_disconnects() -> None:
    ctx = new_run()
    released: list[tuple[str, CancellationReason]] = []
    ctx.cancellation.register(lambda reason: released.append(("stream", reason)))
    ctx.cancellation.register(lambda reason: released.append(("connection", reason)))
    model = FakeModel([FakeResponse("never sent")])
    tool = FakeTool("metrics", result=1)

    assert ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED) is True

    # The registered callbacks ran, once each.
    assert released == [
        ("stream", CancellationReason.CLIENT_DISCONNECTED),
        ("connection", CancellationReason.CLIENT_DISCONNECTED),
    ]
    # Subsequent Model and Tool boundaries are rejected.
    termination = ctx.lifecycle.termination
    assert termination is not None
    rejected: list[Callable[[], object]] = [
        lambda: ctx.check(Boundary.MODEL),
        lambda: ctx.check(Boundary.TOOL),
        ctx.reserve_model_call,
        lambda: ctx.reserve_tool_call("metrics"),
        lambda: model.complete(ctx, "prompt"),
        lambda: tool(ctx, "call-1"),
    ]
    for boundary in rejected:
        with pytest.raises(RunCancelled) as caught:
            boundary()
        assert caught.value.termination is termination
    assert (model.calls, tool.calls) == (0, 0)
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.tool_calls) == (0, 0)
    # Exactly one CANCELLED terminal outcome: nothing later replaces it.
    assert termination.state is RunState.CANCELLED
    assert ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED) is False
    assert ctx.cancellation.cancel(CancellationReason.SHUTDOWN) is False
    assert not ctx.lifecycle.succeed().changed
    assert not ctx.lifecycle.fail("handler").changed
    assert ctx.lifecycle.termination is termination
    assert ctx.cancellation.reason is CancellationReason.CLIENT_DISCONNECTED
    assert len(released) == 2
