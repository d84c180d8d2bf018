"""The pydantic-ai capability's cost per agent step, as a ratio timed in the same run.

One agent run is two steps: a ``FunctionModel`` answer asking for three parallel tool calls (logs,
metrics, deploy history), then a final text answer. The baseline runs the agent bare; the
candidate runs it with ``HarnessCapability`` on a fresh ``RunContext`` (built inside the timed
loop: a run is part of what a governed agent run costs), so every step reserves a Model call,
records its usage, and every tool call is checked, reserved, run under the Tool policy and its
result's bytes counted. Two more sides show what pydantic-ai itself charges, which the ratio to
the bare agent includes: the same agent with a capability that overrides no hook (any capability
given per run: pydantic-ai rebuilds and re-sorts the run's capabilities, and copies its run
context for every capability at every hook it dispatches), and with one that overrides the same
hooks as ``HarnessCapability`` and wraps each attempt's model the same way, but does nothing in
them. What is left above the last is the harness's own work, and the target applies to it:
within 3 % of "the same hooks, doing nothing". (A target over the bare agent was withdrawn:
pydantic-ai's own dispatch of the hooks costs more than that before the harness does anything.)

Sampling. One agent run is one sample, timed in CPU seconds of the process
(``time.process_time``: every tool here is async, so the process's CPU time is the agent's). The
four sides are interleaved run by run, in a fresh random order each round, in one process and
one event loop, after a warm-up; each side's figure is the median of its samples, and a ratio is
a ratio of medians, given with a 95 % interval from resampling the samples (bootstrap). Not
pyperf's processes and means, as in the other benchmarks: the same agent run costs 6 to 11 ms of
CPU from one run to the next here, and with each side timed in processes of its own the means
moved by up to 20 % between two runs of this benchmark -- a capability doing nothing once came
out 5 % cheaper than no capability. Interleaving puts the machine's drift on every side alike,
and the median leaves out the runs a garbage collection or a neighbour lengthened.

Run: ``tox -e bench`` (or ``python benchmarks/bench_pydantic_ai.py [--quick] [--rounds N]``).
Writes ``benchmarks/results/pydantic_ai.json`` and ``pydantic_ai.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.usage import RequestUsage

from diagnosis_harness import BudgetLimits, RunContext
from diagnosis_harness.integrations.pydantic_ai import HarnessCapability

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from pydantic_ai.models import Model

TARGET = 1.03  # the harness's own work per step: within 3 % of the same hooks doing nothing
STEPS = 2  # model requests per agent run: the tool calls' answer, then the final answer
ROUNDS = 600  # samples per side
QUICK_ROUNDS = 60
WARMUP = 10  # agent runs per side before sampling
RESAMPLES = 400  # bootstrap resamples for the ratio's interval
RESULTS = Path(__file__).parent / "results"
PATH = "agent step: FunctionModel, three parallel tool calls"

_LIMITS = BudgetLimits(
    model_calls=100,
    tool_calls=100,
    per_tool_calls=100,
    input_tokens=1 << 40,
    output_tokens=1 << 40,
    total_tokens=1 << 40,
    run_bytes=1 << 40,
)


def _respond(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("logs", {"service": "checkout"}, tool_call_id="call_logs"),
                ToolCallPart("metrics", {"service": "checkout"}, tool_call_id="call_metrics"),
                ToolCallPart("deploys", {"service": "checkout"}, tool_call_id="call_deploys"),
            ],
            usage=RequestUsage(input_tokens=120, output_tokens=40),
        )
    return ModelResponse(
        parts=[TextPart("checkout v42 raised p99 to 840 ms: roll back")],
        usage=RequestUsage(input_tokens=300, output_tokens=20),
    )


def _agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(_respond))

    @agent.tool_plain
    async def logs(service: str) -> str:
        return f"{service}: 5xx rate 12 % since 10:02"

    @agent.tool_plain
    async def metrics(service: str) -> dict[str, float]:
        return {"p99_ms": 840.0 if service == "checkout" else 90.0, "p50_ms": 120.0}

    @agent.tool_plain
    async def deploys(service: str) -> list[str]:
        return [f"{service} v42 at 10:01"]

    return agent


@dataclass
class _Nothing(AbstractCapability[Any]):
    """A capability that overrides no hook: what pydantic-ai charges for any capability."""


@dataclass
class _SameHooks(AbstractCapability[Any]):
    """The hooks ``HarnessCapability`` overrides, each passing straight through, and the same
    wrapper around each attempt's model, sending straight on."""

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="outermost")

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        return await handler()

    async def after_run(self, ctx: Any, *, result: Any) -> Any:
        return result

    async def on_run_error(self, ctx: Any, *, error: BaseException) -> Any:
        raise error

    async def wrap_model_request(self, ctx: Any, *, request_context: Any, handler: Any) -> Any:
        return await handler(request_context)

    def get_wrapper_model(self, model: Model) -> Model:
        return WrapperModel(model)

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        return await handler(args)


def _runs() -> dict[str, Callable[[], Coroutine[Any, Any, object]]]:
    agent = _agent()
    count = 0

    async def bare() -> object:
        return await agent.run("why is checkout slow?")

    async def nothing() -> object:
        return await agent.run("why is checkout slow?", capabilities=[_Nothing()])

    async def same_hooks() -> object:
        return await agent.run("why is checkout slow?", capabilities=[_SameHooks()])

    async def governed() -> object:
        nonlocal count
        count += 1
        ctx = RunContext.create(
            session_id="bench", run_id=f"run-{count}", limits=_LIMITS, timeout=3600
        )
        return await agent.run("why is checkout slow?", capabilities=[HarnessCapability(ctx)])

    return {
        "bare agent": bare,
        "a no-op capability": nothing,
        "the same hooks, doing nothing": same_hooks,
        "HarnessCapability": governed,
    }


def _samples(
    runs: dict[str, Callable[[], Coroutine[Any, Any, object]]], rounds: int, seed: int
) -> dict[str, list[float]]:
    """Each side's CPU seconds per agent run, the sides interleaved in a random order per round."""
    order = random.Random(seed)
    samples: dict[str, list[float]] = {name: [] for name in runs}

    async def all_rounds() -> None:
        for run in runs.values():  # warm-up: pydantic-ai builds its schemas and caches once
            for _ in range(WARMUP):
                await run()
        sides = list(runs.items())
        for _ in range(rounds):
            order.shuffle(sides)
            for name, run in sides:
                started = time.process_time()
                await run()
                samples[name].append(time.process_time() - started)

    asyncio.run(all_rounds())
    return samples


def _ratio_interval(
    candidate: list[float], baseline: list[float], seed: int
) -> tuple[float, float]:
    """A 95 % interval for median(candidate) / median(baseline), by bootstrap."""
    draw = random.Random(seed)
    ratios = sorted(
        statistics.median(draw.choices(candidate, k=len(candidate)))
        / statistics.median(draw.choices(baseline, k=len(baseline)))
        for _ in range(RESAMPLES)
    )
    return ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, help=f"rounds of the four sides (default {ROUNDS})")
    parser.add_argument("--seed", type=int, default=0, help="the order's and bootstrap's seed")
    args = parser.parse_args()
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    if rounds < 20:
        parser.error(f"--rounds must be at least 20, got {rounds}")
    runs = _runs()
    samples = _samples(runs, rounds, args.seed)
    per_step = {name: statistics.median(values) * 1e9 / STEPS for name, values in samples.items()}
    bare, nothing, same_hooks, governed = (per_step[name] for name in runs)
    names = list(runs)
    intervals = {
        name: _ratio_interval(samples[name], samples[names[0]], args.seed) for name in names[1:]
    }
    low, high = intervals[names[3]]
    ratio = governed / bare
    own_low, own_high = _ratio_interval(samples[names[3]], samples[names[2]], args.seed)
    own = governed / same_hooks
    met = own_high <= TARGET
    report = {
        "python": sys.version.split()[0],
        "pydantic_ai": version("pydantic-ai-slim"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rounds": rounds,
        "quick": bool(args.quick),
        "statistic": "median of the runs, CPU time of the process (time.process_time)",
        "target_ratio": TARGET,
        "steps_per_run": STEPS,
        "paths": {
            PATH: {
                "ns_per_step": per_step,
                "ratio": ratio,
                "ratio_95_interval": [low, high],
                "no_op_capability_ratio": nothing / bare,
                "no_op_capability_ratio_95_interval": list(intervals[names[1]]),
                "same_hooks_ratio": same_hooks / bare,
                "same_hooks_ratio_95_interval": list(intervals[names[2]]),
                "ratio_to_same_hooks": own,
                "ratio_to_same_hooks_95_interval": [own_low, own_high],
                "target": TARGET,
                "met": met,
                "baseline": "the same agent without the capability",
                "target_baseline": "the same hooks, doing nothing",
            }
        },
    }
    table = "\n".join(
        [
            "| path | bare agent | a no-op capability | the same hooks, doing nothing "
            "| HarnessCapability | ratio to bare (95 % interval) "
            "| of which pydantic-ai's (same hooks) "
            "| the harness's own: over the same hooks (95 % interval) | target | |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
            f"| {PATH} (ns per step) | {bare:,.0f} | {nothing:,.0f} | {same_hooks:,.0f} "
            f"| {governed:,.0f} | {ratio:.3f}x ({low:.3f}-{high:.3f}) "
            f"| {same_hooks / bare:.3f}x | {own:.3f}x ({own_low:.3f}-{own_high:.3f}) "
            f"| <= {TARGET:g}x | {'met' if met else '**not met**'} |",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pydantic_ai.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "pydantic_ai.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
