"""One governed model call, whatever the SDK: :class:`ModelCall`, the one owner of its steps.

Every adapter -- the governed openai/anthropic clients, the openai-agents model, the pydantic-ai
model -- sends its requests through one ``ModelCall``, and only translates its SDK's shapes
(how to send, where the usage is). What a governed model call is, decided here once:

1. the arguments: the run (``ctx``), the retry policy, the executor, checked when the adapter is
   built (:mod:`._arguments`, the same checks as the Tool calls');
2. the reservation (:meth:`ModelCall.reserve`, held around the attempt's request): the gate and
   one Model call in one decision -- a refusal reserves nothing and the request is never sent.
   It gives the attempt's :class:`ModelReservation`, on which the response's usage is recorded
   exactly once (:meth:`ModelReservation.record`, or :meth:`ModelReservation.end_stream` for a
   stream, also when it was cut by a cancellation or the deadline: the tokens received were
   spent);
3. the request under the run's deadline: its timeout cut to the time the run has left
   (:meth:`ModelCall.timeout`), an awaited request in ``ctx.scope()``
   (:meth:`ModelCall.request_async`), and after a failure the run's ending wins over the SDK's
   error (:meth:`ModelCall.ended_wins`);
4. the failure classified by the retry policy, and each attempt journaled: the executor's
   (:meth:`ModelCall.execute` and :meth:`ModelCall.execute_async` drive the same attempts, with
   a ``chat`` span each when tracing).

Money (``prices=``, a :class:`~diagnosis_harness.pricing.Prices`) is decided here too, once for
every adapter:

- the hold, in :meth:`ModelCall.reserve`: the adapter describes the request
  (:class:`ModelRequest`: the model, a bound on its input tokens from :func:`input_bound`, its
  ``max_tokens``); the model's price is looked up (:class:`~diagnosis_harness.pricing.UnknownPrice`
  before anything is reserved or sent), and the request's worst case
  (:meth:`~diagnosis_harness.pricing.ModelPrice.worst_case`) is held in the same decision as the
  Model call. A request without ``max_tokens`` is given ``default_max_tokens``; when the money
  left (limit - settled - held) cannot pay for the worst case, the run holds what is left (at
  least one output token's worst case) in that same decision, ``max_tokens`` is lowered to the
  most the hold pays for, and the reservation says so (:attr:`ModelReservation.lowered`);
- the settlement, in :meth:`ModelReservation._settle`, through which every record goes: the
  actual usage priced exactly, settled on the hold with its tokens. A stream cut before any
  usage was received is not settled: its hold stays charged at the worst case (the provider may
  have billed it, and nothing says how much);
- the release, in :meth:`ModelReservation._release`, of an attempt that failed unsettled: a hold
  whose request provably was never billed (the connection was never made, or the provider
  refused the request with a 4xx status other than 408/499) is settled at zero; any other
  (a timeout, a cut connection, a 5xx, the run's ending in flight) stays held at its worst case,
  and a sync worker whose answer still arrives settles it exactly (the two paths share the
  reservation's lock, and a hold settles once).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Context, Decimal
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, final

from .._boundary import Boundary
from .._errors import HarnessError
from .._validate import non_blank_str
from ._arguments import checked_ctx, executor_of, policy_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

    from .._budget import CallHold
    from .._context import RunContext
    from .._retry import Classifier, HarnessRetryExecutor
    from .._retry_policy import RetryPolicy
    from ..pricing import ModelPrice, Prices
    from ._chat import ChatResponse, Server
    from .otel import HarnessTracing

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ChargeSlot",
    "ModelCall",
    "ModelCharge",
    "ModelRequest",
    "ModelReservation",
    "TokenUsage",
    "UsageMeter",
    "UsageNotReported",
    "input_bound",
]

DEFAULT_MAX_TOKENS = 4096
"""The ``max_tokens`` a priced request that gives none is held for (and, under a money limit, sent
with): a model's output is otherwise bounded only by its own maximum (16,384 and more), whose
worst case would hold most of a small budget for every call. Change it with
``default_max_tokens=``."""

R = TypeVar("R")
A = TypeVar("A")  # an attempt, sync or async
C_contra = TypeVar("C_contra", contravariant=True)


@final
@dataclass(frozen=True, slots=True, repr=False)
class TokenUsage:
    """The tokens one response used, as the provider reported them and as the run recorded them.

    ``input_tokens`` is every input token (the prompt cache's included); ``cache_read_tokens``
    and ``cache_write_tokens`` are the parts of it read from and written to the provider's
    prompt cache, and ``cache_write_1h_tokens`` the part of the writes kept for an hour, which a
    price may rate apart (:meth:`~diagnosis_harness.pricing.ModelPrice.cost`); zero when not
    reported.
    """

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __repr__(self) -> str:
        # The cache's parts only where reported: most usages have none.
        parts = [f"input_tokens={self.input_tokens}", f"output_tokens={self.output_tokens}"]
        for name in ("cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}={value}")
        return f"TokenUsage({', '.join(parts)})"


@final
class UsageNotReported(HarnessError):
    """The provider answered without token usage, so the run's token budget cannot count it.

    Raised by a governed call whose response has no usage, and at the end of a governed stream
    that ended without reporting it (an OpenAI-compatible server that ignores
    ``stream_options.include_usage``). Inside an attempt it is not retried (its kind is
    ``UNKNOWN``): the request was answered, and asking again would spend twice. ``response`` is
    the answer that came without usage (``None`` for a stream, whose chunks were delivered).
    """

    def __init__(self, message: str, response: object = None) -> None:
        super().__init__(message)
        self.response = response


class UsageMeter(Protocol[C_contra]):
    """Reads a stream's chunks as they pass; knows the usage once the provider has reported it."""

    def observe(self, chunk: C_contra, /) -> None: ...

    @property
    def final(self) -> bool:
        """Whether the provider has reported the response's whole usage."""
        ...

    def usage(self) -> TokenUsage | None:
        """The usage known so far (the whole of it once :attr:`final`), or ``None``."""
        ...


# -- money: what a request may cost at most -------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What a priced request's worst case is computed from, as its adapter describes it.

    ``model`` is the model asked for (looked up in the prices, with ``provider``: genai-prices'
    provider id, e.g. ``"openai"``, or ``None``), ``input_bound`` a number never below the
    request's input tokens (:func:`input_bound` of everything the request sends as input), and
    ``max_tokens`` the request's own output limit (``None`` if it gives none).
    ``writes_cache=False`` says the request cannot write to the provider's prompt cache (an
    Anthropic request without ``cache_control``), so its worst case leaves the cache-write prices
    out. Checked at construction: a bad value raises, naming it.
    """

    model: str
    input_bound: int
    max_tokens: int | None
    provider: str | None = None
    writes_cache: bool = True

    def __post_init__(self) -> None:
        non_blank_str("model", self.model)
        if self.provider is not None:
            non_blank_str("provider", self.provider)
        if type(self.input_bound) is not int or self.input_bound < 0:
            raise ValueError(f"input_bound must be an int >= 0, got {self.input_bound!r}")
        if self.max_tokens is not None and (
            type(self.max_tokens) is not int or self.max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be an int >= 1 or None, got {self.max_tokens!r}")
        if type(self.writes_cache) is not bool:
            raise TypeError(f"writes_cache must be a bool, got {self.writes_cache!r}")


_SENTINELS = frozenset({"NotGiven", "Omit"})  # the SDKs' "not given": dropped before sending


def _jsonable(value: object) -> object:
    """What ``json.dumps`` cannot write, as the JSON its SDK sends; a ``TypeError`` for what
    cannot be bounded without changing it (an iterator, which reading would consume)."""
    dump = getattr(value, "model_dump", None)  # pydantic models: the SDKs' typed params
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (bytes, bytearray, memoryview)):  # sent as base64: 4 bytes per 3
        return "x" * (4 * ((len(value) + 2) // 3))
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset, Sequence)):
        return list(value)
    if type(value).__name__ in _SENTINELS:
        return None
    raise TypeError(
        f"input_bound cannot bound a {type(value).__name__} in the request: give its input as "
        "JSON values (dicts, lists, str, numbers), the SDK's typed models, or bytes -- an "
        "iterator would be consumed by reading it"
    )


def input_bound(payload: object) -> int:
    """A number never below the input tokens of a request that sends ``payload`` as its input.

    The UTF-8 byte length of ``payload``'s JSON (compact, non-ASCII kept as UTF-8): pass
    everything the request sends as input -- the messages, the system prompt, the tools and their
    schemas, the response format. Why bytes bound tokens: the providers' tokenizers are byte-level
    BPE, where every token covers at least one byte of the text the model reads, so that text has
    at most as many tokens as bytes; and the text the model reads is the payload's strings plus a
    few framing tokens per message (role markers, separators: OpenAI counts 3 per message and 3
    to prime the reply), which the JSON's own bytes around each message (``{"role":"user",
    "content":""}``, 28 bytes) more than pay for. A tool's schema is rendered from its JSON into
    shorter text. Escapes only lengthen the JSON. The bound is far above the real count (about 4
    bytes per English token): it is a hold, settled to the exact usage after the call.

    What it does not bound: input the provider adds that the request does not send (Anthropic's
    tool-use system prompt, a few hundred tokens when ``tools`` are given, which the anthropic
    adapter adds to this bound), and the tokens of an image, audio or file part, which the
    providers count from the media, not from the bytes that carry it: an inline (base64) image
    counts its base64 bytes, usually far more than its tokens, but a part given by URL or file
    id counts only the bytes of its reference. Such a request's hold may be below its cost; its
    settlement still records the actual cost, even past the limit (the run then ends
    ``BUDGET_EXHAUSTED`` on ``COST``).

    Besides JSON values it reads the SDKs' typed models (as they dump them), bytes (as base64),
    any mapping or sequence, and the SDKs' "not given" sentinels; anything else -- an iterator,
    which reading would consume before the SDK sends it -- is a ``TypeError``.
    """
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_jsonable)
    return len(text.encode("utf-8"))


@final
@dataclass(frozen=True, slots=True)
class ModelCharge:
    """What one priced attempt held and settled: a line of :attr:`ModelCall.charges`.

    ``price_data`` names the prices' data (``GenaiPrices.data_version``; ``None`` for prices that
    give none, as a ``PriceTable``). ``max_tokens`` is what the request was sent with (``None``:
    nothing was added), ``lowered`` whether the money left lowered it. ``held`` is what was held:
    the worst case, or when lowered the money that was left (at least the worst case of the
    ``max_tokens`` sent, less than that of one token more); ``cost`` the actual cost settled
    (zero for a request released unbilled), ``None`` while the hold stays charged (not answered
    yet, or never: a cut stream without usage, a request that may have been billed).
    ``run_id`` is the run that held and settled it: a parent's journal holds its sub-agents'
    lines too (a sub-agent's spending is its parent's), each tagged with the sub-agent's run.
    """

    name: str
    model: str
    provider: str | None
    price_data: str | None
    max_tokens: int | None
    lowered: bool
    held: Decimal
    cost: Decimal | None
    usage: TokenUsage | None
    run_id: str


# Decimal arithmetic in its own context, never the thread's (which a user may have changed).
_DIVIDE = Context(prec=60)


def _max_affordable(price: ModelPrice, request: ModelRequest, wanted: int, left: int) -> int:
    """The most output tokens, 1 to ``wanted``, whose worst case fits ``left`` picodollars.

    ``wanted`` when it fits; 1 when not even that does (``left`` is the hold granted, which is
    at least one output token's worst case, so that never happens in :meth:`ModelCall.reserve`).
    """
    from ..pricing import from_units, to_units  # noqa: PLC0415 - with the prices only

    def held(tokens: int) -> int:
        worst = price.worst_case(
            input_tokens_bound=request.input_bound,
            max_output_tokens=tokens,
            writes_cache=request.writes_cache,
        )
        return to_units(worst)

    if held(wanted) <= left:
        return wanted
    if left <= 0:  # settled + held at or past the limit already: the core refuses any hold
        return 1
    base = price.worst_case(
        input_tokens_bound=request.input_bound,
        max_output_tokens=0,
        writes_cache=request.writes_cache,
    )
    per_token = (
        price.worst_case(
            input_tokens_bound=request.input_bound,
            max_output_tokens=1,
            writes_cache=request.writes_cache,
        )
        - base
    )
    if per_token <= 0 or from_units(left) < base:
        return 1
    # The worst case is linear in the output tokens; the hold rounds it up to a picodollar, so
    # the estimate is corrected by a step or two each way against the hold itself.
    guess = _DIVIDE.divide(from_units(left) - base, per_token)
    tokens = max(1, min(wanted, int(guess.to_integral_value(rounding=ROUND_FLOOR))))
    while tokens > 1 and held(tokens) > left:
        tokens -= 1
    while tokens < wanted and held(tokens + 1) <= left:
        tokens += 1
    return tokens


# -- the arguments -------------------------------------------------------------------------------


def _positive_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


# -- what the chat spans say of a call -----------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Chat:
    """What one call's ``chat`` spans report: the model asked for, and readers of its answer.

    ``usage_of`` and ``response_of`` read a succeeded attempt's result; ``None`` when the result
    is not the answer (an opened stream, whose usage comes at its end).
    """

    model: str
    usage_of: Callable[[Any], TokenUsage | None] | None = None
    response_of: Callable[[Any], ChatResponse | None] | None = None
    # Where a priced attempt puts its reservation, for its span to report the money (one per
    # call: its attempts run one after another); None: the spans report no money.
    charges: ChargeSlot | None = None


@final
class ChargeSlot:
    """The reservation of one execution's current attempt, for the attempt's ``chat`` span.

    The attempt puts its reservation here once reserved (:meth:`put`); the span takes it when
    the attempt ends (and the slot is empty for the next attempt). One execution's attempts run
    one after another, each on the thread or task of its span, so one writer at a time: no lock.
    """

    __slots__ = ("_reservation",)

    def __init__(self) -> None:
        self._reservation: ModelReservation | None = None

    def put(self, reservation: ModelReservation) -> None:
        self._reservation = reservation

    def take(self) -> ModelCharge | None:
        """The current attempt's money (``None``: not priced, or refused), the slot emptied."""
        reservation, self._reservation = self._reservation, None
        return None if reservation is None else reservation.charge()


@final
class ChargeJournal:
    """The priced reservations of one run's model call, in the order they were granted.

    ``parent`` is the journal of the parent run's call (a sub-agent's run): every reservation
    appended here is appended there too, and so up to the root, each journal under its own
    lock, so each level lists its own and its descendants' reservations in the order they were
    journaled at that level. ``_reservations`` is guarded by ``_lock``.
    """

    __slots__ = ("_lock", "_parent", "_reservations")

    def __init__(self, parent: ChargeJournal | None) -> None:
        self._parent = parent
        self._reservations: list[ModelReservation] = []
        self._lock = threading.Lock()

    def append(self, reservation: ModelReservation) -> None:
        with self._lock:
            self._reservations.append(reservation)
        if self._parent is not None:
            self._parent.append(reservation)

    def read(self) -> tuple[ModelReservation, ...]:
        with self._lock:
            return tuple(self._reservations)


# -- one call: the reservation, the request under the deadline, the attempts --------------------


def _never_billed(error: BaseException | None) -> bool:
    """Whether ``error`` proves its request was never billed: the provider refused it with a
    4xx status (not 408 or 499, after which it may have worked on it), or the connection was
    never made (httpx's ``ConnectError`` / ``ConnectTimeout``, raised by the SDKs as the cause
    of their connection errors) so nothing was sent. Anything else may have been billed."""
    status = getattr(error, "status_code", None)
    if type(status) is int and 400 <= status < 500 and status not in (408, 499):
        return True
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        kind = type(error)
        if kind.__module__.startswith("httpx") and kind.__name__ in (
            "ConnectError",
            "ConnectTimeout",
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


@final
class ModelReservation:
    """One attempt's reserved Model call; the response's usage is recorded on it exactly once.

    Invariant: ``_usage`` is written once, by :meth:`_settle`, the one place every record goes
    through; a second record is a ``RuntimeError`` (a usage counted twice would spend the run's
    tokens twice). Recorded by one thread: the one that reads the response (a sync client's
    worker, which may still record after its caller left; the caller then reads :attr:`usage`
    only once the worker has ended the stream).

    Priced (its :class:`ModelCall` has ``prices``): it holds the request's worst case
    (:attr:`held`), and its record settles the hold with the usage priced exactly (:attr:`cost`).
    ``_lock`` (a priced reservation's only; ``None`` unpriced, where one thread records) guards
    ``_settled`` and ``_cost``: the record (perhaps on a sync worker whose caller left) and the
    release of a failed attempt (on the caller) decide under it which one settles the hold,
    once; the settling itself runs outside it.
    """

    __slots__ = (
        "_call",
        "_cost",
        "_hold",
        "_lock",
        "_lowered",
        "_max_tokens",
        "_name",
        "_price",
        "_request",
        "_settled",
        "_usage",
    )

    def __init__(
        self,
        call: ModelCall,
        name: str,
        *,
        hold: CallHold | None = None,
        price: ModelPrice | None = None,
        request: ModelRequest | None = None,
        max_tokens: int | None = None,
        lowered: bool = False,
    ) -> None:
        self._call = call
        self._name = name
        self._settled = False
        self._usage: TokenUsage | None = None  # what was recorded; None: nothing (yet)
        self._hold = hold  # the money held; None: the call is not priced
        self._price = price  # the model's price; None exactly when _hold is
        self._request = request
        self._max_tokens = max_tokens
        self._lowered = lowered
        self._cost: Decimal | None = None  # the cost settled; None: still held, or not priced
        # Only a priced reservation has two paths that may settle it (the record, the release);
        # an unpriced one is recorded by the one thread that reads the response: no lock.
        self._lock = None if hold is None else threading.Lock()

    @property
    def usage(self) -> TokenUsage | None:
        """The usage recorded on this reservation, once it is; else ``None``."""
        return self._usage

    @property
    def settled(self) -> bool:
        """Whether the attempt's usage has been recorded (or its stream ended without any)."""
        return self._settled

    @property
    def max_tokens(self) -> int | None:
        """The ``max_tokens`` the adapter must send: the request's, ``default_max_tokens`` when
        it gave none and the run has a money limit, or the lowered value; ``None`` when the
        request gave none and nothing is to be added."""
        return self._max_tokens

    @property
    def lowered(self) -> bool:
        """Whether the money left lowered :attr:`max_tokens` below what was asked (or the
        default)."""
        return self._lowered

    @property
    def held(self) -> Decimal | None:
        """What was held for this attempt (US dollars): its worst case, or the money left when
        lowered (see :class:`ModelCharge`); ``None`` when it is not priced."""
        return None if self._hold is None else self._hold.max_cost

    @property
    def cost(self) -> Decimal | None:
        """The actual cost settled (zero for a request released unbilled); ``None`` while the
        worst case stays held, or when the call is not priced."""
        return self._cost

    def charge(self) -> ModelCharge | None:
        """This attempt's line of the journal (:attr:`ModelCall.charges`); ``None`` unpriced."""
        request = self._request
        if self._hold is None or request is None:
            return None
        return ModelCharge(
            name=self._name,
            model=request.model,
            provider=request.provider,
            price_data=self._call.price_data,
            max_tokens=self._max_tokens,
            lowered=self._lowered,
            held=self._hold.max_cost,
            cost=self._cost,
            usage=self._usage,
            run_id=self._call.ctx.run_id,
        )

    def record(self, usage: TokenUsage) -> TokenUsage:
        """Record the response's actual usage on the run (even past a limit: it was spent)."""
        self._settle(usage)
        return usage

    def record_response(self, response: R, usage_of: Callable[[R], TokenUsage | None]) -> R:
        """Record the usage ``response`` reports; :class:`UsageNotReported` if it reports none."""
        self._settle(self.reported(response, usage_of))
        return response

    def reported(self, response: R, usage_of: Callable[[R], TokenUsage | None]) -> TokenUsage:
        """The usage ``response`` reports, not recorded yet; :class:`UsageNotReported` if none."""
        usage = usage_of(response)
        if usage is None:
            raise UsageNotReported(f"{self._name}: the response reports no token usage", response)
        return usage

    def end_stream(self, meter: UsageMeter[Any], *, complete: bool) -> TokenUsage | None:
        """A stream ended: record the usage its chunks reported, whole or as far as it went.

        ``complete``: the stream was read to its end (not cut by a cancellation, the deadline,
        a failure or the consumer). A stream cut short records what it received; one read to
        its end without the provider's whole usage raises :class:`UsageNotReported`, after
        recording what it knows. Priced, a stream that received no usage at all leaves its
        hold charged at the worst case.
        """
        known = meter.usage()
        self._settle(known)
        if complete and not meter.final:
            raise UsageNotReported(f"{self._name}: the stream ended without token usage")
        return known

    def __enter__(self) -> ModelReservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._release(exc)

    def _release(self, error: BaseException | None = None) -> None:
        """The attempt's block failed with ``error``: give back what the reservation holds, if
        unsettled and if the request provably was never billed.

        The Model call itself the failed attempt spent (a retry reserves anew). A priced hold is
        settled at zero when ``error`` proves the request unbilled (:func:`_never_billed`); any
        other stays charged at its worst case, until the answer is recorded -- a sync worker
        whose answer arrives after its caller left still settles it, exactly once.
        """
        hold, lock = self._hold, self._lock
        if hold is None or lock is None or not _never_billed(error):
            return
        with lock:
            if self._settled:
                return
            self._settled = True
            self._cost = Decimal(0)
        hold.settle(cost=Decimal(0), input_tokens=0, output_tokens=0)

    def _settle(self, usage: TokenUsage | None) -> None:
        lock = self._lock
        if lock is None:  # unpriced: the tokens only, recorded by the one reading thread
            if self._settled:
                raise RuntimeError(f"{self._name}: the usage of one Model call was recorded twice")
            self._settled = True
            if usage is not None:
                self._usage = usage
                self._call.ctx.record_token_usage(
                    input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
                )
            return
        hold, price = self._hold, self._price
        cost: Decimal | None = None
        if usage is not None and price is not None:
            # Priced before the lock: a usage the price refuses (cache parts above the input)
            # raises here, with nothing recorded, and the hold stays at its worst case.
            cost = price.cost(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cache_write_1h_tokens=usage.cache_write_1h_tokens,
            )
        with lock:
            if self._settled:
                raise RuntimeError(f"{self._name}: the usage of one Model call was recorded twice")
            self._settled = True
            if usage is None:
                return  # nothing received: a priced hold stays at its worst case
            self._usage = usage
            self._cost = cost
        if hold is not None and cost is not None:  # always, with a lock: priced
            hold.settle(
                cost=cost, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
            )


@final
class ModelCall:
    """One adapter's governed model calls: a run, its executor and policy, checked once.

    ``policy`` is the retry policy the attempts run under (a name in ``ctx.retry_policies`` or a
    ``RetryPolicy``), or ``None`` for a framework that retries model requests itself (pydantic-ai:
    each of its requests is reserved and recorded here, :meth:`execute` is not used).
    ``executor`` records every attempt (a new one classifying with ``classifier``, else
    ``default_classifier``, if not given); ``request_timeout`` replaces the client's timeout;
    ``tracing`` gives each attempt a ``chat`` span, which names ``provider`` and ``server``.

    ``prices`` (a :class:`~diagnosis_harness.pricing.Prices`: ``GenaiPrices()``, a
    ``PriceTable``) prices every call: each reservation holds its request's worst case and each
    record settles the actual cost (see the module's docstring). It is required when the run has
    a money limit (``BudgetLimits(cost=...)``): a ``ValueError`` here, before any call. Without a
    money limit the costs are still held, settled and tracked (``ctx.budget.snapshot().cost``);
    without ``prices`` nothing is priced. ``default_max_tokens`` (an int >= 1,
    :data:`DEFAULT_MAX_TOKENS` by default) is the output a priced request without ``max_tokens``
    is held for, and sent with under a money limit.

    ``parent`` is the model call of the run ``ctx`` is a child of (``ctx.child(...)``, a
    sub-agent's run): every priced reservation of this call is journaled in the parent's
    :attr:`charges` too, and so up to the root, as the run's spending rolls up into its ancestors'.

    Immutable once built, but for the journal of its priced attempts (:attr:`charges`, a
    :class:`ChargeJournal` with its own lock): calls on it may run on many threads and tasks at
    once.
    """

    __slots__ = (
        "_ctx",
        "_default_max_tokens",
        "_executor",
        "_journal",
        "_money_limited",
        "_policy",
        "_price_data",
        "_prices",
        "_provider",
        "_request_timeout",
        "_server",
        "_tracing",
    )

    def __init__(
        self,
        ctx: RunContext,
        *,
        policy: RetryPolicy | str | None,
        executor: HarnessRetryExecutor | None = None,
        classifier: Classifier | None = None,
        default_classifier: Classifier | None = None,
        request_timeout: float | None = None,
        tracing: HarnessTracing | None = None,
        provider: str = "",
        server: Server | None = None,
        prices: Prices | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        parent: ModelCall | None = None,
    ) -> None:
        self._ctx = checked_ctx(ctx)
        if parent is not None:
            if type(parent) is not ModelCall:
                raise TypeError(f"parent must be a ModelCall or None, got {parent!r}")
            if ctx.parent_run_id != parent.ctx.run_id:
                raise ValueError(
                    f"parent must be the model call of run {ctx.parent_run_id!r}, the parent of "
                    f"run {ctx.run_id!r}; got the model call of run {parent.ctx.run_id!r}"
                )
        if prices is not None and not callable(getattr(prices, "model_price", None)):
            raise TypeError(
                "prices must be None or a Prices (an object with model_price(model, *, "
                f"provider=None)), e.g. GenaiPrices() or PriceTable({{...}}), got {prices!r}"
            )
        self._money_limited = ctx.budget.priced  # the run's or an ancestor's; fixed
        if prices is None and self._money_limited:
            raise ValueError(
                f"prices is required: the run has a money limit (BudgetLimits(cost="
                f"{ctx.budget.limits.cost}), or an ancestor run's), and each model call must "
                "hold its worst case in "
                "dollars. Pass prices=GenaiPrices() (genai-prices' data, the 'prices' extra) or "
                "prices=PriceTable({'model': ModelPrice(...)}), from diagnosis_harness.pricing"
            )
        if type(default_max_tokens) is not int or default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be an int >= 1, got {default_max_tokens!r}")
        self._prices = prices
        self._default_max_tokens = default_max_tokens
        version = getattr(prices, "data_version", None)
        self._price_data = version if isinstance(version, str) else None
        self._journal = ChargeJournal(None if parent is None else parent.journal)
        self._policy = None if policy is None else policy_of(ctx, policy)
        self._executor = executor_of(ctx, executor, classifier, default=default_classifier)
        self._request_timeout = _positive_seconds("request_timeout", request_timeout)
        if tracing is not None:  # OpenTelemetry is imported only when tracing is asked for
            from .otel import check_tracing  # noqa: PLC0415 - lazy: the optional `otel` extra

            check_tracing(tracing)
        self._tracing = tracing
        self._provider = provider  # gen_ai.provider.name of the chat spans
        self._server = server  # server.address and server.port of the chat spans

    @property
    def ctx(self) -> RunContext:
        return self._ctx

    @property
    def executor(self) -> HarnessRetryExecutor:
        """The executor that runs, and records, every attempt."""
        return self._executor

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy the attempts run under (``ValueError`` if the framework retries)."""
        if self._policy is None:
            raise ValueError("this model call's framework retries itself: it has no policy")
        return self._policy

    @property
    def prices(self) -> Prices | None:
        """The prices every call is priced with; ``None``: the calls are not priced."""
        return self._prices

    @property
    def default_max_tokens(self) -> int:
        """The ``max_tokens`` a priced request without one is held for."""
        return self._default_max_tokens

    @property
    def price_data(self) -> str | None:
        """The version of the prices' data (``GenaiPrices.data_version``), for the journal;
        ``None`` when the prices give none (a ``PriceTable``) or there are none."""
        return self._price_data

    @property
    def charges(self) -> tuple[ModelCharge, ...]:
        """The journal of the priced attempts, in the order they were reserved: what each held,
        the ``max_tokens`` it was sent with (and whether it was lowered), and what it settled.
        With the attempts of every sub-agent's call built with this one as ``parent`` (and
        theirs), each line tagged with the ``run_id`` that made it."""
        reservations = self._journal.read()
        return tuple(charge for charge in (r.charge() for r in reservations) if charge is not None)

    @property
    def journal(self) -> ChargeJournal:
        """The journal of this call's priced reservations (:attr:`charges` reads it)."""
        return self._journal

    def subject(self, name: str, model: str) -> str | None:
        """What the executor's journal names a priced execution (with the prices' data), or
        ``None`` for an unpriced one (named as before)."""
        if self._prices is None:
            return None
        data = "" if self._price_data is None else f", prices: {self._price_data}"
        return f"{name} {model!r}{data}"

    # -- the steps of one attempt -------------------------------------------------------------

    def reserve(
        self, name: str = "model call", request: ModelRequest | None = None
    ) -> ModelReservation:
        """Reserve the attempt's Model call; the run's ``RunTerminated`` if refused (sends nothing).

        ``name`` names the call in the errors of its reservation
        (``"openai chat.completions.create"``). Every adapter's attempt holds its reservation
        around the block that sends the request (``with model_call.reserve(name) as r:``), in
        both loops: a block that fails leaves it to :meth:`ModelReservation._release`.

        Priced, ``request`` is required (``ValueError`` without it): the model's price is looked
        up (``UnknownPrice``, nothing reserved), and the run holds, with the Model call and in
        its one decision, as much of the request's worst case as the money left pays for, but at
        least the worst case of one output token (``BudgetExhausted`` on ``COST`` if not even
        that fits). ``max_tokens`` is then the most whose worst case fits what was held, lowered
        when below the request's; the adapter sends the reservation's
        :attr:`~ModelReservation.max_tokens`. The money left is never read apart from the hold,
        so no hold placed meanwhile by anything else on the run (a Tool call, another adapter,
        a process sharing the run) can end the run where a lower ``max_tokens`` fits.
        """
        if request is not None and type(request) is not ModelRequest:
            raise TypeError(f"request must be a ModelRequest or None, got {request!r}")
        prices = self._prices
        if prices is None:
            self._ctx.reserve_model_call()
            asked = None if request is None else request.max_tokens
            return ModelReservation(self, name, request=request, max_tokens=asked)
        if request is None:
            raise ValueError(
                f"{name}: this model call is priced (prices=...), so reserve() needs the "
                "request's ModelRequest(model, input_bound, max_tokens) to hold its worst case"
            )
        price = prices.model_price(request.model, provider=request.provider)  # UnknownPrice
        wanted = self._default_max_tokens if request.max_tokens is None else request.max_tokens
        if not self._money_limited:
            sent = request.max_tokens  # nothing added to a request that gives none
            hold = self._ctx.reserve_model_call(max_cost=self._worst(price, request, wanted))
        else:
            from ..pricing import to_units  # noqa: PLC0415 - with the prices only

            # One decision of the run: it holds the worst case at the wanted max_tokens, or as
            # much of it as the money left pays for, down to the worst case of one output token;
            # the call is then sized to what was held. A read of the money left apart from the
            # hold would let a hold from elsewhere land in between and end the run on COST.
            hold = self._ctx.reserve_model_call(
                max_cost=self._worst(price, request, wanted),
                min_cost=self._worst(price, request, 1),
            )
            sent = _max_affordable(price, request, wanted, to_units(hold.max_cost))
        reservation = ModelReservation(
            self,
            name,
            hold=hold,
            price=price,
            request=request,
            max_tokens=sent,
            lowered=sent is not None and sent < wanted,
        )
        self._journal.append(reservation)
        return reservation

    @staticmethod
    def _worst(price: ModelPrice, request: ModelRequest, max_tokens: int) -> Decimal:
        return price.worst_case(
            input_tokens_bound=request.input_bound,
            max_output_tokens=max_tokens,
            writes_cache=request.writes_cache,
        )

    def timeout(self, client_timeout: object) -> object:
        """The request's ``timeout=``: the client's (or ``request_timeout``), cut to the deadline.

        An ``httpx`` ``Timeout`` (the SDKs' default: 5 s to connect, 600 s for the rest) keeps its
        shape, each part cut; a number or ``None`` becomes a number.
        """
        left = self._ctx.deadline.remaining_seconds(self._ctx.clock)
        if self._request_timeout is not None:
            return min(self._request_timeout, left)
        if isinstance(client_timeout, (int, float)) and not isinstance(client_timeout, bool):
            return min(float(client_timeout), left)
        parts = ("connect", "read", "write", "pool")
        if client_timeout is not None and all(hasattr(client_timeout, p) for p in parts):

            def cut(part: str) -> float:
                value = getattr(client_timeout, part)
                return left if value is None else min(float(value), left)

            return type(client_timeout)(**{part: cut(part) for part in parts})
        return left

    def ended_wins(self) -> None:
        """After a failure: if the run ended meanwhile, raise its ``RunTerminated`` instead."""
        self._ctx.check(Boundary.MODEL)

    async def request_async(self, send: Callable[[], Awaitable[R]]) -> R:
        """``await send()`` in ``ctx.scope()``: the run's cancellation or deadline cuts it.

        After a failure, the run's ending wins over the SDK's error.
        """
        try:
            async with self._ctx.scope(Boundary.MODEL):
                return await send()
        except Exception:
            self.ended_wins()
            raise

    # -- the attempts: one decision (policy, journal, span), driven by a sync and an async loop --

    def execute(self, attempt: Callable[[], R], chat: Chat, subject: str | None = None) -> R:
        """``attempt`` under the executor and the policy; in a ``chat`` span each, when tracing.

        ``subject`` names the execution in the executor's journal (:meth:`subject`: a priced
        call's, with its prices' data version); ``None``: unnamed.
        """
        if self._tracing is not None:
            attempt = self._traced(self._tracing.chat_attempts, attempt, chat)
        if subject is not None:
            return self._executor.execute_named(subject, self.policy, attempt)
        return self._executor.execute(self.policy, attempt)

    async def execute_async(
        self, attempt: Callable[[], Awaitable[R]], chat: Chat, subject: str | None = None
    ) -> R:
        """:meth:`execute` for an async attempt: the same decisions, awaited."""
        if self._tracing is not None:
            attempt = self._traced(self._tracing.chat_attempts_async, attempt, chat)
        if subject is not None:
            return await self._executor.execute_named_async(subject, self.policy, attempt)
        return await self._executor.execute_async(self.policy, attempt)

    def _traced(self, wrap: Callable[..., A], attempt: A, chat: Chat) -> A:
        """``attempt`` wrapped in its ``chat`` spans: the provider and server here, the rest
        the call's (``wrap`` is the tracing's sync or async wrapper: they take the same)."""
        return wrap(
            attempt,
            provider=self._provider,
            model=chat.model,
            classify=self._executor.classify,
            usage_of=chat.usage_of,
            response_of=chat.response_of,
            server=self._server,
            charge_of=None if chat.charges is None else chat.charges.take,
        )

    def __repr__(self) -> str:
        policy = None if self._policy is None else self._policy.name
        return f"ModelCall(run_id={self._ctx.run_id!r}, policy={policy!r})"
