"""Prices per model, in US dollars per million tokens, cache reads and writes included.

A price comes from the config's overrides first, then from genai-prices (a maintained
database of list prices, with cache prices for most providers, imported only when a
cost is computed: 50-65 ms of a billed turn, measured), then from the few models it does
not know below; the model's name decides, as a hosted model's ("provider/model", a
router's name, as that provider's), so a local model named like one is priced as it
unless the config prices it. A model no one knows costs None and
is reported as unpriced. The cost of a request is cache-aware: its cached input at the
cache-read price, its cache writes at the write price, the rest of its input at the
input price; what the cache saved is the cost with every input token at the input
price, less that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from agctl.providers.base import Usage

# Providers whose answers no one bills: the offline model, and a cassette's recordings
# (replayed, not asked again). A turn they answer costs 0 whatever its model is called
# (a cassette's replies carry the recorded model's name, as its requests must to match).
FREE_PROVIDERS = frozenset({"offline", "replay"})


class Price(NamedTuple):
    """US dollars per million tokens. A cache price None is the input price (none known)."""

    prompt: float
    completion: float
    cache_read: float | None = None
    cache_write: float | None = None


# What genai-prices does not know (exact name or prefix): the offline model, and free ones.
LOCAL_PRICES: dict[str, Price] = {
    "offline": Price(0.0, 0.0),
    "glm-4-flash": Price(0.0, 0.0),
}


# The config's overrides, by model name (or prefix).
Prices = Mapping[str, Price]


class Charge(NamedTuple):
    """What a request cost, and what the cache saved of it: None when not known (the
    model has no price; for `saved`, also when the provider reported no cache use)."""

    cost: float | None
    saved: float | None


def _lookup(model: str, table: Mapping[str, Any]) -> Any:
    """The exact entry for `model`, else the longest prefix of it in `table`, else None."""
    if model in table:
        return table[model]
    prefixes = [name for name in table if model.startswith(name)]
    return table[max(prefixes, key=len)] if prefixes else None


def _known_model(model: str) -> Any:
    """genai-prices' entry for `model` (its provider and model), or None; one that has no
    price per input and output token (an image model's) is not a chat model's price."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    try:
        found = snapshot.find_provider_model(model, None, None, None)
    except LookupError:
        # A router's name, "provider/model" (OpenRouter's, LiteLLM's): the provider's model.
        provider, _, name = model.partition("/")
        if not name:
            return None
        try:
            found = snapshot.find_provider_model(name, None, provider, None)
        except LookupError:
            return None
    prices = found[1].get_prices(_now())
    if getattr(prices, "input_mtok", None) is None or getattr(prices, "output_mtok", None) is None:
        return None
    return found


def price_for(model: str, overrides: Prices) -> Price | None:
    """The price of `model`: the config's override, else genai-prices' (its base price
    where it has tiers), else the local table's; None when no one knows it."""
    override = _lookup(model, overrides)
    if override is not None:
        return Price(*override)
    found = _known_model(model)
    if found is None:
        local: Price | None = _lookup(model, LOCAL_PRICES)
        return local
    prices = found[1].get_prices(_now())

    def per_million(key: str) -> float | None:
        value = getattr(prices, key, None)
        value = getattr(value, "base", value)  # tiered: the price below the first tier
        return None if value is None else float(value)

    return Price(
        per_million("input_mtok") or 0.0,
        per_million("output_mtok") or 0.0,
        per_million("cache_read_mtok"),
        per_million("cache_write_mtok"),
    )


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def add_costs(costs: Iterable[float | None]) -> float | None:
    """The sum, or None when any part is unknown."""
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return total


def answers_free(provider_name: str) -> bool:
    """Whether what this provider answers costs nothing (see FREE_PROVIDERS)."""
    return provider_name in FREE_PROVIDERS


def cost_of(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    overrides: Prices | None = None,
    *,
    cached_tokens: int | None = None,
    cache_write_tokens: int | None = None,
) -> float | None:
    """Dollars for one request, cache-aware (see the module), or None when the model has
    no known price. A count not reported (None) is priced as none: all input at the
    input price."""
    cached, written = cached_tokens or 0, cache_write_tokens or 0
    override = _lookup(model, overrides or {})
    if override is None:
        found = _known_model(model)
        if found is not None:
            return _database_cost(found, prompt_tokens, completion_tokens, cached, written)
    price = Price(*override) if override is not None else _lookup(model, LOCAL_PRICES)
    if price is None:
        return None
    fresh = max(prompt_tokens - cached - written, 0)
    read_price = price.prompt if price.cache_read is None else price.cache_read
    write_price = price.prompt if price.cache_write is None else price.cache_write
    dollars = (
        fresh * price.prompt
        + cached * read_price
        + written * write_price
        + completion_tokens * price.completion
    )
    return dollars / 1_000_000


def _database_cost(found: Any, prompt: int, completion: int, cached: int, written: int) -> float:
    """genai-prices' cost of the request (its tiers applied: a long prompt may cost more
    per token), cache reads and writes at their prices."""
    from genai_prices import Usage as Counts

    provider, model = found
    counts = Counts(input_tokens=prompt, output_tokens=completion)
    if cached:
        counts.cache_read_tokens = min(cached, prompt)
    if written:
        counts.cache_write_tokens = min(written, max(prompt - cached, 0))
    return float(model.calc_price(counts, provider).total_price)


def charge(model: str, usage: Usage, overrides: Prices | None = None) -> Charge:
    """What a request of `usage` cost, and what its cache saved (None when the provider
    said nothing of the cache, or the model has no price)."""
    cost = cost_of(
        model,
        usage.prompt_tokens,
        usage.completion_tokens,
        overrides,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    if cost is None or (usage.cached_tokens is None and usage.cache_write_tokens is None):
        return Charge(cost, None)
    uncached = cost_of(model, usage.prompt_tokens, usage.completion_tokens, overrides)
    return Charge(cost, None if uncached is None else uncached - cost)
