"""Spin models of the run's concurrency protocol: render them, check them, read what Spin says.

Theory of operation. Three protocols keep a run consistent under threads, and each becomes a
Promela model that Spin explores exhaustively for a fixed number of racing processes:

* the terminal compare-and-set (:func:`render_terminal_cas`), generated from the lifecycle
  table (``LIFECYCLE``, i.e. ``model/lifecycle.toml``): every row becomes one option of the
  locked step, the table's terminal states become the "stable" property. Each racer fires one
  event of the table, whichever Spin picks, at one shared machine, under the run lock;
* cancellation callbacks (``promela/callbacks.pml``, hand-written: the protocol is code, not a
  table): the first signal takes every registered callback under the lock and runs them outside
  it; a late registration runs inline; ``unregister()`` removes only a callback not yet taken;
* the budget reservation (``promela/budget.pml``, hand-written): check every limit, the money
  included, and bump the total and per-Tool counters and the money held in one locked step; a
  refusal reserves nothing and ends the run. Each granted call then settles its hold at an
  actual below, at or above it, even after the run ended: only such a settle takes settled +
  held past the money limit, and it exhausts the run;
* the run tree (``promela/tree.pml``, hand-written): a root and three children whose every
  reservation is one all-or-nothing step over the child and the root (the tree shares the
  root's lock), counted in both; any ending of the root cancels every live child in the same
  step; a child that exhausts the root ends it. No level passes its limit, every child of an
  ended root has ended, each run ends once.

The run lock is a ``d_step``: one indivisible transition. Each model has a seeded-bug variant
that breaks exactly that (a read outside the lock, a take outside the lock, check-then-act; the
tree's, a level left unchecked or a child left out of the cascade) and which Spin must refute:
it shows that the properties can fail, and that this module notices.

Checking: ``spin -a`` writes ``pan.c`` (one never claim per ``ltl`` block), ``gcc -O0`` builds
it, and ``./pan -a -N <property>`` searches for acceptance cycles against one property at a
time. ``./pan`` exits 0 even when it finds a violation, so the verdict is the ``errors: N``
line of its report, never the exit status. Everything happens in a temporary directory; the
templates are package data, read with :mod:`importlib.resources`, so an installed wheel can
check itself without the repository's ``model/``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from string import Template
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypedDict, cast, final

from .._generated.tables import LIFECYCLE
from ._counterexample import Counterexample
from ._results import CheckResult, ScenarioTally
from ._spec_scenarios import BUDGET_WINS, CLIENT_DISCONNECTS, PER_TOOL, SUCCESS_WINS

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from .._machine import MachineTable
    from ._spec_scenarios import SpecScenario

__all__ = [
    "BUDGET_SEEDED_BUGS",
    "INSTALL_HINT",
    "PROFILES",
    "TREE_BUG_PROPERTIES",
    "TREE_CHILDREN",
    "TREE_PROPERTIES",
    "TREE_SEEDED_BUGS",
    "TREE_SITUATIONS",
    "ModelResult",
    "PanReport",
    "SpinModel",
    "SpinSummary",
    "budget_limits",
    "build_models",
    "check_model",
    "money_limit",
    "parse_pan_output",
    "render_budget",
    "render_callbacks",
    "render_terminal_cas",
    "render_tree",
    "run_checks",
    "run_spin",
    "spin_unavailable_reason",
    "tree_calls",
    "tree_limits",
]

PROFILES: Final[Mapping[str, int]] = MappingProxyType({"ci": 5, "deep": 7})
"""Racers per profile: 5 in CI (a few seconds in all), 7 in the deep run."""

INSTALL_HINT: Final = "apt-get install -y --no-install-recommends spin gcc libc6-dev (see .ci/run)"

CALLBACK_SIGNALLERS: Final = 2
"""Racers that end the run in the callbacks model; the other racers own one callback each."""
BUDGET_TOOLS: Final = 2
"""Tools the reservers of the budget model choose between."""
BUDGET_HOLD: Final = 2
"""The worst case each reserver of the budget model holds; its actual is 0 to 3."""

_PAN_MAX_DEPTH: Final = 1_000_000
_TIMEOUT_SECONDS: Final = 1_800.0
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ERRORS = re.compile(r"\berrors: (\d+)")
_STORED = re.compile(r"([0-9][0-9.e+]*) states, stored")
_DEPTH = re.compile(r"depth reached (\d+)")
_CLAIM = re.compile(r"never claim\s+\+ \((\w+)\)")
_PROMELA = files("diagnosis_harness.modelcheck").joinpath("promela")


class ModelResult(TypedDict):
    """One property of one model, as Spin answered."""

    name: str  # the model, e.g. "terminal_cas" or "terminal_cas_seeded_bug"
    racers: int
    property: str  # the ltl block's name
    errors: int | None  # pan's `errors: N`; None when pan did not report (see detail)
    states_stored: int | None
    seconds: float  # wall time of this pan search (the model's compile time is not included)
    expected_violation: bool  # a seeded-bug model: Spin must refute the property
    ok: bool  # errors == 0 for a real model, errors >= 1 for a seeded bug
    detail: str | None  # why there is no verdict (spin, gcc or pan failed), else None
    trail: list[str]  # the steps of the trail pan wrote when it found a violation, else []
    final: str | None  # the globals at the trail's end ("name = value, ..."), else None


class SpinSummary(TypedDict):
    """What :func:`run_checks` returns; ``passed`` only if Spin ran and every result is ok."""

    available: bool
    reason: str | None  # why Spin could not run, else None
    profile: str
    racers: int
    models: list[ModelResult]
    passed: bool


@final
@dataclass(frozen=True, slots=True)
class SpinModel:
    """A rendered model and the ``ltl`` properties to check it against."""

    name: str
    racers: int
    text: str
    properties: tuple[str, ...]
    expected_violation: bool = False


@final
@dataclass(frozen=True, slots=True)
class PanReport:
    """The figures read off one ``./pan`` report."""

    errors: int | None
    states_stored: int | None
    depth: int | None
    claim: str | None  # the never claim pan says it used
    truncated: bool  # "max search depth too small": the search was not exhaustive


# -- rendering ----------------------------------------------------------------------------------


def _conjunction(template: str, indices: Iterable[int]) -> str:
    return " && ".join(template.format(i=i) for i in indices)


def _identifier(kind: str, name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise ValueError(f"{kind} {name!r} is not a Promela identifier")
    return name


def _check_racers(racers: int, low: int, high: int, what: str) -> int:
    if racers.__class__ is not int or not low <= racers <= high:
        raise ValueError(f"{what} needs {low} to {high} racers, got {racers!r}")
    return racers


def render_terminal_cas(
    table: MachineTable[Any, Any] = LIFECYCLE, racers: int = 5, *, seeded_bug: bool = False
) -> str:
    """The terminal compare-and-set of ``table`` with ``racers`` racers, as Promela.

    Each racer fires one event of the table (Spin tries every choice) at one shared machine.
    The real model reads the state and writes the row's target in one locked step, like
    ``LocalRun._end_locked`` under the run lock; ``seeded_bug`` reads the state outside the
    lock, so that two racers can both see the initial state and both "win".

    Meant for a table shaped like the lifecycle, whose rows lead from the initial state into
    terminal ones. Any table renders; on another shape the properties say what does not hold
    (an event without a row from a non-terminal state fails the model's assertion).
    """
    _check_racers(racers, 1, 32, "the terminal compare-and-set")
    states = list(cast("Iterable[enum.Enum]", table.states))
    events = list(cast("Iterable[enum.Enum]", table.events))
    state_names = [_identifier("state", s.name) for s in states]
    event_names = [_identifier("event", f"e_{e.value}") for e in events]
    if set(state_names) & set(event_names):
        raise ValueError(f"{table.name}: state and event names collide in Promela's mtype")
    terminal = [s.name for s in states if s in table.terminal]
    guarded = any(row.guard is not None for row in table.rows)
    is_terminal = " || ".join(f"s == {name}" for name in terminal) or "false"

    lines = [
        "/*",
        f" * The terminal compare-and-set of the {table.name} table ({table.source}).",
        " * GENERATED by diagnosis_harness.modelcheck._spin.render_terminal_cas: do not edit;",
        " * change the table. Each racer fires one event, whichever Spin picks, at one machine.",
    ]
    if seeded_bug:
        lines.append(" * SEEDED BUG: the state is read outside the lock, then written under it.")
    else:
        lines.append(" * The read and the write are one locked step (LocalRun._end_locked).")
    lines += [
        " */",
        "",
        f"#define RACERS {racers}",
        f"#define TERMINAL(s) ({is_terminal})",
        "",
        f"mtype = {{ {', '.join(state_names)} }};   /* states */",
        f"mtype = {{ {', '.join(event_names)} }};   /* events */",
        "",
        f"mtype state = {table.initial.name};",
        "byte winners = 0;      /* racers whose event took the machine into a terminal state */",
        "byte finished = 0;     /* racers whose finish attempt returned */",
        "mtype seen[RACERS];    /* the state each racer's attempt reported */",
        "",
        "proctype Racer(byte id) {",
        "    mtype event;",
        "    mtype cur;",
    ]
    if guarded:
        lines.append("    bool g;   /* the row's guard: data, so Spin tries both values */")
    lines += [
        "    atomic {   /* the racer's choice is local: made in the same step */",
        "        if",
        *(f"        :: event = {name}" for name in event_names),
        "        fi;",
    ]
    if guarded:
        lines += ["        if", "        :: g = true", "        :: g = false", "        fi;"]
    if seeded_bug:
        lines += [
            "    };",
            "    cur = state;   /* BUG: the lock is not held here */",
            "    atomic {",
        ]
    step = ["d_step {   /* under the run lock */"]
    if not seeded_bug:
        step.append("    cur = state;")
    step.append("    if")
    for row in table.rows:
        condition = f"cur == {row.source.name} && event == e_{row.event.value}"
        if row.guard is not None:
            condition += " && g" if row.expect else " && !g"
        step.append(f"    :: {condition} -> state = {row.target.name}   /* row {row.index} */")
    step += [
        "    :: else -> assert(TERMINAL(cur))   /* absorbed; elsewhere IllegalTransition */",
        "    fi;",
        "    if",
        "    :: !TERMINAL(cur) && TERMINAL(state) -> winners++",
        "    :: else -> skip",
        "    fi;",
        "    seen[id] = state;",
        "    finished++",
        "};",
        "event = 0;",
        "cur = 0",
    ]
    lines += [f"        {line}" for line in step]
    lines += [
        "    }",
        "}",
        "",
        "init {",
        "    byte k;",
        "    atomic { for (k : 0 .. RACERS - 1) { run Racer(k) } }",
        "}",
        "",
        "/* Once a terminal state is set, it stays set. */",
        "ltl stable { [] ("
        + (" && ".join(f"(state == {n} -> [] (state == {n}))" for n in terminal) or "true")
        + ") }",
        "/* Exactly one racer's event takes the machine into a terminal state: never two, and",
        " * one by the time every racer has returned (safety, so a counterexample is short). */",
        "ltl one_winner { [] (winners <= 1 && (finished < RACERS || winners == 1)) }",
        "/* Every racer's attempt reports the one outcome that won. */",
        "ltl same_outcome { [] (finished == RACERS -> ("
        + _conjunction("seen[{i}] == state", range(racers))
        + ")) }",
        "",
    ]
    return "\n".join(lines)


def _template(name: str) -> Template:
    return Template(_PROMELA.joinpath(name).read_text(encoding="utf-8"))


def render_callbacks(racers: int = 5, *, seeded_bug: bool = False) -> str:
    """The cancellation callbacks model: two signallers and ``racers - 2`` callback owners."""
    _check_racers(racers, CALLBACK_SIGNALLERS + 1, CALLBACK_SIGNALLERS + 8, "the callbacks model")
    callbacks = range(racers - CALLBACK_SIGNALLERS)
    return _template("callbacks.pml").substitute(
        signallers=CALLBACK_SIGNALLERS,
        callbacks=len(callbacks),
        seeded_bug=int(seeded_bug),
        all_once=_conjunction("runs[{i}] <= 1", callbacks),
        all_delivered=_conjunction("(runs[{i}] == 1 || removed[{i}])", callbacks),
        all_removed_never_run=_conjunction("(!removed[{i}] || runs[{i}] == 0)", callbacks),
        all_first_reason=_conjunction("(runs[{i}] == 0 || got[{i}] == reason)", callbacks),
    )


def budget_limits(racers: int) -> tuple[int, int]:
    """The (total Tool call, per-Tool call) limits of the budget model for ``racers`` reservers.

    Both below the number of reservers, so that both refusals are reachable.
    """
    return racers - 2, max(1, (racers - 1) // 2)


def money_limit(racers: int) -> int:
    """The money limit of the budget model for ``racers`` reservers, in units of money.

    One unit more than ``BUDGET_HOLD`` times one call fewer than the Tool-call limit: with four
    reservers or more, fewer holds fit than the Tool-call limit lets through, so a hold is
    refused on money alone, and two settles above their holds pass it. (With 5 reservers: holds
    of 2, a limit of 5, 3 Tool calls.)
    """
    tool_limit, _ = budget_limits(racers)
    return BUDGET_HOLD * max(1, tool_limit - 1) + 1


BUDGET_SEEDED_BUGS: Final[Mapping[str, int]] = MappingProxyType({"check_then_act": 1, "unheld": 2})
"""The budget model's seeded bugs: the reservation checked in one locked step and written in
the next (1); a hold checked against the money settled only, not settled + held (2)."""


def render_budget(racers: int = 5, *, seeded_bug: bool | str = False) -> str:
    """The budget reservation model: ``racers`` threads each reserve one call of some Tool,
    holding a worst case of money, and settle it at an actual Spin picks, while one more process
    ends the run on its own. ``seeded_bug``: ``True`` (or ``"check_then_act"``) or ``"unheld"``,
    see :data:`BUDGET_SEEDED_BUGS`."""
    _check_racers(racers, 3, 64, "the budget model")
    if seeded_bug is True:
        bug = BUDGET_SEEDED_BUGS["check_then_act"]
    elif seeded_bug is False:
        bug = 0
    elif seeded_bug in BUDGET_SEEDED_BUGS:
        bug = BUDGET_SEEDED_BUGS[seeded_bug]
    else:
        raise ValueError(
            f"seeded_bug must be a bool or one of {sorted(BUDGET_SEEDED_BUGS)}, got {seeded_bug!r}"
        )
    tool_limit, per_tool_limit = budget_limits(racers)
    tools = range(BUDGET_TOOLS)
    return _template("budget.pml").substitute(
        reservers=racers,
        tools=BUDGET_TOOLS,
        tool_limit=tool_limit,
        per_tool_limit=per_tool_limit,
        hold=BUDGET_HOLD,
        cost_limit=money_limit(racers),
        seeded_bug=bug,
        all_per_tool_within=_conjunction("per_tool[{i}] <= PER_TOOL_LIMIT", tools),
        sum_per_tool=" + ".join(f"per_tool[{i}]" for i in tools),
        sum_holding=" + ".join(f"holding[{i}]" for i in range(racers)),
        all_frozen_after_end=_conjunction(
            "(live || tool_calls != {i} || [] (tool_calls == {i}))", range(racers + 1)
        ),
    )


TREE_CHILDREN: Final = 3
"""The children of the root in the run-tree model."""
TREE_HOLD: Final = 2
"""The worst case each reservation of the run-tree model holds (``max_cost``)."""
TREE_LEAST: Final = 1
"""The least hold each reservation of the run-tree model accepts (``min_cost``)."""

TREE_SEEDED_BUGS: Final[Mapping[str, int]] = MappingProxyType(
    {"child_only": 1, "check_then_act": 2, "cascade_skips": 3, "cascade_reends": 4}
)
"""The run-tree model's seeded bugs: a child's reservation checked against the child only (1);
the levels checked in one locked step and bumped in the next (2); a cascade that leaves the last
child out (3); a cascade without the compare-and-set, ending an ended child again (4)."""

TREE_PROPERTIES: Final = (
    "within_limits",
    "rollup",
    "descendants_end",
    "one_ending",
    "nothing_after_end",
)
"""The properties of the run-tree model (``ltl`` blocks of ``promela/tree.pml``)."""

TREE_BUG_PROPERTIES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "child_only": ("within_limits",),
        "check_then_act": ("within_limits",),
        "cascade_skips": ("descendants_end", "nothing_after_end"),
        "cascade_reends": ("one_ending",),
    }
)
"""The properties Spin must refute in each seeded-bug variant of the run-tree model."""

TREE_SITUATIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "refused_at_a_child": "exhausted[1] && !overrun[1] && live[0]",
        "refused_at_the_root_on_money": (
            "exhausted[0] && !overrun[0] && calls[0] < ROOT_CALL_LIMIT"
        ),
        "the_root_at_its_call_limit": "calls[0] == ROOT_CALL_LIMIT",
        "a_partial_hold": "holding[1] == LEAST",
        "a_settle_overruns_the_root": "overrun[0]",
        "a_settle_overruns_a_child_alone": "overrun[1] && live[0]",
        "a_child_cut_mid_call": "!live[0] && holding[1] > 0",
        "a_child_ends_and_the_root_goes_on": "!live[1] && live[0] && !exhausted[1]",
    }
)
"""What the run-tree model must reach with 2 calls per child (the ``ci`` profile), as Promela
expressions: a property that holds in a model that never got there would show nothing. The
tests check each with a claim ``[] !(situation)`` that Spin must refute."""


def tree_limits(calls: int) -> dict[str, int]:
    """The limits of the run-tree model when each child makes ``calls`` reservations.

    Each child may make every call (``child_call_limit``) but its money cap lets one full hold
    and one partial hold through, so a child is refused on its own money after an actual above
    its hold; the root's Tool calls and money are below the children's sum, so a child is
    refused at the root (and exhausts it), and the third full hold racing two is partial.
    (With 2 calls each: children of 2 calls and 3 units, a root of 3 calls and 5 units.)
    """
    return {
        "child_call_limit": calls,
        "child_money": TREE_HOLD * calls - 1 if calls > 1 else TREE_HOLD,
        "root_call_limit": TREE_CHILDREN * calls // 2,
        "root_money": TREE_HOLD * (TREE_CHILDREN - 1) + 1,
    }


def tree_calls(racers: int) -> int:
    """The reservations each child makes in the run-tree model of a profile with ``racers``:
    1 for 3 or 4 racers, 2 for 5 or 6 (``ci``: about 90,000 states), 3 from 7 (``deep``: about
    700,000). The tree's three children are fixed; its size grows with their calls."""
    return max(1, min(3, (racers - 1) // 2))


def render_tree(calls: int = 2, *, seeded_bug: bool | str = False) -> str:
    """The run-tree model: a root and :data:`TREE_CHILDREN` children racing, each child making
    ``calls`` reservations (partial money holds, settled at an actual Spin picks) and then
    ending on its own, while one more process cancels the root. ``seeded_bug``: ``False`` or
    one of :data:`TREE_SEEDED_BUGS` (``True`` is ``"child_only"``)."""
    if calls.__class__ is not int or not 1 <= calls <= 4:
        raise ValueError(f"the run-tree model needs 1 to 4 calls per child, got {calls!r}")
    if seeded_bug is True:
        bug = TREE_SEEDED_BUGS["child_only"]
    elif seeded_bug is False:
        bug = 0
    elif seeded_bug in TREE_SEEDED_BUGS:
        bug = TREE_SEEDED_BUGS[seeded_bug]
    else:
        raise ValueError(
            f"seeded_bug must be a bool or one of {sorted(TREE_SEEDED_BUGS)}, got {seeded_bug!r}"
        )
    limits = tree_limits(calls)
    children = range(1, TREE_CHILDREN + 1)
    runs = range(TREE_CHILDREN + 1)

    def within(r: int) -> str:
        level = "ROOT" if r == 0 else "CHILD"
        calls_limit, money = f"{level}_CALL_LIMIT", f"{level}_MONEY"
        return (
            f"calls[{r}] <= {calls_limit} && (settled[{r}] + held[{r}] <= {money} "
            f"|| (overrun[{r}] && !live[{r}]))"
        )

    return _template("tree.pml").substitute(
        children=TREE_CHILDREN,
        runs=TREE_CHILDREN + 1,
        calls=calls,
        hold=TREE_HOLD,
        least=TREE_LEAST,
        seeded_bug=bug,
        **limits,
        cascade="; ".join(f"CASCADE_ONE({c})" for c in children),
        cascade_skipping="; ".join(f"CASCADE_ONE({c})" for c in children[:-1]),
        all_within=" && ".join(f"({within(r)})" for r in runs),
        sum_calls=" + ".join(f"calls[{c}]" for c in children),
        sum_held=" + ".join(f"held[{c}]" for c in children),
        sum_settled=" + ".join(f"settled[{c}]" for c in children),
        all_holding=_conjunction("held[{i}] == holding[{i}] && held[{i}] >= 0", children),
        all_children_ended=_conjunction("!live[{i}]", children),
        all_at_most_once=_conjunction("ends[{i}] <= 1", runs),
        all_ended_once=_conjunction("ends[{i}] == 1", runs),
    )


def build_models(racers: int) -> tuple[SpinModel, ...]:
    """Every model the checks run, real and seeded-bug, with the properties each is checked on."""
    return (
        SpinModel(
            "terminal_cas",
            racers,
            render_terminal_cas(LIFECYCLE, racers),
            ("stable", "one_winner", "same_outcome"),
        ),
        SpinModel(
            "terminal_cas_seeded_bug",
            racers,
            render_terminal_cas(LIFECYCLE, racers, seeded_bug=True),
            ("stable", "one_winner"),
            expected_violation=True,
        ),
        SpinModel(
            "callbacks",
            racers,
            render_callbacks(racers),
            ("once", "delivered", "unregistered_never_runs", "first_reason"),
        ),
        SpinModel(
            "callbacks_seeded_bug",
            racers,
            render_callbacks(racers, seeded_bug=True),
            ("once", "unregistered_never_runs"),
            expected_violation=True,
        ),
        SpinModel(
            "budget",
            racers,
            render_budget(racers),
            ("within_limits", "money_within", "consistent", "nothing_after_end", "all_settled"),
        ),
        SpinModel(
            "budget_seeded_bug",
            racers,
            render_budget(racers, seeded_bug=True),
            ("within_limits", "nothing_after_end"),
            expected_violation=True,
        ),
        # With 3 reservers the Tool-call limit (1) admits one hold: no two holds race for money.
        *(
            ()
            if racers < 4
            else (
                SpinModel(
                    "budget_unheld_seeded_bug",
                    racers,
                    render_budget(racers, seeded_bug="unheld"),
                    ("within_limits", "money_within"),
                    expected_violation=True,
                ),
            )
        ),
        SpinModel("tree", racers, render_tree(tree_calls(racers)), TREE_PROPERTIES),
        *(
            SpinModel(
                f"tree_{bug}_seeded_bug",
                racers,
                render_tree(tree_calls(racers), seeded_bug=bug),
                properties,
                expected_violation=True,
            )
            for bug, properties in TREE_BUG_PROPERTIES.items()
        ),
    )


# -- checking -----------------------------------------------------------------------------------


def spin_unavailable_reason() -> str | None:
    """Why Spin cannot check models here (a missing program), or ``None`` if it can."""
    missing = [program for program in ("spin", "gcc") if shutil.which(program) is None]
    if not missing:
        return None
    return f"{' and '.join(missing)} not found on PATH: {INSTALL_HINT}"


def parse_pan_output(output: str) -> PanReport:
    """Read ``errors: N``, ``N states, stored``, the depth and the claim off a pan report."""
    errors = _ERRORS.search(output)
    stored = _STORED.search(output)
    depth = _DEPTH.search(output)
    claim = _CLAIM.search(output)
    return PanReport(
        errors=None if errors is None else int(errors.group(1)),
        states_stored=None if stored is None else int(float(stored.group(1))),
        depth=None if depth is None else int(depth.group(1)),
        claim=None if claim is None else claim.group(1),
        truncated="max search depth too small" in output,
    )


def _run(args: Sequence[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )


def _failed(step: str, result: subprocess.CompletedProcess[str]) -> str:
    tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
    return f"{step} exited {result.returncode}: " + " | ".join(tail)


def _result(
    model: SpinModel,
    prop: str,
    seconds: float,
    report: PanReport | None,
    detail: str | None,
    *,
    trail: tuple[list[str], str | None] = ([], None),
) -> ModelResult:
    errors = None if report is None else report.errors
    if report is not None and detail is None:
        if errors is None:
            detail = "pan printed no `errors: N` line"
        elif report.claim != prop:
            detail = f"pan checked claim {report.claim!r}, not {prop!r}"
        elif report.truncated and errors == 0:
            detail = "max search depth too small: the search was not exhaustive"
    if detail is not None or errors is None:
        ok = False
    else:
        ok = errors >= 1 if model.expected_violation else errors == 0
    return ModelResult(
        name=model.name,
        racers=model.racers,
        property=prop,
        errors=errors,
        states_stored=None if report is None else report.states_stored,
        seconds=round(seconds, 3),
        expected_violation=model.expected_violation,
        ok=ok,
        detail=detail,
        trail=trail[0],
        final=trail[1],
    )


def check_model(
    model: SpinModel, *, workdir: Path | None = None, timeout: float = _TIMEOUT_SECONDS
) -> list[ModelResult]:
    """Compile ``model`` once and check each of its properties; one result per property.

    Runs in ``workdir`` (a fresh temporary directory by default). Never raises for what Spin,
    gcc or pan do: a failure becomes a result with ``ok=False`` and a ``detail``.
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix=f"spin-{model.name}-") as tmp:
            return check_model(model, workdir=Path(tmp), timeout=timeout)
    source = f"{model.name}.pml"
    (workdir / source).write_text(model.text, encoding="utf-8")
    try:
        for step, args in (
            ("spin -a", ["spin", "-a", source]),
            ("gcc", ["gcc", "-O0", "-o", "pan", "pan.c"]),
        ):
            built = _run(args, workdir, timeout)
            if built.returncode != 0:
                return [
                    _result(model, p, 0.0, None, _failed(step, built)) for p in model.properties
                ]
    except (OSError, subprocess.TimeoutExpired) as error:
        return [_result(model, p, 0.0, None, f"build failed: {error}") for p in model.properties]
    results = []
    for prop in model.properties:
        started = time.perf_counter()
        try:
            # ./pan exits 0 whether or not it found a violation: the report is the verdict.
            searched = _run(["./pan", "-a", f"-m{_PAN_MAX_DEPTH}", "-N", prop], workdir, timeout)
        except (OSError, subprocess.TimeoutExpired) as error:
            seconds = time.perf_counter() - started
            results.append(_result(model, prop, seconds, None, f"pan failed: {error}"))
            continue
        seconds = time.perf_counter() - started
        report = parse_pan_output(searched.stdout)
        detail = None
        if report.errors is None and searched.returncode != 0:
            detail = _failed("pan", searched)
        trail = ([], None) if not report.errors else _read_trail(source, workdir, timeout)
        results.append(_result(model, prop, seconds, report, detail, trail=trail))
    return results


_TRAIL_STEP = re.compile(r"^\s*\d+:\s+proc\s+(\d+) \(([^)]*)\) \S+:(\d+) \(state \d+\)\s+\[(.*)\]$")
_TRAIL_VALUE = re.compile(r"^\t\t(\S+) = (\S+)$")
_TRAIL_STEPS_KEPT: Final = 200


def _read_trail(source: str, workdir: Path, timeout: float) -> tuple[list[str], str | None]:
    """The steps of the trail pan just wrote (``spin -t -p``), and the globals at its end."""
    try:
        replayed = _run(["spin", "-t", "-p", source], workdir, timeout)
    except (OSError, subprocess.TimeoutExpired):
        return [], None
    steps: list[str] = []
    values: list[str] = []
    for line in replayed.stdout.splitlines():
        step = _TRAIL_STEP.match(line)
        if step is not None:
            pid, name, number, statement = step.groups()
            steps.append(f"proc {pid} ({name}) line {number}: {statement}")
            continue
        value = _TRAIL_VALUE.match(line)
        if value is not None:
            values.append(f"{value.group(1)} = {value.group(2)}")
    return steps[-_TRAIL_STEPS_KEPT:], (", ".join(values) or None)


def run_checks(profile: str, racers: int | None = None) -> SpinSummary:
    """Check every model with the profile's racers (``ci``: 5, ``deep``: 7) or ``racers``.

    When Spin or gcc is missing, returns ``available=False``, the reason and no results, and
    ``passed=False``: nothing was shown.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    count = PROFILES[profile] if racers is None else racers
    models = build_models(count)  # before looking for Spin: bad racers fail the same everywhere
    reason = spin_unavailable_reason()
    if reason is not None:
        return SpinSummary(
            available=False, reason=reason, profile=profile, racers=count, models=[], passed=False
        )
    results = [result for model in models for result in check_model(model)]
    return SpinSummary(
        available=True,
        reason=None,
        profile=profile,
        racers=count,
        models=results,
        passed=bool(results) and all(result["ok"] for result in results),
    )


SCENARIOS_OF_MODEL: Final[Mapping[str, tuple[SpecScenario, ...]]] = MappingProxyType(
    {
        "terminal_cas": (SUCCESS_WINS, BUDGET_WINS),
        "callbacks": (CLIENT_DISCONNECTS,),
        "budget": (PER_TOOL,),
        "budget_unheld": (PER_TOOL,),
        # A run tree: its reservations at every level, its cascade (a cancel stops the children's
        # work) and one ending per run.
        "tree": (PER_TOOL, CLIENT_DISCONNECTS, BUDGET_WINS),
    }
)
"""The spec scenarios each model's properties exercise (a seeded-bug variant, the same)."""


def _base(name: str) -> str:
    base = name.removesuffix("_seeded_bug")
    # Every seeded-bug variant of the run tree is charged to the tree's scenarios.
    return "tree" if base.startswith("tree_") else base


def _counterexample(result: ModelResult) -> Counterexample:
    """Why a property result is not ok, with its trail when pan wrote one."""
    model, prop = result["name"], result["property"]
    if result["detail"] is not None:
        message = f"{model}: {prop}: no verdict ({result['detail']})"
    elif result["expected_violation"]:
        message = f"{model}: Spin did not refute {prop} in the seeded-bug model"
    else:
        message = f"{model}: {prop} is violated ({result['errors']} errors)"
    steps = result["trail"]
    return Counterexample.of(
        "spin",
        message,
        steps,
        disagreement=len(steps) - 1 if steps else None,
        model=f"{prop} holds" if steps else None,
        runtime=result["final"] if steps else None,
        replay=(
            f"render it with diagnosis_harness.modelcheck._spin.build_models({result['racers']}), "
            f"then: spin -a {model}.pml && gcc -O0 -o pan pan.c && ./pan -a -N {prop} "
            f"&& spin -t -p {model}.pml"
        ),
    )


def run_spin(
    profile: str,
    racers: int | None = None,
    *,
    tick: Callable[[str, int, int | None], None] | None = None,
) -> CheckResult:
    """:func:`run_checks` as a typed result: each property credited to its model's scenarios,
    a failure charged to them with the Spin trail. ``tick`` is told once the models are
    checked (Spin reports nothing in between)."""
    summary = run_checks(profile, racers)
    if tick is not None:
        tick("models", 1, 1)
    if not summary["available"]:
        return CheckResult(
            name="spin",
            kind="spin",
            passed=False,
            summary=f"unavailable: {summary['reason']}",
            problems=(f"Spin is unavailable: {summary['reason']}",),
            figures=(("racers", summary["racers"]),),
        )
    tally = ScenarioTally("properties")
    for result in summary["models"]:
        pairs = SCENARIOS_OF_MODEL.get(_base(result["name"]), ())
        if result["ok"]:
            tally.count(pairs)
        else:
            tally.charge(pairs, _counterexample(result))
    models = summary["models"]
    real = [r for r in models if not r["expected_violation"]]
    seeded = [r for r in models if r["expected_violation"]]
    stored = sum(r["states_stored"] or 0 for r in models)
    proved = sum(1 for r in real if r["ok"])
    refuted = sum(1 for r in seeded if r["ok"])
    return CheckResult(
        name="spin",
        kind="spin",
        passed=summary["passed"],
        summary=(
            f"{summary['racers']} racers: {proved}/{len(real)} properties proved, "
            f"{refuted}/{len(seeded)} seeded bugs refuted, {stored:,} states stored: "
            f"{'ok' if summary['passed'] else 'FAILED'}"
        ),
        scenarios=tally.results(),
        figures=(
            ("racers", summary["racers"]),
            ("properties_proved", proved),
            ("properties", len(real)),
            ("seeded_bugs_refuted", refuted),
            ("seeded_bugs", len(seeded)),
            ("states_stored", stored),
        ),
    )
