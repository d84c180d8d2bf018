"""Clocks and deadlines: integer nanoseconds, a manual clock that never goes back, ``now >= at``."""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    CancellationReason,
    Clock,
    Deadline,
    ManualClock,
    RunContext,
    RunState,
    RunTimedOut,
    SystemClock,
)
from diagnosis_harness._clock import _to_ns
from strategies import limits, new_run, state

if TYPE_CHECKING:
    from collections.abc import Callable

NS = 1_000_000_000


def test_manual_clock_starts_at_zero_or_where_told() -> None:
    assert ManualClock().monotonic_ns() == 0
    assert ManualClock(42).monotonic_ns() == 42
    assert ManualClock(start_ns=7).monotonic_ns() == 7


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(10)
    assert clock.monotonic_ns() == clock.monotonic_ns() == 10
    clock.advance_ns(5)
    assert clock.monotonic_ns() == 15
    clock.advance(1.5)
    assert clock.monotonic_ns() == 15 + 1_500_000_000
    clock.advance(0)
    clock.advance_ns(0)
    assert clock.monotonic_ns() == 15 + 1_500_000_000


def test_manual_clock_rounds_seconds_to_the_nanosecond() -> None:
    clock = ManualClock()
    clock.advance(1e-9)
    assert clock.monotonic_ns() == 1
    clock.advance(0.1)
    assert clock.monotonic_ns() == 100_000_001


@pytest.mark.parametrize("advance", [lambda c: c.advance_ns(-1), lambda c: c.advance(-0.001)])
def test_manual_clock_never_goes_backwards(advance: Any) -> None:
    clock = ManualClock(1_000)
    with pytest.raises(ValueError, match=r"\b(ns|seconds)\b"):
        advance(clock)
    assert clock.monotonic_ns() == 1_000


@given(steps=st.lists(st.integers(min_value=-(10**12), max_value=10**12), max_size=30))
def test_manual_clock_is_monotonic_whatever_it_is_asked(steps: list[int]) -> None:
    clock = ManualClock()
    expected = 0
    for step in steps:
        before = clock.monotonic_ns()
        if step < 0:
            with pytest.raises(ValueError, match=r"\bns\b"):
                clock.advance_ns(step)
        else:
            clock.advance_ns(step)
            expected += step
        assert clock.monotonic_ns() >= before
        assert clock.monotonic_ns() == expected


def test_manual_clock_advances_from_many_threads_lose_nothing() -> None:
    clock = ManualClock()
    threads_n, per_thread = 8, 2_000
    barrier = threading.Barrier(threads_n)

    def worker() -> None:
        barrier.wait()
        for _ in range(per_thread):
            clock.advance_ns(1)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.monotonic_ns() == threads_n * per_thread


def test_both_clocks_satisfy_the_clock_protocol() -> None:
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SystemClock(), Clock)


def test_system_clock_is_monotonic_integer_nanoseconds() -> None:
    clock = SystemClock()
    readings = [clock.monotonic_ns() for _ in range(1_000)]
    assert all(type(r) is int for r in readings)
    assert readings == sorted(readings)


def test_deadline_after_is_now_plus_the_delay_in_ns() -> None:
    clock = ManualClock(5)
    assert Deadline.after(clock, 2) == Deadline(5 + 2 * NS)
    assert Deadline.after(clock, 0.25).instant_ns == 5 + NS // 4
    assert Deadline.after(clock, 0).instant_ns == 5


def test_deadline_at_ns_is_that_instant() -> None:
    assert Deadline.at_ns(123).instant_ns == 123
    assert Deadline.at_ns(123) == Deadline(123)


def test_deadline_expires_when_now_reaches_it() -> None:
    clock = ManualClock(99)
    deadline = Deadline.at_ns(100)
    assert not deadline.expired(clock)
    assert deadline.remaining_ns(clock) == 1
    clock.advance_ns(1)
    assert deadline.expired(clock)
    assert deadline.remaining_ns(clock) == 0
    clock.advance_ns(1_000)
    assert deadline.expired(clock)
    assert deadline.remaining_ns(clock) == 0


@given(at=st.integers(min_value=-(2**63), max_value=2**63), now=st.integers(0, 2**63))
def test_expiry_is_exactly_now_at_or_after_the_instant(at: int, now: int) -> None:
    clock = ManualClock(now)
    deadline = Deadline.at_ns(at)
    assert deadline.expired(clock) is (now >= at)
    assert deadline.remaining_ns(clock) == max(0, at - now)


def test_deadline_is_an_immutable_value() -> None:
    deadline = Deadline.at_ns(1)
    untyped: Any = deadline
    with pytest.raises(dataclasses.FrozenInstanceError):
        untyped.instant_ns = 2
    assert {Deadline.at_ns(1), Deadline.at_ns(1)} == {deadline}


def test_a_deadline_in_the_past_is_allowed_and_expires_at_the_first_check() -> None:
    clock = ManualClock(10 * NS)
    ctx = new_run(clock=clock, deadline=Deadline.at_ns(NS))  # nine seconds ago

    assert state(ctx) is RunState.RUNNING  # creation itself does not check
    with pytest.raises(RunTimedOut) as caught:
        ctx.check(Boundary.MODEL)

    assert state(ctx) is RunState.TIMED_OUT
    assert caught.value.termination.at_ns == 10 * NS
    assert ctx.cancellation.reason is CancellationReason.DEADLINE_EXCEEDED


def test_a_zero_timeout_expires_at_the_first_check() -> None:
    ctx = new_run(timeout=0)
    with pytest.raises(RunTimedOut):
        ctx.check(Boundary.TOOL)


def test_timeout_is_measured_on_the_injected_clock() -> None:
    clock = ManualClock(1_000)
    ctx = new_run(clock=clock, timeout=2.5)
    assert ctx.deadline == Deadline(1_000 + 2_500_000_000)
    assert ctx.clock is clock


def test_the_default_clock_is_the_system_clock() -> None:
    ctx = RunContext.create(session_id="s", run_id="r", limits=limits(), timeout=60)
    assert isinstance(ctx.clock, SystemClock)
    ctx.check(Boundary.MODEL)  # a minute away: passes


@given(seconds=st.floats(min_value=0, allow_infinity=False, allow_nan=False))
def test_any_finite_delay_gives_a_deadline_or_a_value_error_naming_it(seconds: float) -> None:
    """A finite, non-negative delay is valid input: it must never escape as another error."""
    clock = ManualClock(7)
    refusal: ValueError | None = None
    try:
        deadline = Deadline.after(clock, seconds)
    except ValueError as error:  # refusing an absurd delay is acceptable, if it says why
        refusal = error
    else:
        assert deadline.instant_ns >= 7
    assert refusal is None or "seconds" in str(refusal)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        pytest.param(lambda: Deadline.after(ManualClock(), 1e300), "seconds", id="Deadline.after"),
        pytest.param(lambda: ManualClock().advance(1e300), "seconds", id="ManualClock.advance"),
        pytest.param(lambda: new_run(timeout=1e300), "timeout", id="RunContext.create"),
    ],
)
def test_a_huge_finite_delay_does_not_overflow(call: Any, name: str) -> None:
    """``round(1e300 * 1e9)`` is ``round(inf)``: an OverflowError, not a ValueError naming it."""
    refusal: ValueError | None = None
    try:
        call()
    except ValueError as error:  # refusing it is fine; accepting it (a far deadline) too
        refusal = error
    assert refusal is None or name in str(refusal)


# -- seconds to nanoseconds: the nearest, ties to even -------------------------------------------


def _nearest_ns(seconds: float) -> int:
    """The oracle: the float's exact decimal value times 1e9, rounded half to even."""
    with localcontext() as context:
        context.prec = 1_000  # a float has at most ~770 significant digits: the product is exact
        exact = Decimal(seconds) * NS  # Decimal(float) is the float's exact value
        return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


def _halfway(n: int) -> float:
    """An exact float exactly halfway between two nanoseconds: ``(2n + 1) * 1_953_125 / 2`` ns."""
    return (2 * n + 1) * 2**-10


# (seconds, ns) where truncating the exact value, half-up or half-down would each be wrong once.
ROUNDING = [
    pytest.param(0.3, 300_000_000, id="0.3-truncates-to-299_999_999"),
    pytest.param(0.7, 700_000_000, id="0.7-truncates-to-699_999_999"),
    pytest.param(1e-9 * 0.6, 1, id="0.6ns-truncates-to-0"),
    pytest.param(2.5e-9, 3, id="2.5e-9-is-above-2.5ns"),
    pytest.param(1.5e-9, 1, id="1.5e-9-is-below-1.5ns"),
    pytest.param(2**-10, 976_562, id="976_562.5ns-tie-down-to-even"),
    pytest.param(3 * 2**-10, 2_929_688, id="2_929_687.5ns-tie-up-to-even"),
    pytest.param(0.1, 100_000_000, id="0.1"),
]


@pytest.mark.parametrize(("seconds", "ns"), ROUNDING)
def test_advance_rounds_to_the_nearest_nanosecond_ties_to_even(seconds: float, ns: int) -> None:
    clock = ManualClock(5)
    clock.advance(seconds)
    assert clock.monotonic_ns() == 5 + ns == 5 + _nearest_ns(seconds)


@pytest.mark.parametrize(("seconds", "ns"), ROUNDING)
def test_deadline_after_rounds_to_the_nearest_nanosecond_ties_to_even(
    seconds: float, ns: int
) -> None:
    assert Deadline.after(ManualClock(5), seconds).instant_ns == 5 + ns == 5 + _nearest_ns(seconds)


@given(seconds=st.one_of(st.floats(0, 1), st.floats(0, 1e30), st.integers(0, 10**6).map(_halfway)))
def test_every_finite_delay_is_its_nearest_nanosecond(seconds: float) -> None:
    expected = _nearest_ns(seconds)
    clock = ManualClock()
    clock.advance(seconds)
    assert clock.monotonic_ns() == expected
    assert Deadline.after(ManualClock(), seconds).instant_ns == expected


def _fraction_ns(seconds: float) -> int:
    """What ``_to_ns`` computed with :class:`fractions.Fraction` before: ``Fraction.__round__``
    is half to even, ``Fraction(float)`` the float's exact value."""
    return round(Fraction(seconds) * NS)


# Every kind of finite float: subnormals, the largest, negatives (``_to_ns`` itself takes them,
# though ``seconds`` refuses them first), nanosecond ties and the floats next to them.
_BOTH_WAYS = (-math.inf, math.inf)
_ANY_FINITE = st.floats(allow_nan=False, allow_infinity=False)
_NEAR_TIES = (
    st.integers(-(10**9), 10**9)
    .map(_halfway)
    .flatmap(lambda tie: st.sampled_from([tie, *(math.nextafter(tie, to) for to in _BOTH_WAYS)]))
)


@given(seconds=st.one_of(_ANY_FINITE, _NEAR_TIES, st.floats(-1e-6, 1e-6), st.integers()))
def test_to_ns_is_the_fraction_rounding_it_replaced(seconds: float) -> None:
    assert _to_ns(seconds) == _fraction_ns(seconds)


def test_to_ns_agrees_with_fraction_over_a_sweep_of_floats_and_ints() -> None:
    """Deterministic, beside the property: 1, 3 and 5 times every 2**-k, the first 100,000
    nanosecond ties, every millisecond to 20 s, every power of two in the float range, the largest
    float, and the float just above each of the first 5,000 of these."""
    floats = [2.0**-k * m for k in range(1, 1075) for m in (1, 3, 5)]
    floats += [_halfway(n) for n in range(100_000)]
    floats += [n / 1000 for n in range(20_000)]
    floats += [2.0**e for e in range(-1074, 1024)] + [sys.float_info.max, -sys.float_info.max]
    floats += [math.nextafter(x, math.inf) for x in floats[:5_000]]
    for seconds in floats:
        assert _to_ns(seconds) == _fraction_ns(seconds), seconds
    for seconds_int in [0, 1, 60, 10**30 + 1, 10**400, -5]:
        assert _to_ns(seconds_int) == _fraction_ns(seconds_int) == seconds_int * NS


@pytest.mark.parametrize("seconds", [10**400, 10**30 + 1])
def test_an_int_delay_is_exact_however_large(seconds: int) -> None:
    """An int is not converted to a float: ``float(10**400)`` would overflow, 10**30 + 1 round."""
    clock = ManualClock(7)
    assert Deadline.after(clock, seconds).instant_ns == 7 + seconds * NS
    clock.advance(seconds)
    assert clock.monotonic_ns() == 7 + seconds * NS
    ctx = new_run(clock=ManualClock(7), timeout=seconds)
    assert ctx.deadline.instant_ns == 7 + seconds * NS
    ctx.check(Boundary.MODEL)


# -- remaining time for a wait: capped, so that no timer overflows --------------------------------

DAY = 86_400.0  # Deadline.MAX_WAIT_SECONDS, as documented
MAX_WAIT_NS = 86_400 * NS


def test_the_longest_single_wait_is_a_day_and_within_every_platform_timer() -> None:
    assert Deadline.MAX_WAIT_SECONDS == DAY
    assert Deadline.MAX_WAIT_SECONDS <= threading.TIMEOUT_MAX


@pytest.mark.parametrize(
    ("at", "seconds"),
    [
        (1_000 + 1_500_000_000, 1.5),
        (1_000 + 1, 1e-9),
        (1_000 + MAX_WAIT_NS - 1, (MAX_WAIT_NS - 1) / NS),
        (1_000 + MAX_WAIT_NS, DAY),
        (1_000 + MAX_WAIT_NS + 1, DAY),
        (10**400, DAY),  # past the float range as seconds or as ns
        (1_000, 0.0),
        (999, 0.0),
        (-(10**400), 0.0),
    ],
)
def test_remaining_seconds_is_the_time_left_capped_at_a_day(at: int, seconds: float) -> None:
    clock = ManualClock(1_000)
    remaining = Deadline.at_ns(at).remaining_seconds(clock)
    assert type(remaining) is float
    assert remaining == seconds


@given(at=st.integers(min_value=-(10**400), max_value=10**400), now=st.integers(0, 2**70))
def test_remaining_seconds_never_overflows_and_agrees_with_remaining_ns(at: int, now: int) -> None:
    deadline, clock = Deadline.at_ns(at), ManualClock(now)
    remaining = deadline.remaining_seconds(clock)
    assert 0.0 <= remaining <= DAY
    assert remaining == min(deadline.remaining_ns(clock), MAX_WAIT_NS) / NS
    assert (remaining == 0.0) is deadline.expired(clock)


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda: new_run(timeout=sys.float_info.max), id="timeout=float-max"),
        pytest.param(lambda: new_run(timeout=1e300), id="timeout=1e300"),
        pytest.param(lambda: new_run(timeout=10**400), id="timeout=10**400"),
        pytest.param(lambda: new_run(deadline=Deadline.at_ns(10**400)), id="at_ns(10**400)"),
    ],
)
def test_a_far_deadline_is_accepted_and_waits_for_it_are_capped(
    create: Callable[[], RunContext],
) -> None:
    ctx = create()
    ctx.check(Boundary.MODEL)
    assert ctx.deadline.remaining_seconds(ctx.clock) == DAY
    assert ctx.cancellation.wait(0) is False  # a live run: the zero-length wait times out
