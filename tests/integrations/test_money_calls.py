"""Money on the governed openai and anthropic calls, through the real SDKs over real HTTP.

Each priced attempt holds its request's worst case before the request leaves (seen from the
loopback provider's handler while the request is in flight), settles the usage priced exactly
after it, lowers ``max_tokens`` to what the money left can pay for (seen in the body the provider
receives), refuses a model without a price before anything is reserved or sent, and never lets
settled + held pass the limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import socket
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from diagnosis_harness import (
    BudgetDimension,
    BudgetExhausted,
    BudgetLimits,
    CancellationReason,
    HarnessRetryExecutor,
    RunCancelled,
    RunContext,
    RunState,
    RunTerminated,
)
from diagnosis_harness.integrations import (
    DEFAULT_MAX_TOKENS,
    AsyncGovernedAnthropic,
    AsyncGovernedOpenAI,
    GovernedAnthropic,
    GovernedOpenAI,
    ModelRequest,
    TokenUsage,
    classify_sdk,
    input_bound,
)
from diagnosis_harness.integrations._anthropic import TOOLS_PROMPT_TOKENS
from diagnosis_harness.integrations._model_call import ModelCall
from diagnosis_harness.integrations.otel import (
    COST,
    COST_HELD,
    MAX_TOKENS_LOWERED,
    PRICE_DATA,
    HarnessTracing,
)
from diagnosis_harness.pricing import GenaiPrices, ModelPrice, PriceTable, UnknownPrice
from diagnosis_harness.testing import ManualClock
from racing import race

from .loopback import ANSWER, LoopbackServer, Reply, SeenRequest

# genai-prices (the `prices` extra) installs on Python 3.11+ only: the tests of GenaiPrices skip
# where it cannot be installed, the others run everywhere.
needs_genai_prices = pytest.mark.skipif(
    importlib.util.find_spec("genai_prices") is None, reason="genai-prices needs Python 3.11+"
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from diagnosis_harness.pricing import Prices

D = Decimal
KEY = "test-key-not-a-secret"
QUESTION = "why is checkout down?"

# $0.001 per input token, $0.01 per output token: round figures, so the tests' sums are exact.
GPT = ModelPrice(input_per_mtok=D("1000"), output_per_mtok=D("10000"))
# A cache write dearer than the input: held only for a request that can write to the cache.
CLAUDE = ModelPrice(
    input_per_mtok=D("1000"),
    output_per_mtok=D("10000"),
    cache_read_per_mtok=D("100"),
    cache_write_per_mtok=D("1250"),
)
TABLE = PriceTable({"gpt-test": GPT, "claude-test": CLAUDE})

OPENAI_PARAMS: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [{"role": "user", "content": QUESTION}],
}
ANTHROPIC_PARAMS: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": QUESTION}],
}


def _run(cost: Decimal | None = None, *, model_calls: int = 50) -> RunContext:
    limits = BudgetLimits(
        model_calls=model_calls,
        tool_calls=10,
        per_tool_calls=10,
        input_tokens=100_000,
        output_tokens=100_000,
        total_tokens=200_000,
        run_bytes=1 << 20,
        cost=cost,
    )
    return RunContext.create(
        session_id="s-1", run_id="r-1", limits=limits, timeout=600, clock=ManualClock()
    )


def _money(ctx: RunContext) -> tuple[Decimal, Decimal]:
    usage = ctx.budget.snapshot()
    return usage.cost, usage.cost_held


# -- one priced call, in each of the four flavours, created or streamed ---------------------------


@dataclass(frozen=True)
class Flavour:
    """One SDK in one world: ``ask`` makes one governed call and returns the governed client."""

    name: str
    ask: Callable[..., Any]
    params: dict[str, Any]
    price: ModelPrice
    max_tokens_key: str  # where the request's output limit goes in the body


def _sync_openai(
    server: LoopbackServer, ctx: RunContext, params: dict[str, Any], streamed: bool, **kw: Any
) -> GovernedOpenAI:
    with openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0) as client:
        governed = GovernedOpenAI(client, ctx, **kw)
        if streamed:
            chunks = list(governed.stream(**params))
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            assert governed.create(**params).choices[0].message.content == ANSWER
        return governed


def _async_openai(
    server: LoopbackServer, ctx: RunContext, params: dict[str, Any], streamed: bool, **kw: Any
) -> AsyncGovernedOpenAI:
    async def ask() -> AsyncGovernedOpenAI:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=server.openai_url, max_retries=0
        ) as client:
            governed = AsyncGovernedOpenAI(client, ctx, **kw)
            if streamed:
                stream = await governed.stream(**params)
                assert [chunk async for chunk in stream]
            else:
                completion = await governed.create(**params)
                assert completion.choices[0].message.content == ANSWER
            return governed

    return asyncio.run(ask())


def _sync_anthropic(
    server: LoopbackServer, ctx: RunContext, params: dict[str, Any], streamed: bool, **kw: Any
) -> GovernedAnthropic:
    with anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0) as client:
        governed = GovernedAnthropic(client, ctx, **kw)
        if streamed:
            assert list(governed.stream(**params))
        else:
            assert governed.create(**params).content
        return governed


def _async_anthropic(
    server: LoopbackServer, ctx: RunContext, params: dict[str, Any], streamed: bool, **kw: Any
) -> AsyncGovernedAnthropic:
    async def ask() -> AsyncGovernedAnthropic:
        async with anthropic.AsyncAnthropic(
            api_key=KEY, base_url=server.url, max_retries=0
        ) as client:
            governed = AsyncGovernedAnthropic(client, ctx, **kw)
            if streamed:
                stream = await governed.stream(**params)
                assert [event async for event in stream]
            else:
                assert (await governed.create(**params)).content
            return governed

    return asyncio.run(ask())


FLAVOURS = [
    Flavour("openai", _sync_openai, OPENAI_PARAMS, GPT, "max_completion_tokens"),
    Flavour("async-openai", _async_openai, OPENAI_PARAMS, GPT, "max_completion_tokens"),
    Flavour("anthropic", _sync_anthropic, ANTHROPIC_PARAMS, CLAUDE, "max_tokens"),
    Flavour("async-anthropic", _async_anthropic, ANTHROPIC_PARAMS, CLAUDE, "max_tokens"),
]
flavours = pytest.mark.parametrize("flavour", FLAVOURS, ids=[f.name for f in FLAVOURS])
streamed = pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])


def _worst(price: ModelPrice, params: dict[str, Any], max_tokens: int) -> Decimal:
    """What a request with ``params`` (no tools, no cache_control) holds for ``max_tokens``."""
    return price.worst_case(
        input_tokens_bound=input_bound(params),
        max_output_tokens=max_tokens,
        writes_cache=False,
    )


def _watch(server: LoopbackServer, ctx: RunContext) -> list[tuple[Decimal, Decimal]]:
    """(settled, held) as each request reaches the provider: read while it is in flight."""
    seen: list[tuple[Decimal, Decimal]] = []

    def on_request(_request: SeenRequest) -> None:
        seen.append(_money(ctx))

    server.on_request = on_request
    return seen


@flavours
@streamed
@pytest.mark.parametrize("limit", [None, D("100")], ids=["no-limit", "limit"])
def test_the_worst_case_is_held_in_flight_and_the_usage_settled_exactly_after(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool, limit: Decimal | None
) -> None:
    ctx = _run(limit)
    in_flight = _watch(loopback, ctx)
    loopback.script(Reply(input_tokens=30, output_tokens=7))
    governed = flavour.ask(
        loopback, ctx, flavour.params, streamed, policy="diagnosis_agent", prices=TABLE
    )
    asked = flavour.params.get("max_tokens", DEFAULT_MAX_TOKENS)
    worst = _worst(flavour.price, flavour.params, asked)
    assert in_flight == [(D(0), worst)]  # held before the request left, nothing settled yet
    cost = flavour.price.cost(input_tokens=30, output_tokens=7)
    assert cost == D("0.1")  # 30 x $0.001 + 7 x $0.01
    assert _money(ctx) == (cost, D(0))  # settled exactly, the hold released
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.input_tokens, usage.output_tokens) == (1, 30, 7)
    (body,) = (request.body for request in loopback.requests)
    if limit is None and "max_tokens" not in flavour.params:
        assert flavour.max_tokens_key not in body  # no money limit: nothing added
    else:
        assert body[flavour.max_tokens_key] == asked
    (charge,) = governed.charges
    assert (charge.held, charge.cost, charge.lowered) == (worst, cost, False)
    assert charge.usage == TokenUsage(30, 7)


@flavours
@streamed
def test_max_tokens_is_lowered_to_what_the_money_left_can_pay_for(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    limit = D("0.5")
    ctx = _run(limit)
    in_flight = _watch(loopback, ctx)
    governed = flavour.ask(
        loopback, ctx, flavour.params, streamed, policy="diagnosis_agent", prices=TABLE
    )
    # What $0.50 pays for: the input bound at $0.001 a token, then $0.01 per output token.
    affordable = int((limit - input_bound(flavour.params) * D("0.001")) / D("0.01"))
    assert 1 <= affordable < flavour.params.get("max_tokens", DEFAULT_MAX_TOKENS)
    (body,) = (request.body for request in loopback.requests)
    assert body[flavour.max_tokens_key] == affordable  # the provider saw the lowered limit
    (charge,) = governed.charges
    assert (charge.max_tokens, charge.lowered) == (affordable, True)
    # The run held what the money left paid for, in the reservation's one decision: the sent
    # max_tokens is the most whose worst case fits that hold.
    ((settled, held),) = in_flight
    assert settled == D(0)
    worst = _worst(flavour.price, flavour.params, affordable)
    assert worst <= held < _worst(flavour.price, flavour.params, affordable + 1)
    assert held <= limit
    assert _money(ctx) == (flavour.price.cost(input_tokens=12, output_tokens=5), D(0))


def test_an_openai_request_keeps_the_name_of_its_own_output_limit(
    loopback: LoopbackServer,
) -> None:
    """A request that gives the deprecated max_tokens is lowered there, nothing else added."""
    ctx = _run(D("1.00"))
    params = {**OPENAI_PARAMS, "max_tokens": 500}
    governed = _sync_openai(loopback, ctx, params, False, policy="diagnosis_agent", prices=TABLE)
    affordable = int((D("1.00") - input_bound(params) * D("0.001")) / D("0.01"))
    (body,) = (request.body for request in loopback.requests)
    assert body["max_tokens"] == affordable < 500
    assert "max_completion_tokens" not in body
    assert governed.charges[0].lowered


def test_when_one_output_token_cannot_be_paid_for_nothing_is_sent(
    loopback: LoopbackServer,
) -> None:
    ctx = _run(D("0.05"))  # below the input's own worst case (about $0.08)
    with pytest.raises(BudgetExhausted) as refused:
        _sync_openai(loopback, ctx, OPENAI_PARAMS, False, policy="diagnosis_agent", prices=TABLE)
    assert refused.value.dimension is BudgetDimension.COST
    assert loopback.count == 0
    assert ctx.budget.snapshot().model_calls == 0
    assert _money(ctx) == (D(0), D(0))


# -- unknown prices and bad input: refused before anything is reserved or sent --------------------


@flavours
@streamed
def test_a_model_without_a_price_is_refused_before_anything_is_sent(
    loopback: LoopbackServer, flavour: Flavour, streamed: bool
) -> None:
    ctx = _run(D("1.00"))
    params = {**flavour.params, "model": "mystery-model"}
    with pytest.raises(UnknownPrice, match="mystery-model") as unknown:
        flavour.ask(loopback, ctx, params, streamed, policy="diagnosis_agent", prices=TABLE)
    assert "PriceTable" in str(unknown.value)  # says how to give a price
    assert loopback.count == 0
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost, usage.cost_held) == (0, D(0), D(0))


def test_a_run_with_a_money_limit_needs_prices(loopback: LoopbackServer) -> None:
    ctx = _run(D("1.00"))
    with (
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
        pytest.raises(ValueError, match=r"prices is required.*GenaiPrices\(\).*PriceTable"),
    ):
        GovernedOpenAI(client, ctx, policy="diagnosis_agent")
    assert ctx.budget.snapshot().model_calls == 0


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"prices": TABLE, "default_max_tokens": 0}, ValueError, "default_max_tokens"),
        ({"prices": TABLE, "default_max_tokens": True}, ValueError, "default_max_tokens"),
        ({"prices": "genai"}, TypeError, "prices must be None or a Prices"),
    ],
)
def test_bad_money_arguments_are_refused_when_the_client_is_built(
    loopback: LoopbackServer, bad: dict[str, Any], error: type[Exception], message: str
) -> None:
    ctx = _run()
    with (
        openai.OpenAI(api_key=KEY, base_url=loopback.openai_url, max_retries=0) as client,
        pytest.raises(error, match=message),
    ):
        GovernedOpenAI(client, ctx, policy="diagnosis_agent", **bad)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({**OPENAI_PARAMS, "n": 2}, "n=2 is refused on a priced call"),
        ({**OPENAI_PARAMS, "max_completion_tokens": 0}, "must be ints >= 1"),
        ({**OPENAI_PARAMS, "max_tokens": "many"}, "must be ints >= 1"),
    ],
)
def test_a_priced_request_that_cannot_be_bounded_is_refused_before_the_gate(
    loopback: LoopbackServer, params: dict[str, Any], message: str
) -> None:
    ctx = _run(D("1.00"))
    with pytest.raises(ValueError, match=message):
        _sync_openai(loopback, ctx, params, False, policy="diagnosis_agent", prices=TABLE)
    assert loopback.count == 0
    assert ctx.budget.snapshot().model_calls == 0


def test_a_priced_model_call_needs_the_request() -> None:
    model_call = ModelCall(_run(D("1.00")), policy=None, prices=TABLE)
    with pytest.raises(ValueError, match="needs the request's ModelRequest"):
        model_call.reserve("call")
    with pytest.raises(TypeError, match="request must be a ModelRequest"):
        model_call.reserve("call", {"model": "gpt-test"})  # type: ignore[arg-type]  # on purpose


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": " "}, "model must not be blank"),
        ({"input_bound": -1}, "input_bound must be an int >= 0"),
        ({"input_bound": 1.5}, "input_bound must be an int >= 0"),
        ({"max_tokens": 0}, "max_tokens must be an int >= 1 or None"),
        ({"provider": ""}, "provider must not be blank"),
    ],
)
def test_a_bad_model_request_is_refused(fields: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {"model": "gpt-test", "input_bound": 10, "max_tokens": 5, **fields}
    with pytest.raises(ValueError, match=message):
        ModelRequest(**values)


# -- genai-prices: a real OpenAI model's price, its data version in the journal --------------------


@needs_genai_prices
def test_genai_prices_price_a_real_openai_model_exactly(loopback: LoopbackServer) -> None:
    ctx = _run(D("1.00"))
    executor = HarnessRetryExecutor(ctx, classifier=classify_sdk)
    prices = GenaiPrices()
    params = {**OPENAI_PARAMS, "model": "gpt-4o-mini", "max_completion_tokens": 300}
    loopback.script(Reply(input_tokens=1_200, output_tokens=250))
    governed = _sync_openai(
        loopback, ctx, params, False, policy="diagnosis_agent", executor=executor, prices=prices
    )
    import genai_prices  # noqa: PLC0415 - the prices extra: Python 3.11+ only

    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=1_200, output_tokens=250),
        model_ref="gpt-4o-mini",
        provider_id="openai",
    ).total_price
    assert _money(ctx) == (expected, D(0))
    (charge,) = governed.charges
    assert charge.price_data == prices.data_version
    assert charge.max_tokens == 300
    # The executor's journal names the priced call and the price data it was priced with.
    (execution,) = executor.executions
    assert execution.subject is not None
    assert prices.data_version in execution.subject
    assert "'gpt-4o-mini'" in execution.subject


# -- failures: what stays held, what is released ---------------------------------------------------


@pytest.mark.parametrize(
    ("status", "released"), [(429, True), (400, True), (500, False), (503, False)]
)
def test_a_refused_request_is_released_and_one_that_may_have_been_billed_stays_held(
    loopback: LoopbackServer, status: int, released: bool
) -> None:
    """A 4xx was refused by the provider (never billed); a 5xx may have been worked on."""
    ctx = _run(D("100"))
    loopback.script(Reply(status=status))
    with pytest.raises(openai.APIStatusError):
        _sync_openai(loopback, ctx, OPENAI_PARAMS, False, policy="diagnosis_agent", prices=TABLE)
    worst = _worst(GPT, OPENAI_PARAMS, DEFAULT_MAX_TOKENS)
    assert _money(ctx) == (D(0), D(0) if released else worst)


def test_a_retried_rate_limit_holds_only_the_attempt_that_answered(
    loopback: LoopbackServer,
) -> None:
    ctx = _run(D("100"))
    loopback.script(Reply(status=429), Reply(input_tokens=30, output_tokens=7))
    governed = _sync_openai(
        loopback, ctx, OPENAI_PARAMS, False, policy="intent_router", prices=TABLE
    )
    assert loopback.count == 2
    assert _money(ctx) == (D("0.1"), D(0))
    assert [charge.cost for charge in governed.charges] == [D(0), D("0.1")]


def _closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused, nothing is sent."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_request_that_could_not_connect_is_released(direct_connections: None) -> None:
    ctx = _run(D("10"))
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with (
        openai.OpenAI(api_key=KEY, base_url=url, max_retries=0) as client,
        pytest.raises(openai.APIConnectionError),
    ):
        GovernedOpenAI(client, ctx, policy="intent_router", prices=TABLE).create(**OPENAI_PARAMS)
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.cost, usage.cost_held) == (2, D(0), D(0))


# -- streams cut short: the usage received, or the worst case -------------------------------------


@pytest.mark.parametrize(
    ("provider", "settled"), [("anthropic", True), ("openai", False)], ids=["anthropic", "openai"]
)
def test_a_stream_cut_by_a_cancel_settles_what_it_received(
    loopback: LoopbackServer, provider: str, settled: bool
) -> None:
    """Anthropic reports the input (and a first output token) in message_start; OpenAI reports
    nothing before its end, so its cut stream stays charged at the worst case."""
    ctx = _run(D("100"))
    stall = threading.Event()
    loopback.script(Reply(input_tokens=30, output_tokens=7, stall=stall, stall_after_events=2))

    async def cut() -> None:
        if provider == "anthropic":
            async with anthropic.AsyncAnthropic(
                api_key=KEY, base_url=loopback.url, max_retries=0
            ) as client:
                governed: Any = AsyncGovernedAnthropic(
                    client, ctx, policy="diagnosis_agent", prices=TABLE
                )
                stream = await governed.stream(**ANTHROPIC_PARAMS)
                await _read_until_cancelled(stream, loopback, ctx)
        else:
            async with openai.AsyncOpenAI(
                api_key=KEY, base_url=loopback.openai_url, max_retries=0
            ) as client:
                governed = AsyncGovernedOpenAI(client, ctx, policy="diagnosis_agent", prices=TABLE)
                stream = await governed.stream(**OPENAI_PARAMS)
                await _read_until_cancelled(stream, loopback, ctx)

    asyncio.run(cut())
    if settled:  # message_start: 30 input tokens, 1 output token
        assert _money(ctx) == (CLAUDE.cost(input_tokens=30, output_tokens=1), D(0))
    else:
        assert _money(ctx) == (D(0), _worst(GPT, OPENAI_PARAMS, DEFAULT_MAX_TOKENS))


async def _read_until_cancelled(stream: Any, server: LoopbackServer, ctx: RunContext) -> None:
    """Read the first event (Anthropic's message_start), then be cut by a cancel in the stall."""
    assert await anext(stream)

    def cancel() -> None:
        server.wait_for_stalled(1)
        ctx.cancellation.cancel(CancellationReason.CLIENT_DISCONNECTED)

    canceller = threading.Thread(target=cancel, name="canceller")
    canceller.start()
    with pytest.raises(RunCancelled):
        async for _ in stream:
            pass
    canceller.join()


def test_a_stream_settles_at_its_end_not_before(loopback: LoopbackServer) -> None:
    ctx = _run(D("100"))
    loopback.script(Reply(input_tokens=30, output_tokens=7, chunks=3))
    worst = _worst(GPT, OPENAI_PARAMS, DEFAULT_MAX_TOKENS)

    async def read() -> None:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=loopback.openai_url, max_retries=0
        ) as client:
            governed = AsyncGovernedOpenAI(client, ctx, policy="diagnosis_agent", prices=TABLE)
            stream = await governed.stream(**OPENAI_PARAMS)
            first = await anext(stream)
            assert first.choices  # a chunk of text: the usage comes with the last one
            assert _money(ctx) == (D(0), worst)
            assert [chunk async for chunk in stream]

    asyncio.run(read())
    assert _money(ctx) == (D("0.1"), D(0))


# -- the limit is never passed ------------------------------------------------------------------


def test_racing_calls_never_pass_the_money_limit(loopback: LoopbackServer) -> None:
    """Four tasks call until the run refuses one (the money left cannot pay for even one output
    token), which ends the run and cuts the calls in flight. At every request the provider
    receives, settled + held is within the limit; at the end each answered call is settled at
    its actual cost, each cut one stays held at its worst case, and together they are within
    the limit."""
    limit = D("2.00")
    ctx = _run(limit, model_calls=1_000)
    in_flight = _watch(loopback, ctx)
    params = {**OPENAI_PARAMS, "max_completion_tokens": 20}
    loopback.default = Reply(input_tokens=30, output_tokens=7)  # $0.10 each

    async def calls() -> AsyncGovernedOpenAI:
        async with openai.AsyncOpenAI(
            api_key=KEY, base_url=loopback.openai_url, max_retries=0
        ) as client:
            governed = AsyncGovernedOpenAI(client, ctx, policy="diagnosis_agent", prices=TABLE)

            async def caller() -> None:
                while True:
                    try:
                        await governed.create(**params)
                    except RunTerminated:
                        return

            await asyncio.gather(*(caller() for _ in range(4)))
            return governed

    governed = asyncio.run(calls())
    assert len(in_flight) >= 4  # requests were made, several at once
    assert all(settled + held <= limit for settled, held in in_flight)
    assert ctx.budget.exhausted is BudgetDimension.COST
    charges = governed.charges
    answered = [charge for charge in charges if charge.cost is not None]
    cut = [charge for charge in charges if charge.cost is None]
    assert answered
    assert all(charge.cost == D("0.1") for charge in answered)
    settled, held = _money(ctx)
    assert settled == D("0.1") * len(answered)  # the sum of the actual costs
    assert held == sum((charge.held for charge in cut), D(0))  # the cut ones, at worst case
    assert settled + held <= limit


class _HoldElsewhereOnTheClock:
    """A run's clock that, once armed for a thread, makes a Tool call's hold land from another
    thread the first time the armed thread reads it, and lets the armed thread on only when that
    hold is placed. A priced model call reads the clock only in its reservation: after the money
    left could have been read, before (or at) the decision that holds it -- where a hold from
    elsewhere on the run (a Tool call, another adapter, another process) lands in a race."""

    def __init__(self, tool_cost: Decimal) -> None:
        self.ctx: RunContext | None = None
        self.tool_holds: list[Decimal] = []
        self._tool_cost = tool_cost
        self._armed: int | None = None

    def arm(self) -> None:
        self._armed = threading.get_ident()

    def monotonic_ns(self) -> int:
        if self._armed == threading.get_ident():
            self._armed = None
            placed = threading.Barrier(2)
            holder = threading.Thread(target=self._hold, args=(placed,))
            holder.start()
            placed.wait(30)  # the Tool call's hold is placed: the model call goes on
            holder.join(30)
        return 0

    def _hold(self, placed: threading.Barrier) -> None:
        assert self.ctx is not None
        try:
            hold = self.ctx.reserve_tool_call("search", max_cost=self._tool_cost)
            self.tool_holds.append(hold.max_cost)
        finally:
            placed.wait(30)


def test_a_tool_hold_racing_a_lowered_model_call_never_ends_the_run() -> None:
    """The model call wants 100 output tokens ($1.00 at $0.01 each) of a $1.00 run; a Tool call
    holds $0.50 from another thread in the middle of the model call's reservation. The run holds
    what is left, $0.50, in the reservation's one decision, and the call is lowered to the 50
    tokens it pays for: a read of the money left apart from the hold would have sized the call
    to $1.00 and the core would have refused it on COST, ending the run."""
    price = ModelPrice(input_per_mtok=D("1000"), output_per_mtok=D("10000"))
    clock = _HoldElsewhereOnTheClock(tool_cost=D("0.50"))
    ctx = RunContext.create(
        session_id="s-1",
        run_id="r-1",
        limits=dataclasses.replace(_run().budget.limits, cost=D("1.00")),
        timeout=600,
        clock=clock,
    )
    clock.ctx = ctx
    model_call = ModelCall(ctx, policy=None, prices=PriceTable({"m": price}))
    clock.arm()
    reservation = model_call.reserve("call", ModelRequest("m", 0, 100))
    assert clock.tool_holds == [D("0.5")]  # the Tool call's hold landed in between
    assert ctx.lifecycle.state is RunState.RUNNING
    assert (reservation.max_tokens, reservation.lowered) == (50, True)
    assert reservation.held == D("0.5")
    assert _money(ctx) == (D(0), D("1.00"))
    usage = ctx.budget.snapshot()
    assert (usage.model_calls, usage.tool_calls) == (1, 1)


# -- a sync worker's late answer and its caller's release: one settlement ------------------------


class CutOff(Exception):
    """A failure after the request may have left: a timeout, a cut connection, the run's end."""


@pytest.mark.parametrize("round_", range(20))
def test_a_late_answer_and_a_release_settle_the_hold_once(round_: int) -> None:
    """The caller leaves (the run's ending in flight: the hold stays), the worker records the
    answer: in either order, or at once, the hold is settled exactly once, at the actual cost."""
    ctx = _run(D("10"))
    model_call = ModelCall(ctx, policy=None, prices=TABLE)
    request = ModelRequest("gpt-test", input_bound=100, max_tokens=50)
    reservation = model_call.reserve("call", request)
    start = threading.Barrier(2)

    def caller_leaves() -> None:
        start.wait()
        with pytest.raises(CutOff), reservation:
            raise CutOff  # not a proof that the request was never billed: the hold stays

    def worker_records() -> None:
        start.wait()
        reservation.record(TokenUsage(30, 7))

    race([caller_leaves, worker_records])
    assert _money(ctx) == (D("0.1"), D(0))
    assert reservation.cost == D("0.1")


# -- the OpenTelemetry chat span carries the money ------------------------------------------------


@needs_genai_prices
def test_the_chat_span_carries_the_cost_the_hold_and_the_lowering(
    loopback: LoopbackServer,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("diagnosis_harness.tests")
    ctx = _run(D("0.5"))
    prices: Prices = PriceTable({}, fallback=GenaiPrices())
    params = {**OPENAI_PARAMS, "model": "gpt-4o"}
    loopback.script(Reply(input_tokens=100, output_tokens=20))
    try:
        with HarnessTracing(tracer).run(ctx, "diagnosis") as tracing:
            governed = _sync_openai(
                loopback,
                ctx,
                params,
                False,
                policy="diagnosis_agent",
                tracing=tracing,
                prices=prices,
                default_max_tokens=200_000,  # more than $0.50 pays for: lowered
            )
    finally:
        provider.shutdown()
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    attributes = dict(span.attributes or {})
    (charge,) = governed.charges
    assert charge.cost == D("0.00045")  # 100 x $2.50 + 20 x $10 per million
    assert attributes[COST] == pytest.approx(0.00045)
    assert attributes[COST_HELD] == pytest.approx(float(charge.held))
    assert attributes[MAX_TOKENS_LOWERED] is True
    assert attributes["gen_ai.request.max_tokens"] == charge.max_tokens
    assert charge.max_tokens is not None
    assert charge.max_tokens < 200_000
    assert PRICE_DATA not in attributes  # a PriceTable names no data version of its own


# -- the input bound -------------------------------------------------------------------------------


def test_the_input_bound_is_the_utf8_bytes_of_the_payloads_json() -> None:
    assert input_bound({"a": "b"}) == len(b'{"a":"b"}')
    assert input_bound("héllo") == len('"héllo"'.encode())  # é is two bytes, as its tokens may be
    assert input_bound({"data": b"\x00" * 3}) == input_bound({"data": "xxxx"})  # sent as base64
    assert input_bound(None) == 4


def test_the_input_bound_reads_the_sdks_values_and_refuses_what_reading_would_consume() -> None:
    assert input_bound({"a": openai.NOT_GIVEN, "b": openai.omit}) == input_bound(
        {"a": None, "b": None}
    )
    assert input_bound(("x", frozenset())) == input_bound(["x", []])
    with pytest.raises(TypeError, match="cannot bound a generator"):
        input_bound({"messages": (m for m in [{"role": "user", "content": "hi"}])})


def test_a_priced_request_given_an_iterator_is_refused_before_anything_is_sent(
    loopback: LoopbackServer,
) -> None:
    ctx = _run(D("1.00"))
    params = {**OPENAI_PARAMS, "messages": iter(OPENAI_PARAMS["messages"])}
    with pytest.raises(TypeError, match="cannot bound a list_iterator"):
        _sync_openai(loopback, ctx, params, False, policy="diagnosis_agent", prices=TABLE)
    assert loopback.count == 0
    assert ctx.budget.snapshot().model_calls == 0


def test_the_input_bound_is_never_below_one_token_per_character_of_text() -> None:
    """A byte-level BPE token covers at least one byte: a text of n bytes has at most n tokens,
    and the JSON around it only adds bytes."""
    text = "Ünïcødé, emoji 🚀 and\nnewlines\t" * 20
    messages = [{"role": "user", "content": text}]
    assert input_bound(messages) >= len(text.encode()) + len(messages) * 3


# -- lowering: the most output tokens the money left pays for ---------------------------------


_PER_MTOK = st.decimals(min_value=D("0.01"), max_value=D("100"), places=3)


@settings(max_examples=200, deadline=None)
@given(
    input_price=_PER_MTOK,
    output_price=_PER_MTOK,
    bound=st.integers(min_value=0, max_value=300_000),
    wanted=st.integers(min_value=1, max_value=200_000),
    limit=st.decimals(min_value=D("0.000001"), max_value=D("20"), places=6),
)
def test_max_tokens_is_lowered_to_exactly_the_most_the_limit_pays_for(
    input_price: Decimal, output_price: Decimal, bound: int, wanted: int, limit: Decimal
) -> None:
    """The hold of the tokens sent fits the limit, and one token more would not (or the request's
    own max_tokens is sent); when not even one fits, the core refuses the reservation. A lowered
    call holds the money left, granted in one decision, and is sized to it."""
    price = ModelPrice(input_per_mtok=input_price, output_per_mtok=output_price)
    ctx = _run(limit)
    model_call = ModelCall(ctx, policy=None, prices=PriceTable({"m": price}))

    def held(tokens: int) -> Decimal:
        return price.worst_case(input_tokens_bound=bound, max_output_tokens=tokens)

    request = ModelRequest("m", bound, wanted)
    if held(1) > limit:
        with pytest.raises(BudgetExhausted) as refused:
            model_call.reserve("call", request)
        assert refused.value.dimension is BudgetDimension.COST
        return
    reservation = model_call.reserve("call", request)
    sent = reservation.max_tokens
    assert sent is not None
    assert 1 <= sent <= wanted
    if sent == wanted:  # the request's whole worst case was held
        assert reservation.held == held(sent) <= limit
    else:  # the run held all the money left, in the one decision, and the call is sized to it
        assert reservation.held is not None
        assert held(sent) <= reservation.held == limit < held(sent + 1)
    assert reservation.lowered is (sent < wanted)


# -- the prompt cache and Anthropic's tools: priced as genai-prices prices them --------------------


@pytest.mark.parametrize(
    ("flavour", "model", "provider"),
    [(FLAVOURS[0], "gpt-4o-mini", "openai"), (FLAVOURS[2], "claude-3-5-haiku-latest", "anthropic")],
    ids=["openai", "anthropic"],
)
@needs_genai_prices
def test_cached_input_tokens_are_priced_at_the_cache_read_price(
    loopback: LoopbackServer, flavour: Flavour, model: str, provider: str
) -> None:
    """300 of the 320 input tokens were read from the prompt cache: they cost less."""
    ctx = _run(D("1.00"))
    loopback.script(Reply(input_tokens=20, cache_read_tokens=300, output_tokens=6))
    params = {**flavour.params, "model": model}
    governed = flavour.ask(
        loopback, ctx, params, False, policy="diagnosis_agent", prices=GenaiPrices()
    )
    import genai_prices  # noqa: PLC0415 - the prices extra: Python 3.11+ only

    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=320, cache_read_tokens=300, output_tokens=6),
        model_ref=model,
        provider_id=provider,
    ).total_price
    assert _money(ctx) == (expected, D(0))
    (charge,) = governed.charges
    assert charge.usage == TokenUsage(320, 6, cache_read_tokens=300)
    full = GenaiPrices().model_price(model).cost(input_tokens=320, output_tokens=6)
    assert expected < full  # the cache's price, not the input's


def test_an_anthropic_request_that_can_write_the_cache_or_use_tools_holds_for_it(
    loopback: LoopbackServer,
) -> None:
    """Without cache_control the cache-write price is left out of the worst case; with it, it
    is the dearest input price. Tools add Anthropic's tool-use system prompt to the bound."""
    ctx = _run()
    cached = {
        **ANTHROPIC_PARAMS,
        "system": [{"type": "text", "text": "You triage.", "cache_control": {"type": "ephemeral"}}],
    }
    tools = {
        **ANTHROPIC_PARAMS,
        "tools": [{"name": "logs", "description": "Read logs", "input_schema": {"type": "object"}}],
    }
    plain, with_cache, with_tools = (
        _sync_anthropic(loopback, ctx, params, False, policy="diagnosis_agent", prices=TABLE)
        .charges[0]
        .held
        for params in (ANTHROPIC_PARAMS, cached, tools)
    )
    assert plain == _worst(CLAUDE, ANTHROPIC_PARAMS, 64)
    assert with_cache == CLAUDE.worst_case(
        input_tokens_bound=input_bound(cached), max_output_tokens=64, writes_cache=True
    )
    assert with_cache > _worst(CLAUDE, cached, 64)  # at $1.25, not $1.00, per million
    assert with_tools == CLAUDE.worst_case(
        input_tokens_bound=input_bound(tools) + TOOLS_PROMPT_TOKENS,
        max_output_tokens=64,
        writes_cache=False,
    )


def test_a_run_spent_past_its_limit_refuses_the_next_call_on_cost() -> None:
    """A settled cost above its hold (an input the bound missed) passes the limit: recorded, the
    run exhausted, and the next reservation refused as the core refuses it."""
    ctx = _run(D("1.00"))
    model_call = ModelCall(ctx, policy=None, prices=TABLE)
    with model_call.reserve("call", ModelRequest("gpt-test", 10, 5)) as reservation:
        reservation.record(TokenUsage(2_000, 5))  # $2.05: the image the bound did not count
    assert _money(ctx) == (D("2.05"), D(0))
    with pytest.raises(BudgetExhausted) as refused:
        model_call.reserve("call", ModelRequest("gpt-test", 10, 5))
    assert refused.value.dimension is BudgetDimension.COST
    assert ctx.budget.snapshot().model_calls == 1


@needs_genai_prices
def test_a_failed_attempts_span_carries_its_hold_and_no_cost(loopback: LoopbackServer) -> None:
    """A 500 may have been billed: its span says what stays held; the retry's, what it cost."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = _run(D("100"))
    loopback.script(Reply(status=500), Reply(input_tokens=30, output_tokens=7))
    try:
        with HarnessTracing(provider.get_tracer("tests")).run(ctx, "diagnosis") as tracing:
            _sync_openai(
                loopback,
                ctx,
                {**OPENAI_PARAMS, "model": "gpt-4o-mini"},
                False,
                policy="intent_router",
                tracing=tracing,
                prices=GenaiPrices(),
                default_max_tokens=100,
            )
    finally:
        provider.shutdown()
    failed, answered = (
        dict(span.attributes or {})
        for span in exporter.get_finished_spans()
        if span.name.startswith("chat ")
    )
    assert COST not in failed
    held = failed[COST_HELD]
    assert isinstance(held, float)
    assert held > 0
    assert answered[COST_HELD] == held
    assert answered[COST] == pytest.approx(0.0000087)  # 30 x $0.15 + 7 x $0.60 per million
    assert failed[MAX_TOKENS_LOWERED] is False
    assert failed[PRICE_DATA] == answered[PRICE_DATA] == GenaiPrices().data_version
