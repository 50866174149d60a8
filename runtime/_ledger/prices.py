"""What tokens cost: a shipped price table, overrides from the config, and integer arithmetic.

Prices are held as integer micro-dollars per million tokens, so a token count times a price is
an integer number of pico-dollars and the cost of one usage record is exact until it is rounded
once, to whole micro-dollars (half up). Money never passes through a float after the config is
read. A model with no price has an unknown cost (``None``): the ledger counts it as unpriced and
a money budget refuses it, rather than guessing.

Lookup, first match wins: the config's ``provider:model``, the config's ``provider:*``, the
shipped ``provider:model``, the shipped ``provider:*``; each is tried with the model name as
given, then without a trailing snapshot date (``gpt-4.1-2025-04-14`` -> ``gpt-4.1``,
``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``). A snapshot whose price differs from
its alias is listed under its own name (``gpt-4o-2024-05-13``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs

from .._record import Value

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

    from .._limits.cost import Cost
    from .._messages import Usage

__all__ = [
    "DEFAULT_BATCH_DISCOUNT",
    "PRICES_CHECKED",
    "SHIPPED_PRICES",
    "ModelPrice",
    "PriceTable",
    "cost_micros",
    "format_usd",
    "usd_to_micros",
    "worst_case_micros",
]

_MILLION = 1_000_000
DEFAULT_BATCH_DISCOUNT = 50
"""Percent off every price for tokens sent through a provider's Batch API (OpenAI's Batch API
and Anthropic's Message Batches both bill half the standard price)."""
_CACHED = 4096
"""Price lookups remembered before the cache starts over (it is keyed by caller-chosen names)."""


def usd_to_micros(usd: float | int | str | Decimal) -> int:
    """``usd`` dollars as whole micro-dollars (half up). ``2.5`` -> ``2_500_000``.

    Exact: plain decimal text (what ``str`` gives for the prices in this module) is read with
    integer arithmetic, anything else (an exponent, surrounding blanks) through ``Decimal``,
    which is then imported (the shipped price table is built at import, and ``decimal`` is not
    something a call needs).

    Raises:
        ValueError: not a finite non-negative number.
    """
    text = usd if isinstance(usd, str) else str(usd)
    whole, _, fraction = text.partition(".")
    if _digits(whole) and (not fraction or _digits(fraction)):
        micros = int(whole) * _MILLION + int(fraction[:6].ljust(6, "0"))
        return micros + 1 if fraction[6:7] >= "5" else micros  # half up on the 7th digit
    from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a dollar amount: {usd!r}") from None
    if not value.is_finite() or value < 0:
        raise ValueError(f"a dollar amount must be finite and not negative: {usd!r}")
    return int((value * _MILLION).to_integral_value(rounding=ROUND_HALF_UP))


def _digits(text: str) -> bool:
    """ASCII digits only, at least one."""
    return text.isascii() and text.isdigit()


def format_usd(micros: int | None) -> str:
    """``1234567`` -> ``"1.234567"`` (dollars, exact); None -> ``"?"`` (unknown)."""
    if micros is None:
        return "?"
    whole, frac = divmod(abs(micros), _MILLION)
    return f"{'-' if micros < 0 else ''}{whole}.{frac:06d}"


@attrs.frozen(eq=False, repr=False)
class ModelPrice(Value):
    """One model's prices in micro-dollars per million tokens (``2_500_000`` is $2.50 / M).

    ``cache_read`` and ``cache_write`` are the prices of prompt tokens read from or written to
    the provider's prompt cache; every other prompt token costs ``input``. ``long_context``
    is a second price that applies to the whole call when its prompt has more than that many
    tokens (Gemini 2.5 Pro and Claude Sonnet 4.x above 200k tokens). ``batch_discount`` is
    the percentage a provider's Batch API takes off every one of these prices (OpenAI and
    Anthropic: 50), applied by :meth:`for_batch`.
    """

    input: int
    output: int
    cache_read: int
    cache_write: int
    long_context: tuple[int, ModelPrice] | None = None
    batch_discount: int = attrs.field(default=DEFAULT_BATCH_DISCOUNT, kw_only=True)

    @classmethod
    def usd(
        cls,
        input: float | str,
        output: float | str,
        cache_read: float | str | None = None,
        cache_write: float | str | None = None,
        *,
        long_context: tuple[int, ModelPrice] | None = None,
        batch_discount: int = DEFAULT_BATCH_DISCOUNT,
    ) -> ModelPrice:
        """Build from dollars per million tokens; a missing cache price is the input price."""
        micros = usd_to_micros(input)
        return cls(
            micros,
            usd_to_micros(output),
            micros if cache_read is None else usd_to_micros(cache_read),
            micros if cache_write is None else usd_to_micros(cache_write),
            long_context,
            batch_discount=batch_discount,
        )

    def for_batch(self) -> ModelPrice:
        """The price of the same tokens sent through the provider's Batch API: every price
        (the long-context tier's too) less ``batch_discount`` percent, rounded down to whole
        micro-dollars per million tokens."""
        keep = 100 - self.batch_discount
        tier = self.long_context
        return ModelPrice(
            self.input * keep // 100,
            self.output * keep // 100,
            self.cache_read * keep // 100,
            self.cache_write * keep // 100,
            None if tier is None else (tier[0], tier[1].for_batch()),
            batch_discount=0,
        )

    def for_prompt(self, input_tokens: int) -> ModelPrice:
        """The price in force for a call whose prompt has ``input_tokens`` tokens."""
        tier = self.long_context
        if tier is not None and input_tokens > tier[0]:
            return tier[1]
        return self


def _round_micros(pico: int) -> int:
    return (pico + _MILLION // 2) // _MILLION


def cost_micros(price: ModelPrice, usage: Usage) -> int:
    """What ``usage`` cost at ``price``, in whole micro-dollars (rounded half up, once).

    ``usage.input_tokens`` counts every prompt token, cached ones included (the normalized
    :class:`~sluice._messages.Usage`); reasoning tokens are part of ``output_tokens``.
    """
    p = price.for_prompt(usage.input_tokens)
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    plain = max(0, usage.input_tokens - cached)
    pico = (
        plain * p.input
        + usage.cache_read_tokens * p.cache_read
        + usage.cache_write_tokens * p.cache_write
        + usage.output_tokens * p.output
    )
    return _round_micros(pico)


def worst_case_micros(price: ModelPrice, cost: Cost) -> int:
    """The most an attempt reserved as ``cost`` can be charged, in micro-dollars (rounded up).

    Every prompt token is taken at the dearer of the input and cache-write prices (a prompt
    written to the cache costs more than a plain one), every output token at the output price.
    """
    p = price.for_prompt(cost.input_tokens)
    pico = cost.input_tokens * max(p.input, p.cache_write) + cost.output_tokens * p.output
    return -(-pico // _MILLION)


# The shipped table: list prices in US dollars per million tokens, standard (not batch or
# priority) tier, as published by each provider. Checked against the providers' price pages
# as of PRICES_CHECKED; prices change, so the config can override and extend every entry.
PRICES_CHECKED = "2025-11-30"

_SONNET_LONG = ModelPrice.usd(6.00, 22.50, 0.60, 7.50)
_SONNET = ModelPrice.usd(3.00, 15.00, 0.30, 3.75, long_context=(200_000, _SONNET_LONG))
_OPUS_4 = ModelPrice.usd(15.00, 75.00, 1.50, 18.75)
_GPT_4O = ModelPrice.usd(2.50, 10.00, 1.25)
_GPT_4O_MINI = ModelPrice.usd(0.15, 0.60, 0.075)
_DEEPSEEK = ModelPrice.usd(0.28, 0.42, 0.028)

SHIPPED_PRICES: Mapping[str, Mapping[str, ModelPrice]] = {
    "openai": {
        # OpenAI bills no cache writes; cached prompt tokens at the "cached input" price.
        "gpt-4o": _GPT_4O,
        "gpt-4o-2024-11-20": _GPT_4O,
        "gpt-4o-2024-08-06": _GPT_4O,
        "gpt-4o-2024-05-13": ModelPrice.usd(5.00, 15.00),
        "chatgpt-4o-latest": ModelPrice.usd(5.00, 15.00),
        "gpt-4o-mini": _GPT_4O_MINI,
        "gpt-4.1": ModelPrice.usd(2.00, 8.00, 0.50),
        "gpt-4.1-mini": ModelPrice.usd(0.40, 1.60, 0.10),
        "gpt-4.1-nano": ModelPrice.usd(0.10, 0.40, 0.025),
        "gpt-5": ModelPrice.usd(1.25, 10.00, 0.125),
        "gpt-5-mini": ModelPrice.usd(0.25, 2.00, 0.025),
        "gpt-5-nano": ModelPrice.usd(0.05, 0.40, 0.005),
        "o1": ModelPrice.usd(15.00, 60.00, 7.50),
        "o3": ModelPrice.usd(2.00, 8.00, 0.50),
        "o3-mini": ModelPrice.usd(1.10, 4.40, 0.55),
        "o4-mini": ModelPrice.usd(1.10, 4.40, 0.275),
        # Embedding models: input tokens only (an embedding has no output tokens).
        "text-embedding-3-small": ModelPrice.usd(0.02, 0),
        "text-embedding-3-large": ModelPrice.usd(0.13, 0),
        "text-embedding-ada-002": ModelPrice.usd(0.10, 0),
    },
    "anthropic": {
        # cache_write is the 5-minute cache write (1.25 x input); reads are 0.1 x input.
        "claude-opus-4-5": ModelPrice.usd(5.00, 25.00, 0.50, 6.25),
        "claude-opus-4-1": _OPUS_4,
        "claude-opus-4-0": _OPUS_4,
        "claude-opus-4": _OPUS_4,
        "claude-sonnet-4-5": _SONNET,
        "claude-sonnet-4-0": _SONNET,
        "claude-sonnet-4": _SONNET,
        "claude-3-7-sonnet": ModelPrice.usd(3.00, 15.00, 0.30, 3.75),
        "claude-3-7-sonnet-latest": ModelPrice.usd(3.00, 15.00, 0.30, 3.75),
        "claude-haiku-4-5": ModelPrice.usd(1.00, 5.00, 0.10, 1.25),
        "claude-3-5-haiku": ModelPrice.usd(0.80, 4.00, 0.08, 1.00),
        "claude-3-5-haiku-latest": ModelPrice.usd(0.80, 4.00, 0.08, 1.00),
    },
    "gemini": {
        # Thinking tokens are billed as output (they are part of output_tokens). Context-cache
        # storage (per hour) is not a token price and is not counted here.
        "gemini-2.5-pro": ModelPrice.usd(
            1.25, 10.00, 0.125, long_context=(200_000, ModelPrice.usd(2.50, 15.00, 0.25))
        ),
        "gemini-2.5-flash": ModelPrice.usd(0.30, 2.50, 0.03),
        "gemini-2.5-flash-lite": ModelPrice.usd(0.10, 0.40, 0.01),
        "gemini-2.0-flash": ModelPrice.usd(0.10, 0.40, 0.025),
        "gemini-3-pro-preview": ModelPrice.usd(
            2.00, 12.00, 0.20, long_context=(200_000, ModelPrice.usd(4.00, 18.00, 0.40))
        ),
        "gemini-embedding-001": ModelPrice.usd(0.15, 0),
    },
    "deepseek": {
        # One price for both since V3.2 (2025-09-29): cache-hit input, cache-miss input, output.
        "deepseek-chat": _DEEPSEEK,
        "deepseek-reasoner": _DEEPSEEK,
    },
    "sim": {
        # The simulator charges nothing; this made-up price gives tests and demos a cost.
        "*": ModelPrice.usd(1.00, 4.00, 0.10),
    },
}
SHIPPED_PRICES = {**SHIPPED_PRICES, "google": SHIPPED_PRICES["gemini"]}

_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


def _names(model: str) -> tuple[str, ...]:
    bare = _SNAPSHOT.sub("", model)
    return (model,) if bare == model else (model, bare)


class PriceTable:
    """The shipped prices with the config's overrides laid over them.

    ``overrides`` maps ``provider:model`` (or ``provider:*`` for every model of a provider) to a
    price; an override wins over a shipped entry of the same name and over every shipped entry
    of that provider when it is a wildcard. Lookups are cached, so pricing is a dict hit.
    """

    def __init__(
        self,
        overrides: Mapping[str, ModelPrice] | None = None,
        *,
        shipped: Mapping[str, Mapping[str, ModelPrice]] | None = None,
    ) -> None:
        self._layers: list[Mapping[str, Mapping[str, ModelPrice]]] = []
        user: dict[str, dict[str, ModelPrice]] = {}
        for name, price in (overrides or {}).items():
            provider, sep, model = name.partition(":")
            if not sep or not provider or not model:
                raise ValueError(f"a price is keyed 'provider:model' or 'provider:*', not {name!r}")
            user.setdefault(provider, {})[model] = price
        self._layers = [user, SHIPPED_PRICES if shipped is None else shipped]
        self._cache: dict[tuple[str, str], ModelPrice | None] = {}

    def lookup(self, provider: str, model: str) -> ModelPrice | None:
        """The price of ``provider:model``, or None when it is unknown."""
        key = (provider, model)
        try:
            return self._cache[key]
        except KeyError:
            pass
        found = None
        for layer in self._layers:
            models = layer.get(provider)
            if not models:
                continue
            for name in (*_names(model), "*"):
                found = models.get(name)
                if found is not None:
                    break
            if found is not None:
                break
        cache = self._cache
        if len(cache) >= _CACHED:
            cache.clear()  # model names are the caller's: a cache of them must not grow forever
        cache[key] = found
        return found

    def cost(self, provider: str, model: str, usage: Usage, *, batch: bool = False) -> int | None:
        """What ``usage`` of ``provider:model`` cost in micro-dollars (at the Batch API's
        price with ``batch``); None if unpriced."""
        price = self.lookup(provider, model)
        if price is None:
            return None
        return cost_micros(price.for_batch() if batch else price, usage)
