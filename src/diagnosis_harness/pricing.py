"""Prices: what a model call costs in US dollars, exactly, and what it may cost at most.

A money budget holds each call's worst case before the call and settles its actual cost after it.
This module turns tokens into dollars for both, through one small interface, :class:`Prices`
(``model_price(model, provider=...) -> ModelPrice``), with two implementations:

- :class:`GenaiPrices`, backed by the price data bundled with genai-prices (the ``prices``
  extra: ``pip install 'diagnosis-harness[prices]'``), offline, its data version recorded;
- :class:`PriceTable`, a user's own prices (self-hosted or negotiated models), optionally
  falling back to another :class:`Prices`.

A model with no known price raises :class:`UnknownPrice`, naming the model and how to give a
price: a model is never silently free.

Money is exact: every amount is a :class:`~decimal.Decimal` of US dollars (genai-prices' unit),
computed without rounding. A float price is refused (``0.1`` is not a tenth). For stores that keep
integers (Redis), :func:`to_units` and :func:`from_units` convert to and from picodollars
(:data:`USD_PER_UNIT`), rounding a hold up so rounding never lets spend pass a limit.

Only the standard library is imported here; genai-prices is imported by :class:`GenaiPrices`
alone, when one is made, so ``import diagnosis_harness.pricing`` never loads it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol, final

from ._errors import HarnessError
from ._money import EXACT as _EXACT
from ._money import USD_PER_UNIT, from_units, to_units
from ._money import checked_price as _price
from ._money import tidy as _tidy
from ._validate import non_blank_str, non_negative_int

if TYPE_CHECKING:
    from datetime import datetime

    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelPrice as _GenaiModelPrice
    from genai_prices.types import TieredPrices

__all__ = [
    "USD_PER_UNIT",
    "GenaiPrices",
    "ModelPrice",
    "PriceTable",
    "PriceTier",
    "Prices",
    "UnknownPrice",
    "from_units",
    "to_units",
]

_TOKENS_PER_MTOK = 6  # prices are per million tokens: a price per token is price.scaleb(-6)

_ZERO = Decimal(0)


def _optional_price(name: str, value: object) -> Decimal | None:
    return None if value is None else _price(name, value)


def _or(price: Decimal | None, otherwise: Decimal) -> Decimal:
    return otherwise if price is None else price


def _per_mtok(tokens: int, price_per_mtok: Decimal) -> Decimal:
    """``tokens`` at ``price_per_mtok`` dollars per million tokens, exactly."""
    return _EXACT.multiply(Decimal(tokens), price_per_mtok).scaleb(-_TOKENS_PER_MTOK, _EXACT)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class PriceTier:
    """The prices that apply, to all tokens of a request, once its input passes a threshold.

    A tier applies to a request whose input tokens are *more than* ``above_input_tokens``, and
    then to every token of the request (input, cached and output alike): the "cliff" model of
    genai-prices' ``TieredPrices`` (and of the providers: Anthropic, Google, OpenAI), where
    crossing the threshold re-prices the whole request, not only the tokens past it.
    """

    above_input_tokens: int  # the tier applies when input_tokens > this; an int >= 0
    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None  # None: cached reads cost input_per_mtok
    cache_write_per_mtok: Decimal | None = None  # None: cache writes cost input_per_mtok
    # None: 1-hour cache writes cost cache_write_per_mtok (else input_per_mtok)
    cache_write_1h_per_mtok: Decimal | None = None

    def __post_init__(self) -> None:
        non_negative_int("above_input_tokens", self.above_input_tokens)
        _check_rates(self)


def _check_rates(rates: PriceTier | ModelPrice) -> None:
    _price("input_per_mtok", rates.input_per_mtok)
    _price("output_per_mtok", rates.output_per_mtok)
    _optional_price("cache_read_per_mtok", rates.cache_read_per_mtok)
    _optional_price("cache_write_per_mtok", rates.cache_write_per_mtok)
    _optional_price("cache_write_1h_per_mtok", rates.cache_write_1h_per_mtok)


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """One model's prices, in exact US dollars per million tokens (as genai-prices states them).

    ``input_tokens`` is the request's whole input, cached tokens included (genai-prices'
    convention: Anthropic's ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` are
    added to it); the cached part is priced at ``cache_read_per_mtok`` / ``cache_write_per_mtok``
    where given, else at ``input_per_mtok``, and the rest at ``input_per_mtok``. Cache writes
    kept for an hour (Anthropic's ``ephemeral_1h_input_tokens``, part of the cache writes) are
    priced at ``cache_write_1h_per_mtok`` where given, else as other cache writes. ``per_request``
    is a fixed price of every request (genai-prices' ``requests_kcount``, divided by 1000).

    ``tiers``, in strictly increasing ``above_input_tokens``, re-price a request whose input
    passes a threshold (see :class:`PriceTier`); the base prices apply below the first.

    Only text tokens are priced: audio, image and video tokens, web searches and the other
    units genai-prices knows are outside this price (a request that uses them costs more than
    :meth:`cost` says, and its worst case must be bounded by the caller). Reasoning tokens are
    output tokens here, at the output price (genai-prices prices them apart for two models, at
    less).

    Invariants (checked at construction; a bad value raises and nothing is made): every price
    is a finite Decimal >= 0 (never a float), the tiers' thresholds are ints >= 0, strictly
    increasing.
    """

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None  # None: cached reads cost input_per_mtok
    cache_write_per_mtok: Decimal | None = None  # None: cache writes cost input_per_mtok
    # None: 1-hour cache writes cost cache_write_per_mtok (else input_per_mtok)
    cache_write_1h_per_mtok: Decimal | None = None
    per_request: Decimal = _ZERO  # dollars per request, whatever its tokens
    tiers: tuple[PriceTier, ...] = ()  # strictly increasing above_input_tokens

    def __post_init__(self) -> None:
        _check_rates(self)
        _price("per_request", self.per_request)
        tiers: object = self.tiers  # typed as a tuple, but a caller may pass anything
        if not isinstance(tiers, tuple) or not all(isinstance(tier, PriceTier) for tier in tiers):
            raise TypeError(f"tiers must be a tuple of PriceTier, got {self.tiers!r}")
        thresholds = [tier.above_input_tokens for tier in self.tiers]
        if any(later <= earlier for earlier, later in pairwise(thresholds)):
            raise ValueError(
                f"tiers must be in strictly increasing above_input_tokens, got {thresholds}"
            )

    def _rates_for(self, input_tokens: int) -> ModelPrice | PriceTier:
        """The tier a request of ``input_tokens`` falls in: the last one it is above."""
        applicable: ModelPrice | PriceTier = self
        for tier in self.tiers:
            if input_tokens > tier.above_input_tokens:
                applicable = tier
        return applicable

    def cost(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
    ) -> Decimal:
        """The exact price, in US dollars, of one request with this usage.

        The tier is the one ``input_tokens`` falls in, applied to every token, as genai-prices'
        ``calc_price`` does; for the same usage the two agree exactly. ``cache_read_tokens`` and
        ``cache_write_tokens`` are part of ``input_tokens`` (their sum may not exceed it), and
        ``cache_write_1h_tokens`` part of ``cache_write_tokens``. The amount is written without
        trailing zeros (``0.00288``, ``10``); its value is exact.
        """
        non_negative_int("input_tokens", input_tokens)
        non_negative_int("output_tokens", output_tokens)
        non_negative_int("cache_read_tokens", cache_read_tokens)
        non_negative_int("cache_write_tokens", cache_write_tokens)
        non_negative_int("cache_write_1h_tokens", cache_write_1h_tokens)
        if cache_write_1h_tokens > cache_write_tokens:
            raise ValueError(
                "cache_write_1h_tokens are part of cache_write_tokens and may not exceed them, "
                f"got {cache_write_1h_tokens} > {cache_write_tokens}"
            )
        if cache_read_tokens + cache_write_tokens > input_tokens:
            raise ValueError(
                "cache_read_tokens + cache_write_tokens are part of input_tokens and may not "
                f"exceed it, got {cache_read_tokens} + {cache_write_tokens} > {input_tokens}"
            )
        rates = self._rates_for(input_tokens)
        # A kind of token without a price of its own is priced as the kind it is part of, as
        # genai-prices prices the leaves of its unit tree.
        cache_read = _or(rates.cache_read_per_mtok, rates.input_per_mtok)
        cache_write = _or(rates.cache_write_per_mtok, rates.input_per_mtok)
        cache_write_1h = _or(rates.cache_write_1h_per_mtok, cache_write)
        parts = (
            self.per_request,
            _per_mtok(input_tokens - cache_read_tokens - cache_write_tokens, rates.input_per_mtok),
            _per_mtok(cache_read_tokens, cache_read),
            _per_mtok(cache_write_tokens - cache_write_1h_tokens, cache_write),
            _per_mtok(cache_write_1h_tokens, cache_write_1h),
            _per_mtok(output_tokens, rates.output_per_mtok),
        )
        total = _ZERO
        for part in parts:
            total = _EXACT.add(total, part)
        return _tidy(total)

    def worst_case(
        self, *, input_tokens_bound: int, max_output_tokens: int, writes_cache: bool = True
    ) -> Decimal:
        """The most, in US dollars, that a request within these bounds can cost: its hold.

        ``input_tokens_bound`` must be at least the request's input tokens (cached included) and
        ``max_output_tokens`` at least its output tokens. Then, for every usage within them,
        ``cost(...) <= worst_case(...)``: each input token is priced at the highest input,
        cache-read or cache-write (one-hour ones included) price, and each output token at the
        highest output price, of the base prices and of every tier the bound can reach
        (``above_input_tokens < input_tokens_bound``), plus ``per_request``. The highest of the
        reachable tiers, not the tier of the bound: a tier is a cliff, and a later tier is not
        assumed to cost more.

        ``writes_cache=False`` is for a request that cannot write to the provider's prompt cache
        (an Anthropic request without ``cache_control``): the cache-write prices, often the
        dearest input prices, are then left out, and the bound holds for every usage within the
        bounds that writes no cache (``cache_write_tokens=0``).
        """
        non_negative_int("input_tokens_bound", input_tokens_bound)
        non_negative_int("max_output_tokens", max_output_tokens)
        if not isinstance(writes_cache, bool):
            raise TypeError(f"writes_cache must be a bool, got {writes_cache!r}")
        reachable: list[ModelPrice | PriceTier] = [self]
        reachable += [tier for tier in self.tiers if input_tokens_bound > tier.above_input_tokens]
        input_rate = max(
            price
            for rates in reachable
            for price in (
                rates.input_per_mtok,
                rates.cache_read_per_mtok,
                *(
                    (rates.cache_write_per_mtok, rates.cache_write_1h_per_mtok)
                    if writes_cache
                    else ()
                ),
            )
            if price is not None
        )
        output_rate = max(rates.output_per_mtok for rates in reachable)
        total = _EXACT.add(self.per_request, _per_mtok(input_tokens_bound, input_rate))
        return _tidy(_EXACT.add(total, _per_mtok(max_output_tokens, output_rate)))


class UnknownPrice(HarnessError, LookupError):
    """No price is known for a model: the call it would price must not be made.

    ``model`` and ``provider`` (``None`` when not given) name what was looked up; the message
    says why and how to give a price.
    """

    def __init__(self, model: str, provider: str | None, reason: str) -> None:
        self.model = model
        self.provider = provider
        self.reason = reason
        of = "" if provider is None else f" of provider {provider!r}"
        super().__init__(
            f"no price is known for model {model!r}{of}: {reason}. A model is never priced as "
            f"free: give its price with PriceTable({{{model!r}: ModelPrice("
            "input_per_mtok=Decimal('...'), output_per_mtok=Decimal('...'))}, "
            "fallback=GenaiPrices()), or name a model that genai-prices' data prices "
            "(GenaiPrices(), the 'prices' extra)"
        )


class Prices(Protocol):
    """Where a model's price comes from: :class:`GenaiPrices`, :class:`PriceTable` or your own.

    ``model_price`` returns the model's :class:`ModelPrice` or raises :class:`UnknownPrice`;
    it never returns a price of zero for a model it does not know.
    """

    def model_price(self, model: str, *, provider: str | None = None) -> ModelPrice: ...


def _lookup_args(model: object, provider: object) -> tuple[str, str | None]:
    checked_model = non_blank_str("model", model)
    return checked_model, None if provider is None else non_blank_str("provider", provider)


@final
class PriceTable:
    """A user's own prices, by exact model name, e.g. for a self-hosted or negotiated model.

    ``PriceTable({"my-llama": ModelPrice(input_per_mtok=Decimal("0.20"),
    output_per_mtok=Decimal("0.60"))}, fallback=GenaiPrices())`` looks a model up here first,
    then in ``fallback`` (if given). ``provider`` does not select among this table's entries
    (the table is yours: one price per name); it is passed on to the fallback. The table is
    copied at construction and never changes.
    """

    __slots__ = ("_fallback", "_prices")

    def __init__(self, prices: Mapping[str, ModelPrice], *, fallback: Prices | None = None) -> None:
        if not isinstance(prices, Mapping):
            raise TypeError(
                "prices must be a mapping of model name to ModelPrice, e.g. "
                f"{{'my-llama': ModelPrice(...)}}, got {prices!r}"
            )
        table: dict[str, ModelPrice] = {}
        for name, price in prices.items():
            non_blank_str("a model name of prices", name)
            if not isinstance(price, ModelPrice):
                raise TypeError(
                    f"prices[{name!r}] must be a ModelPrice, e.g. ModelPrice(input_per_mtok="
                    f"Decimal('0.20'), output_per_mtok=Decimal('0.60')), got {price!r}"
                )
            table[name] = price
        if fallback is not None and not callable(getattr(fallback, "model_price", None)):
            raise TypeError(
                "fallback must be None or a Prices (an object with model_price(model, *, "
                f"provider=None)), e.g. GenaiPrices(), got {fallback!r}"
            )
        self._prices = table  # never mutated after this point
        self._fallback = fallback

    def model_price(self, model: str, *, provider: str | None = None) -> ModelPrice:
        """The table's price for ``model``, else the fallback's; :class:`UnknownPrice` if
        neither knows it."""
        model, provider = _lookup_args(model, provider)
        found = self._prices.get(model)
        if found is not None:
            return found
        if self._fallback is None:
            raise UnknownPrice(
                model, provider, "it is not in the PriceTable, which has no fallback"
            )
        try:
            return self._fallback.model_price(model, provider=provider)
        except UnknownPrice as unknown:
            raise UnknownPrice(
                model,
                provider,
                f"it is not in the PriceTable, nor in its fallback ({unknown.reason})",
            ) from unknown


@final
class GenaiPrices:
    """Prices from the data bundled with genai-prices (the ``prices`` extra), offline.

    Only the bundled data is read: never the network, and never prices that genai-prices'
    ``UpdatePrices`` may have fetched into its process-wide snapshot, so that
    :attr:`data_version` names the data every price came from. A model is found as
    genai-prices' ``calc_price`` finds it (its matching rules, ``provider`` as its
    ``provider_id``), and its price is the one in effect at ``at`` (default: now), the standard
    one (no batch or service-tier variant). Its :meth:`ModelPrice.cost` agrees exactly with
    ``calc_price`` for a usage of text tokens.

    A model the data lists without an input or an output token price (free tiers, embeddings,
    audio or image models priced by other units) raises :class:`UnknownPrice`: it is not
    assumed free.
    """

    __slots__ = ("_lock", "_snapshot", "_version")

    def __init__(self) -> None:
        try:
            import genai_prices  # noqa: PLC0415 -- the extra is loaded only by who uses it
            from genai_prices.data import providers  # noqa: PLC0415
            from genai_prices.data_snapshot import DataSnapshot  # noqa: PLC0415
        except ImportError as missing:
            raise ImportError(
                "GenaiPrices needs genai-prices: pip install 'diagnosis-harness[prices]' "
                "(Python 3.11+), or price your models with PriceTable({...})"
            ) from missing
        # Our own snapshot of the bundled data: genai-prices' get_snapshot() would return the
        # prices UpdatePrices fetched, if anyone in the process started it.
        self._snapshot: DataSnapshot = DataSnapshot(providers=providers, from_auto_update=False)
        self._version = f"genai-prices {genai_prices.__version__} (bundled data)"
        # Guards the snapshot's lookup caches (plain dicts it fills on each new model name).
        self._lock = threading.Lock()

    @property
    def data_version(self) -> str:
        """The price data's version, for the journal: genai-prices' package version (its bundled
        data carries no date of its own, and changes only with the package)."""
        return self._version

    def model_price(
        self, model: str, *, provider: str | None = None, at: datetime | None = None
    ) -> ModelPrice:
        """The price of ``model`` (``provider``: genai-prices' provider id, e.g. ``"openai"``)
        in effect at ``at`` (an aware datetime; default now), or :class:`UnknownPrice`."""
        from datetime import datetime, timezone  # noqa: PLC0415 -- only GenaiPrices needs it

        model, provider = _lookup_args(model, provider)
        when: object = datetime.now(timezone.utc) if at is None else at
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(f"at must be an aware datetime (with a tzinfo) or None, got {at!r}")
        try:
            with self._lock:
                _, info = self._snapshot.find_provider_model(model, None, provider, None)
        except LookupError as unknown:
            raise UnknownPrice(
                model, provider, f"genai-prices' data has no price ({unknown})"
            ) from None
        return _from_genai(info.get_prices(when), model, provider)


def _from_genai(price: _GenaiModelPrice, model: str, provider: str | None) -> ModelPrice:
    """genai-prices' price of a model as a :class:`ModelPrice`: its text-token prices, each
    tiered independently there, merged into one list of tiers (at every threshold any of them
    has, each price is the one its own tiers give above that threshold: the same cost for every
    input size)."""
    from genai_prices.types import TieredPrices  # noqa: PLC0415 -- the extra, loaded lazily

    input_mtok, output_mtok = price.input_mtok, price.output_mtok
    if input_mtok is None or output_mtok is None:
        missing = " or ".join(
            name
            for name, value in (("input", input_mtok), ("output", output_mtok))
            if value is None
        )
        raise UnknownPrice(model, provider, f"genai-prices' data gives it no {missing} token price")
    requests = price.requests_kcount
    if isinstance(requests, TieredPrices):
        raise UnknownPrice(model, provider, "its per-request price is tiered, which is unsupported")
    per_request = _ZERO if requests is None else requests.scaleb(-3, _EXACT)
    cache_read_mtok, cache_write_mtok = price.cache_read_mtok, price.cache_write_mtok
    cache_write_1h_mtok = price.cache_write_1h_mtok
    tiered = [input_mtok, output_mtok, cache_read_mtok, cache_write_mtok, cache_write_1h_mtok]
    thresholds = sorted(
        {tier.start for value in tiered if isinstance(value, TieredPrices) for tier in value.tiers}
    )

    def rate(value: Decimal | TieredPrices, above: int) -> Decimal:
        """The price ``value`` gives a request of more than ``above`` input tokens."""
        if not isinstance(value, TieredPrices):
            return value
        applicable = value.base
        for tier in value.tiers:  # sorted by start (TieredPrices.__post_init__)
            if tier.start <= above:
                applicable = tier.price
        return applicable

    def optional_rate(value: Decimal | TieredPrices | None, above: int) -> Decimal | None:
        return None if value is None else rate(value, above)

    tiers = tuple(
        PriceTier(
            above_input_tokens=above,
            input_per_mtok=rate(input_mtok, above),
            output_per_mtok=rate(output_mtok, above),
            cache_read_per_mtok=optional_rate(cache_read_mtok, above),
            cache_write_per_mtok=optional_rate(cache_write_mtok, above),
            cache_write_1h_per_mtok=optional_rate(cache_write_1h_mtok, above),
        )
        for above in thresholds
    )
    # -1: below every threshold (each is an int >= 0), so the base prices
    return ModelPrice(
        input_per_mtok=rate(input_mtok, -1),
        output_per_mtok=rate(output_mtok, -1),
        cache_read_per_mtok=optional_rate(cache_read_mtok, -1),
        cache_write_per_mtok=optional_rate(cache_write_mtok, -1),
        cache_write_1h_per_mtok=optional_rate(cache_write_1h_mtok, -1),
        per_request=per_request,
        tiers=tiers,
    )
