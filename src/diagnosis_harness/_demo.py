"""``diagnosis-harness demo``: a diagnosis run that hits its deadline, narrated step by step.

The clock is a :class:`ManualClock` that each Fake Tool call moves forward, so the demo is
instant and prints the same thing on every machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._boundary import Boundary
from ._context import RunContext
from ._errors import RunTerminated
from ._limits import BudgetLimits
from .testing import FakeTool, ManualClock

if TYPE_CHECKING:
    import argparse

__all__ = ["add_arguments", "run", "run_demo"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo takes no options."""


def run(args: argparse.Namespace) -> int:  # noqa: ARG001 - the command-line protocol
    return run_demo()


def run_demo() -> int:
    """Run the demo; returns 0 when the run ended TIMED_OUT as it should."""
    say = print
    clock = ManualClock()
    limits = BudgetLimits(
        model_calls=10,
        tool_calls=10,
        per_tool_calls=10,
        input_tokens=10_000,
        output_tokens=10_000,
        total_tokens=20_000,
        run_bytes=1 << 20,
    )
    ctx = RunContext.create(
        session_id="demo-session", run_id="demo-run", limits=limits, timeout=3.0, clock=clock
    )
    released: list[str] = []
    ctx.cancellation.register(lambda reason: released.append(reason.name))
    tool = FakeTool("read_logs", result="disk usage 97%")
    say(f"run {ctx.run_id}: deadline in 3.0 s on a ManualClock; each Tool call takes 1.2 s")
    for step in range(1, 10):
        try:
            result = tool(ctx, f"call-{step}")
        except RunTerminated as ended:
            say(f"  call {step}: refused before the Tool ran -> {type(ended).__name__}: {ended}")
            break
        clock.advance(1.2)
        say(
            f"  call {step}: {tool.name} -> {result!r}; clock at {clock.monotonic_ns() / 1e9:.1f} s"
        )
    termination = ctx.lifecycle.termination
    assert termination is not None
    say(f"terminal outcome: {termination.state.name} at {termination.at_ns / 1e9:.1f} s")
    say(f"cancellation reason: {ctx.cancellation.reason.name if ctx.cancellation.reason else None}")
    say(f"resource callbacks run: {released}")
    say(f"Tool invoked {tool.calls} times; usage: {ctx.budget.snapshot().tool_calls} Tool calls")
    late = ctx.lifecycle.succeed()
    say(f"a late succeed() changed the outcome: {late.changed}")
    try:
        ctx.check(Boundary.MODEL)
    except RunTerminated as again:
        same = again.termination is termination
        say(f"a later Model check raises {type(again).__name__} with the same termination: {same}")
    return 0 if termination.state.name == "TIMED_OUT" and not late.changed else 1
