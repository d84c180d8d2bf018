"""Write the performance page's figures from ``benchmarks/results/`` (``tox -e bench``'s last step).

The benchmark scripts write their results as JSON; this script rewrites the part of
``docs/performance.md`` between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` from them, so
the published table is always the one measured, never typed by hand. The rest of the page (what
the profiles showed, how to read the figures) is prose and stays as written.

``python benchmarks/publish.py --check`` changes nothing and exits 1 when the page is not what the
results give; the test suite runs it, so results and page land together. Only the standard library
is used: the check runs in every test environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"

# The rows, in its order: (label, results file, path in that file).
_CORE_ROWS = (
    ("`ctx.check(boundary)` on a live run", "ctx.check(boundary)"),
    ("`ctx.reserve_tool_call(name)`", "ctx.reserve_tool_call(name)"),
    ("`RunContext.create(...)`", "RunContext.create(...)"),
    (
        "8 threads reserving against one budget (ns per round: 8 threads x 5,000 each)",
        "8 threads reserving against one budget",
    ),
    (
        "a full run: create, 20 Tool calls, 5 Model calls with token usage, succeed",
        "full run: create, 20 Tool calls, 5 Model calls, succeed",
    ),
    (
        "a paid Tool call's hold and settle: `ctx.reserve_tool_call(name, max_cost=D)`, "
        "`hold.settle(cost=D)`",
        "hold and settle: ctx.reserve_tool_call(name, max_cost=D), hold.settle(cost=D)",
    ),
)
_RETRY_ROWS = (
    ("executor, first-try success", "first_try"),
    ("executor, fail once then succeed, zero wait", "fail_once"),
)


def _load(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / f"{stem}.json").read_text(encoding="utf-8"))
    return data


def _ns(value: float) -> str:
    return f"{value:,.0f}"


def _met(met: bool) -> str:
    return "met" if met else "**not met**"


def _core_table(core: dict[str, Any]) -> list[str]:
    lines = [
        "| path | harness ns | baseline ns | ratio | target | |",
        "|---|---:|---:|---:|---|---|",
    ]
    for label, key in _CORE_ROWS:
        row = core["paths"][key]
        lines.append(
            f"| {label} | {_ns(row['candidate_ns'])} | {_ns(row['baseline_ns'])} "
            f"| {row['ratio']:.2f}x | <= {row['target']:g}x | {_met(row['met'])} |"
        )
    lines += ["", "The baselines, timed in the same run:", ""]
    lines += [f"- {label}: {core['paths'][key]['baseline']}." for label, key in _CORE_ROWS]
    return lines


def _retry_table(retry: dict[str, Any]) -> list[str]:
    lines = [
        "| path | bare call ns | ours ns | tenacity ns | stamina ns "
        "| tenacity adds / we add | stamina adds / we add | target | |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    target = retry["target_ratio"]
    for label, key in _RETRY_ROWS:
        row = retry["paths"][key]
        ns = row["ns_per_call"]
        ratios = row["overhead_ratio_vs"]
        cells = " | ".join(
            _ns(ns[name]) for name in ("bare operation", "diagnosis-harness", "tenacity", "stamina")
        )
        lines.append(
            f"| {label} | {cells} | {ratios['tenacity']:.1f}x | {ratios['stamina']:.1f}x "
            f"| >= {target:g}x | {_met(row['met'])} |"
        )
    return lines


def _provenance(stem: str, data: dict[str, Any]) -> str:
    pyperf = data.get("pyperf")
    how = (
        f"pyperf {pyperf['version']}, {pyperf['processes']} processes x "
        f"{pyperf['values_per_process']} values of >= {pyperf['min_time_s']:g} s"
        + (" (a --quick smoke run)" if pyperf["quick"] else "")
        if pyperf
        else f"median of {data['rounds']} runs"
        if data.get("statistic", "").startswith("median")
        else f"best of {data['rounds']} rounds"
    )
    date = data.get("date", "")
    when = f", {date[:10]}" if date else ""
    return (
        f"`{stem}`: Python {data['python']}, {data['machine']}, {data['cpus']} CPUs; {how}{when}."
    )


def render() -> str:
    """The text that belongs between the page's markers."""
    stems = ("core", "retry", "model", "report", "import", "pydantic_ai")
    results = {stem: _load(stem) for stem in stems}
    model_table = (RESULTS / "model.md").read_text(encoding="utf-8").strip()
    report_table = (RESULTS / "report.md").read_text(encoding="utf-8").strip()
    import_table = (RESULTS / "import.md").read_text(encoding="utf-8").strip()
    pydantic_ai_table = (RESULTS / "pydantic_ai.md").read_text(encoding="utf-8").strip()
    lines = [
        "### The core paths",
        "",
        *_core_table(results["core"]),
        "",
        "### The retry executor against tenacity and stamina",
        "",
        *_retry_table(results["retry"]),
        "",
        "### The model side: Hypothesis stateful steps per second",
        "",
        model_table,
        "",
        "### The conformance report on a large spec",
        "",
        report_table,
        "",
        "### `import diagnosis_harness` in a fresh interpreter",
        "",
        import_table,
        "",
        "### A pydantic-ai agent step with `HarnessCapability`",
        "",
        pydantic_ai_table,
        "",
        "Measured with:",
        "",
        *(f"- {_provenance(stem, data)}" for stem, data in results.items()),
    ]
    return "\n".join(lines)


def updated(page: str) -> str:
    """``page`` with the section between the markers replaced by :func:`render`."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{PAGE.name}: the markers {BEGIN} and {END} must both be present")
    return f"{head}{BEGIN}\n{render()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if the page is stale"
    )
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    new = updated(page)
    if args.check:
        if new != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python benchmarks/publish.py")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
