"""RunCapacityCounter: all-or-nothing reservations that never exceed the limit, even under races."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness._capacity import RunCapacityCounter
from racing import race

if TYPE_CHECKING:
    from collections.abc import Callable

THREADS = 8

wrong_types: list[object] = [True, False, 1.0, 2.5, "10", b"10", None, [1]]
non_positive: list[object] = [0, -1, -(2**70)]


@given(
    limit=st.integers(min_value=1, max_value=1_000),
    requests=st.lists(st.integers(min_value=1, max_value=1_200), max_size=60),
)
def test_reservations_match_a_simple_model(limit: int, requests: list[int]) -> None:
    counter = RunCapacityCounter(limit)
    model_used = 0
    for n in requests:
        fits = model_used + n <= limit
        before = counter.used

        accepted = counter.try_reserve(n)

        assert accepted is fits
        assert counter.used == (before + n if accepted else before)
        if accepted:
            model_used += n
        assert counter.used == model_used <= limit
        assert counter.remaining == limit - model_used
        assert counter.limit == limit


@given(limit=st.integers(min_value=1, max_value=2**80))
def test_the_whole_limit_can_be_reserved_at_once(limit: int) -> None:
    counter = RunCapacityCounter(limit)
    assert not counter.try_reserve(limit + 1)
    assert counter.used == 0
    assert counter.try_reserve(limit)
    assert counter.remaining == 0


@pytest.mark.parametrize("value", wrong_types)
def test_a_limit_of_the_wrong_type_is_a_type_error(value: object) -> None:
    untyped: Any = RunCapacityCounter
    with pytest.raises(TypeError, match=r"^limit_bytes must be a positive int"):
        untyped(value)


@pytest.mark.parametrize("value", non_positive)
def test_a_non_positive_limit_is_a_value_error(value: object) -> None:
    untyped: Any = RunCapacityCounter
    with pytest.raises(ValueError, match=r"^limit_bytes must be a positive int"):
        untyped(value)


@pytest.mark.parametrize(
    ("value", "error"),
    [(v, TypeError) for v in wrong_types] + [(v, ValueError) for v in non_positive],
)
def test_a_bad_reservation_raises_and_changes_nothing(
    value: object, error: type[Exception]
) -> None:
    counter = RunCapacityCounter(10)
    assert counter.try_reserve(4)
    untyped: Any = counter

    with pytest.raises(error, match=r"^n must be a positive int"):
        untyped.try_reserve(value)

    assert (counter.used, counter.remaining) == (4, 6)


def _race(counter: RunCapacityCounter, plans: list[list[int]]) -> list[list[tuple[int, bool]]]:
    """Run one thread per plan, released together; return each thread's (n, accepted) results."""
    results: list[list[tuple[int, bool]]] = [[] for _ in plans]

    def reserver(plan: list[int], out: list[tuple[int, bool]]) -> Callable[[], None]:
        def reserve_each() -> None:
            reserve: Callable[[int], bool] = counter.try_reserve
            out.extend((n, reserve(n)) for n in plan)

        return reserve_each

    race([reserver(plan, out) for plan, out in zip(plans, results, strict=True)])
    return results


def test_concurrent_unit_reservations_never_over_reserve(eager_thread_switching: None) -> None:
    per_thread = 250
    for round_number in range(40):
        # The limit lands inside the race, so threads contend for the last few bytes.
        limit = THREADS * per_thread - 1 - 37 * round_number
        counter = RunCapacityCounter(limit)

        results = _race(counter, [[1] * per_thread for _ in range(THREADS)])

        accepted = sum(ok for thread in results for _, ok in thread)
        assert counter.used == accepted == limit  # no lost update, no spurious refusal
        assert counter.remaining == 0


def test_concurrent_mixed_reservations_never_over_reserve(eager_thread_switching: None) -> None:
    rng = random.Random(20240601)
    per_thread = 250
    for _ in range(40):
        plans = [[rng.randint(1, 64) for _ in range(per_thread)] for _ in range(THREADS)]
        total = sum(map(sum, plans))
        counter = RunCapacityCounter(rng.randint(total // 4, total - 1))

        results = _race(counter, plans)

        accepted = [n for thread in results for n, ok in thread if ok]
        refused = [n for thread in results for n, ok in thread if not ok]
        assert counter.used == sum(accepted) <= counter.limit
        assert refused, "the limit was meant to be reached"
        # Usage only grows, so every refusal must still not fit in what is left at the end.
        assert min(refused) > counter.remaining
