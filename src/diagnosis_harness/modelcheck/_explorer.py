"""The exhaustive explorer: every reachable abstract state and every short event sequence.

Theory of operation. :func:`explore` runs two breadth-first searches against the real runtime,
each step driven through a :class:`~._probe.RunProbe` (the oracle):

* **run**: the abstract state of one run -- lifecycle and budget state, every counter capped at
  its limit + 1 with the limits set to 1-3, whether the clock has reached the deadline, the first
  reason, the exhausted dimension (in a terminal state the reservation counters are frozen and
  steer no guard any more, so the abstraction forgets them). Its events are success, failure,
  cancellation with each reason, the clock reaching the deadline, a gate check, a Model call, a
  call of each of two Tools, a byte reservation and two kinds of token usage report. Each state
  is represented by the shortest path to it; an edge replays that path on a fresh run and applies
  one event, so every check runs against real objects.
* **retry**: the abstract state of one execution of the executor -- policy, attempts so far, and
  the run's state at each gate -- over scripted attempts (success, a retryable and a
  never-retried failure, failures that cancel the run, pass its deadline, spend its last Model
  call or finish it before the next gate).

Then it runs every event sequence up to the depth from the initial state, for both, shortest
first. It does not stop at a disagreement: a failing sequence (or search edge) is recorded as a
:class:`~._counterexample.Counterexample` charged to the spec scenarios of the step that
disagreed (the probe's trail says which), its extensions are skipped (they would only repeat
it), and the search goes on. Each scenario's result holds the sequences that exercised it and
its first, shortest, counterexample. The rows taken are recorded whether checks pass or fail.
The model's answers come from :class:`~._models.MemoModels` (see there why).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, final

from .. import Boundary, BudgetLimits, CancellationReason, FailureKind
from ..pricing import from_units
from ._counterexample import Counterexample
from ._coverage import TransitionCoverage
from ._disagreement import Disagreement
from ._models import MemoModels
from ._probe import RunProbe
from ._probe_config import THRICE, ProbeConfig
from ._probe_config import policies_with_thrice as _policies
from ._probe_prediction import EXPLICIT_REASONS
from ._probe_script import Attempt, Effect
from ._results import CheckResult, ScenarioResult, ScenarioTally
from ._spec_scenarios import (
    BUDGET_WINS,
    CLIENT_DISCONNECTS,
    DEADLINE_BEFORE_TOOL,
    PER_TOOL,
    RETRY_CANCELLED,
    RETRY_TOOL_FAILS,
    RETRY_TRANSPORT,
    SUCCESS_WINS,
    TOKENS_EXCEED,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from .._generated.tables import RetryState
    from ._spec_scenarios import SpecScenario

__all__ = [
    "EXPLORE_CONFIG",
    "RETRY_ATTEMPTS",
    "RETRY_POLICIES",
    "RETRY_PRELUDES",
    "RUN_EVENTS",
    "SCENARIOS",
    "UNPRICED_CONFIG",
    "Exploration",
    "SearchFigures",
    "explore",
    "replay_execution",
    "replay_sequence",
]

SCENARIOS: Final[tuple[SpecScenario, ...]] = (
    SUCCESS_WINS,
    BUDGET_WINS,
    DEADLINE_BEFORE_TOOL,
    CLIENT_DISCONNECTS,
    PER_TOOL,
    TOKENS_EXCEED,
    RETRY_TRANSPORT,
    RETRY_TOOL_FAILS,
    RETRY_CANCELLED,
)
"""The spec scenarios the explorer's steps exercise (see ``_probe_scenarios.step_scenarios``)."""

_NS = 1_000_000_000
_TOOL_A = "search"
_TOOL_B = "fetch"

EXPLORE_LIMITS = BudgetLimits(
    model_calls=1,
    tool_calls=2,
    per_tool_calls=1,
    input_tokens=1,
    output_tokens=3,
    total_tokens=3,
    run_bytes=2,
    per_tool_overrides={_TOOL_B: 2},
    cost=from_units(7),
)
"""Small limits: every guard flips within two steps. (1, 0) twice passes the input limit,
(0, 3) twice the output limit, (1, 0) then (0, 3) only the total; search then search passes the
per-Tool limit, fetch twice then any Tool the total. Money, in picodollars: a Model call holds 5
and a Tool call 2 of the 7, so fetch twice then the Model call is refused on COST (as is a Tool
call after a Model call and a Tool call), and the settle's actual of 6 passes the limit beside
a Tool call's hold."""

EXPLORE_CONFIG = ProbeConfig(
    limits=EXPLORE_LIMITS,
    deadline_ns=10 * _NS,
    policies=_policies(),
    callbacks=1,
)

UNPRICED_CONFIG = dataclasses.replace(
    EXPLORE_CONFIG, limits=dataclasses.replace(EXPLORE_LIMITS, cost=None)
)
"""The explorer's run without its money limit (``explore(priced=False)``): the same events and
rows, nothing refused on money, so 796 run states rather than 1,886 and about a
third of the time. For checks about something other than money, such as the planted defects."""


def _config(priced: bool) -> ProbeConfig:
    return EXPLORE_CONFIG if priced else UNPRICED_CONFIG


def _replay_keywords(priced: bool) -> str:
    return "" if priced else ", priced=False"


RunEvent = tuple[str, "Callable[[RunProbe], object]"]

RUN_EVENTS: Final[tuple[RunEvent, ...]] = (
    ("succeed", RunProbe.succeed),
    ("fail", RunProbe.fail),
    *(
        (f"cancel({reason.name})", lambda probe, reason=reason: probe.cancel(reason))
        for reason in EXPLICIT_REASONS
    ),
    ("reach_deadline", RunProbe.reach_deadline),
    ("check(GUARD)", lambda probe: probe.check(Boundary.GUARD)),
    ("reserve_model_call", RunProbe.reserve_model),
    (f"reserve_tool_call({_TOOL_A})", lambda probe: probe.reserve_tool(_TOOL_A)),
    (f"reserve_tool_call({_TOOL_B})", lambda probe: probe.reserve_tool(_TOOL_B)),
    ("reserve_bytes(1)", lambda probe: probe.reserve_bytes(1)),
    ("record_usage(1, 0)", lambda probe: probe.record_usage(1, 0)),
    ("record_usage(0, 3)", lambda probe: probe.record_usage(0, 3)),
    ("settle(0, 3)", lambda probe: probe.settle(0, 3, 6)),
)
"""The run explorer's events: every way a run's state can change, each guard both ways."""

_RUN_EVENT_INDEX: Final = {name: index for index, (name, _) in enumerate(RUN_EVENTS)}

RETRY_POLICIES: Final = ("tool_call", "intent_router", THRICE.name)

RETRY_PRELUDES: Final[tuple[RunEvent, ...]] = (
    ("live", RunProbe.check_invariants),
    ("cancelled(SHUTDOWN)", lambda probe: probe.cancel(CancellationReason.SHUTDOWN)),
    ("deadline reached", RunProbe.reach_deadline),
    ("succeeded", RunProbe.succeed),
)
"""What happened to the run before the execution starts."""

RETRY_ATTEMPTS: Final[tuple[Attempt, ...]] = (
    Attempt(),
    Attempt(FailureKind.TRANSPORT),
    Attempt(FailureKind.BUSINESS_REJECTION),
    Attempt(FailureKind.TRANSPORT, Effect.CANCEL, CancellationReason.USER_REQUESTED),
    Attempt(FailureKind.TRANSPORT, Effect.PASS_DEADLINE),
    Attempt(FailureKind.TRANSPORT, Effect.MODEL_CALL),
    Attempt(FailureKind.RATE_LIMITED, Effect.FINISH_RUN),
)
"""The retry explorer's events: what each invocation of the operation does."""

_ATTEMPT_BY_TEXT: Final = {str(attempt): attempt for attempt in RETRY_ATTEMPTS}
_PRELUDE_INDEX: Final = {name: index for index, (name, _) in enumerate(RETRY_PRELUDES)}


@final
@dataclass(slots=True)
class SearchFigures:
    """What one search explored."""

    states: int = 0
    edges: int = 0
    sequences: int = 0
    steps: int = 0  # events applied to a real run, replays included
    failures: int = 0  # sequences (or edges) on which the runtime and the model disagreed


@final
@dataclass(frozen=True, slots=True)
class Exploration:
    """The explorer's result: figures per search, totals, the rows taken, and per scenario the
    sequences that exercised it and its shortest counterexample."""

    depth: int
    run: SearchFigures
    retry: SearchFigures
    coverage: TransitionCoverage
    seconds: float
    model_answers: int  # real python-statemachine events behind the memo
    scenarios: tuple[ScenarioResult, ...]
    unattributed: tuple[Counterexample, ...]  # failures of steps that exercise no scenario

    @property
    def states(self) -> int:
        return self.run.states + self.retry.states

    @property
    def edges(self) -> int:
        return self.run.edges + self.retry.edges

    @property
    def sequences(self) -> int:
        return self.run.sequences + self.retry.sequences

    @property
    def steps(self) -> int:
        return self.run.steps + self.retry.steps

    @property
    def failures(self) -> int:
        return self.run.failures + self.retry.failures

    @property
    def passed(self) -> bool:
        return self.failures == 0

    @property
    def counterexamples(self) -> tuple[Counterexample, ...]:
        """The first counterexample of each failed scenario, then the unattributed ones."""
        seen: list[Counterexample] = []
        for result in self.scenarios:
            if result.counterexample is not None and result.counterexample not in seen:
                seen.append(result.counterexample)
        return (*seen, *self.unattributed)

    def as_check(self) -> CheckResult:
        """This exploration as the ``model-check`` command's typed result."""
        verdict = "ok" if self.passed else f"{self.failures:,} failing sequences"
        summary = (
            f"depth {self.depth}: {self.states:,} states, {self.edges:,} edges, "
            f"{self.sequences:,} sequences, {self.steps:,} steps: {verdict}"
        )
        details = (
            f"run: {self.run.states:,} states, {self.run.edges:,} edges, "
            f"{self.run.sequences:,} sequences",
            f"retry: {self.retry.states:,} states, {self.retry.edges:,} edges, "
            f"{self.retry.sequences:,} sequences",
        )
        return CheckResult(
            name="explorer",
            kind="exhaustive",
            passed=self.passed,
            summary=summary,
            scenarios=self.scenarios,
            problems=tuple(c.message for c in self.unattributed),
            details=details,
            figures=(
                ("depth", self.depth),
                ("states", self.states),
                ("edges", self.edges),
                ("sequences", self.sequences),
                ("steps", self.steps),
                ("failing_sequences", self.failures),
                ("seconds", round(self.seconds, 3)),
            ),
        )


@final
class _Explorer:
    """Shared plumbing: fresh probes on one memo and one coverage object, the scenario tally."""

    def __init__(self, coverage: TransitionCoverage, *, priced: bool = True) -> None:
        self.memo = MemoModels()
        self.coverage = coverage
        self.priced = priced
        self.config = _config(priced)
        self.tally = ScenarioTally("sequences", SCENARIOS)
        self.unattributed: list[Counterexample] = []

    def probe(self) -> RunProbe:
        return RunProbe(self.config, models=self.memo, coverage=self.coverage)

    def passed(self, probe: RunProbe) -> None:
        self.tally.count(_exercised(probe))

    def failed(self, probe: RunProbe, counterexample: Counterexample) -> None:
        """Charge the failure to the scenarios of the step that disagreed, and to no other; a
        step that exercises no scenario leaves it unattributed (a problem of the check)."""
        step = probe.culprit
        culprit = frozenset() if step is None else step.scenarios
        charged = culprit
        self.tally.count(_exercised(probe) - charged)
        if charged:
            self.tally.charge(sorted(charged), counterexample)
        else:
            self.unattributed.append(counterexample)


def _exercised(probe: RunProbe) -> frozenset[SpecScenario]:
    return frozenset(pair for step in probe.trail for pair in step.scenarios)


def _has_failed_prefix(path: Sequence[object], failed: set[tuple[object, ...]]) -> bool:
    """Whether a proper prefix of ``path`` failed: the rest would only repeat it."""
    return bool(failed) and any(tuple(path[:k]) in failed for k in range(len(path)))


# -- the run search --------------------------------------------------------------------------------


def _sequence_counterexample(
    path: Sequence[int], position: int, error: Disagreement, *, priced: bool
) -> Counterexample:
    names = [RUN_EVENTS[event][0] for event in path]
    return Counterexample.of(
        "sequence",
        error.message,
        names,
        disagreement=position,
        model=error.model,
        runtime=error.runtime,
        replay=(
            "from diagnosis_harness.modelcheck import replay_sequence; "
            f"replay_sequence({names!r}{_replay_keywords(priced)})"
        ),
    )


def _run_replay(
    explorer: _Explorer, path: Sequence[int], figures: SearchFigures
) -> tuple[RunProbe, Counterexample | None]:
    """A fresh run driven along ``path``; the invariants are checked after its last event.

    Every proper prefix of ``path`` was itself explored (and checked, and passed) before: breadth
    first, a state's path is known before any edge from it, and the sequences are walked shortest
    first. The runtime is deterministic, so a replay only re-compares each answer with the
    prediction. Returns the probe and, if it disagreed, the counterexample.
    """
    probe = explorer.probe()
    probe.checking = False
    last = len(path) - 1
    figures.steps += len(path)
    for position, event in enumerate(path):
        if position == last:
            probe.checking = True
        try:
            RUN_EVENTS[event][1](probe)
        except Disagreement as error:
            return probe, _sequence_counterexample(path, position, error, priced=explorer.priced)
    return probe, None


Tick: TypeAlias = "Callable[[str, int, int | None], None]"
"""``tick(what, done, total or None)``: told now and then how far a search is (a progress bar)."""


def _explore_run(explorer: _Explorer, depth: int, tick: Tick) -> SearchFigures:
    figures = SearchFigures()
    failed: set[tuple[object, ...]] = set()
    # Breadth first over abstract states, each represented by the shortest path to it.
    initial = explorer.probe()
    initial.check_invariants()
    seen: dict[tuple[object, ...], tuple[int, ...]] = {initial.abstract(): ()}
    queue: deque[tuple[int, ...]] = deque([()])
    events = range(len(RUN_EVENTS))
    while queue:
        path = queue.popleft()
        for event in events:
            probe, counterexample = _run_replay(explorer, (*path, event), figures)
            figures.edges += 1
            if counterexample is not None:
                figures.failures += 1
                failed.add((*path, event))
                explorer.failed(probe, counterexample)
                continue
            state = probe.abstract()
            if state not in seen:
                seen[state] = (*path, event)
                queue.append((*path, event))
        tick("run states", len(seen), None)
    figures.states = len(seen)
    # Then every sequence of 1 to `depth` events, shortest first, each on a fresh run.
    total = sum(len(events) ** length for length in range(1, depth + 1))
    done = 0
    for length in range(1, depth + 1):
        for path in itertools.product(events, repeat=length):
            done += 1
            if done % 2048 == 0:
                tick("run sequences", done, total)
            if _has_failed_prefix(path, failed) or path in failed:
                continue  # the same disagreement, found already
            probe, counterexample = _run_replay(explorer, path, figures)
            figures.sequences += 1
            if counterexample is None:
                explorer.passed(probe)
            else:
                figures.failures += 1
                failed.add(path)
                explorer.failed(probe, counterexample)
    return figures


# -- the retry search ------------------------------------------------------------------------------


def _execution_counterexample(
    policy: str,
    prelude: int,
    script: Sequence[Attempt],
    position: int,
    error: Disagreement,
    *,
    priced: bool,
) -> Counterexample:
    prelude_name = RETRY_PRELUDES[prelude][0]
    texts = [str(attempt) for attempt in script]
    actions = [
        f"the run is {prelude_name}",
        *(f"execute({policy!r}) attempt {n}: {text}" for n, text in enumerate(texts, 1)),
        f"execute({policy!r}) ends",
    ]
    return Counterexample.of(
        "sequence",
        error.message,
        actions,
        disagreement=min(position, len(actions) - 1),
        model=error.model,
        runtime=error.runtime,
        replay=(
            "from diagnosis_harness.modelcheck import replay_execution; "
            f"replay_execution({policy!r}, {prelude_name!r}, {texts!r}"
            f"{_replay_keywords(priced)})"
        ),
    )


def _retry_run(
    explorer: _Explorer, policy: str, prelude: int, script: Sequence[Attempt]
) -> tuple[RunProbe, tuple[object, ...] | None, RetryState | None, Counterexample | None]:
    """One execution; the abstract state at the gate after the script, if it passed; its end
    state; and the counterexample if the runtime and the model disagreed."""
    probe = explorer.probe()
    at_gate: list[tuple[object, ...]] = []
    position = [0]  # 0: the prelude; n: attempt n; len(script) + 1: past the script

    def listen(number: int) -> None:
        position[0] = number
        if number == len(script) + 1:
            at_gate.append((policy, "gate passed", number - 1, probe.abstract()))

    try:
        RETRY_PRELUDES[prelude][1](probe)
        position[0] = 1
        probe.on_attempt = listen
        state = probe.execute(policy, script)
    except Disagreement as error:
        # Charged to the last attempt invoked (its handling is what differs), or the end.
        where = min(position[0], len(script) + 1)
        counterexample = _execution_counterexample(
            policy, prelude, script, where, error, priced=explorer.priced
        )
        return probe, None, None, counterexample
    return probe, (at_gate[0] if at_gate else None), state, None


def _explore_retry(explorer: _Explorer, depth: int, tick: Tick) -> SearchFigures:
    figures = SearchFigures()
    seen: set[tuple[object, ...]] = set()
    roots = [
        (policy, prelude) for policy in RETRY_POLICIES for prelude in range(len(RETRY_PRELUDES))
    ]
    # Breadth first: a node is a script prefix whose next gate passed; its state is the
    # execution's abstract state there. A script whose execution ended is a leaf.
    queue: deque[tuple[str, int, tuple[Attempt, ...]]] = deque(
        (policy, prelude, ()) for policy, prelude in roots
    )
    while queue:
        policy, prelude, script = queue.popleft()
        probe, at_gate, final, counterexample = _retry_run(explorer, policy, prelude, script)
        figures.steps += 2 + len(probe.executor.attempts)  # the prelude, the attempts, the end
        if counterexample is not None:
            if len(script) > depth:  # longer than the sequence pass below walks
                figures.failures += 1
                explorer.failed(probe, counterexample)
            continue
        if at_gate is None:
            seen.add((policy, final, len(script), probe.abstract()))
            continue
        if at_gate in seen:
            continue
        seen.add(at_gate)
        for attempt in RETRY_ATTEMPTS:
            figures.edges += 1
            queue.append((policy, prelude, (*script, attempt)))
        tick("retry states", len(seen), None)
    figures.states = len(seen)

    # Every sequence of up to `depth` attempts, for every policy and prelude; a failing
    # execution's extensions are not walked.
    def walk(policy: str, prelude: int, script: tuple[Attempt, ...]) -> None:
        probe, at_gate, _, counterexample = _retry_run(explorer, policy, prelude, script)
        figures.sequences += 1
        figures.steps += 2 + len(probe.executor.attempts)
        if counterexample is not None:
            figures.failures += 1
            explorer.failed(probe, counterexample)
            return
        explorer.passed(probe)
        if at_gate is not None and len(script) < depth:
            for attempt in RETRY_ATTEMPTS:
                walk(policy, prelude, (*script, attempt))

    for policy, prelude in roots:
        walk(policy, prelude, ())
        tick("retry sequences", figures.sequences, None)
    return figures


def _noop(what: str, done: int, total: int | None) -> None:
    pass


def explore(
    *,
    depth: int = 4,
    coverage: TransitionCoverage | None = None,
    tick: Callable[[str, int, int | None], None] | None = None,
    priced: bool = True,
) -> Exploration:
    """Run both breadth-first searches and every sequence up to ``depth``; see the docstring.

    Never stops at a disagreement: the result says, per scenario, what was checked and the
    shortest counterexample. The rows taken are merged into ``coverage`` whether or not
    anything failed. ``tick(what, done, total)`` is called now and then (for a progress bar;
    ``total`` is ``None`` while unknown). ``priced=False`` explores the run without its money
    limit (:data:`UNPRICED_CONFIG`); its counterexamples replay with ``priced=False``.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth!r}")
    if priced.__class__ is not bool:
        raise TypeError(f"priced must be a bool, got {priced!r}")
    own = TransitionCoverage()
    explorer = _Explorer(own, priced=priced)
    started = time.perf_counter()
    try:
        run = _explore_run(explorer, depth, tick or _noop)
        retry = _explore_retry(explorer, depth, tick or _noop)
    finally:
        if coverage is not None:
            coverage.merge(own)
    return Exploration(
        depth=depth,
        run=run,
        retry=retry,
        coverage=own,
        seconds=time.perf_counter() - started,
        model_answers=explorer.memo.answers,
        scenarios=explorer.tally.results(),
        unattributed=tuple(explorer.unattributed),
    )


# -- replaying a counterexample --------------------------------------------------------------------


def _fresh_probe(priced: bool) -> RunProbe:
    if priced.__class__ is not bool:
        raise TypeError(f"priced must be a bool, got {priced!r}")
    return RunProbe(_config(priced), models=MemoModels())


def replay_sequence(events: Iterable[str], *, priced: bool = True) -> RunProbe:
    """Apply the run explorer's ``events`` (by name) to a fresh run, checking every step;
    ``priced=False``: the run of ``explore(priced=False)``.

    Raises the :class:`Disagreement` a counterexample recorded; returns the probe if none.
    """
    probe = _fresh_probe(priced)
    for name in events:
        if name not in _RUN_EVENT_INDEX:
            raise ValueError(f"unknown event {name!r}: use one of {sorted(_RUN_EVENT_INDEX)}")
        RUN_EVENTS[_RUN_EVENT_INDEX[name]][1](probe)
    return probe


def replay_execution(
    policy: str, prelude: str, attempts: Iterable[str], *, priced: bool = True
) -> RunProbe:
    """Run one execution as the retry explorer does: ``prelude`` (by name), then ``policy``
    over the scripted ``attempts`` (their texts); ``priced=False``: on the run of
    ``explore(priced=False)``. Raises the recorded :class:`Disagreement`."""
    if policy not in RETRY_POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {list(RETRY_POLICIES)}")
    if prelude not in _PRELUDE_INDEX:
        raise ValueError(f"unknown prelude {prelude!r}: use one of {sorted(_PRELUDE_INDEX)}")
    script = []
    for text in attempts:
        if text not in _ATTEMPT_BY_TEXT:
            raise ValueError(f"unknown attempt {text!r}: use one of {sorted(_ATTEMPT_BY_TEXT)}")
        script.append(_ATTEMPT_BY_TEXT[text])
    probe = _fresh_probe(priced)
    RETRY_PRELUDES[_PRELUDE_INDEX[prelude]][1](probe)
    probe.execute(policy, script)
    return probe
