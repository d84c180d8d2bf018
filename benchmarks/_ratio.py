"""What ``bench_core.py`` and ``bench_retry.py`` share: a pyperf runner, benchmarks timed in pairs.

pyperf parses ``sys.argv`` itself and runs the calling script again in worker processes
(``--worker``): the master calibrates the loops, then spawns one worker per process, each running
one benchmark and sending its values back on a pipe. Every ``time*`` and ``pair`` call below
returns ``None`` in a worker, so the calling script computes ratios and writes results only in the
master, from the ``pyperf.Benchmark`` objects it collected (mean and stdev of all the values).

``--quick`` (ours, added through ``runner.argparser``) is a smoke run: 3 processes of 3 values of
at least 50 ms each, instead of pyperf's 20 processes of 3 values of at least 100 ms. Any other
pyperf option (``--fast``, ``--rigorous``, ``-p``, ``-v``, ``--affinity``...) works as usual.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyperf  # type: ignore[import-untyped]  # pyperf ships no type information

if TYPE_CHECKING:
    from collections.abc import Callable

RESULTS = Path(__file__).parent / "results"
QUICK = {"processes": 3, "values": 3, "min_time": 0.05}
# pyperf's metadata that names this machine's host or file system is not written to results/;
# nor is any other value naming one of these directories (see _scrub).
_PRIVATE_METADATA = ("python_executable", "python_config_args", "hostname")
_PRIVATE_ROOTS = tuple(
    root
    for root in {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.expanduser("~"),
        os.getcwd(),
        tempfile.gettempdir(),
    }
    if len(root) > 1
)


@dataclass(frozen=True)
class Timing:
    """One benchmark, in ns per call: the mean and stdev of all its values (warmups left out)."""

    mean_ns: float
    stdev_ns: float
    values: int
    loops: float  # calls per value, as pyperf calibrated them

    @classmethod
    def of(cls, bench: Any) -> Timing:
        return cls(
            mean_ns=float(bench.mean()) * 1e9,
            stdev_ns=float(bench.stdev()) * 1e9,
            values=int(bench.get_nvalue()),
            loops=float(bench.get_loops()),
        )

    def cell(self, spec: str = ",.0f") -> str:
        """``mean ± stdev`` for a Markdown table."""
        return f"{self.mean_ns:{spec}} ± {self.stdev_ns:{spec}}"


@dataclass(frozen=True)
class Ratio:
    """A candidate against its baseline timed in the same run: ratio of the means, vs a target."""

    path: str
    candidate: Timing
    baseline: Timing
    target: float  # the ratio must not exceed it

    @property
    def ratio(self) -> float:
        return self.candidate.mean_ns / self.baseline.mean_ns

    @property
    def met(self) -> bool:
        return self.ratio <= self.target


class Session:
    """One pyperf ``Runner`` for the whole script; collects what the master process measured."""

    def __init__(self, description: str) -> None:
        self.runner: Any = pyperf.Runner()
        parser = self.runner.argparser
        parser.description = description
        parser.add_argument(
            "--quick",
            action="store_true",
            help=f"smoke run: {QUICK['processes']} processes x {QUICK['values']} values "
            f"of >= {QUICK['min_time']} s each",
        )
        self.args: Any = self.runner.parse_args()
        self.worker = bool(self.args.worker)
        if self.args.quick and not self.worker:
            # Workers are given --values and --min-time on their command line by the master.
            for name, value in QUICK.items():
                setattr(self.args, name, value)
            # Too few values for pyperf's stability checks by design: keep their warnings out.
            self.args.quiet = not self.args.verbose
        self._benchmarks: list[Any] = []

    def time(self, name: str, func: Callable[[], object]) -> Timing | None:
        """``func()`` called in a calibrated loop (``Runner.bench_func``); ``None`` in a worker."""
        return self._collect(self.runner.bench_func(name, func))

    def time_loops(self, name: str, time_func: Callable[[int], float]) -> Timing | None:
        """``time_func(loops)`` times itself, in seconds (``Runner.bench_time_func``)."""
        return self._collect(self.runner.bench_time_func(name, time_func))

    def pair(
        self,
        path: str,
        candidate: Callable[[], object],
        baseline: Callable[[], object],
        target: float,
        *,
        timed: Callable[[Callable[[], object]], Callable[[int], float]] | None = None,
    ) -> Ratio | None:
        """Baseline, then candidate, one after the other; with ``timed``, each is given to it and
        what it returns times itself. ``None`` in a worker."""
        if timed is None:
            base = self.time(f"{path} [baseline]", baseline)
            cand = self.time(f"{path} [harness]", candidate)
        else:
            base = self.time_loops(f"{path} [baseline]", timed(baseline))
            cand = self.time_loops(f"{path} [harness]", timed(candidate))
        if base is None or cand is None:
            return None
        return Ratio(path, cand, base, target)

    def _collect(self, bench: Any) -> Timing | None:
        if self.worker or bench is None:
            return None
        self._benchmarks.append(bench)
        return Timing.of(bench)

    def provenance(self) -> dict[str, object]:
        """Where and how the figures were taken, for the results' JSON."""
        metadata = self._benchmarks[0].get_metadata() if self._benchmarks else {}
        return {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "cpu_model": metadata.get("cpu_model_name"),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "pyperf": {
                "version": pyperf.__version__,
                "quick": bool(self.args.quick),
                "processes": self.args.processes,
                "values_per_process": self.args.values,
                "warmups": self.args.warmups,
                "min_time_s": self.args.min_time,
                "statistic": "mean and stdev of all values, ns per call",
            },
        }

    def save(self, stem: str, report: dict[str, object], table: str) -> None:
        """Write ``results/<stem>.json``, ``<stem>.md`` and pyperf's own ``<stem>.pyperf.json``."""
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (RESULTS / f"{stem}.md").write_text(table + "\n", encoding="utf-8")
        buffer = io.StringIO()
        pyperf.BenchmarkSuite(self._benchmarks).dump(buffer, compact=False)
        suite = json.loads(buffer.getvalue())
        _scrub(suite)
        (RESULTS / f"{stem}.pyperf.json").write_text(
            json.dumps(suite, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )


def _scrub(node: object) -> None:
    """Drop private metadata from every metadata mapping of a pyperf suite, in place."""
    if isinstance(node, dict):
        metadata = node.get("metadata")
        if isinstance(metadata, dict):
            for key, value in list(metadata.items()):
                if key in _PRIVATE_METADATA or (
                    isinstance(value, str) and any(root in value for root in _PRIVATE_ROOTS)
                ):
                    del metadata[key]
        for value in node.values():
            _scrub(value)
    elif isinstance(node, list):
        for value in node:
            _scrub(value)
