"""The run's races under the deterministic scheduler: every schedule of two and three actors,
Hypothesis-chosen schedules of four and six, and the unlocked variant of each, which must fail.

Each schedule builds a fresh run whose lock is a :class:`SchedLock`; the scenario's invariant is
checked after the schedule completes (see :mod:`diagnosis_harness.modelcheck._scheduler`).
"""

from __future__ import annotations

import ast
import itertools
from typing import TYPE_CHECKING

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from diagnosis_harness._local_run import LocalRun
from diagnosis_harness.conformance.suite._support import BUDGETS, DEADLINE, PRIMITIVES, TERMINAL
from diagnosis_harness.modelcheck._planted import replaceable_terminal
from diagnosis_harness.modelcheck._race_checks import RaceCheck, plan, replay_schedule, run_checks
from diagnosis_harness.modelcheck._races import (
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
from diagnosis_harness.modelcheck._scheduler import InvariantViolation, SchedLock, Scheduler
from diagnosis_harness.modelcheck._schedules import explore_schedules as explore
from diagnosis_harness.modelcheck._schedules import search_schedules as search
from diagnosis_harness.modelcheck._spec_scenarios import CAPACITY as CAPACITY_SCENARIO

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


SUCCESS_WINS = pytest.mark.spec(TERMINAL, "Success wins a terminal race")
BUDGET_WINS = pytest.mark.spec(TERMINAL, "Budget exhaustion wins a terminal race")
CLIENT_DISCONNECTS = pytest.mark.spec(DEADLINE, "Client disconnects")
PER_TOOL = pytest.mark.spec(BUDGETS, "Per-Tool budget is exhausted")
BYTE_LIMIT = pytest.mark.spec(PRIMITIVES, "Run byte limit would be exceeded")
TOKENS = pytest.mark.spec(BUDGETS, "Actual Token usage exceeds the limit")

# Every schedule of every race is enumerated by the deterministic scheduler, which decides the
# interleaving itself: the outcome does not depend on the Python version, so CI runs these once
# (tox -e e2e). test_scheduler.py, which checks the scheduler itself, runs on every version.
pytestmark = [pytest.mark.model_check, pytest.mark.version_independent]


def _marks(racers: Sequence[str]) -> list[pytest.MarkDecorator]:
    marks = []
    if "succeed" in racers:
        marks.append(SUCCESS_WINS)
    if "budget" in racers:
        marks.append(BUDGET_WINS)
    if "cancel_client" in racers:
        marks.append(CLIENT_DISCONNECTS)
    return marks


PAIRS = [
    pytest.param(pair, marks=_marks(pair), id="+".join(pair))
    for pair in itertools.combinations(RACERS, 2)
]
TRIPLES = [
    pytest.param(triple, marks=_marks(triple), id="+".join(triple))
    for triple in (
        ("succeed", "fail", "cancel_user"),  # the spec's "success wins" race
        ("budget", "fail", "deadline"),  # the spec's "budget exhaustion wins" race
        ("cancel_client", "deadline", "budget"),
    )
]


def _assert_clean(scenario: Scenario, *, release_points: bool = False) -> set[str]:
    """Every schedule of ``scenario`` with the real lock keeps its invariant; the outcomes seen."""
    result = explore(scenario, release_points=release_points)
    assert result.complete
    assert result.violations == 0, (result.first_violation, result.first_violation_trace)
    assert result.schedules == sum(result.outcomes.values()) > 1
    return set(result.outcomes)


# -- N racers finishing one run -------------------------------------------------------------------


@pytest.mark.parametrize("release_points", [False, True], ids=["sections", "release-points"])
@pytest.mark.parametrize("racers", PAIRS)
def test_every_schedule_of_two_racers_gives_one_outcome_and_one_winner(
    racers: tuple[str, str], release_points: bool
) -> None:
    """Any two ways of ending one run: one terminal outcome, one winner, each callback once.

    And each racer wins in some schedule: the enumeration reaches both orders.
    """
    assert _assert_clean(terminal_race(*racers), release_points=release_points) == set(racers)


@pytest.mark.parametrize("racers", TRIPLES)
def test_every_schedule_of_three_racers_gives_one_outcome_and_one_winner(
    racers: tuple[str, str, str],
) -> None:
    """Includes every schedule where success (or budget exhaustion) is recorded first: the later
    finish attempts then report ``changed=False`` and see the same ``RunTermination`` (state,
    reason, timestamp), the cancel returns False, and the callbacks ran once, for the winner."""
    assert _assert_clean(terminal_race(*racers)) == set(racers)


@SUCCESS_WINS
@BUDGET_WINS
@CLIENT_DISCONNECTS
@given(st.data())
def test_six_racers_under_hypothesis_chosen_schedules(data: st.DataObject) -> None:
    """``succeed``, ``fail``, two cancels, a deadline check and a budget refusal, all at once."""
    winner = terminal_race(*RACERS).run(lambda runnable: data.draw(st.sampled_from(runnable)))
    event(f"winner: {winner}")


# -- callback registration racing cancellation ----------------------------------------------------


@CLIENT_DISCONNECTS
@pytest.mark.parametrize(
    ("registrars", "per_registrar"), [(1, 1), (1, 2), (2, 1)], ids=["1x1", "1x2", "2x1"]
)
def test_every_schedule_of_registration_racing_a_disconnect_runs_each_callback_once(
    registrars: int, per_registrar: int
) -> None:
    """Early callbacks run on the cancelling thread, late ones inline; none twice, none lost;
    later Model and Tool boundaries are rejected and the run is CANCELLED once."""
    outcomes = _assert_clean(registration_race(registrars, per_registrar))
    callbacks = registrars * per_registrar
    assert {"0 late", f"{callbacks} late"} <= outcomes  # all early, and all late, both reached


# -- per-Tool and total reservations racing -------------------------------------------------


@PER_TOOL
@pytest.mark.parametrize(
    ("plans", "tool_calls", "per_tool_calls", "exhausted"),
    [
        pytest.param([["a"], ["a"]], 2, 1, {"per_tool_calls"}, id="same-tool"),
        pytest.param([["a", "b"], ["b"]], 2, 2, {"tool_calls"}, id="total"),
        pytest.param(
            [["a"], ["a"], ["b"]], 2, 1, {"per_tool_calls", "tool_calls"}, id="both-limits"
        ),
        pytest.param([["a"], ["b"]], 2, 1, {"all granted"}, id="within"),
    ],
)
def test_every_schedule_of_racing_reservations_keeps_the_counters_exact(
    plans: list[list[str]], tool_calls: int, per_tool_calls: int, exhausted: set[str]
) -> None:
    """Never over-reserved, total == sum per Tool == granted calls, refusals reserve nothing,
    and a refusal ends the run as BUDGET_EXHAUSTED on a limit that is really reached."""
    scenario = reservation_race(plans, tool_calls=tool_calls, per_tool_calls=per_tool_calls)
    assert _assert_clean(scenario) == exhausted


@PER_TOOL
@pytest.mark.parametrize(
    ("calls", "limit", "outcomes"),
    [
        pytest.param([2, 1], 2, {"exhausted"}, id="past-the-limit"),
        pytest.param([2, 2], 4, {"all granted"}, id="within"),
    ],
)
def test_every_schedule_of_repeated_model_call_reservations_loses_no_update(
    calls: list[int], limit: int, outcomes: set[str]
) -> None:
    """An actor's second reservation is the plain granted path: no update lost, none over."""
    assert _assert_clean(model_call_race(calls, limit=limit)) == outcomes


@PER_TOOL
@pytest.mark.parametrize("plan", [["a", "b"], ["a", "a", "b"]], ids=["two-tools", "repeat"])
def test_every_schedule_of_snapshots_during_reservations_sees_one_decision(
    plan: list[str],
) -> None:
    """A snapshot taken while Tool calls are reserved is never torn: total == sum per Tool."""
    assert _assert_clean(snapshot_race(plan)) == {"consistent"}


# -- capacity reservations racing -----------------------------------------------------------------


@BYTE_LIMIT
@pytest.mark.parametrize(
    ("sizes", "limit", "usages"),
    [
        pytest.param([[3], [3]], 5, {"used 3"}, id="one-fits"),
        pytest.param([[2, 3], [3]], 5, {"used 5"}, id="sequence"),
        pytest.param([[3], [2], [2]], 5, {"used 4", "used 5"}, id="three"),
    ],
)
def test_every_schedule_of_racing_capacity_reservations_stays_within_the_limit(
    sizes: list[list[int]], limit: int, usages: set[str]
) -> None:
    """Never above the limit, used == sum of the accepted, every refusal justified."""
    assert _assert_clean(capacity_race(sizes, limit=limit)) == usages


# -- usage reports past a limit racing another ending ---------------------------------------------

USAGE_RACES = [
    pytest.param(("usage_in", "cancel"), id="usage+cancel"),
    pytest.param(("usage_in", "usage_out"), id="usage+usage"),
]


@TOKENS
@pytest.mark.parametrize("release_points", [False, True], ids=["sections", "release-points"])
@pytest.mark.parametrize("racers", USAGE_RACES)
def test_every_schedule_of_a_usage_report_past_a_limit_racing_an_ending_ends_once(
    racers: tuple[str, str], release_points: bool
) -> None:
    """The report's read-modify-write of the counters, the budget and the ending it decides is
    one locked section: without it, a report that passes a limit rewrites the ending another
    racer recorded meanwhile (or the limit it named)."""
    outcomes = _assert_clean(usage_race(*racers), release_points=release_points)
    if "cancel" in racers:
        assert outcomes == {"CANCELLED input_tokens", "BUDGET_EXHAUSTED input_tokens"}
    else:
        assert outcomes == {"BUDGET_EXHAUSTED input_tokens", "BUDGET_EXHAUSTED output_tokens"}


# -- money holds racing settles and the run's ending ---------------------------------------------


@PER_TOOL
@pytest.mark.parametrize(
    ("scenario", "outcomes"),
    [
        pytest.param(
            money_race([10, 10], hold=10, limit=15),
            {"1 ran, BUDGET_EXHAUSTED on cost"},
            id="one-fits",
        ),
        pytest.param(
            money_race([5, 10], hold=10, limit=15),
            {"2 ran, RUNNING", "1 ran, BUDGET_EXHAUSTED on cost"},
            id="settled-below-frees-money",
        ),
        pytest.param(
            money_race([15, 10], hold=10, limit=20),
            {"2 ran, BUDGET_EXHAUSTED on cost", "1 ran, BUDGET_EXHAUSTED on cost"},
            id="settled-above-exhausts",
        ),
        pytest.param(
            money_race([10, 10], hold=10, limit=15, ender=True),
            {"1 ran, BUDGET_EXHAUSTED on cost", "1 ran, CANCELLED", "0 ran, CANCELLED"},
            id="racing-the-end",
        ),
        pytest.param(
            money_race([10, 10, 10], hold=10, limit=20, watch=False),
            {"2 ran, BUDGET_EXHAUSTED on cost"},
            id="three-payers",
        ),
    ],
)
def test_every_schedule_of_holds_racing_settles_keeps_the_money_exact(
    scenario: Scenario, outcomes: set[str]
) -> None:
    """Settled + held within the limit but by a settle's actual above its hold (which exhausts
    the run), nothing held in the end -- a hold granted before the run ended settles after it --
    the money settled is the sum of the actuals, a refused hold reserves nothing."""
    assert _assert_clean(scenario) == outcomes


@PER_TOOL
@given(st.data())
def test_sixteen_parallel_ten_cent_calls_under_a_dollar_run_exactly_ten(
    data: st.DataObject,
) -> None:
    """16 parallel calls of a paid Tool ($0.10 each) under $1.00: whatever the schedule, exactly
    10 run and settle, the other 6 are refused on COST, holding nothing."""
    label = paid_tool_race(16, price=10, limit=100).run(
        lambda runnable: data.draw(st.sampled_from(runnable))
    )
    assert label == "10 ran, BUDGET_EXHAUSTED on cost"


# -- a run tree: the parent's cancel racing its children's reservations ------------------------


@CLIENT_DISCONNECTS
@pytest.mark.parametrize(
    ("calls", "hold"), [([1, 1, 1], 0), ([2, 1, 1], 10)], ids=["three-children", "paid"]
)
def test_a_parent_cancelled_while_its_children_reserve_grants_them_nothing_after(
    calls: list[int], hold: int
) -> None:
    """Three children reserving Model calls (holding the parent's money, or not) while their
    parent is cancelled, under Hypothesis-chosen schedules: nothing granted after the parent's
    ending, every child ended by it, each callback once, the children's before the parent's;
    the parent counted exactly the calls granted. (Every schedule of two children is 1,374:
    the deep profile enumerates them.)"""
    result = search(tree_cancel_race(calls, hold=hold), max_examples=40)
    assert result.violations == 0, (result.first_violation, result.first_violation_trace)
    assert result.schedules == 40
    granted = {int(label.split()[0]) for label in result.outcomes}
    assert 0 in granted  # the cancel came first
    assert max(granted) > 0  # a child reserved before it


@CLIENT_DISCONNECTS
def test_the_unlocked_tree_race_grants_a_child_a_call_after_its_parent_ended() -> None:
    result = search(tree_cancel_race([1, 1, 1]), locked=False, max_examples=40)
    assert result.violations > 0
    assert result.first_violation is not None


@CLIENT_DISCONNECTS
def test_the_tree_race_catches_a_cascade_that_skips_a_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planted defect with the real lock: the parent's ending leaves its last child live."""
    cancel_by = LocalRun.__dict__["_cancel_by_locked"]

    def skipping(self: LocalRun, origin: LocalRun, at_ns: int) -> object:
        if self.run_id == "child-2":
            return []  # BUG: this child outlives its ended parent
        return cancel_by(self, origin, at_ns)

    monkeypatch.setattr(LocalRun, "_cancel_by_locked", skipping)
    result = search(tree_cancel_race([1, 1, 1]), max_examples=20)
    assert result.violations > 0
    assert result.first_violation is not None
    assert "child-2 outlived its parent" in result.first_violation


# -- the unlocked variants: the checks must find each race ---------------------------------------

UNLOCKED = [
    pytest.param(terminal_race("succeed", "fail"), marks=SUCCESS_WINS, id="succeed+fail"),
    pytest.param(terminal_race("budget", "fail"), marks=BUDGET_WINS, id="budget+fail"),
    pytest.param(
        terminal_race("cancel_client", "deadline"), marks=CLIENT_DISCONNECTS, id="cancel+deadline"
    ),
    pytest.param(
        terminal_race("succeed", "fail", "cancel_user"), marks=SUCCESS_WINS, id="three-racers"
    ),
    pytest.param(registration_race(2, 1), marks=CLIENT_DISCONNECTS, id="registration"),
    pytest.param(
        reservation_race([["a"], ["a"]], tool_calls=2, per_tool_calls=1),
        marks=PER_TOOL,
        id="per-tool",
    ),
    pytest.param(
        reservation_race([["a", "b"], ["b"]], tool_calls=2, per_tool_calls=2),
        marks=PER_TOOL,
        id="total",
    ),
    pytest.param(model_call_race([2, 1], limit=2), marks=PER_TOOL, id="model-calls"),
    pytest.param(snapshot_race(["a", "b"]), marks=PER_TOOL, id="snapshot"),
    pytest.param(capacity_race([[3], [3]], limit=5), marks=BYTE_LIMIT, id="capacity"),
    pytest.param(usage_race("usage_in", "cancel"), marks=TOKENS, id="usage+cancel"),
    pytest.param(usage_race("usage_in", "usage_out"), marks=TOKENS, id="usage+usage"),
    pytest.param(money_race([10, 10], hold=10, limit=15), marks=PER_TOOL, id="money"),
    pytest.param(
        money_race([10, 10], hold=10, limit=15, ender=True), marks=PER_TOOL, id="money+cancel"
    ),
]


@pytest.mark.parametrize("release_points", [False, True], ids=["sections", "release-points"])
@pytest.mark.parametrize("scenario", UNLOCKED)
def test_the_enumerator_finds_the_race_of_each_unlocked_variant(
    scenario: Scenario, release_points: bool
) -> None:
    """``SchedLock(exclusive=False)`` as the run's lock: some schedule breaks the invariant."""
    result = explore(
        scenario, locked=False, release_points=release_points, stop_at_first_violation=True
    )
    assert result.violations == 1, "no schedule of the unlocked variant broke the invariant"
    assert result.first_violation_trace  # the schedule that did, for the failure message


@PER_TOOL
def test_hypothesis_finds_the_race_of_sixteen_unlocked_paid_calls() -> None:
    result = search(paid_tool_race(16, price=10, limit=100), locked=False, max_examples=50)
    assert result.violations > 0
    assert result.first_violation is not None


@SUCCESS_WINS
@BUDGET_WINS
def test_hypothesis_finds_the_race_of_the_unlocked_six_racer_run() -> None:
    result = search(terminal_race(*RACERS), locked=False, max_examples=100)
    assert result.violations > 0
    assert result.first_violation is not None
    assert "claim the win" in result.first_violation


def test_the_command_lines_checks_pass_and_find_every_unlocked_race() -> None:
    result = run_checks("ci")
    assert result.passed, [c.text() for c in result.counterexamples]
    figures = dict(result.figures)
    races = plan("ci")
    assert figures["races"] == len(races) > 0
    assert figures["races_found_in_unlocked_variants"] == figures["races"]
    assert isinstance(figures["schedules"], int)
    assert figures["schedules"] > 1_000
    actors = {check.scenario.actors for check in races}
    assert {2, 3} <= actors
    assert max(actors) >= 4
    # Every race names its spec scenario, and each of those is credited with its schedules.
    pairs = {(c.scenario.requirement, c.scenario.spec_scenario) for c in races}
    assert {r.scenario for r in result.scenarios} == pairs
    assert all(r.passed and r.unit == "schedules" and r.checked > 0 for r in result.scenarios)
    with pytest.raises(ValueError, match="profile"):
        run_checks("fast")


def test_a_failing_schedule_is_charged_to_its_race_scenario_only() -> None:
    terminal = terminal_race("succeed", "fail")
    capacity = capacity_race([[3], [3]], limit=5)
    with replaceable_terminal():  # a later finish replaces the first: two racers win
        result = run_checks("ci", checks=[RaceCheck(terminal), RaceCheck(capacity)])
        failed = result.scenario((terminal.requirement, terminal.spec_scenario))
        assert failed is not None
        counterexample = failed.counterexample
        assert counterexample is not None
        # The schedule replays: the same violation, under the same planted bug.
        replay = dict(_replay_arguments(counterexample.replay))
        with pytest.raises(InvariantViolation, match="claim the win"):
            replay_schedule(terminal.name, replay["choices"])
    assert not result.passed
    passed = result.scenario((capacity.requirement, capacity.spec_scenario))
    assert passed is not None
    assert passed.passed
    assert passed.checked > 0
    assert counterexample.kind == "schedule"
    assert counterexample.message.startswith("terminal[succeed+fail]: 2 racers claim the win")
    at = counterexample.at
    assert at is not None
    assert at.action == "the invariant is checked"
    assert at.index == len(counterexample.steps) - 1 > 0
    assert at.runtime is not None
    assert "claim the win" in at.runtime
    assert all(": " in step.action for step in counterexample.steps[:-1])  # "actor: site"


def _powerless_race() -> Scenario:
    """Two actors that each take the lock and touch only their own counter: nothing to race, so
    even without the lock no schedule breaks the invariant."""

    def build(
        scheduler: Scheduler, lock: SchedLock
    ) -> tuple[list[Callable[[], object]], Callable[[], str]]:
        counts = [0, 0]

        def actor(index: int) -> Callable[[], None]:
            def act() -> None:
                with lock:
                    counts[index] += 1

            return act

        def check() -> str:
            if counts != [1, 1]:
                raise InvariantViolation(f"counts {counts}")
            return "ok"

        return [actor(0), actor(1)], check

    return Scenario("powerless", *CAPACITY_SCENARIO, ("a", "b"), build)


def test_a_race_check_whose_unlocked_variant_never_breaks_fails() -> None:
    """Schedules that never break the unlocked variant do not reach the race: however clean the
    locked run, the check fails, charged to its scenario, and says why."""
    powerless = _powerless_race()
    assert _assert_clean(powerless) == {"ok"}
    result = run_checks("ci", checks=[RaceCheck(powerless)])
    assert not result.passed
    assert result.details == ("FAILED: powerless",)
    assert dict(result.figures)["races_found_in_unlocked_variants"] == 0
    [charged] = result.scenarios
    assert charged.scenario == CAPACITY_SCENARIO
    assert not charged.passed
    assert charged.counterexample is not None
    assert charged.counterexample.message.startswith("powerless: without the lock no schedule")
    assert "do not reach the race" in charged.counterexample.message


def _replay_arguments(replay: str) -> list[tuple[str, list[int]]]:
    """The choices out of a ``replay_schedule(name, [choices], ...)`` line."""
    call = ast.parse(replay.rsplit("; ", maxsplit=1)[-1]).body[0]
    assert isinstance(call, ast.Expr)
    assert isinstance(call.value, ast.Call)
    choices = ast.literal_eval(call.value.args[1])
    assert isinstance(choices, list)
    return [("choices", choices)]
