"""The core's hot paths against hand-written baselines, timed in the same run (ratios, not seconds).

- ``ctx.check(boundary)`` on a live run vs reading ``time.monotonic_ns()``, comparing with a
  deadline and reading one attribute: <= 3x;
- ``ctx.reserve_tool_call(name)`` vs a ``threading.Lock`` plus a dict increment and an int
  compare: <= 3x;
- a hold and its settle -- ``ctx.reserve_tool_call(name, max_cost=D)`` then
  ``hold.settle(cost=D)``, on a run with a money limit -- vs ``ctx.reserve_tool_call(name)`` on a
  run without one: <= 1.5x;
- ``RunContext.create(...)`` vs constructing one frozen dataclass with 7 fields: <= 30x;
- 8 threads reserving against one budget vs the same with a bare lock: <= 3x (it measures lock
  convoys under the GIL as much as the design);
- a full run (create, 20 Tool calls, 5 Model calls with token usage, succeed) vs the same
  bookkeeping hand-written with one lock: <= 5x.

Timed with pyperf (``_ratio.py``): each benchmark runs in 20 worker processes of 3 values, the
loops calibrated to at least 100 ms a value, and a ratio is the candidate's mean over its
baseline's, the baseline timed right before it in the same run (the stdev of each is recorded).
The thread round times itself, from the release of the 8 started threads to the last join.

Run: ``tox -e bench`` or ``python benchmarks/bench_core.py [--quick] [pyperf options]``; writes
``benchmarks/results/core.json``, ``core.md`` and pyperf's own ``core.pyperf.json`` (for
``python -m pyperf compare_to``).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from decimal import Decimal
from typing import TYPE_CHECKING

from _ratio import Ratio, Session

from diagnosis_harness import Boundary, BudgetLimits, RunContext

if TYPE_CHECKING:
    from collections.abc import Callable

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


PRICE = Decimal("0.10")  # a Tool's price: its hold, and its actual cost


def _money_run() -> RunContext:
    """A run with a money limit no benchmark reaches: 10**12 dollars, 10**13 calls at PRICE."""
    limits = dataclasses.replace(_limits(), cost=Decimal(10**12))
    return RunContext.create(session_id="bench", run_id="money", limits=limits, timeout=3600)


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


def _threads(reserve: Callable[[], object]) -> Callable[[int], float]:
    """``loops`` rounds, each timed on its own: 8 threads are started and wait on a barrier; the
    clock runs from their release to the last join, each thread reserving PER_THREAD times."""

    def work(barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(PER_THREAD):
            reserve()

    def rounds(loops: int) -> float:
        total = 0.0
        for _ in range(loops):
            barrier = threading.Barrier(THREADS + 1)
            workers = [threading.Thread(target=work, args=(barrier,)) for _ in range(THREADS)]
            for worker in workers:
                worker.start()
            while barrier.n_waiting < THREADS:
                time.sleep(0)
            start = time.perf_counter()
            barrier.wait()  # the last party: releases the 8 workers
            for worker in workers:
                worker.join()
            total += time.perf_counter() - start
        return total

    return rounds


@dataclasses.dataclass(frozen=True)
class _Pair:
    candidate: Callable[[], object]
    baseline: Callable[[], object]
    target: float  # the ratio must not exceed it
    baseline_text: str  # the baseline, in words, for the published table
    threaded: bool = False


def _pairs() -> dict[str, _Pair]:
    ctx = _new_run()
    deadline_ns = time.monotonic_ns() + 3600 * 10**9

    class _Holder:
        termination = None

    holder = _Holder()

    # Each baseline takes the argument its harness path takes and is called the same way, through
    # a lambda, so that the ratio compares the work and not how many Python frames lead to it.
    def check_baseline(boundary: Boundary) -> object:
        if time.monotonic_ns() >= deadline_ns:
            raise RuntimeError(f"over at {boundary}")
        return holder.termination

    lock = threading.Lock()
    counts: dict[str, int] = {}

    def reserve_baseline(tool: str) -> None:
        with lock:
            used = counts.get(tool, 0)
            if used >= BIG:
                raise RuntimeError("budget")
            counts[tool] = used + 1

    shared = _new_run()
    paid = _money_run()

    def hold_and_settle() -> None:
        paid.reserve_tool_call("t", max_cost=PRICE).settle(cost=PRICE)

    return {
        "ctx.check(boundary)": _Pair(
            lambda: ctx.check(Boundary.TOOL),
            lambda: check_baseline(Boundary.TOOL),
            3.0,
            "`time.monotonic_ns()`, a compare with the deadline, one attribute read",
        ),
        "ctx.reserve_tool_call(name)": _Pair(
            lambda: ctx.reserve_tool_call("t"),
            lambda: reserve_baseline("t"),
            3.0,
            "a `threading.Lock`, a dict increment and an int compare",
        ),
        "hold and settle: ctx.reserve_tool_call(name, max_cost=D), hold.settle(cost=D)": _Pair(
            hold_and_settle,
            lambda: ctx.reserve_tool_call("t"),
            1.5,
            "`ctx.reserve_tool_call(name)` on a run without a money limit",
        ),
        "RunContext.create(...)": _Pair(
            _new_run,
            lambda: _Seven(1, 2, 3, 4, 5, 6, 7),
            30.0,
            "one frozen dataclass of 7 fields",
        ),
        "8 threads reserving against one budget": _Pair(
            lambda: shared.reserve_tool_call("t"),
            lambda: reserve_baseline("t"),
            3.0,
            "the same 8 threads, each reserving under one bare lock",
            threaded=True,
        ),
        "full run: create, 20 Tool calls, 5 Model calls, succeed": _Pair(
            _full_run_harness,
            _full_run_baseline,
            5.0,
            "the same bookkeeping hand-written under one lock",
        ),
    }


def main() -> int:
    session = Session(__doc__.split("\n", 1)[0] if __doc__ else "bench_core")
    measured: list[tuple[Ratio, _Pair]] = []
    for path, pair in _pairs().items():
        ratio = session.pair(
            path,
            pair.candidate,
            pair.baseline,
            pair.target,
            timed=_threads if pair.threaded else None,
        )
        if ratio is not None:
            measured.append((ratio, pair))
    if session.worker:
        return 0

    results: dict[str, dict[str, object]] = {}
    rows = []
    for ratio, pair in measured:
        results[ratio.path] = {
            "candidate_ns": ratio.candidate.mean_ns,
            "candidate_stdev_ns": ratio.candidate.stdev_ns,
            "baseline_ns": ratio.baseline.mean_ns,
            "baseline_stdev_ns": ratio.baseline.stdev_ns,
            "values": ratio.candidate.values,
            "ratio": ratio.ratio,
            "target": ratio.target,
            "met": ratio.met,
            "baseline": pair.baseline_text,
        }
        rows.append(
            f"| {ratio.path} | {ratio.candidate.cell()} | {ratio.baseline.cell()} "
            f"| {ratio.ratio:.2f}x | <= {ratio.target:g}x | {'met' if ratio.met else 'NOT met'} |"
        )
    table = "\n".join(
        [
            "| path | harness ns | baseline ns | ratio | target | |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    session.save("core", {**session.provenance(), "paths": results}, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
