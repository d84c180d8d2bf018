"""The retry executor against tenacity and stamina, timed in the same run (a ratio, not seconds).

Two paths, zero wait everywhere: success on the first attempt, and fail once then succeed.
Overhead is each candidate's time minus the bare operation's (the same calls without any retry
library), so the ratio compares what the libraries add. Timed with pyperf (``_ratio.py``): each
candidate runs in 20 worker processes of 3 values, loops calibrated to at least 100 ms a value;
the means are used, one path's four candidates timed one after the other in the same run (the
stdev of each is recorded).

Run: ``tox -e bench`` (or ``python benchmarks/bench_retry.py [--quick] [pyperf options]``). Writes
``benchmarks/results/retry.json``, ``retry.md`` and pyperf's own ``retry.pyperf.json`` (for
``python -m pyperf compare_to``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import stamina
import tenacity
from _ratio import Session, Timing
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
PATHS = {
    "first_try": "success on the first attempt",
    "fail_once": "one failure, then success",
}


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


def measure(session: Session, path: str) -> dict[str, Timing] | None:
    """Each candidate of ``path``, one after the other; ``None`` in a worker process."""
    timings: dict[str, Timing] = {}
    for name, fn in _candidates(path).items():
        timing = session.time(f"retry {path} [{name}]", fn)
        if timing is not None:
            timings[name] = timing
    return None if session.worker else timings


def main() -> int:
    session = Session(__doc__.split("\n", 1)[0] if __doc__ else "bench_retry")
    measured = {path: measure(session, path) for path in PATHS}
    if session.worker:
        return 0

    paths: dict[str, object] = {}
    rows = []
    ok = True
    for path, timings in measured.items():
        assert timings is not None
        ns = {name: timing.mean_ns for name, timing in timings.items()}
        base = ns["bare operation"]
        ours = max(ns["diagnosis-harness"] - base, 1.0)
        ratios = {peer: (ns[peer] - base) / ours for peer in ("tenacity", "stamina")}
        met = all(r >= TARGET for r in ratios.values())
        ok &= met
        paths[path] = {
            "description": PATHS[path],
            "ns_per_call": ns,
            "stdev_ns": {name: timing.stdev_ns for name, timing in timings.items()},
            "values": timings["diagnosis-harness"].values,
            "overhead_ratio_vs": ratios,
            "met": met,
        }
        cells = " | ".join(timings[name].cell(".0f") for name in timings)
        rows.append(
            f"| {path} | {cells} "
            f"| {ratios['tenacity']:.1f}x | {ratios['stamina']:.1f}x "
            f"| >= {TARGET:g}x | {'met' if met else 'NOT met'} |"
        )
    table = "\n".join(
        [
            "| path | bare ns | diagnosis-harness ns | tenacity ns | stamina ns "
            "| tenacity overhead / ours | stamina overhead / ours | target | |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    report = {**session.provenance(), "target_ratio": TARGET, "paths": paths}
    session.save("retry", report, table)
    print(table)
    print(f"target: peers' overhead >= {TARGET}x ours on both paths: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
