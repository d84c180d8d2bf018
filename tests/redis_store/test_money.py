"""Money budgets on a RedisRunStore: the hold moves with the call counters in the reservation's
function, all or nothing; a settle records the actual and releases the hold in the ``settle``
function, even past the limit or after the run ended; ``snapshot()`` gives ``cost`` and
``cost_held``.

The same scenarios run on a run in this process and on a run in Redis, and must end the same way:
the same refusals worded the same, the same counters, the same termination. Integer picodollars
on the wire and in Redis; a money limit the Lua functions could not compare exactly (2**53
picodollars, $9,007.199254740992, or more) is refused before anything is written.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from decimal import Decimal
from importlib import resources
from typing import TYPE_CHECKING, Any

import pytest
import redis

from diagnosis_harness import (
    Boundary,
    BudgetDimension,
    BudgetExhausted,
    CallHold,
    Deadline,
    ManualClock,
    RunContext,
    RunState,
    RunStoreConflict,
    RunStoreUnavailable,
    RunTerminated,
    UnknownRun,
)
from diagnosis_harness._money import dollars
from diagnosis_harness.pricing import to_units
from diagnosis_harness.redis import RedisRunStore
from diagnosis_harness.redis._bounded import GRACE_SECONDS
from diagnosis_harness.redis._scripts import prelude

from . import workers
from .test_races import _SPAWN as SPAWN
from .test_races import _WAIT as RACE_WAIT
from .test_races import PROCESSES, TOOLS
from .test_races import _create as race_create
from .test_races import _limits as race_limits
from .test_store import LIMITS, _create

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .server import RedisServer

D = Decimal
MONEY = dataclasses.replace(LIMITS, cost=D("1.00"))
_NS = 1_000_000_000
LARGEST = D("9007.199254740991")  # 2**53 - 1 picodollars: the largest limit the store takes


def _money_run(store: RedisRunStore | None, cost: Decimal | None, run_id: str) -> RunContext:
    return RunContext.create(
        session_id="session-1",
        run_id=run_id,
        limits=dataclasses.replace(LIMITS, cost=cost),
        deadline=Deadline.at_ns(10 * _NS),
        clock=ManualClock(),
        store=store,
    )


# -- the same scenarios on a run in this process and on a run in Redis --------------------------


def _within(ctx: RunContext) -> None:
    hold = ctx.reserve_model_call(max_cost=D("0.40"))
    hold.settle(cost=D("0.25"), input_tokens=10, output_tokens=5)
    ctx.reserve_tool_call("search", max_cost=D("0.30")).settle(cost=D("0.30"))
    ctx.reserve_tool_call("grep", max_cost=D("0.45"))  # held, never settled


def _model_hold_refused(ctx: RunContext) -> None:
    ctx.reserve_model_call(max_cost=D("0.60"))
    ctx.reserve_model_call(max_cost=D("0.50"))


def _tool_hold_refused(ctx: RunContext) -> None:
    ctx.reserve_tool_call("search", max_cost=D("0.70"))
    ctx.reserve_tool_call("grep", max_cost=D("0.31"))


def _exactly_the_limit(ctx: RunContext) -> None:
    hold = ctx.reserve_model_call(max_cost=D("1.00"))
    ctx.reserve_tool_call("search", max_cost=D(0))  # settled + held == the limit: within it
    hold.settle(cost=D("1.00"))
    ctx.reserve_tool_call("grep", max_cost=D("0.000000000001"))  # one picodollar too many


def _settled_past_the_limit(ctx: RunContext) -> None:
    hold = ctx.reserve_tool_call("search", max_cost=D("0.50"))
    hold.settle(cost=D("1.20"))  # above its max_cost: recorded, and the run ends
    ctx.check(Boundary.GUARD)


def _settled_after_the_end(ctx: RunContext) -> None:
    hold = ctx.reserve_model_call(max_cost=D("0.50"))
    ctx.lifecycle.succeed("done")
    hold.settle(cost=D("1.50"), input_tokens=3, output_tokens=4)  # the call happened


def _model_calls_before_money(ctx: RunContext) -> None:
    for _ in range(4):  # model_calls=3: the fourth is refused by the count, not the money
        ctx.reserve_model_call(max_cost=D("0.10"))


def _tiny_amounts(ctx: RunContext) -> None:
    ctx.reserve_model_call(max_cost=D("0.0000010000001"))  # rounded up to 1,000,001 units
    ctx.reserve_tool_call("search", max_cost=D("0.000000501"))


def _tokens_in_a_settle(ctx: RunContext) -> None:
    ctx.reserve_model_call(max_cost=D("0.10")).settle(cost=D("0.05"), input_tokens=60)


def _a_hold_beyond_the_exact_range(ctx: RunContext) -> None:
    ctx.reserve_model_call(max_cost=D(10_000))  # 10**16 units, above 2**53: the limit refuses


def _the_largest_limit(ctx: RunContext) -> None:
    ctx.reserve_model_call(max_cost=LARGEST)
    ctx.reserve_tool_call("search", max_cost=D("0.000000000001"))


def _bad_input(ctx: RunContext) -> None:
    steps: list[Callable[[], object]] = [
        ctx.reserve_model_call,  # a money limit needs max_cost
        lambda: ctx.reserve_model_call(max_cost=0.1),  # type: ignore[arg-type]  # the bad input
        lambda: ctx.reserve_tool_call("search", max_cost=D("-0.1")),
    ]
    hold = ctx.reserve_tool_call("search", max_cost=D("0.20"))
    steps += [
        lambda: hold.settle(cost=0.1),  # type: ignore[arg-type]  # the bad input
        lambda: hold.settle(cost=D("-0.01")),
        lambda: hold.settle(cost=D("0.10"), input_tokens=3),  # a Tool call has no tokens
        lambda: hold.settle(cost=D("0.10")),
        lambda: hold.settle(cost=D("0.10")),  # settled already
    ]
    for step in steps:
        try:
            step()
        except (TypeError, ValueError, RuntimeError) as error:
            _RAISED.append(f"{type(error).__name__}: {error}")


def _partial_holds(ctx: RunContext) -> None:
    _HELD.append(ctx.reserve_model_call(max_cost=D("0.40"), min_cost=D("0.10")).max_cost)
    ctx.reserve_tool_call("search", max_cost=D("0.45"))
    held = ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.05"))  # $0.15 left
    _HELD.append(held.max_cost)
    held.settle(cost=D("0.02"), input_tokens=4, output_tokens=1)
    _HELD.append(ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.13")).max_cost)


def _partial_hold_refused(ctx: RunContext) -> None:
    ctx.reserve_tool_call("search", max_cost=D("0.95"))
    ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))


def _partial_hold_without_a_limit(ctx: RunContext) -> None:
    _HELD.append(ctx.reserve_model_call(max_cost=D("50"), min_cost=D("0.01")).max_cost)


def _partial_bad_input(ctx: RunContext) -> None:
    steps: list[Callable[[], object]] = [
        lambda: ctx.reserve_model_call(max_cost=D("0.10"), min_cost=D("0.20")),
        lambda: ctx.reserve_model_call(min_cost=D("0.10")),
        lambda: ctx.reserve_model_call(max_cost=D("0.10"), min_cost=0.05),  # type: ignore[arg-type]  # the bad input
        lambda: ctx.reserve_model_call(max_cost=D("0.10"), min_cost=D("-0.01")),
    ]
    for step in steps:
        try:
            step()
        except (TypeError, ValueError) as error:
            _RAISED.append(f"{type(error).__name__}: {error}")


_RAISED: list[str] = []  # what _bad_input's steps raised, read by _outcome
_HELD: list[Decimal] = []  # what the partial holds held, read by _outcome

SCENARIOS: dict[str, tuple[Decimal | None, Callable[[RunContext], None]]] = {
    "within": (D("1.00"), _within),
    "model-hold-refused": (D("1.00"), _model_hold_refused),
    "tool-hold-refused": (D("1.00"), _tool_hold_refused),
    "exactly-the-limit": (D("1.00"), _exactly_the_limit),
    "settled-past-the-limit": (D("1.00"), _settled_past_the_limit),
    "settled-after-the-end": (D("1.00"), _settled_after_the_end),
    "model-calls-before-money": (D("1.00"), _model_calls_before_money),
    "tiny-amounts": (D("0.0000015"), _tiny_amounts),
    "tokens-in-a-settle": (D("1.00"), _tokens_in_a_settle),
    "hold-beyond-the-exact-range": (D("1.00"), _a_hold_beyond_the_exact_range),
    "the-largest-limit": (LARGEST, _the_largest_limit),
    "no-money-limit": (None, _within),
    "bad-input": (D("1.00"), _bad_input),
    "partial-holds": (D("1.00"), _partial_holds),
    "partial-hold-refused": (D("1.00"), _partial_hold_refused),
    "partial-hold-without-a-limit": (None, _partial_hold_without_a_limit),
    "partial-bad-input": (D("1.00"), _partial_bad_input),
}


def _outcome(ctx: RunContext, scenario: Callable[[RunContext], None]) -> tuple[Any, ...]:
    """Everything a user reads after ``scenario``: what it raised, the counters, the ending."""
    _RAISED.clear()
    _HELD.clear()
    try:
        scenario(ctx)
        raised = None
    except RunTerminated as error:
        dimension = error.dimension if isinstance(error, BudgetExhausted) else None
        raised = (type(error).__name__, str(error), dimension)
    usage = ctx.budget.snapshot()
    termination = ctx.lifecycle.termination
    ending = None
    if termination is not None:
        ending = (termination.state, termination.reason, termination.boundary, termination.at_ns)
    return (
        raised,
        list(_RAISED),
        (usage.cost, usage.cost_held, usage.cost_units, usage.cost_held_units),
        (usage.model_calls, usage.tool_calls, dict(usage.per_tool_calls)),
        (usage.input_tokens, usage.output_tokens, usage.exhausted),
        (ctx.budget.state, ctx.budget.exhausted),
        ending,
        list(_HELD),
    )


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_money_scenario_ends_the_same_on_the_redis_store_as_in_this_process(
    store: RedisRunStore, name: str
) -> None:
    cost, scenario = SCENARIOS[name]
    local = _outcome(_money_run(None, cost, f"money-{name}"), scenario)
    server = _outcome(_money_run(store, cost, f"money-{name}"), scenario)
    assert server == local


def test_the_scenarios_reach_what_they_are_named_for(store: RedisRunStore) -> None:
    """The comparison above is worth what the scenarios exercise: a few, read on the server."""
    refused = _outcome(_money_run(store, D("1.00"), "r1"), _tool_hold_refused)
    assert refused[0][2] is BudgetDimension.COST
    assert refused[6][:3] == (
        RunState.BUDGET_EXHAUSTED,
        "cost limit $1 would be passed: a hold of $0.31 refused ($0 settled, $0.7 held)",
        Boundary.TOOL,
    )
    past = _outcome(_money_run(store, D("1.00"), "r2"), _settled_past_the_limit)
    assert past[2] == (D("1.2"), D(0), 1_200_000_000_000, 0)
    assert past[6][1] == "cost limit $1 exceeded: $1.2 settled, $0 held"
    tiny = _outcome(_money_run(store, D("0.0000015"), "r3"), _tiny_amounts)
    assert tiny[6][1] == (
        "cost limit $0.0000015 would be passed: a hold of $5.01E-7 refused "
        "($0 settled, $0.000001000001 held)"
    )
    after = _outcome(_money_run(store, D("1.00"), "r4"), _settled_after_the_end)
    assert after[2][0] == D("1.5")
    assert after[6][0] is RunState.SUCCESS  # the first ending stays
    bad = _outcome(_money_run(store, D("1.00"), "r5"), _bad_input)
    assert len(bad[1]) == 7  # every bad step refused; the one good settle recorded
    assert bad[2][:2] == (D("0.1"), D(0))
    partial = _outcome(_money_run(store, D("1.00"), "r6"), _partial_holds)
    assert partial[7] == [D("0.4"), D("0.15"), D("0.13")]  # as much as fitted, at least min_cost
    assert partial[2][:2] == (D("0.02"), D("0.98"))
    assert partial[6] is None  # no partial hold ended the run
    short = _outcome(_money_run(store, D("1.00"), "r7"), _partial_hold_refused)
    assert short[0][2] is BudgetDimension.COST
    assert short[6][1] == (
        "cost limit $1 would be passed: a hold of $0.1 refused ($0 settled, $0.95 held)"
    )
    assert short[3][0] == 0  # the Model call refused with its hold
    unlimited = _outcome(_money_run(store, None, "r8"), _partial_hold_without_a_limit)
    assert unlimited[7] == [D("50")]
    bad_partial = _outcome(_money_run(store, D("1.00"), "r9"), _partial_bad_input)
    assert len(bad_partial[1]) == 4
    assert all("min_cost" in raised for raised in bad_partial[1])
    assert bad_partial[3][0] == 0


# -- the limit in the store -----------------------------------------------------------------------


def test_a_money_limit_is_stored_and_read_back_by_an_attaching_process(
    store: RedisRunStore,
) -> None:
    RunContext.create(session_id="session-1", run_id="run-1", limits=MONEY, timeout=10, store=store)
    attached = RunContext.attach(session_id="session-1", run_id="run-1", store=store)
    assert attached.budget.limits == MONEY
    assert attached.budget.limits.cost == D("1.00")
    same = dataclasses.replace(MONEY, cost=D("1"))  # equal to 1.00: money compares by value
    RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=same)
    for other, differ in (
        (dataclasses.replace(MONEY, cost=D("2.00")), "stored with cost=1.00; given cost=2.00$"),
        (LIMITS, "stored with cost=1.00; given cost=None$"),
        (
            dataclasses.replace(same, model_calls=9),
            "stored with model_calls=3; given model_calls=9$",
        ),
    ):
        with pytest.raises(RunStoreConflict, match=differ):
            RunContext.attach(session_id="session-1", run_id="run-1", store=store, limits=other)


def test_a_limit_beyond_the_exact_range_is_refused_naming_cost_and_nothing_is_published(
    store: RedisRunStore,
) -> None:
    for too_much in (D("9007.199254740992"), D("9007.1992547409911"), D(10_000)):
        with pytest.raises(ValueError, match=r"^cost must be below 2\*\*53 picodollars"):
            _money_run(store, too_much, "too-much")
        with pytest.raises(UnknownRun):
            RunContext.attach(session_id="session-1", run_id="too-much", store=store)
    assert to_units(LARGEST) == 2**53 - 1
    assert _money_run(store, LARGEST, "largest").budget.limits.cost == LARGEST


def test_a_cost_or_tokens_beyond_the_exact_range_are_refused_and_the_hold_stays_open(
    store: RedisRunStore,
) -> None:
    ctx = _money_run(store, D("1.00"), "run-1")
    hold = ctx.reserve_model_call(max_cost=D("0.50"))
    with pytest.raises(ValueError, match=r"^cost must be below 2\*\*53 picodollars"):
        hold.settle(cost=D("9007.199254740992"))
    with pytest.raises(ValueError, match=r"^input_tokens must be below 2\*\*53"):
        hold.settle(cost=D("0.10"), input_tokens=2**53)
    assert not hold.settled
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.input_tokens) == (D(0), D("0.5"), 0)
    hold.settle(cost=D("0.10"))  # nothing was recorded: it settles now
    assert ctx.budget.snapshot().cost == D("0.1")
    free = _money_run(store, None, "run-2")  # no limit to refuse it: the store cannot keep it
    with pytest.raises(ValueError, match=r"^max_cost must be below 2\*\*53 picodollars"):
        free.reserve_model_call(max_cost=D(10_000))
    assert free.budget.snapshot().model_calls == 0


def test_two_processes_share_the_money(client: redis.Redis, namespace: str) -> None:
    """Each process's hold counts against the other's; a settle in one ends the run for both,
    and a hold granted before the end still settles after it."""
    one = RedisRunStore(client, namespace=namespace)
    two = RedisRunStore(client, namespace=namespace)
    first = RunContext.create(
        session_id="session-1", run_id="run-1", limits=MONEY, timeout=60, store=one
    )
    second = RunContext.attach(session_id="session-1", run_id="run-1", store=two)
    a = first.reserve_model_call(max_cost=D("0.60"))
    b = second.reserve_tool_call("search", max_cost=D("0.40"))
    assert second.budget.snapshot().cost_held == D("1.0")
    b.settle(cost=D("0.10"))
    c = second.reserve_tool_call("grep", max_cost=D("0.30"))
    a.settle(cost=D("0.70"), input_tokens=5, output_tokens=5)  # 0.8 settled + 0.3 held > 1
    assert first.lifecycle.state is RunState.BUDGET_EXHAUSTED
    assert second.lifecycle.state is RunState.BUDGET_EXHAUSTED
    c.settle(cost=D("0.25"))
    usage = first.budget.snapshot()
    assert (usage.cost, usage.cost_held, usage.exhausted) == (D("1.05"), D(0), BudgetDimension.COST)
    termination = second.lifecycle.termination
    assert termination is not None
    assert termination.boundary is Boundary.MODEL  # the settle of a Model call's hold ended it
    one.close()
    two.close()


# -- a settle the store does not answer -----------------------------------------------------------


@pytest.fixture
def paused(fresh_server: RedisServer) -> Iterator[RedisServer]:
    """The test pauses the server; it goes on at the end whatever happened."""
    yield fresh_server
    fresh_server.resume()


def test_a_settle_the_store_does_not_answer_raises_and_is_applied_once_when_retried(
    paused: RedisServer,
) -> None:
    """The store's timeout (0.3 s) ends the wait: RunStoreUnavailable, the hold stays unsettled.
    The server ran the settle once it went on; settled again, the hold is not counted twice."""
    client = redis.Redis(host="127.0.0.1", port=paused.port, socket_timeout=0.3)
    store = RedisRunStore(client, namespace="money-stall")
    ctx = _money_run(store, D("1.00"), uuid.uuid4().hex)
    hold = ctx.reserve_model_call(max_cost=D("0.50"))
    paused.pause()
    with pytest.raises(RunStoreUnavailable, match="nothing granted"):
        hold.settle(cost=D("0.20"), input_tokens=4, output_tokens=2)
    assert not hold.settled  # it may settle again
    paused.resume()
    hold.settle(cost=D("0.20"), input_tokens=4, output_tokens=2)
    assert repr(hold).endswith("settled)")  # (mypy narrowed .settled to False above)
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (D("0.2"), D(0))
    assert (usage.input_tokens, usage.output_tokens) == (4, 2)
    store.close()
    client.close()


def test_racing_partial_holds_on_redis_hold_exactly_the_money_there_is(
    store: RedisRunStore,
) -> None:
    """Eight threads each ask $0.30, down to $0.05, of $1.00 at once, each holding in the
    store's one decision: three get $0.30, one the $0.10 left, the rest are refused on COST."""
    ctx = RunContext.create(
        session_id="session-1",
        run_id=uuid.uuid4().hex,
        limits=dataclasses.replace(MONEY, model_calls=100),
        deadline=Deadline.at_ns(10 * _NS),
        clock=ManualClock(),
        store=store,
    )
    barrier = threading.Barrier(8)
    held: list[Decimal] = []
    refused: list[BudgetDimension | None] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait(30)
        try:
            hold = ctx.reserve_model_call(max_cost=D("0.30"), min_cost=D("0.05"))
        except RunTerminated as error:
            with lock:
                refused.append(error.dimension if isinstance(error, BudgetExhausted) else None)
            return
        with lock:
            held.append(hold.max_cost)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(held) == [D("0.1"), D("0.3"), D("0.3"), D("0.3")]
    assert refused == [BudgetDimension.COST] * 4
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost_held) == (4, D("1.00"))


def test_a_partial_hold_the_store_did_not_answer_is_answered_the_same_when_sent_again(
    paused: RedisServer,
) -> None:
    """The store ran the partial hold once it went on, but its answer was lost; sent again with
    the same arguments, the function answers the amount it held then, even though the money left
    has changed since, and the call and its hold are counted once."""
    client = redis.Redis(host="127.0.0.1", port=paused.port, socket_timeout=0.3)
    store = RedisRunStore(client, namespace="money-partial-stall")
    ctx = _money_run(store, D("1.00"), uuid.uuid4().hex)
    ctx.reserve_tool_call("search", max_cost=D("0.70"))
    # The call must be sent, not stuck in a new connection's handshake with the paused server:
    # no listener to take the pool's connection for a re-read at that moment, and a read that
    # leaves a live connection on top of the pool for the call.
    store.close()
    ctx.budget.snapshot()
    paused.pause()
    with pytest.raises(RunStoreUnavailable):
        ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))
    paused.resume()
    # The server runs the call it was sent once it reads that connection again, which it may do
    # after it answers a newer connection: wait for that (the server's own progress), so that
    # the money left has changed when the call is sent again.
    given_up = time.monotonic() + 10
    while ctx.budget.snapshot().cost_held != D("1.00"):  # it held the $0.30 left
        assert time.monotonic() < given_up, "the server never ran the call it was sent"
        time.sleep(0.01)  # polling the server, not ordering a race of ours
    hold = ctx.reserve_model_call(max_cost=D("0.50"), min_cost=D("0.10"))
    assert hold.max_cost == D("0.3")  # what it held then: nothing is left now
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost_held) == (1, D("1.00"))
    assert ctx.lifecycle.state is RunState.RUNNING
    store.close()
    client.close()


def test_a_settle_past_the_deadline_waits_for_the_store_only_the_grace(
    paused: RedisServer,
) -> None:
    """A hold granted before the deadline settles after it; a store that does not answer then
    fails it within the grace, as every operation past the deadline, and nothing is recorded."""
    client = redis.Redis(host="127.0.0.1", port=paused.port, socket_timeout=5.0)
    store = RedisRunStore(client, namespace="money-late")
    clock = ManualClock()
    ctx = RunContext.create(
        session_id="s",
        run_id=uuid.uuid4().hex,
        limits=MONEY,
        deadline=Deadline.at_ns(10 * _NS),
        clock=clock,
        store=store,
    )
    hold = ctx.reserve_tool_call("search", max_cost=D("0.50"))
    clock.advance_ns(11 * _NS)
    paused.pause()
    started = time.monotonic()
    with pytest.raises(RunStoreUnavailable, match="the grace at the run's deadline"):
        hold.settle(cost=D("0.40"))
    assert time.monotonic() - started <= GRACE_SECONDS + 0.5  # a bound, plus scheduling slack
    paused.resume()
    hold.settle(cost=D("0.40"))  # recorded after the deadline: the call happened
    usage = ctx.budget.snapshot()
    assert (usage.cost, usage.cost_held) == (D("0.4"), D(0))
    store.close()
    client.close()


# -- the Lua writes dollars as Python does ------------------------------------------------------


def _common() -> str:
    return resources.files("diagnosis_harness.redis").joinpath("lua/common.lua").read_text()


UNITS = [
    0,
    1,
    10,
    999_999,
    1_000_000,  # $0.000001: the smallest amount Python writes without an exponent
    1_000_001,
    1_500_000,
    123_456_789,
    400_000_000_000,
    1_000_000_000_000,
    1_234_500_000_000,
    10**15,
    2**53 - 1,
    2**53,
    2**63 - 1,
]


def test_the_functions_write_an_amount_as_the_run_in_this_process_does(
    client: redis.Redis,
) -> None:
    script = f"{prelude()}\n{_common()}\nlocal out = {{}}\n" + (
        "for i, units in ipairs(ARGV) do out[i] = dollars(units) end\nreturn out"
    )
    written = [text.decode() for text in client.eval(script, 0, *UNITS)]
    assert written == [f"${dollars(units)}" for units in UNITS]


def test_a_hold_s_settle_is_a_call_hold(store: RedisRunStore) -> None:
    """Nothing Redis-specific leaks to the user: a reservation returns the core's CallHold."""
    hold = _create(store).reserve_model_call(max_cost=D("0.10"))
    assert isinstance(hold, CallHold)
    assert hold.max_cost == D("0.1")
    assert repr(hold) == "CallHold(Model call, max_cost=0.1, held)"


# -- eight processes race holds and settles on one run ------------------------------------------


@pytest.mark.version_independent  # the scripts decide; CI runs it once, in `e2e`
@pytest.mark.end_to_end  # nine spawned interpreters, where coverage.py does not follow
@pytest.mark.parametrize("overshoot", [False, True], ids=["actual-within-hold", "some-above"])
def test_eight_processes_race_holds_and_settles_and_never_pass_the_limit(
    redis_server: RedisServer, namespace: str, overshoot: bool
) -> None:
    """Eight processes hold (a random max_cost up to $0.02) and settle (an actual up to the
    hold, or, in `some-above`, one time in twenty above it) until the money limit ($5) refuses a
    hold; a ninth reads snapshots all the while, and each racer reads one after each grant.

    In every snapshot read while the budget was ACTIVE, settled + held is within the limit;
    in every snapshot, within it plus what the settles above their holds added (nothing in
    `actual-within-hold`). After the race the settled spend is the sum of the actual costs the
    processes report, nothing is held, and every grant was counted once."""
    limit = D(5)
    limit_units = to_units(limit)
    # The counts out of the way (up to 5 tokens a Model call): the money limit ends the race.
    counts = race_limits(model_calls=10**6, input_tokens=10**9, total_tokens=2 * 10**9)
    limits = dataclasses.replace(counts, cost=limit)
    run_id = race_create(redis_server, namespace, limits)
    where = {"port": redis_server.port, "namespace": namespace, "run_id": run_id}
    start = SPAWN.Barrier(PROCESSES + 1)
    stop = SPAWN.Event()
    out = SPAWN.Queue()
    targets: list[tuple[Callable[..., None], dict[str, Any]]] = [
        (
            workers.race_money,
            {
                **where,
                "worker": worker,
                "max_units": to_units(D("0.02")),
                "overshoot": overshoot,
                "tools": TOOLS,
                "start": start,
                "out": out,
            },
        )
        for worker in range(PROCESSES)
    ]
    targets.append(
        (
            workers.watch_money,
            {**where, "limit_units": limit_units, "start": start, "stop": stop, "out": out},
        )
    )
    processes = [SPAWN.Process(target=target, kwargs=kwargs) for target, kwargs in targets]
    for process in processes:
        process.start()
    results = [out.get(timeout=RACE_WAIT) for _ in range(PROCESSES)]
    stop.set()  # every racer has settled its last hold: the watcher may stop
    [watcher] = [out.get(timeout=RACE_WAIT)]
    for process in processes:
        process.join(RACE_WAIT)
        assert process.exitcode == 0
    assert all(result[0] != "watcher" for result in results)
    excess = sum(result[4] for result in results)
    assert (excess > 0) is overshoot  # the scenario happened as named
    _, _, watched = watcher
    assert len(watched) > 1
    seen = [*watched, *(snapshot for result in results for snapshot in result[5])]
    for total, active in seen:
        assert total <= limit_units + excess
        if active or not overshoot:
            assert total <= limit_units
    client = redis_server.client()
    store = RedisRunStore(client, namespace=namespace)
    ctx = RunContext.attach(session_id=workers.SESSION, run_id=run_id, store=store)
    usage = ctx.budget.snapshot()
    assert usage.cost_units == sum(result[2] for result in results)  # nothing lost, nothing twice
    assert usage.cost_held_units == 0  # every hold settled
    assert usage.model_calls + usage.tool_calls == sum(result[1] for result in results)
    assert usage.input_tokens == sum(result[3] for result in results)
    assert usage.exhausted is BudgetDimension.COST
    assert ctx.lifecycle.state is RunState.BUDGET_EXHAUSTED
    store.close()
    client.close()
