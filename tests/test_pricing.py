"""Prices: what a user relies on when a money budget turns tokens into dollars.

- GenaiPrices agrees exactly with genai-prices' own ``calc_price`` (real models of several
  providers, tiered ones included, and every model of the bundled data), reads only the bundled
  data, and records its version;
- the worst case is never below the cost of a usage within its bounds (Hypothesis), tiers
  included;
- arithmetic is exact, whatever the thread's decimal context;
- an unknown model raises an error that names it and says how to give a price;
- PriceTable looks up its own prices first, then its fallback;
- integer units (picodollars) round-trip and round holds up; every price of the data is checked;
- bad input raises, names the argument, and makes or changes nothing.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import datetime, timezone
from decimal import Decimal, localcontext
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diagnosis_harness import HarnessError
from diagnosis_harness.pricing import (
    USD_PER_UNIT,
    GenaiPrices,
    ModelPrice,
    PriceTable,
    PriceTier,
    UnknownPrice,
    from_units,
    to_units,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from genai_prices.types import ModelInfo, Provider

needs_genai_prices = pytest.mark.skipif(
    find_spec("genai_prices") is None, reason="genai-prices (the prices extra) is Python 3.11+"
)

# One instant for both sides of every comparison: some prices in the data change with the date
# or the time of day, and calc_price defaults to now.
AT = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)

LLAMA = ModelPrice(input_per_mtok=Decimal("0.20"), output_per_mtok=Decimal("0.60"))


# -- GenaiPrices agrees with genai-prices ----------------------------------------------------------


def _calc(model: str, provider: str | None, **usage: int) -> Decimal:
    import genai_prices  # noqa: PLC0415 -- Python 3.11+ only; the tests using it are skipped before

    result = genai_prices.calc_price(
        genai_prices.Usage(**usage), model, provider_id=provider, genai_request_timestamp=AT
    )
    return result.total_price


REAL_MODELS = [
    ("gpt-4o", "openai"),
    ("gpt-4o-mini", None),  # found by genai-prices' model matching alone
    ("gpt-5.4-pro", "openai"),  # input and output tiered above 272k input tokens
    ("claude-sonnet-4-5", "anthropic"),  # tiered above 200k, with cache read and write prices
    ("claude-haiku-5-5", "anthropic"),  # tiered above 100k
    ("gemini-2.5-pro", "google"),  # tiered above 200k
    ("mistral-large-latest", "mistral"),
    ("deepseek-chat", "deepseek"),
    ("sonar", "perplexity"),  # a price per request besides its tokens
]

USAGES = [
    {"input_tokens": 0, "output_tokens": 0},
    {"input_tokens": 1, "output_tokens": 1},
    {"input_tokens": 1234, "output_tokens": 567},
    {"input_tokens": 5000, "output_tokens": 100, "cache_read_tokens": 4000},
    {"input_tokens": 5000, "output_tokens": 100, "cache_write_tokens": 3000},
    {
        "input_tokens": 5000,
        "output_tokens": 9,
        "cache_write_tokens": 3000,
        "cache_write_1h_tokens": 2000,
    },
    {"input_tokens": 100_000, "output_tokens": 8000, "cache_read_tokens": 1},
    {"input_tokens": 100_001, "output_tokens": 8000},  # past claude-haiku-5-5's threshold
    {"input_tokens": 200_000, "output_tokens": 8000},  # at a threshold: still the base price
    {"input_tokens": 200_001, "output_tokens": 8000, "cache_read_tokens": 100_000},
    {
        "input_tokens": 250_000,
        "output_tokens": 1,
        "cache_read_tokens": 10,
        "cache_write_tokens": 200_000,
        "cache_write_1h_tokens": 150_000,
    },
    {"input_tokens": 272_001, "output_tokens": 32_000, "cache_write_tokens": 1000},
    {"input_tokens": 10**7, "output_tokens": 10**6},
]


@needs_genai_prices
@pytest.mark.parametrize(("model", "provider"), REAL_MODELS)
def test_genai_prices_costs_agree_with_calc_price_on_real_models(
    model: str, provider: str | None
) -> None:
    price = GenaiPrices().model_price(model, provider=provider, at=AT)
    for usage in USAGES:
        assert price.cost(**usage) == _calc(model, provider, **usage), (model, usage)


@needs_genai_prices
def test_the_real_models_include_tiers_and_a_price_per_request() -> None:
    """The agreement above covers what it claims: were a tier or the per-request price dropped
    in conversion, these would fail before the agreement test could pass vacuously."""
    prices = GenaiPrices()
    sonnet = prices.model_price("claude-sonnet-4-5", provider="anthropic", at=AT)
    assert [tier.above_input_tokens for tier in sonnet.tiers] == [200_000]
    assert sonnet.cache_write_1h_per_mtok is not None  # one-hour cache writes: their own price
    assert sonnet.tiers[0].cache_write_1h_per_mtok is not None
    assert sonnet.cost(input_tokens=200_001, output_tokens=0) > 2 * sonnet.cost(
        input_tokens=200_000, output_tokens=0
    )
    pro = prices.model_price("gpt-5.4-pro", provider="openai", at=AT)
    assert pro.tiers[0].output_per_mtok > pro.output_per_mtok
    assert prices.model_price("sonar", provider="perplexity", at=AT).per_request > 0


def _every_priced_model() -> Iterator[tuple[Provider, ModelInfo]]:
    from genai_prices.data import providers  # noqa: PLC0415

    for provider in providers:
        for model in provider.models:
            standard = model.get_prices(AT)
            if standard.input_mtok is not None and standard.output_mtok is not None:
                yield provider, model


@needs_genai_prices
def test_every_model_of_the_data_costs_what_genai_prices_says() -> None:
    """Every model the data prices by text tokens, at every threshold it has and one past it:
    the conversion (tiers merged across prices, cache prices, price per request) loses nothing."""
    from diagnosis_harness.pricing import _from_genai  # noqa: PLC0415

    checked = 0
    for provider, info in _every_priced_model():
        genai_price = info.get_prices(AT)
        price = _from_genai(genai_price, info.id, provider.id)
        sizes = {0, 1, 777}
        for tier in price.tiers:
            sizes |= {tier.above_input_tokens, tier.above_input_tokens + 1}
        for size in sorted(sizes):
            cached = size // 3
            for usage in (
                {"input_tokens": size, "output_tokens": 321},
                {"input_tokens": size, "output_tokens": 5, "cache_read_tokens": cached},
                {"input_tokens": size, "output_tokens": 0, "cache_write_tokens": cached},
                {
                    "input_tokens": size,
                    "output_tokens": 1,
                    "cache_read_tokens": cached,
                    "cache_write_tokens": cached,
                    "cache_write_1h_tokens": cached // 2,
                },
            ):
                expected = info.calc_price(
                    _usage(usage), provider, genai_request_timestamp=AT
                ).total_price
                assert price.cost(**usage) == expected, (provider.id, info.id, usage)
        checked += 1
    assert checked > 500  # the walk walked: the data has well over a thousand priced models


def _usage(usage: dict[str, int]) -> Any:
    from genai_prices import Usage  # noqa: PLC0415

    return Usage(**usage)


@needs_genai_prices
def test_genai_prices_reads_the_bundled_data_only() -> None:
    """Prices UpdatePrices fetched into genai-prices' process-wide snapshot are not used: the
    data version recorded must name the data every price came from."""
    import genai_prices  # noqa: PLC0415
    from genai_prices import data_snapshot  # noqa: PLC0415
    from genai_prices.types import ClauseEquals, ModelInfo, Provider  # noqa: PLC0415
    from genai_prices.types import ModelPrice as GenaiModelPrice  # noqa: PLC0415

    bundled = GenaiPrices().model_price("gpt-4o", provider="openai", at=AT)
    fetched = data_snapshot.DataSnapshot(
        providers=[
            Provider(
                id="openai",
                name="OpenAI",
                api_pattern="x",
                models=[
                    ModelInfo(
                        id="gpt-4o",
                        match=ClauseEquals(equals="gpt-4o"),
                        prices=GenaiModelPrice(input_mtok=Decimal(999), output_mtok=Decimal(999)),
                    )
                ],
            )
        ],
        from_auto_update=True,
    )
    data_snapshot.set_custom_snapshot(fetched)
    try:
        assert _calc("gpt-4o", "openai", input_tokens=10**6, output_tokens=0) == 999  # in effect
        assert GenaiPrices().model_price("gpt-4o", provider="openai", at=AT) == bundled
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert GenaiPrices().data_version == f"genai-prices {genai_prices.__version__} (bundled data)"


OFFLINE = """
import socket

class NoNetwork(socket.socket):
    def connect(self, *args, **kwargs):
        raise AssertionError("GenaiPrices used the network")

    connect_ex = connect

socket.socket = NoNetwork
socket.create_connection = NoNetwork.connect

from diagnosis_harness.pricing import GenaiPrices

prices = GenaiPrices()
print(prices.model_price("gpt-4o", provider="openai").input_per_mtok)
"""


@needs_genai_prices
def test_genai_prices_works_offline() -> None:
    """A fresh interpreter whose sockets cannot connect: making a GenaiPrices and pricing a
    model needs no network (genai-prices fetches only when UpdatePrices is started)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    result = subprocess.run(
        [sys.executable, "-c", OFFLINE], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.5"


@needs_genai_prices
def test_a_model_the_data_lists_without_token_prices_is_not_free() -> None:
    free = next(
        (provider, info)
        for provider, info in _every_model()
        if info.get_prices(AT).input_mtok is None
    )
    with pytest.raises(UnknownPrice, match="no input"):
        GenaiPrices().model_price(free[1].id, provider=free[0].id, at=AT)


def _every_model() -> Iterator[tuple[Provider, ModelInfo]]:
    from genai_prices.data import providers  # noqa: PLC0415

    for provider in providers:
        for model in provider.models:
            yield provider, model


# -- unknown prices --------------------------------------------------------------------------------


@needs_genai_prices
@pytest.mark.parametrize("provider", [None, "openai", "no-such-provider"])
def test_an_unknown_model_is_refused_with_what_to_do(provider: str | None) -> None:
    with pytest.raises(UnknownPrice) as raised:
        GenaiPrices().model_price("my-fine-tune-7", provider=provider)
    message = str(raised.value)
    assert "'my-fine-tune-7'" in message
    assert raised.value.model == "my-fine-tune-7"
    assert raised.value.provider == provider
    if provider is not None:
        assert f"provider {provider!r}" in message
    assert "PriceTable({'my-fine-tune-7': ModelPrice(input_per_mtok=Decimal(" in message
    assert "never priced as free" in message
    assert isinstance(raised.value, LookupError)
    assert isinstance(raised.value, HarnessError)


def test_a_table_without_the_model_nor_a_fallback_refuses_it() -> None:
    with pytest.raises(UnknownPrice, match=r"'gpt-4o'.*not in the PriceTable.*no fallback"):
        PriceTable({"my-llama": LLAMA}).model_price("gpt-4o")


# -- PriceTable ------------------------------------------------------------------------------------


class _Recording:
    """A Prices that knows one model and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    def model_price(self, model: str, *, provider: str | None = None) -> ModelPrice:
        self.asked.append((model, provider))
        if model == "shared":
            return ModelPrice(input_per_mtok=Decimal(1), output_per_mtok=Decimal(2))
        raise UnknownPrice(model, provider, "the recording fallback does not know it")


def test_a_price_table_looks_up_its_own_prices_then_its_fallback() -> None:
    fallback = _Recording()
    own_shared = ModelPrice(input_per_mtok=Decimal(9), output_per_mtok=Decimal(9))
    table = PriceTable({"my-llama": LLAMA, "mine": own_shared}, fallback=fallback)
    assert table.model_price("my-llama") is LLAMA
    assert table.model_price("mine", provider="any") is own_shared
    assert fallback.asked == []  # the table's own prices win, the fallback is not asked
    assert table.model_price("shared", provider="acme").input_per_mtok == 1
    assert fallback.asked == [("shared", "acme")]  # the provider is passed on
    with pytest.raises(UnknownPrice, match=r"nor in its fallback.*recording fallback") as raised:
        table.model_price("nobody", provider="acme")
    assert (raised.value.model, raised.value.provider) == ("nobody", "acme")


@needs_genai_prices
def test_a_price_table_falls_back_to_genai_prices() -> None:
    table = PriceTable({"my-llama": LLAMA}, fallback=GenaiPrices())
    assert table.model_price("my-llama") is LLAMA
    gpt = table.model_price("gpt-4o", provider="openai")
    assert gpt.cost(input_tokens=10**6, output_tokens=0) == _calc(
        "gpt-4o", "openai", input_tokens=10**6, output_tokens=0
    )


def test_a_price_table_is_a_copy() -> None:
    prices = {"my-llama": LLAMA}
    table = PriceTable(prices)
    prices["my-llama"] = ModelPrice(input_per_mtok=Decimal(0), output_per_mtok=Decimal(0))
    prices["other"] = LLAMA
    assert table.model_price("my-llama") is LLAMA
    with pytest.raises(UnknownPrice):
        table.model_price("other")


# -- cost and worst case ---------------------------------------------------------------------------

TIERED = ModelPrice(
    input_per_mtok=Decimal("3"),
    output_per_mtok=Decimal("15"),
    cache_read_per_mtok=Decimal("0.30"),
    cache_write_per_mtok=Decimal("3.75"),
    tiers=(
        PriceTier(
            above_input_tokens=200_000,
            input_per_mtok=Decimal("6"),
            output_per_mtok=Decimal("22.5"),
            cache_read_per_mtok=Decimal("0.60"),
            cache_write_per_mtok=Decimal("7.50"),
        ),
    ),
)


def test_cost_prices_each_kind_of_token_at_its_tier() -> None:
    assert TIERED.cost(input_tokens=1000, output_tokens=100) == Decimal("0.0045")
    assert TIERED.cost(
        input_tokens=1000, output_tokens=0, cache_read_tokens=600, cache_write_tokens=300
    ) == Decimal("0.0003") + Decimal("0.00018") + Decimal("0.001125")
    # at the threshold: the base; one past it, every token at the tier's price
    assert TIERED.cost(input_tokens=200_000, output_tokens=1000) == Decimal("0.615")
    assert TIERED.cost(input_tokens=200_001, output_tokens=1000) == Decimal("1.222506")
    assert LLAMA.cost(input_tokens=0, output_tokens=0) == 0
    with_fee = dataclasses.replace(LLAMA, per_request=Decimal("0.005"))
    assert with_fee.cost(input_tokens=0, output_tokens=0) == Decimal("0.005")


def test_amounts_are_written_as_a_reader_writes_them() -> None:
    """No trailing zeros from the arithmetic, and no exponent for a whole number of dollars."""
    assert str(LLAMA.cost(input_tokens=12_000, output_tokens=800)) == "0.00288"
    ten = ModelPrice(input_per_mtok=Decimal(10), output_per_mtok=Decimal("2.50"))
    assert str(ten.cost(input_tokens=10**6, output_tokens=0)) == "10"
    assert str(ten.worst_case(input_tokens_bound=10**6, max_output_tokens=4 * 10**6)) == "20"
    assert str(ten.cost(input_tokens=0, output_tokens=0)) == "0"


def test_one_hour_cache_writes_have_their_own_price() -> None:
    one_hour = dataclasses.replace(TIERED, cache_write_1h_per_mtok=Decimal(6))
    usage = {"input_tokens": 1000, "output_tokens": 0, "cache_write_tokens": 300}
    assert TIERED.cost(**usage, cache_write_1h_tokens=100) == TIERED.cost(**usage)  # no price: 5m
    # 700 input at 3, 200 five-minute writes at 3.75, 100 one-hour writes at 6
    assert one_hour.cost(**usage, cache_write_1h_tokens=100) == Decimal("0.00345")
    # the dearest input price, below the threshold: the one-hour write
    assert one_hour.worst_case(input_tokens_bound=1000, max_output_tokens=0) == Decimal("0.006")


def test_the_worst_case_takes_the_dearest_price_the_bounds_can_reach() -> None:
    # below the threshold: the cache write price is the dearest input price
    assert TIERED.worst_case(input_tokens_bound=1000, max_output_tokens=100) == Decimal(
        "0.00375"
    ) + Decimal("0.0015")
    # a bound past the threshold reaches the tier, for every token
    assert TIERED.worst_case(input_tokens_bound=200_001, max_output_tokens=1000) == Decimal(
        "1.5000075"
    ) + Decimal("0.0225")
    cheaper_later = ModelPrice(
        input_per_mtok=Decimal(5),
        output_per_mtok=Decimal(5),
        tiers=(
            PriceTier(above_input_tokens=10, input_per_mtok=Decimal(1), output_per_mtok=Decimal(1)),
        ),
    )
    # a later tier that is cheaper does not lower the worst case: a smaller input pays more
    assert cheaper_later.worst_case(input_tokens_bound=1000, max_output_tokens=1000) == Decimal(
        "0.01"
    )
    assert cheaper_later.cost(input_tokens=10, output_tokens=1000) == Decimal("0.00505")


prices = st.decimals(min_value=0, max_value=1000, places=7, allow_nan=False, allow_infinity=False)
optional_prices = st.none() | prices


@st.composite
def model_prices(draw: st.DrawFn) -> ModelPrice:
    thresholds = sorted(draw(st.sets(st.integers(0, 500_000), max_size=3)))
    return ModelPrice(
        input_per_mtok=draw(prices),
        output_per_mtok=draw(prices),
        cache_read_per_mtok=draw(optional_prices),
        cache_write_per_mtok=draw(optional_prices),
        cache_write_1h_per_mtok=draw(optional_prices),
        per_request=draw(prices),
        tiers=tuple(
            PriceTier(
                above_input_tokens=above,
                input_per_mtok=draw(prices),
                output_per_mtok=draw(prices),
                cache_read_per_mtok=draw(optional_prices),
                cache_write_per_mtok=draw(optional_prices),
                cache_write_1h_per_mtok=draw(optional_prices),
            )
            for above in thresholds
        ),
    )


@given(
    price=model_prices(),
    input_bound=st.integers(0, 1_000_000),
    max_output=st.integers(0, 200_000),
    data=st.data(),
)
def test_the_worst_case_is_never_below_the_cost_within_its_bounds(
    price: ModelPrice, input_bound: int, max_output: int, data: st.DataObject
) -> None:
    input_tokens = data.draw(st.integers(0, input_bound), label="input_tokens")
    cache_read = data.draw(st.integers(0, input_tokens), label="cache_read_tokens")
    cache_write = data.draw(st.integers(0, input_tokens - cache_read), label="cache_write_tokens")
    cache_write_1h = data.draw(st.integers(0, cache_write), label="cache_write_1h_tokens")
    output_tokens = data.draw(st.integers(0, max_output), label="output_tokens")
    cost = price.cost(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cache_write_1h_tokens=cache_write_1h,
    )
    assert cost <= price.worst_case(input_tokens_bound=input_bound, max_output_tokens=max_output)


@given(
    price=model_prices(),
    input_bound=st.integers(0, 1_000_000),
    max_output=st.integers(0, 200_000),
    data=st.data(),
)
def test_the_worst_case_of_a_request_that_writes_no_cache_is_never_below_its_cost(
    price: ModelPrice, input_bound: int, max_output: int, data: st.DataObject
) -> None:
    input_tokens = data.draw(st.integers(0, input_bound), label="input_tokens")
    cache_read = data.draw(st.integers(0, input_tokens), label="cache_read_tokens")
    output_tokens = data.draw(st.integers(0, max_output), label="output_tokens")
    cost = price.cost(
        input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cache_read
    )
    worst = price.worst_case(
        input_tokens_bound=input_bound, max_output_tokens=max_output, writes_cache=False
    )
    assert (
        cost
        <= worst
        <= price.worst_case(input_tokens_bound=input_bound, max_output_tokens=max_output)
    )


def test_a_request_that_writes_no_cache_holds_less() -> None:
    # below the threshold: the input price, not the cache write's 3.75
    assert TIERED.worst_case(
        input_tokens_bound=1000, max_output_tokens=100, writes_cache=False
    ) == Decimal("0.003") + Decimal("0.0015")
    with pytest.raises(TypeError, match="writes_cache must be a bool, got 0"):
        TIERED.worst_case(input_tokens_bound=1, max_output_tokens=1, writes_cache=0)  # type: ignore[arg-type]  # the bad input under test


@given(price=model_prices(), input_tokens=st.integers(0, 1_000_000), output=st.integers(0, 10**5))
def test_the_worst_case_of_a_usage_s_own_counts_is_reached_when_it_pays_the_dearest(
    price: ModelPrice, input_tokens: int, output: int
) -> None:
    """Not a bound pulled from the air: with no cache prices and no tiers, the worst case of a
    usage's own counts is its cost."""
    plain = dataclasses.replace(
        price,
        cache_read_per_mtok=None,
        cache_write_per_mtok=None,
        cache_write_1h_per_mtok=None,
        tiers=(),
    )
    assert plain.worst_case(
        input_tokens_bound=input_tokens, max_output_tokens=output
    ) == plain.cost(input_tokens=input_tokens, output_tokens=output)


def test_arithmetic_is_exact_whatever_the_thread_s_decimal_context() -> None:
    price = ModelPrice(
        input_per_mtok=Decimal("0.123456789012345678901234567890123"),
        output_per_mtok=Decimal("7.000000000000000000000000000000001"),
    )
    # 123456789.012345678901234567890123 + 7000000000.000000000000000000000001, by hand: the
    # default context (28 digits) would round the sum itself
    expected = Decimal("7123456789.012345678901234567890124")
    with localcontext() as ctx:
        ctx.prec = 3  # a user's own context must neither round our sums nor be changed by them
        cost = price.cost(input_tokens=10**15, output_tokens=10**15)
        worst = price.worst_case(input_tokens_bound=10**15, max_output_tokens=10**15)
        assert ctx.prec == 3
    assert cost == worst == expected
    assert ModelPrice(input_per_mtok=Decimal("0.1"), output_per_mtok=Decimal("0.2")).cost(
        input_tokens=10**6, output_tokens=10**6
    ) == Decimal("0.3")  # not 0.30000000000000004


# -- integer units ---------------------------------------------------------------------------------


def test_a_unit_is_a_picodollar() -> None:
    assert Decimal("1E-12") == USD_PER_UNIT
    assert to_units(Decimal("2.00")) == 2 * 10**12
    assert from_units(1) == USD_PER_UNIT
    assert to_units(Decimal("1E-13")) == 1  # a fraction of a unit is held as a whole one
    assert to_units(Decimal("1.0000000000001")) == 10**12 + 1
    assert to_units(Decimal(0), rounding="exact") == 0
    with pytest.raises(ValueError, match="not a whole number of picodollars"):
        to_units(Decimal("1E-13"), rounding="exact")


@given(units=st.integers(0, 2**80))
def test_units_round_trip(units: int) -> None:
    assert to_units(from_units(units), rounding="exact") == units


@given(amount=st.decimals(min_value=0, max_value=10**6, allow_nan=False, allow_infinity=False))
def test_units_round_a_hold_up_by_less_than_one_unit(amount: Decimal) -> None:
    held = from_units(to_units(amount))
    assert amount <= held < amount + USD_PER_UNIT


def _per_token_prices() -> Iterator[tuple[str, str, str, Decimal]]:
    from genai_prices.types import ModelPrice as GenaiModelPrice  # noqa: PLC0415
    from genai_prices.types import TieredPrices  # noqa: PLC0415

    for provider, info in _every_model():
        all_prices = (
            [info.prices]
            if isinstance(info.prices, GenaiModelPrice)
            else [conditional.prices for conditional in info.prices]
        )
        all_prices += [variant.prices for variant in info.price_variants or ()]
        for price in all_prices:
            for key, value in price.__dict__.items():
                per = 10**6 if key.endswith("_mtok") else 10**3 if key.endswith("_kcount") else None
                if per is None or value is None:
                    continue
                values = (
                    [value.base, *(tier.price for tier in value.tiers)]
                    if isinstance(value, TieredPrices)
                    else [value]
                )
                for each in values:
                    yield provider.id, info.id, key, each / per


@needs_genai_prices
def test_every_price_in_the_data_is_a_whole_number_of_units_or_a_float_artifact() -> None:
    """The picodollar is fine enough for every price the data states on purpose: a per-token
    (or per-request) price that is not a whole number of picodollars is a float's or a repeating
    decimal's artifact (15 or more significant digits, e.g. ``0.13999999999999999`` or
    ``0.0416666666666667`` per million tokens), which a hold rounds up by less than a unit."""
    artifacts = []
    walked = 0
    for provider, model, key, per_token in _per_token_prices():
        walked += 1
        units = per_token.scaleb(12)
        if units != units.to_integral_value():
            artifacts.append((provider, model, key, per_token))
            assert len(per_token.normalize().as_tuple().digits) >= 15, (provider, model, key)
        held = from_units(to_units(per_token))
        assert per_token <= held < per_token + USD_PER_UNIT
    assert walked > 3000
    assert len(artifacts) < 100  # the few found in genai-prices 0.2.3: 28


# -- bad input -------------------------------------------------------------------------------------

NOT_A_PRICE: list[tuple[object, type[Exception], str]] = [
    (0.1, TypeError, r"not a float \(money is exact\): write Decimal\('0.1'\)"),
    (1, TypeError, "must be a Decimal"),
    (True, TypeError, "must be a Decimal"),
    ("0.1", TypeError, "must be a Decimal"),
    (None, TypeError, "must be a Decimal"),
    (Decimal("-0.01"), ValueError, ">= 0"),
    (Decimal("NaN"), ValueError, "finite"),
    (Decimal("sNaN"), ValueError, "finite"),
    (Decimal("Infinity"), ValueError, "finite"),
    (Decimal("-Infinity"), ValueError, "finite"),
]

PRICE_FIELDS = [
    "input_per_mtok",
    "output_per_mtok",
    "cache_read_per_mtok",
    "cache_write_per_mtok",
    "cache_write_1h_per_mtok",
]


@pytest.mark.parametrize(("bad", "error", "says"), NOT_A_PRICE)
@pytest.mark.parametrize("field", [*PRICE_FIELDS, "per_request"])
def test_a_model_price_refuses_what_is_not_an_exact_price(
    field: str, bad: object, error: type[Exception], says: str
) -> None:
    if bad is None and field.startswith("cache_"):
        return  # None is allowed there: the input price
    good: dict[str, Any] = {"input_per_mtok": Decimal(1), "output_per_mtok": Decimal(2)}
    with pytest.raises(error, match=says) as raised:
        ModelPrice(**{**good, field: bad})
    assert field in str(raised.value)


@pytest.mark.parametrize(("bad", "error", "says"), NOT_A_PRICE)
@pytest.mark.parametrize("field", PRICE_FIELDS)
def test_a_tier_refuses_what_is_not_an_exact_price(
    field: str, bad: object, error: type[Exception], says: str
) -> None:
    if bad is None and field.startswith("cache_"):
        return
    good: dict[str, Any] = {
        "above_input_tokens": 10,
        "input_per_mtok": Decimal(1),
        "output_per_mtok": Decimal(2),
    }
    with pytest.raises(error, match=says) as raised:
        PriceTier(**{**good, field: bad})
    assert field in str(raised.value)


@pytest.mark.parametrize(
    ("above", "error"), [(-1, ValueError), (True, TypeError), (1.0, TypeError), ("1", TypeError)]
)
def test_a_tier_refuses_a_threshold_that_is_not_a_count(
    above: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="above_input_tokens"):
        PriceTier(above_input_tokens=above, input_per_mtok=Decimal(1), output_per_mtok=Decimal(1))  # type: ignore[arg-type]  # the bad input under test


def _tier(above: int) -> PriceTier:
    return PriceTier(
        above_input_tokens=above, input_per_mtok=Decimal(1), output_per_mtok=Decimal(1)
    )


@pytest.mark.parametrize(
    ("tiers", "error", "says"),
    [
        ([_tier(1)], TypeError, "tuple of PriceTier"),
        ((_tier(1), "tier"), TypeError, "tuple of PriceTier"),
        ((_tier(5), _tier(1)), ValueError, "strictly increasing"),
        ((_tier(5), _tier(5)), ValueError, "strictly increasing"),
    ],
)
def test_a_model_price_refuses_tiers_out_of_order(
    tiers: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        ModelPrice(input_per_mtok=Decimal(1), output_per_mtok=Decimal(1), tiers=tiers)  # type: ignore[arg-type]  # the bad input under test


def test_prices_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LLAMA.input_per_mtok = Decimal(0)  # type: ignore[misc]  # the mutation under test
    assert LLAMA.input_per_mtok == Decimal("0.20")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.final marks a class from 3.11")
def test_prices_are_final() -> None:
    for cls in (ModelPrice, PriceTier, PriceTable, GenaiPrices):
        assert getattr(cls, "__final__", False), cls


TOKEN_ARGUMENTS = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
]


@pytest.mark.parametrize("argument", TOKEN_ARGUMENTS)
@pytest.mark.parametrize(
    ("bad", "error"), [(-1, ValueError), (True, TypeError), (1.5, TypeError), (None, TypeError)]
)
def test_cost_refuses_a_token_count_that_is_not_one(
    argument: str, bad: object, error: type[Exception]
) -> None:
    usage: dict[str, Any] = {"input_tokens": 10, "output_tokens": 10, argument: bad}
    with pytest.raises(error, match=argument):
        TIERED.cost(**usage)


def test_cost_refuses_cached_tokens_beyond_the_input() -> None:
    with pytest.raises(ValueError, match=r"part of input_tokens.*6 \+ 5 > 10"):
        TIERED.cost(input_tokens=10, output_tokens=0, cache_read_tokens=6, cache_write_tokens=5)
    with pytest.raises(ValueError, match=r"part of cache_write_tokens.*4 > 3"):
        TIERED.cost(input_tokens=10, output_tokens=0, cache_write_tokens=3, cache_write_1h_tokens=4)


@pytest.mark.parametrize("argument", ["input_tokens_bound", "max_output_tokens"])
@pytest.mark.parametrize(("bad", "error"), [(-1, ValueError), (False, TypeError), (2.0, TypeError)])
def test_the_worst_case_refuses_a_bound_that_is_not_a_count(
    argument: str, bad: object, error: type[Exception]
) -> None:
    bounds: dict[str, Any] = {"input_tokens_bound": 10, "max_output_tokens": 10, argument: bad}
    with pytest.raises(error, match=argument):
        TIERED.worst_case(**bounds)


def _lookups() -> list[Any]:
    lookups: list[Any] = [PriceTable({"my-llama": LLAMA})]
    if find_spec("genai_prices") is not None:
        lookups.append(GenaiPrices())
    return lookups


@pytest.mark.parametrize(
    ("model", "provider", "error", "says"),
    [
        ("", None, ValueError, "model must not be blank"),
        ("  ", None, ValueError, "model must not be blank"),
        (None, None, TypeError, "model must be a str"),
        (7, None, TypeError, "model must be a str"),
        ("my-llama", "", ValueError, "provider must not be blank"),
        ("my-llama", 3, TypeError, "provider must be a str"),
    ],
)
def test_a_lookup_refuses_a_blank_or_non_str_name(
    model: object, provider: object, error: type[Exception], says: str
) -> None:
    for lookup in _lookups():
        with pytest.raises(error, match=says):
            lookup.model_price(model, provider=provider)


@needs_genai_prices
@pytest.mark.parametrize("at", [datetime(2026, 6, 1), "2026-06-01", 0])  # the naive one: no tzinfo
def test_genai_prices_refuses_a_time_that_is_not_an_aware_datetime(at: object) -> None:
    with pytest.raises(TypeError, match="at must be an aware datetime"):
        GenaiPrices().model_price("gpt-4o", at=at)  # type: ignore[arg-type]  # the bad input under test


@pytest.mark.parametrize(
    ("prices", "fallback", "says"),
    [
        ([("my-llama", LLAMA)], None, "prices must be a mapping"),
        ({"": LLAMA}, None, "a model name of prices must not be blank"),
        ({3: LLAMA}, None, "a model name of prices must be a str"),
        (
            {"my-llama": {"input_per_mtok": Decimal(1)}},
            None,
            r"prices\['my-llama'\] must be a ModelPrice",
        ),
        ({"my-llama": LLAMA}, "GenaiPrices", "fallback must be None or a Prices"),
        ({"my-llama": LLAMA}, object(), "fallback must be None or a Prices"),
    ],
)
def test_a_price_table_refuses_what_is_not_a_table_of_prices(
    prices: Any, fallback: Any, says: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=says):
        PriceTable(prices, fallback=fallback)


@pytest.mark.parametrize(
    ("amount", "error", "says"),
    [
        (0.5, TypeError, r"amount must be a Decimal of US dollars, not a float"),
        (5, TypeError, "amount must be a Decimal"),
        (Decimal("-1E-12"), ValueError, "amount must be a Decimal >= 0"),
        (Decimal("NaN"), ValueError, "amount must be a finite"),
    ],
)
def test_to_units_refuses_what_is_not_an_amount(
    amount: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        to_units(amount)  # type: ignore[arg-type]  # the bad input under test


def test_to_units_refuses_an_unknown_rounding() -> None:
    with pytest.raises(ValueError, match="rounding must be 'up' or 'exact', got 'down'"):
        to_units(Decimal(1), rounding="down")  # type: ignore[arg-type]  # the bad input under test


@pytest.mark.parametrize(
    ("units", "error"), [(-1, ValueError), (True, TypeError), (1.0, TypeError)]
)
def test_from_units_refuses_what_is_not_a_count(units: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="units"):
        from_units(units)  # type: ignore[arg-type]  # the bad input under test


def test_genai_prices_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys  # noqa: PLC0415

    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as on Python 3.10, or not installed
    with pytest.raises(ImportError, match=r"pip install 'diagnosis-harness\[prices\]'"):
        GenaiPrices()


@needs_genai_prices
@pytest.mark.parametrize(
    ("prices", "says"),
    [
        ({"output_mtok": Decimal(1)}, "no input token price"),
        ({"input_mtok": Decimal(1)}, "no output token price"),
        ({}, "no input or output token price"),
        ({"cache_read_mtok": Decimal(1)}, "no input or output token price"),
        (
            {"input_mtok": Decimal(1), "output_mtok": Decimal(1), "requests_kcount": "tiered"},
            "per-request price is tiered",
        ),
    ],
)
def test_a_price_genai_prices_states_in_part_is_refused(prices: dict[str, Any], says: str) -> None:
    from genai_prices.types import ModelPrice as GenaiModelPrice  # noqa: PLC0415
    from genai_prices.types import Tier, TieredPrices  # noqa: PLC0415

    from diagnosis_harness.pricing import _from_genai  # noqa: PLC0415

    if prices.get("requests_kcount") == "tiered":
        prices["requests_kcount"] = TieredPrices(
            base=Decimal(1), tiers=[Tier(start=5, price=Decimal(2))]
        )
    with pytest.raises(UnknownPrice, match=says) as raised:
        _from_genai(GenaiModelPrice(**prices), "odd-model", "acme")
    assert "'odd-model' of provider 'acme'" in str(raised.value)
