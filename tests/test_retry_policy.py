"""Retry policies and backoff: immutable, validated values; the seed spec's default policies."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import Backoff, FailureKind, RetryPolicies, RetryPolicy
from diagnosis_harness._failure import NEVER_RETRIED, TECHNICAL
from strategies import (
    blank_or_non_str,
    expected_int_error,
    expected_str_error,
    new_run,
    not_positive_int,
)

TECHNICAL_KINDS = frozenset(
    {
        FailureKind.TRANSPORT,
        FailureKind.TIMEOUT,
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.MALFORMED_RESPONSE,
    }
)
NEVER_RETRIED_KINDS = frozenset(
    {
        FailureKind.CANCELLED,
        FailureKind.DEADLINE_EXCEEDED,
        FailureKind.BUDGET_EXHAUSTED,
        FailureKind.NO_EVIDENCE,
        FailureKind.BUSINESS_REJECTION,
        FailureKind.UNKNOWN,
    }
)
ROUTER_AND_GUARD = ("intent_router", "semantic_guard")
SINGLE_ATTEMPT = ("diagnosis_agent", "tool_call", "evidence_repair")

technical_subsets = st.frozensets(st.sampled_from(sorted(TECHNICAL_KINDS, key=str)))
kind_sets_with_a_never_retried_kind = st.tuples(
    st.frozensets(st.sampled_from(sorted(NEVER_RETRIED_KINDS, key=str)), min_size=1),
    technical_subsets,
).map(lambda parts: parts[0] | parts[1])
not_a_kind_frozenset = st.one_of(
    st.none(),
    st.text(max_size=4),
    st.sets(st.sampled_from(list(FailureKind)), min_size=1),
    st.lists(st.sampled_from(list(FailureKind)), min_size=1),
    st.tuples(st.sampled_from(list(FailureKind))),
    st.frozensets(
        st.sampled_from([k.name for k in FailureKind] + [k.value for k in FailureKind]), min_size=1
    ),
    st.frozensets(st.integers(), min_size=1),
    st.dictionaries(st.sampled_from(list(FailureKind)), st.booleans(), min_size=1),
)
"""Never a frozenset holding only FailureKind members: other containers, names, values, junk."""


# -- the kinds ----------------------------------------------------------------------------------


def test_technical_and_never_retried_kinds_partition_failure_kind() -> None:
    assert TECHNICAL == TECHNICAL_KINDS
    assert NEVER_RETRIED == NEVER_RETRIED_KINDS
    assert frozenset(FailureKind) == TECHNICAL_KINDS | NEVER_RETRIED_KINDS


# -- RetryPolicy --------------------------------------------------------------------------------


def test_policy_keeps_its_fields_and_retries_nothing_by_default() -> None:
    policy = RetryPolicy("intent_router", 2, frozenset({FailureKind.TRANSPORT}))
    assert (policy.name, policy.max_attempts) == ("intent_router", 2)
    assert policy.retryable == frozenset({FailureKind.TRANSPORT})
    assert RetryPolicy("once", 1).retryable == frozenset()
    assert RetryPolicy(name="k", max_attempts=3, retryable=frozenset()) == RetryPolicy("k", 3)


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "other"), ("max_attempts", 5), ("retryable", frozenset(FailureKind))],
)
def test_policy_is_immutable(field: str, value: object) -> None:
    policy = RetryPolicy("intent_router", 2, TECHNICAL_KINDS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(policy, field, value)
    assert policy == RetryPolicy("intent_router", 2, TECHNICAL_KINDS)
    assert not hasattr(policy, "__dict__")  # slotted: no attribute can be added either


def test_policy_is_hashable_and_compares_by_value() -> None:
    a = RetryPolicy("p", 2, frozenset({FailureKind.TIMEOUT}))
    b = RetryPolicy("p", 2, frozenset({FailureKind.TIMEOUT}))
    assert a == b
    assert hash(a) == hash(b)
    assert a != RetryPolicy("p", 3, frozenset({FailureKind.TIMEOUT}))


@given(max_attempts=st.integers(min_value=1, max_value=10**6), retryable=technical_subsets)
def test_any_positive_attempts_and_technical_subset_is_accepted(
    max_attempts: int, retryable: frozenset[FailureKind]
) -> None:
    policy = RetryPolicy("p", max_attempts, retryable)
    assert policy.max_attempts == max_attempts
    assert policy.retryable == retryable


@given(value=not_positive_int)
def test_bad_max_attempts_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(expected_int_error(value), match="max_attempts"):
        RetryPolicy("p", value)


@pytest.mark.parametrize("value", [True, False])
def test_bool_max_attempts_is_a_type_error(value: bool) -> None:
    with pytest.raises(TypeError, match="max_attempts"):
        RetryPolicy("p", value)


@given(value=blank_or_non_str)
def test_bad_name_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(expected_str_error(value), match="name"):
        RetryPolicy(value, 1)


@given(value=not_a_kind_frozenset)
def test_retryable_must_be_a_frozenset_of_failure_kind(value: Any) -> None:
    with pytest.raises(TypeError, match="retryable"):
        RetryPolicy("p", 2, value)


@pytest.mark.parametrize("kind", sorted(NEVER_RETRIED_KINDS, key=str), ids=lambda k: k.name)
def test_each_never_retried_kind_is_refused_at_construction(kind: FailureKind) -> None:
    with pytest.raises(ValueError, match=rf"never-retried kind\(s\) {kind.name};"):
        RetryPolicy("p", 2, frozenset({kind, FailureKind.TRANSPORT}))


@given(kinds=kind_sets_with_a_never_retried_kind, max_attempts=st.integers(1, 6))
def test_a_policy_listing_never_retried_kinds_names_every_one(
    kinds: frozenset[FailureKind], max_attempts: int
) -> None:
    with pytest.raises(ValueError, match="retryable") as raised:
        RetryPolicy("p", max_attempts, kinds)
    message = str(raised.value)
    listed = message.split("never-retried kind(s) ", 1)[1].split(";", 1)[0]
    assert set(listed.split(", ")) == {kind.name for kind in kinds & NEVER_RETRIED_KINDS}
    for kind in kinds & TECHNICAL_KINDS:  # the technical kinds are only named as allowed
        assert kind.name not in listed


@given(
    max_attempts=st.integers(1, 6),
    retryable=technical_subsets,
    kind=st.sampled_from(list(FailureKind)),
    attempt=st.integers(1, 8),
)
def test_may_retry_needs_a_listed_kind_and_attempts_left(
    max_attempts: int, retryable: frozenset[FailureKind], kind: FailureKind, attempt: int
) -> None:
    policy = RetryPolicy("p", max_attempts, retryable)
    assert policy.may_retry(kind, attempt) == (kind in retryable and attempt < max_attempts)
    if kind in NEVER_RETRIED_KINDS or max_attempts == 1:
        assert not policy.may_retry(kind, attempt)


# -- RetryPolicies.defaults() ---------------------------------------------------------------------


def test_defaults_are_exactly_the_seed_spec_policies() -> None:
    policies = RetryPolicies.defaults()
    assert sorted(policies) == sorted(ROUTER_AND_GUARD + SINGLE_ATTEMPT)
    assert len(policies) == 5
    for name in ROUTER_AND_GUARD:
        assert policies[name] == RetryPolicy(name, 2, TECHNICAL_KINDS)
    for name in SINGLE_ATTEMPT:
        policy = policies[name]
        assert policy.name == name
        assert policy.max_attempts == 1
        assert not any(policy.may_retry(kind, 1) for kind in FailureKind)


@pytest.mark.parametrize("name", ROUTER_AND_GUARD)
def test_router_and_guard_allow_at_most_two_attempts_for_technical_kinds(name: str) -> None:
    policy = RetryPolicies.defaults()[name]
    for kind in FailureKind:
        assert policy.may_retry(kind, 1) == (kind in TECHNICAL_KINDS)
        assert not policy.may_retry(kind, 2)


def test_defaults_are_a_read_only_mapping() -> None:
    policies = RetryPolicies.defaults()
    with pytest.raises(TypeError):
        policies["intent_router"] = RetryPolicy("intent_router", 9)  # type: ignore[index]
    with pytest.raises(TypeError):
        del policies["tool_call"]  # type: ignore[attr-defined]
    assert not hasattr(policies, "__dict__")
    assert policies["intent_router"].max_attempts == 2
    assert RetryPolicies.defaults() == policies  # a fresh, equal mapping each time
    assert "tool_call" in policies
    assert "nope" not in policies


def test_unknown_policy_name_raises_key_error_naming_the_known_ones() -> None:
    with pytest.raises(KeyError, match="no retry policy named 'planner'") as raised:
        RetryPolicies.defaults()["planner"]
    assert "intent_router" in str(raised.value)
    assert RetryPolicies.defaults().get("planner") is None


def test_run_context_uses_the_defaults_or_the_given_policies() -> None:
    ctx = new_run()
    assert ctx.retry_policies == RetryPolicies.defaults()
    assert ctx.retry_policies["intent_router"].max_attempts == 2
    custom = RetryPolicies([RetryPolicy("planner", 3, frozenset({FailureKind.TIMEOUT}))])
    ctx = new_run(retry_policies=custom)
    assert ctx.retry_policies is custom
    assert list(ctx.retry_policies) == ["planner"]


def test_policies_keep_the_given_order_and_show_them_in_repr() -> None:
    a, b = RetryPolicy("b", 1), RetryPolicy("a", 2, frozenset({FailureKind.TRANSPORT}))
    policies = RetryPolicies([a, b])
    assert list(policies) == ["b", "a"]
    assert list(policies.values()) == [a, b]
    assert repr(policies) == f"RetryPolicies({[a, b]!r})"
    assert len(RetryPolicies([])) == 0


def test_two_policies_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="two policies are named 'p'"):
        RetryPolicies([RetryPolicy("p", 1), RetryPolicy("p", 2)])


@pytest.mark.parametrize(
    "policies",
    ["intent_router", {"p": RetryPolicy("p", 1)}, [RetryPolicy("p", 1), "q"], [None], [("p", 1)]],
    ids=["str", "mapping", "mixed", "none-item", "tuple-item"],
)
def test_policies_must_be_an_iterable_of_policies(policies: Any) -> None:
    with pytest.raises(TypeError, match="policies"):
        RetryPolicies(policies)


# -- Backoff ----------------------------------------------------------------------------------

FIELDS = ("initial", "multiplier", "maximum", "jitter")
finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


def test_backoff_defaults_to_no_delay() -> None:
    backoff = Backoff()
    assert (backoff.initial, backoff.multiplier, backoff.maximum, backoff.jitter) == (
        0.0,
        2.0,
        30.0,
        0.0,
    )
    assert [backoff.delay(n) for n in range(1, 10)] == [0.0] * 9


def test_backoff_is_keyword_only_and_immutable() -> None:
    with pytest.raises(TypeError):
        Backoff(1.0)  # type: ignore[call-arg]
    backoff = Backoff(initial=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        backoff.initial = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, -math.inf])
def test_backoff_refuses_negative_and_non_finite_values_naming_them(
    field: str, value: float
) -> None:
    with pytest.raises(ValueError, match=field):
        Backoff(**{field: value})


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", [True, False, None, "1", b"1", [1.0]], ids=repr)
def test_backoff_refuses_non_numbers_with_type_error_naming_them(field: str, value: Any) -> None:
    with pytest.raises(TypeError, match=field):
        Backoff(**{field: value})


@given(multiplier=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_backoff_multiplier_below_one_is_refused(multiplier: float) -> None:
    with pytest.raises(ValueError, match="multiplier"):
        Backoff(initial=1, multiplier=multiplier)


@given(jitter=st.floats(min_value=1, exclude_min=True, allow_nan=False, allow_infinity=False))
def test_backoff_jitter_above_one_is_refused(jitter: float) -> None:
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=jitter)


@given(
    initial=finite,
    multiplier=st.floats(min_value=1, max_value=10),
    maximum=finite,
    retry=st.integers(1, 40),
)
def test_backoff_delay_formula_without_jitter(
    initial: float, multiplier: float, maximum: float, retry: int
) -> None:
    backoff = Backoff(initial=initial, multiplier=multiplier, maximum=maximum)
    assert backoff.delay(retry) == min(maximum, initial * multiplier ** (retry - 1))
    assert backoff.delay(retry) <= backoff.delay(retry + 1)  # never shrinks without jitter
    assert 0 <= backoff.delay(retry) <= maximum


def test_backoff_delay_examples() -> None:
    backoff = Backoff(initial=0.5, multiplier=2, maximum=3)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [Backoff(initial=1, multiplier=1).delay(n) for n in (1, 2, 50)] == [1, 1, 1]


@pytest.mark.parametrize("retry", [1025, 5_000, 10**6])
@pytest.mark.parametrize("initial", [0.0, 0.5])
def test_backoff_delay_stays_capped_for_any_retry_number(retry: int, initial: float) -> None:
    # A policy may allow any number of attempts; the delay saturates at `maximum` (or stays 0),
    # it never overflows the float range.
    backoff = Backoff(initial=initial, multiplier=2, maximum=7)
    assert backoff.delay(retry) == (7 if initial else 0)
    assert Backoff(initial=1, multiplier=1e300, maximum=4).delay(3) == 4


@given(
    initial=st.floats(min_value=0.001, max_value=100),
    jitter=st.floats(min_value=0, max_value=1),
    retry=st.integers(1, 10),
    draw=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_backoff_jitter_subtracts_at_most_its_share(
    initial: float, jitter: float, retry: int, draw: float
) -> None:
    backoff = Backoff(initial=initial, multiplier=1.5, maximum=50, jitter=jitter)
    base = min(50, initial * 1.5 ** (retry - 1))
    with mock.patch.object(random, "random", return_value=draw):
        delay = backoff.delay(retry)
    assert delay == pytest.approx(base - base * jitter * draw)
    assert base * (1 - jitter) - 1e-9 <= delay <= base


def test_backoff_jitter_uses_a_fresh_random_draw_per_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    draws = iter([0.0, 0.5, 0.999])
    monkeypatch.setattr(random, "random", lambda: next(draws))
    backoff = Backoff(initial=4, multiplier=1, maximum=4, jitter=0.5)
    assert [backoff.delay(1) for _ in range(3)] == pytest.approx([4.0, 3.0, 4 - 4 * 0.5 * 0.999])


def test_backoff_error_messages_show_the_value() -> None:
    with pytest.raises(ValueError, match=re.escape("-2")):
        Backoff(maximum=-2)
