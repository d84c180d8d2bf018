"""Bad input: every public constructor and method refuses it, names the argument, changes nothing.

Wrong types raise ``TypeError``, wrong values ``ValueError`` (``InvalidRunIdentity`` for IDs);
the message names the argument; the run's budget snapshot, lifecycle and cancellation are the
same after the refused call as before it.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import (
    Boundary,
    BudgetLimits,
    Cancellation,
    CancellationReason,
    Deadline,
    InvalidRunIdentity,
    ManualClock,
    RunContext,
)
from strategies import (
    bad_seconds,
    blank_or_non_str,
    expected_int_error,
    expected_seconds_error,
    expected_str_error,
    limits,
    new_run,
    non_int,
    non_str,
    not_boundary,
    not_callable,
    not_non_negative_int,
    not_positive_int,
    not_reason,
)

LIMIT_NAMES = (
    "model_calls",
    "tool_calls",
    "per_tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "run_bytes",
)


def _names(message: str, argument: str) -> bool:
    return (
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])", message) is not None
    )


def _busy_run() -> RunContext:
    """A live run with some usage, so that "changes nothing" is not trivially true."""
    ctx = new_run()
    ctx.reserve_model_call()
    ctx.reserve_tool_call("search")
    ctx.reserve_bytes(10)
    ctx.record_token_usage(input_tokens=3, output_tokens=4)
    ctx.cancellation.register(lambda _: None)
    return ctx


def _observable(ctx: RunContext) -> tuple[object, ...]:
    return (
        ctx.budget.snapshot(),
        ctx.lifecycle.state,
        ctx.lifecycle.termination,
        ctx.cancellation.reason,
        ctx.clock.monotonic_ns(),
    )


def _refused(
    ctx: RunContext, call: Any, error: type[Exception], argument: str
) -> pytest.ExceptionInfo[Exception]:
    before = _observable(ctx)
    with pytest.raises(error) as caught:
        call()
    assert _names(str(caught.value), argument), (argument, str(caught.value))
    assert _observable(ctx) == before
    return caught


# -- RunContext.create ------------------------------------------------------------------------


@given(bad=blank_or_non_str, which=st.sampled_from(["session_id", "run_id"]))
def test_create_refuses_bad_ids(bad: object, which: str) -> None:
    ids: dict[str, object] = {"session_id": "s", "run_id": "r", which: bad}
    untyped: Any = RunContext.create
    with pytest.raises(InvalidRunIdentity) as caught:
        untyped(**ids, limits=limits(), timeout=1, clock=ManualClock())
    assert isinstance(caught.value, ValueError)
    # A wrong type is a TypeError, as everywhere else in the library; a blank str is not.
    assert isinstance(caught.value, TypeError) is (not isinstance(bad, str))
    assert _names(str(caught.value), which)


@given(bad=st.one_of(non_str, st.text(max_size=3), st.builds(dict)))
def test_create_refuses_what_is_not_budget_limits(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(TypeError) as caught:
        untyped(session_id="s", run_id="r", limits=bad, timeout=1, clock=ManualClock())
    assert _names(str(caught.value), "limits")


@given(bad=bad_seconds)
def test_create_refuses_bad_timeouts(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(expected_seconds_error(bad)) as caught:
        untyped(session_id="s", run_id="r", limits=limits(), timeout=bad, clock=ManualClock())
    assert _names(str(caught.value), "timeout")


@given(bad=st.one_of(non_str.filter(lambda v: v is not None), st.text(max_size=3)))
def test_create_refuses_what_is_not_a_deadline(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(TypeError) as caught:
        untyped(session_id="s", run_id="r", limits=limits(), deadline=bad, clock=ManualClock())
    assert _names(str(caught.value), "deadline")


@given(bad=st.one_of(non_str.filter(lambda v: v is not None), st.text(max_size=3)))
def test_create_refuses_what_is_not_a_clock(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(TypeError) as caught:
        untyped(session_id="s", run_id="r", limits=limits(), timeout=1, clock=bad)
    assert _names(str(caught.value), "clock")


@given(bad=st.one_of(non_str.filter(lambda v: v is not None), st.builds(dict)))
def test_create_refuses_what_are_not_retry_policies(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(TypeError) as caught:
        untyped(session_id="s", run_id="r", limits=limits(), timeout=1, retry_policies=bad)
    assert _names(str(caught.value), "retry_policies")


@given(bad=not_callable.filter(lambda v: v is not None))
def test_create_refuses_a_non_callable_error_handler(bad: object) -> None:
    untyped: Any = RunContext.create
    with pytest.raises(TypeError) as caught:
        untyped(session_id="s", run_id="r", limits=limits(), timeout=1, on_callback_error=bad)
    assert _names(str(caught.value), "on_callback_error")


# -- BudgetLimits -----------------------------------------------------------------------------


@given(bad=not_positive_int, name=st.sampled_from(LIMIT_NAMES))
def test_limits_refuse_anything_but_a_positive_int(bad: object, name: str) -> None:
    untyped: Any = limits
    with pytest.raises(expected_int_error(bad)) as caught:
        untyped(**{name: bad})
    assert _names(str(caught.value), name)


@given(bad=not_positive_int)
def test_per_tool_override_values_must_be_positive_ints(bad: object) -> None:
    with pytest.raises(expected_int_error(bad)) as caught:
        limits(per_tool_overrides={"search": bad})
    assert "per_tool_overrides" in str(caught.value)


@given(bad=blank_or_non_str.filter(lambda v: not isinstance(v, (list, dict))))
def test_per_tool_override_keys_must_be_tool_names(bad: object) -> None:
    with pytest.raises(expected_str_error(bad)) as caught:
        limits(per_tool_overrides={bad: 1})
    assert "per_tool_overrides" in str(caught.value)


@given(bad=st.one_of(st.integers(), st.none(), st.lists(st.integers(), max_size=2)))
def test_per_tool_overrides_must_be_a_mapping(bad: object) -> None:
    with pytest.raises(TypeError) as caught:
        limits(per_tool_overrides=bad)
    assert "per_tool_overrides" in str(caught.value)


def test_limits_take_keywords_only() -> None:
    untyped: Any = BudgetLimits
    with pytest.raises(TypeError):
        untyped(1, 1, 1, 1, 1, 1, 1)


# -- the run's methods ------------------------------------------------------------------------


@given(bad=not_boundary)
def test_check_refuses_what_is_not_a_boundary(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx
    _refused(ctx, lambda: untyped.check(bad), TypeError, "boundary")


def test_check_refuses_a_non_boundary_even_on_an_ended_run() -> None:
    ctx = new_run(timeout=0)
    untyped: Any = ctx
    _refused(ctx, lambda: untyped.check("tool"), TypeError, "boundary")


@given(bad=blank_or_non_str)
def test_reserve_tool_call_refuses_bad_tool_names(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx
    _refused(ctx, lambda: untyped.reserve_tool_call(bad), expected_str_error(bad), "tool")


@given(bad=blank_or_non_str, ending=st.sampled_from(["deadline", "cancelled", "tool limit"]))
def test_a_bad_tool_name_is_reported_before_the_run_ends_or_the_budget_refuses(
    bad: object, ending: str
) -> None:
    # The budget checks a Tool's name only when it first sees it; the refusal paths check it
    # too, so bad input gets the same error whatever state the run is in, and changes nothing.
    if ending == "deadline":
        ctx = new_run(timeout=0)
    elif ending == "cancelled":
        ctx = _busy_run()
        ctx.cancellation.cancel(CancellationReason.USER_REQUESTED)
    else:  # the next Tool call of any name would be refused; the run is still RUNNING
        ctx = new_run(budget=limits(tool_calls=2))
        ctx.reserve_tool_call("search")
        ctx.reserve_tool_call("read_logs")
    untyped: Any = ctx
    _refused(ctx, lambda: untyped.reserve_tool_call(bad), expected_str_error(bad), "tool")


@given(bad=not_positive_int)
def test_reserve_bytes_refuses_anything_but_a_positive_int(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx
    _refused(ctx, lambda: untyped.reserve_bytes(bad), expected_int_error(bad), "n")


@given(bad=not_non_negative_int, which=st.sampled_from(["input_tokens", "output_tokens"]))
def test_record_token_usage_refuses_bad_counts(bad: object, which: str) -> None:
    ctx = _busy_run()
    untyped: Any = ctx
    counts: dict[str, object] = {"input_tokens": 1, "output_tokens": 1, which: bad}
    _refused(ctx, lambda: untyped.record_token_usage(**counts), expected_int_error(bad), which)


@given(bad=not_reason)
def test_cancel_refuses_what_is_not_a_reason(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx.cancellation
    _refused(ctx, lambda: untyped.cancel(bad), TypeError, "reason")


def test_cancel_refuses_run_finished() -> None:
    ctx = _busy_run()
    _refused(
        ctx,
        lambda: ctx.cancellation.cancel(CancellationReason.RUN_FINISHED),
        ValueError,
        "reason",
    )


@given(bad=not_callable)
def test_register_refuses_what_cannot_be_called(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx.cancellation
    _refused(ctx, lambda: untyped.register(bad), TypeError, "callback")


@given(bad=not_callable)
def test_register_refuses_what_cannot_be_called_after_cancellation(bad: object) -> None:
    ctx = new_run()
    ctx.cancellation.cancel(CancellationReason.SHUTDOWN)
    untyped: Any = ctx.cancellation
    _refused(ctx, lambda: untyped.register(bad), TypeError, "callback")


@given(bad=bad_seconds)
def test_wait_refuses_bad_timeouts(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx.cancellation
    _refused(ctx, lambda: untyped.wait(bad), expected_seconds_error(bad), "timeout")


def test_wait_with_a_huge_finite_timeout_is_not_an_overflow() -> None:
    """A finite timeout is valid: ``wait(1e300)`` must wait (clamped) or refuse it by name.

    ``threading.Event.wait(1e300)`` raises OverflowError on a live token. The waiter runs on
    its own thread; if it is (rightly) still waiting after a bounded join, a cancel wakes it.
    """
    token = Cancellation()
    outcome: list[object] = []

    def waiter() -> None:
        try:
            outcome.append(token.wait(1e300))
        except Exception as error:  # reported below
            outcome.append(error)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    thread.join(0.2)  # a bound, not a condition: OverflowError would come at once
    token.cancel(CancellationReason.SHUTDOWN)
    thread.join(10)
    assert not thread.is_alive()
    (result,) = outcome
    if isinstance(result, ValueError):
        assert _names(str(result), "timeout")
    else:
        assert result is True, result
    done = Cancellation()
    done.cancel(CancellationReason.SHUTDOWN)
    assert done.wait(1e300) is True


@given(bad=blank_or_non_str.filter(lambda v: v is not None))
def test_fail_refuses_a_bad_reason(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx.lifecycle
    _refused(ctx, lambda: untyped.fail(bad), expected_str_error(bad), "reason")


@given(bad=blank_or_non_str)
def test_succeed_refuses_a_bad_reason(bad: object) -> None:
    ctx = _busy_run()
    untyped: Any = ctx.lifecycle
    _refused(ctx, lambda: untyped.succeed(bad), expected_str_error(bad), "reason")


@given(bad=not_callable.filter(lambda v: v is not None))
def test_a_token_refuses_a_non_callable_error_handler(bad: object) -> None:
    untyped: Any = Cancellation
    with pytest.raises(TypeError) as caught:
        untyped(on_callback_error=bad)
    assert _names(str(caught.value), "on_callback_error")


# -- clocks and deadlines ---------------------------------------------------------------------


@given(bad=not_non_negative_int)
def test_manual_clock_refuses_a_bad_start(bad: object) -> None:
    untyped: Any = ManualClock
    with pytest.raises(expected_int_error(bad)) as caught:
        untyped(bad)
    assert _names(str(caught.value), "start_ns")


@given(bad=bad_seconds)
def test_manual_clock_advance_refuses_bad_seconds(bad: object) -> None:
    clock = ManualClock(5)
    untyped: Any = clock
    with pytest.raises(expected_seconds_error(bad)) as caught:
        untyped.advance(bad)
    assert _names(str(caught.value), "seconds")
    assert clock.monotonic_ns() == 5


@given(bad=not_non_negative_int)
def test_manual_clock_advance_ns_refuses_bad_ns(bad: object) -> None:
    clock = ManualClock(5)
    untyped: Any = clock
    with pytest.raises(expected_int_error(bad)) as caught:
        untyped.advance_ns(bad)
    assert _names(str(caught.value), "ns")
    assert clock.monotonic_ns() == 5


@given(bad=bad_seconds)
def test_deadline_after_refuses_bad_seconds(bad: object) -> None:
    untyped: Any = Deadline
    with pytest.raises(expected_seconds_error(bad)) as caught:
        untyped.after(ManualClock(), bad)
    assert _names(str(caught.value), "seconds")


@given(bad=st.one_of(non_str.filter(lambda v: v is not None), st.text(max_size=3)))
def test_deadline_after_refuses_what_is_not_a_clock(bad: object) -> None:
    untyped: Any = Deadline
    with pytest.raises(TypeError) as caught:
        untyped.after(bad, 1)
    assert _names(str(caught.value), "clock")


@given(bad=non_int)
def test_deadline_at_ns_refuses_what_is_not_an_int(bad: object) -> None:
    untyped: Any = Deadline
    with pytest.raises(TypeError) as caught:
        untyped.at_ns(bad)
    assert _names(str(caught.value), "ns")


@given(bad=non_int)
def test_deadline_refuses_what_is_not_an_int(bad: object) -> None:
    untyped: Any = Deadline
    with pytest.raises(TypeError) as caught:
        untyped(bad)
    assert _names(str(caught.value), "instant_ns")


def test_the_name_matcher_wants_the_whole_name() -> None:
    assert _names("ns must be an int", "ns")
    assert not _names("instant_ns must be an int", "ns")
    assert _names("per_tool_overrides['a'] must be", "per_tool_overrides")


def test_boundary_members_are_accepted() -> None:
    ctx = new_run()
    for boundary in Boundary:
        ctx.check(boundary)
