"""The race checks ``model-check`` and the conformance suite run, per profile, with typed results.

Theory of operation. Every race scenario of the profile's plan runs twice: with the real lock
(no schedule may violate its invariant) and with the deliberately unlocked variant until the
first violation (which must be found: it shows the schedules reach the race). ``ci`` (seconds,
derandomized): every two- and three-actor scenario exhaustively, the two-actor ones also with a
scheduling point after each release, and the four- and six-racer terminal races under 50
Hypothesis-chosen schedules each. ``dev``: the same with random Hypothesis seeds. ``deep``
(minutes): more scenarios, four actors exhaustively, release points for every two- and
three-actor scenario, and 1,000-2,000 Hypothesis schedules of four to sixteen actors.

Money: paid Tool calls holding a worst case and settling an actual below, at or above it race
for one money limit, two at a time exhaustively (once against a cancel), three payers in
``deep`` only, and sixteen $0.10 calls under $1.00 under Hypothesis-chosen schedules: exactly
ten run.

A run tree: a parent's cancel racing its children's Model-call reservations (nothing granted
after the parent's ending, every child ended by it, each callback once, the children's before
the parent's), three children under 30 Hypothesis-chosen schedules in ``ci``; in ``deep``, every
schedule of two children (with and without money holds) and 1,000 schedules of three.

Each race names one spec scenario; :func:`run_checks` charges a race's failure to it alone, with
the violating schedule as a :class:`~._counterexample.Counterexample` that
:func:`replay_schedule` replays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final

from ._counterexample import Counterexample
from ._races import (
    RACERS,
    Scenario,
    capacity_race,
    model_call_race,
    money_race,
    paid_tool_race,
    registration_race,
    reservation_race,
    snapshot_race,
    terminal_race,
    tree_cancel_race,
    usage_race,
)
from ._results import CheckResult, ScenarioTally
from ._schedules import explore_schedules, search_schedules

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ._schedules import ScheduleExploration

__all__ = ["PROFILES", "RaceCheck", "plan", "replay_schedule", "run_checks"]

PROFILES: Final = ("ci", "dev", "deep")


@final
@dataclass(frozen=True, slots=True)
class RaceCheck:
    """One entry of a profile: a race, how its schedules are chosen, and how many."""

    scenario: Scenario
    examples: int | None = None  # None: every schedule (exhaustive); else Hypothesis examples
    release_points: bool = False

    @property
    def label(self) -> str:
        return self.scenario.name + (" with release points" if self.release_points else "")


def plan(profile: str) -> list[RaceCheck]:
    """The race checks of ``profile`` (``ci``, ``dev`` or ``deep``), in order."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    two = [
        terminal_race("succeed", "fail"),
        terminal_race("budget", "fail"),
        terminal_race("cancel_client", "deadline"),
        terminal_race("cancel_user", "cancel_client"),
        registration_race(1, 2),
        reservation_race([["a"], ["a"]], tool_calls=2, per_tool_calls=1),
        reservation_race([["a", "b"], ["b"]], tool_calls=2, per_tool_calls=2),
        model_call_race([2, 1], limit=2),
        snapshot_race(["a", "b"]),
        capacity_race([[3], [3]], limit=5),
        capacity_race([[2, 3], [3]], limit=5),
        usage_race("usage_in", "cancel"),
        usage_race("usage_in", "usage_out"),
    ]
    three = [
        terminal_race("succeed", "fail", "cancel_user"),
        terminal_race("budget", "fail", "deadline"),
        registration_race(2, 1),
        reservation_race([["a"], ["a"], ["b"]], tool_calls=2, per_tool_calls=1),
        capacity_race([[3], [2], [2]], limit=5),
    ]
    # Money: holds racing settles (an actual below, at and above its hold) and the run's ending.
    # Not with release points in ci: a payer's four points make them tens of thousands.
    money_two = [
        money_race([10, 10], hold=10, limit=15),
        money_race([5, 10], hold=10, limit=15),
        money_race([15, 10], hold=10, limit=20),
    ]
    money_three = [money_race([10, 10], hold=10, limit=15, ender=True)]
    paid = paid_tool_race(16, price=10, limit=100)  # $0.10 calls under $1.00: exactly 10 run
    # A run tree: the parent's cancel racing three children's reservations. Every schedule of
    # even two children with one call each is 1,374 (the cascade passes a scheduling point per
    # run), so CI draws a few under Hypothesis and deep enumerates the small trees.
    tree = tree_cancel_race([1, 1, 1])
    every_racer = terminal_race(*RACERS)
    four = terminal_race("succeed", "fail", "deadline", "budget")
    if profile != "deep":
        return [
            *(RaceCheck(s) for s in two + three + money_two + money_three),
            *(RaceCheck(s, release_points=True) for s in two),
            RaceCheck(every_racer, examples=50),
            RaceCheck(four, examples=50),
            RaceCheck(paid, examples=50),
            RaceCheck(tree, examples=30),
        ]
    raced = {frozenset(s.actor_names) for s in two}
    names = list(RACERS)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    two += [terminal_race(a, b) for a, b in pairs if frozenset((a, b)) not in raced]
    three += [
        terminal_race("succeed", "cancel_client", "budget"),
        terminal_race("fail", "cancel_user", "deadline"),
        registration_race(1, 3),
        reservation_race([["a", "b"], ["a"], ["b"]], tool_calls=2, per_tool_calls=1),
        capacity_race([[2, 3], [3], [1]], limit=5),
    ]
    fours = [
        four,
        registration_race(3, 1),
        reservation_race([["a"], ["a"], ["b"], ["b"]], tool_calls=3, per_tool_calls=1),
        capacity_race([[3], [2], [2], [1]], limit=5),
    ]
    # Three payers for two holds' money, every schedule: deep only. Its 2,000 schedules were a
    # quarter of the CI plan's time, and the CI plan runs in every run of the bundled suite; in
    # CI, two payers race every schedule and sixteen race under Hypothesis-chosen ones.
    money_three += [
        money_race([10, 10, 10], hold=10, limit=20, watch=False),
        money_race([15, 5, 10], hold=10, limit=20, watch=False),
    ]
    trees = [
        tree_cancel_race([1, 1]),
        tree_cancel_race([2, 1]),
        tree_cancel_race([1, 1], hold=10),
    ]
    return [
        *(RaceCheck(s) for s in two + three + fours + money_two + money_three + trees),
        *(RaceCheck(s, release_points=True) for s in two + three),
        *(RaceCheck(s, release_points=True) for s in money_two),
        RaceCheck(paid, examples=1_000),
        RaceCheck(every_racer, examples=2_000),
        RaceCheck(four, examples=2_000),
        RaceCheck(
            terminal_race("cancel_user", "cancel_client", "deadline", "budget"), examples=2_000
        ),
        RaceCheck(registration_race(4, 2), examples=1_000),
        RaceCheck(
            reservation_race([["a", "b"], ["a"], ["b"], ["a"]], tool_calls=3, per_tool_calls=2),
            examples=1_000,
        ),
        RaceCheck(capacity_race([[2, 3], [3], [1], [4]], limit=6), examples=1_000),
        RaceCheck(tree, examples=1_000),
        RaceCheck(tree_cancel_race([2, 2, 2], hold=10), examples=1_000),
    ]


def _schedule_counterexample(check: RaceCheck, locked: ScheduleExploration) -> Counterexample:
    """The first schedule that broke the invariant with the real lock, replayable."""
    name = check.scenario.name
    actions = [*locked.first_violation_trace, "the invariant is checked"]
    return Counterexample.of(
        "schedule",
        f"{name}: {locked.first_violation}",
        actions,
        disagreement=len(actions) - 1,
        model="the invariant holds",
        runtime=locked.first_violation,
        replay=(
            "from diagnosis_harness.modelcheck import replay_schedule; "
            f"replay_schedule({name!r}, {list(locked.first_violation_choices)!r}, "
            f"release_points={check.release_points})"
        ),
    )


def _powerless(check: RaceCheck, unlocked: ScheduleExploration) -> Counterexample:
    """No counterexample to show: the unlocked variant never broke, so the schedules miss the
    race; what to run to see it again."""
    name = check.scenario.name
    return Counterexample.of(
        "schedule",
        f"{name}: without the lock no schedule of {unlocked.schedules:,} broke the invariant, "
        "so these schedules do not reach the race",
        [],
        disagreement=None,
        replay=(
            "from diagnosis_harness.modelcheck._race_checks import run_checks; run_checks('ci')"
        ),
    )


def _run_one(
    check: RaceCheck, derandomize: bool
) -> tuple[ScheduleExploration, ScheduleExploration]:
    scenario, examples, release = check.scenario, check.examples, check.release_points
    if examples is None:
        checked = explore_schedules(scenario, release_points=release)
        broken = explore_schedules(
            scenario, locked=False, release_points=release, stop_at_first_violation=True
        )
    else:
        checked = search_schedules(scenario, max_examples=examples, derandomize=derandomize)
        broken = search_schedules(
            scenario, locked=False, max_examples=examples, derandomize=derandomize
        )
    return checked, broken


def run_checks(
    profile: str,
    *,
    checks: Sequence[RaceCheck] | None = None,
    tick: Callable[[str, int, int | None], None] | None = None,
) -> CheckResult:
    """Run the race checks of ``profile`` (or ``checks``); the typed result, per scenario.

    ``tick("races", done, total)`` is called after each race (for a progress bar).
    """
    todo = plan(profile) if checks is None else list(checks)
    started = time.perf_counter()
    tally = ScenarioTally("schedules")
    schedules = found = 0
    failed: list[str] = []
    for number, check in enumerate(todo, start=1):
        checked, broken = _run_one(check, derandomize=profile == "ci")
        pair = (check.scenario.requirement, check.scenario.spec_scenario)
        schedules += checked.schedules + broken.schedules
        found += broken.violations > 0
        if checked.violations:
            tally.charge([pair], _schedule_counterexample(check, checked), checked.schedules)
            failed.append(check.label)
        elif not broken.violations:
            tally.charge([pair], _powerless(check, broken), checked.schedules)
            failed.append(check.label)
        else:
            tally.count([pair], checked.schedules)
        if tick is not None:
            tick("races", number, len(todo))
    seconds = time.perf_counter() - started
    verdict = "ok" if not failed else f"{len(failed)} failed"
    return CheckResult(
        name="scheduler",
        kind="scheduled",
        passed=not failed,
        summary=(
            f"{len(todo)} races, {schedules:,} schedules; the race found in "
            f"{found}/{len(todo)} unlocked variants: {verdict}"
        ),
        scenarios=tally.results(),
        details=tuple(f"FAILED: {label}" for label in failed),
        figures=(
            ("profile", profile),
            ("races", len(todo)),
            ("schedules", schedules),
            ("races_found_in_unlocked_variants", found),
            ("seconds", round(seconds, 3)),
        ),
    )


def replay_schedule(
    name: str, choices: Sequence[int], *, release_points: bool = False, locked: bool = True
) -> str:
    """Run the race ``name`` (of any profile's plan) once, resuming the actor ``choices`` names
    at each choice point; its outcome's label, or the :class:`InvariantViolation`."""
    races = {check.scenario.name: check.scenario for p in PROFILES for check in plan(p)}
    if name not in races:
        raise ValueError(f"unknown race {name!r}: use one of {sorted(races)}")
    queue = list(choices)

    def choose(runnable: Sequence[int]) -> int:
        if not queue:
            raise ValueError(f"choices ran out; runnable {list(runnable)}")
        return queue.pop(0)

    return races[name].run(choose, locked=locked, release_points=release_points)
