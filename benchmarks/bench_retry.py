"""The retry executor against tenacity and stamina, timed in the same run (a ratio, not seconds).

Two paths, zero wait everywhere: success on the first attempt, and fail once then succeed.
Overhead is each candidate's time minus the bare operation's (the same calls without any retry
library), so the ratio compares what the libraries add. Rounds interleave the candidates and the
best round of each is kept, which is what a noisy 2-core machine allows.

Run: ``tox -e bench`` (or ``python benchmarks/bench_retry.py [--quick]``). Writes
``benchmarks/results/retry.json`` and ``retry.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import timeit
from pathlib import Path
from typing import TYPE_CHECKING

import stamina
import tenacity
from stamina.instrumentation import set_on_retry_hooks

from diagnosis_harness import (
    BudgetLimits,
    FailureKind,
    HarnessFailure,
    HarnessRetryExecutor,
    RetryPolicy,
    RunContext,
)

if TYPE_CHECKING:
    from collections.abc import Callable

TARGET = 5.0  # the figure: at least 5x less overhead than either peer
RESULTS = Path(__file__).parent / "results"


def _limits() -> BudgetLimits:
    big = 1 << 62
    return BudgetLimits(
        model_calls=big,
        tool_calls=big,
        per_tool_calls=big,
        input_tokens=big,
        output_tokens=big,
        total_tokens=big,
        run_bytes=big,
    )


class _FailEveryOther:
    """Raises on odd calls, returns on even ones: one failure, then success, per execution."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls % 2:
            raise HarnessFailure(FailureKind.TRANSPORT, "reset")
        return 1


def _candidates(path: str) -> dict[str, Callable[[], object]]:
    set_on_retry_hooks([])  # stamina's default hooks log every retry; measure the retry itself
    ctx = RunContext.create(session_id="bench", run_id="retry", limits=_limits(), timeout=3600)
    executor = HarnessRetryExecutor(ctx)
    policy = RetryPolicy("bench", 2, frozenset({FailureKind.TRANSPORT}))
    operation: Callable[[], int] = (lambda: 1) if path == "first_try" else _FailEveryOther()
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(2),
        wait=tenacity.wait_none(),
        retry=tenacity.retry_if_exception_type(HarnessFailure),
        reraise=True,
    )

    @stamina.retry(on=HarnessFailure, attempts=2, wait_initial=0, wait_max=0, wait_jitter=0)
    def with_stamina() -> int:
        return operation()

    def bare() -> int:
        try:
            return operation()
        except HarnessFailure:
            return operation()

    return {
        "bare operation": bare,
        "diagnosis-harness": lambda: executor.execute(policy, operation),
        "tenacity": lambda: retrying(operation),
        "stamina": with_stamina,
    }


def measure(path: str, *, number: int, rounds: int) -> dict[str, float]:
    """Best time per call in ns for each candidate, rounds interleaved."""
    candidates = _candidates(path)
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            elapsed = timeit.timeit(fn, number=number)
            best[name] = min(best[name], elapsed / number * 1e9)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    number, rounds = (2_000, 3) if args.quick else (20_000, 9)
    paths: dict[str, object] = {}
    report = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "target_ratio": TARGET,
        "paths": paths,
    }
    rows = []
    ok = True
    for path in ("first_try", "fail_once"):
        ns = measure(path, number=number, rounds=rounds)
        base = ns["bare operation"]
        ours = max(ns["diagnosis-harness"] - base, 1.0)
        ratios = {peer: (ns[peer] - base) / ours for peer in ("tenacity", "stamina")}
        ok &= all(r >= TARGET for r in ratios.values())
        paths[path] = {"ns_per_call": ns, "overhead_ratio_vs": ratios}
        rows.append(
            f"| {path} | {ns['bare operation']:.0f} | {ns['diagnosis-harness']:.0f} "
            f"| {ns['tenacity']:.0f} | {ns['stamina']:.0f} "
            f"| {ratios['tenacity']:.1f}x | {ratios['stamina']:.1f}x |"
        )
    table = "\n".join(
        [
            "| path | bare ns | diagnosis-harness ns | tenacity ns | stamina ns "
            "| tenacity overhead / ours | stamina overhead / ours |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "retry.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "retry.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    print(f"target: peers' overhead >= {TARGET}x ours on both paths: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
