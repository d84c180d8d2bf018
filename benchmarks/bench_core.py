"""The core's hot paths against hand-written baselines, timed in the same run (ratios, not seconds).

- ``ctx.check(boundary)`` on a live run vs reading ``time.monotonic_ns()``, comparing with a
  deadline and reading one attribute: <= 3x;
- ``ctx.reserve_tool_call(name)`` vs a ``threading.Lock`` plus a dict increment and an int
  compare: <= 3x;
- ``RunContext.create(...)`` vs constructing one frozen dataclass with 7 fields: <= 30x;
- 8 threads reserving against one budget vs the same with a bare lock: <= 2x;
- a full run (create, 20 Tool calls, 5 Model calls with token usage, succeed) vs the same
  bookkeeping hand-written with one lock: <= 5x.

Rounds interleave candidate and baseline and keep the best of each, which is what a noisy 2-core
machine allows. Run: ``tox -e bench`` or ``python benchmarks/bench_core.py [--quick]``; writes
``benchmarks/results/core.json`` and ``core.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import threading
import time
import timeit
from pathlib import Path
from typing import TYPE_CHECKING

from diagnosis_harness import Boundary, BudgetLimits, RunContext

if TYPE_CHECKING:
    from collections.abc import Callable

RESULTS = Path(__file__).parent / "results"
BIG = 1 << 62
THREADS = 8
PER_THREAD = 5_000


def _limits() -> BudgetLimits:
    return BudgetLimits(
        model_calls=BIG,
        tool_calls=BIG,
        per_tool_calls=BIG,
        input_tokens=BIG,
        output_tokens=BIG,
        total_tokens=BIG,
        run_bytes=BIG,
    )


def _new_run() -> RunContext:
    return RunContext.create(session_id="bench", run_id="core", limits=_limits(), timeout=3600)


@dataclasses.dataclass(frozen=True)
class _Seven:
    a: int
    b: int
    c: int
    d: int
    e: int
    f: int
    g: int


class _Bookkeeping:
    """What a careful hand-written harness would do for one run, under one lock."""

    def __init__(self, deadline_ns: int) -> None:
        self.lock = threading.Lock()
        self.deadline_ns = deadline_ns
        self.ended: str | None = None
        self.model_calls = 0
        self.tool_calls = 0
        self.per_tool: dict[str, int] = {}
        self.input_tokens = 0
        self.output_tokens = 0

    def reserve_tool(self, tool: str) -> None:
        now = time.monotonic_ns()
        with self.lock:
            if self.ended is not None or now >= self.deadline_ns:
                raise RuntimeError("over")
            used = self.per_tool.get(tool, 0)
            if self.tool_calls >= BIG or used >= BIG:
                raise RuntimeError("budget")
            self.tool_calls += 1
            self.per_tool[tool] = used + 1

    def reserve_model(self) -> None:
        now = time.monotonic_ns()
        with self.lock:
            if self.ended is not None or now >= self.deadline_ns:
                raise RuntimeError("over")
            if self.model_calls >= BIG:
                raise RuntimeError("budget")
            self.model_calls += 1

    def record(self, input_tokens: int, output_tokens: int) -> None:
        with self.lock:
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            if self.input_tokens > BIG or self.output_tokens > BIG:
                self.ended = "budget"

    def succeed(self) -> None:
        with self.lock:
            if self.ended is None:
                self.ended = "success"


_TOOLS = ("read_logs", "query_metrics", "list_deploys", "grep_traces")


def _full_run_harness() -> None:
    ctx = _new_run()
    for i in range(20):
        ctx.reserve_tool_call(_TOOLS[i % 4])
    for _ in range(5):
        ctx.reserve_model_call()
        ctx.record_token_usage(input_tokens=900, output_tokens=150)
    ctx.lifecycle.succeed()


def _full_run_baseline() -> None:
    run = _Bookkeeping(time.monotonic_ns() + 3600 * 10**9)
    for i in range(20):
        run.reserve_tool(_TOOLS[i % 4])
    for _ in range(5):
        run.reserve_model()
        run.record(900, 150)
    run.succeed()


def _threads(reserve: Callable[[], None]) -> Callable[[], None]:
    """One round: 8 threads released together, each reserving PER_THREAD times."""

    def round_() -> None:
        barrier = threading.Barrier(THREADS)

        def work() -> None:
            barrier.wait()
            for _ in range(PER_THREAD):
                reserve()

        workers = [threading.Thread(target=work) for _ in range(THREADS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return round_


def _pairs() -> dict[str, tuple[Callable[[], object], Callable[[], object], float, int]]:
    """path -> (candidate, baseline, target ratio, calls per timing)."""
    ctx = _new_run()
    deadline_ns = time.monotonic_ns() + 3600 * 10**9

    class _Holder:
        termination = None

    holder = _Holder()

    def check_baseline() -> object:
        if time.monotonic_ns() >= deadline_ns:
            raise RuntimeError("over")
        return holder.termination

    lock = threading.Lock()
    counts: dict[str, int] = {}

    def reserve_baseline() -> None:
        with lock:
            used = counts.get("t", 0)
            if used >= BIG:
                raise RuntimeError("budget")
            counts["t"] = used + 1

    shared = _new_run()
    return {
        "ctx.check(boundary)": (lambda: ctx.check(Boundary.TOOL), check_baseline, 3.0, 100_000),
        "ctx.reserve_tool_call(name)": (
            lambda: ctx.reserve_tool_call("t"),
            reserve_baseline,
            3.0,
            100_000,
        ),
        "RunContext.create(...)": (_new_run, lambda: _Seven(1, 2, 3, 4, 5, 6, 7), 30.0, 10_000),
        "8 threads reserving against one budget": (
            _threads(lambda: shared.reserve_tool_call("t")),
            _threads(reserve_baseline),
            2.0,
            1,
        ),
        "full run: create, 20 Tool calls, 5 Model calls, succeed": (
            _full_run_harness,
            _full_run_baseline,
            5.0,
            2_000,
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    rounds, scale = (3, 0.1) if args.quick else (9, 1.0)
    results: dict[str, dict[str, float | bool]] = {}
    rows = []
    for path, (candidate, baseline, target, number) in _pairs().items():
        calls = max(1, int(number * scale))
        best_candidate = best_baseline = float("inf")
        for _ in range(rounds):
            best_baseline = min(best_baseline, timeit.timeit(baseline, number=calls) / calls)
            best_candidate = min(best_candidate, timeit.timeit(candidate, number=calls) / calls)
        ratio = best_candidate / best_baseline
        met = ratio <= target
        results[path] = {
            "candidate_ns": best_candidate * 1e9,
            "baseline_ns": best_baseline * 1e9,
            "ratio": ratio,
            "target": target,
            "met": met,
        }
        rows.append(
            f"| {path} | {best_candidate * 1e9:,.0f} | {best_baseline * 1e9:,.0f} "
            f"| {ratio:.2f}x | <= {target:g}x | {'met' if met else 'NOT met'} |"
        )
    table = "\n".join(
        [
            "| path | harness ns | baseline ns | ratio | target | |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    report = {"python": sys.version.split()[0], "machine": platform.machine(), "paths": results}
    (RESULTS / "core.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "core.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
