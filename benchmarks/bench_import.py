"""``import diagnosis_harness`` in a fresh interpreter, against the interpreter starting alone.

Every process that uses the harness pays for its import once, at start-up: a command-line tool,
a worker, a serverless function. Two commands are run in turn, many times:

- the baseline: ``python -I -c pass``, the interpreter starting and stopping;
- the harness: ``python -I -c "import diagnosis_harness"``.

Each run is timed twice: its wall time, and the CPU time (user + system) the process used, read
from the kernel's accounting of the finished child. On a machine whose cores are shared, a
process waiting for a core adds wall time but no CPU time, so the CPU time is the headline
figure. The two commands alternate (and which goes first alternates too), so a change in the
machine's load falls on both; each figure is the median of its runs. What the import adds is the
difference of the medians, and the ratio is the harness's median over the baseline's. The target
(issue 21) is that the import adds at most 40 ms of CPU; the figure is printed beside it.

Besides, ``python -X importtime`` gives its own figure for the package (the interpreter's own
start-up left out), the median of as many runs, and one more fresh interpreter reports which
modules the import loaded: how many, and which of the heavy ones the core must not need (or needs
only later, lazily: asyncio for the async paths, logging for an error) are among them. ``-I``
keeps the environment's ``PYTHON*`` variables and the user's site directory out.

Run: ``tox -e bench`` or ``python benchmarks/bench_import.py [--quick]``; writes
``benchmarks/results/import.json`` and ``import.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PACKAGE = "diagnosis_harness"
RESULTS = Path(__file__).parent / "results"
BASELINE = (sys.executable, "-I", "-c", "pass")
HARNESS = (sys.executable, "-I", "-c", f"import {PACKAGE}")
# Loaded by the import only through a dependency the core must not need, or needs only on a path
# a sync user never takes (see tests/test_independence.py, which fails when one of them is).
HEAVY = (
    "importlib.metadata",
    "statemachine",
    "hypothesis",
    "pytest",
    "email",
    "zipfile",
    "asyncio",
    "concurrent.futures",
    "logging",
    "fractions",
    "decimal",
)
# The most CPU, in ms, the import may add over the bare interpreter (issue 21; it was 141 ms).
TARGET_ADDED_MS = 40.0
_LOADED = f"""
import json, sys
before = set(sys.modules)
import {PACKAGE}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _timed(command: tuple[str, ...]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run of ``command``, in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _importtime_us() -> int:
    """``-X importtime``'s cumulative figure for the package, in microseconds, of one run."""
    err = subprocess.run(
        [sys.executable, "-I", "-X", "importtime", "-c", f"import {PACKAGE}"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    # "import time: self [us] | cumulative | imported package"; the package's own line comes
    # after those of everything it imports.
    for line in reversed(err.splitlines()):
        *_, cumulative, name = (part.strip() for part in line.replace(":", "|").split("|"))
        if name == PACKAGE:
            return int(cumulative)
    raise SystemExit(f"-X importtime printed no line for {PACKAGE}")


def _loaded() -> list[str]:
    """The modules a fresh ``import diagnosis_harness`` adds to ``sys.modules``."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", _LOADED], capture_output=True, text=True, check=True
    ).stdout
    names: list[str] = json.loads(out)
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke run)")
    args = parser.parse_args()
    rounds = 20 if args.quick else 150
    for command in (BASELINE, HARNESS):
        _timed(command)  # warm-up: the file system's caches
    runs: dict[str, list[tuple[float, float]]] = {"baseline": [], "harness": []}
    importtime: list[int] = []
    for n in range(rounds):
        pair = [("baseline", BASELINE), ("harness", HARNESS)]
        for name, command in pair if n % 2 else reversed(pair):
            runs[name].append(_timed(command))
        importtime.append(_importtime_us())

    def median(name: str, index: int) -> float:
        return statistics.median(run[index] for run in runs[name])

    wall = {name: median(name, 0) for name in runs}
    cpu = {name: median(name, 1) for name in runs}
    loaded = _loaded()
    heavy = [name for name in HEAVY if name in loaded]
    added_ms = (cpu["harness"] - cpu["baseline"]) * 1000
    met = added_ms <= TARGET_ADDED_MS
    importtime_ms = statistics.median(importtime) / 1000
    data = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rounds": rounds,
        "statistic": "median of the runs, seconds",
        "baseline": "`python -I -c pass`",
        "command": f"import {PACKAGE}",
        "cpu_s": cpu,
        "wall_s": wall,
        "cpu_ratio": cpu["harness"] / cpu["baseline"],
        "wall_ratio": wall["harness"] / wall["baseline"],
        "cpu_added_ms": added_ms,
        "cpu_added_target_ms": TARGET_ADDED_MS,
        "met": met,
        "wall_added_ms": (wall["harness"] - wall["baseline"]) * 1000,
        "importtime_median_us": statistics.median(importtime),
        "modules_loaded": len(loaded),
        "heavy_modules_loaded": heavy,
    }
    table = "\n".join(
        [
            f"Median of {rounds} runs of each, alternating; Python {data['python']}, "
            f"{data['cpus']} CPUs.",
            "",
            "| command | CPU ms | wall ms |",
            "|---|---:|---:|",
            f"| python -I -c pass | {cpu['baseline'] * 1000:.1f} | {wall['baseline'] * 1000:.1f} |",
            f"| python -I -c 'import {PACKAGE}' | {cpu['harness'] * 1000:.1f} "
            f"| {wall['harness'] * 1000:.1f} |",
            "",
            f"The import adds {added_ms:.1f} ms of CPU ({data['cpu_ratio']:.2f}x the "
            f"bare interpreter), {data['wall_added_ms']:.1f} ms of wall time; -X importtime: "
            f"{importtime_ms:.1f} ms; {len(loaded)} modules loaded; "
            "heavy ones: " + (", ".join(heavy) or "none") + ".",
            "",
            f"Target: the import adds at most {TARGET_ADDED_MS:g} ms of CPU: "
            + ("met" if met else "**not met**")
            + f" ({added_ms:.1f} ms).",
        ]
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "import.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "import.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
