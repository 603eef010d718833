"""Prices per model, in US dollars per million tokens, cache reads and writes included.

A price comes from the config's overrides first, then from genai-prices (a maintained
database of list prices, with cache prices for most providers: imported only to make a
model's price sheet, which the data dir then keeps, as importing it took 50-65 ms of a
billed turn; see agctl.context.price_sheets), then from the few models it does not know below;
the model's name decides, as a hosted model's ("provider/model", a router's name, as
that provider's), so a local model named like one is priced as it unless the config
prices it. A model no one knows costs None and is reported as unpriced. The cost of a
request is cache-aware: its cached input at the cache-read price, its cache writes at
the write price (those kept an hour, Anthropic's, at the 1-hour write price), the rest of
its input at the input price; what the cache saved is the cost with every input token at
the input price, less that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.context.price_sheets import PriceSheets, Tiered, database_usage, find_model

if TYPE_CHECKING:
    from agctl.providers.base import Usage

# Providers whose answers no one bills: the offline model, and a cassette's recordings
# (replayed, not asked again). A turn they answer costs 0 whatever its model is called
# (a cassette's replies carry the recorded model's name, as its requests must to match).
FREE_PROVIDERS = frozenset({"offline", "replay"})


class Price(NamedTuple):
    """US dollars per million tokens. A cache price None is the input price (none known);
    a 1-hour write price None is the write price (genai-prices' rule: an hour's writes
    are writes)."""

    prompt: float
    completion: float
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None


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


def price_for(model: str, overrides: Prices, sheets: PriceSheets | None = None) -> Price | None:
    """The price of `model`: the config's override, else genai-prices' (its base price
    where it has tiers; its sheet from `sheets`, else looked up now), else the local
    table's; None when no one knows it."""
    override = _lookup(model, overrides)
    if override is not None:
        return Price(*override)
    sheet = (sheets or PriceSheets()).sheet(model)
    rates = None if sheet is None else sheet.rates_at(_now())
    if rates is None:
        local: Price | None = _lookup(model, LOCAL_PRICES)
        return local

    def per_million(key: str) -> float | None:
        value = rates.get(key)
        if isinstance(value, Tiered):
            return float(value.base)  # the price below the first tier
        return None if value is None else float(value)

    return Price(
        per_million("input_mtok") or 0.0,
        per_million("output_mtok") or 0.0,
        per_million("cache_read_mtok"),
        per_million("cache_write_mtok"),
        per_million("cache_write_1h_mtok"),
    )


def _now() -> datetime:
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
    cache_write_1h_tokens: int | None = None,
    sheets: PriceSheets | None = None,
) -> float | None:
    """Dollars for one request, cache-aware (see the module), or None when the model has
    no known price. A count not reported (None) is priced as none: all input at the
    input price, every write kept 5 minutes. genai-prices' price comes from the model's
    sheet in `sheets` (else one made now)."""
    cached, written = cached_tokens or 0, cache_write_tokens or 0
    hour = min(cache_write_1h_tokens or 0, written)
    override = _lookup(model, overrides or {})
    if override is None:
        sheet = (sheets or PriceSheets()).sheet(model)
        if sheet is not None:
            # What a request can hold: no more cached than its prompt, no more written
            # than the rest of it.
            read = min(cached, prompt_tokens)
            write = min(written, prompt_tokens - read)
            write_1h = min(hour, write)
            if sheet.exact:
                exact = sheet.cost(
                    prompt_tokens, completion_tokens, read, write, _now(), write_1h=write_1h
                )
                cost = None if exact is None else float(exact)
            else:
                counts = database_usage(prompt_tokens, completion_tokens, read, write, write_1h)
                cost = _database_cost(model, counts)
            if cost is not None:
                return cost
    price = Price(*override) if override is not None else _lookup(model, LOCAL_PRICES)
    if price is None:
        return None
    fresh = max(prompt_tokens - cached - written, 0)
    read_price = price.prompt if price.cache_read is None else price.cache_read
    write_price = price.prompt if price.cache_write is None else price.cache_write
    hour_price = write_price if price.cache_write_1h is None else price.cache_write_1h
    dollars = (
        fresh * price.prompt
        + cached * read_price
        + (written - hour) * write_price
        + hour * hour_price
        + completion_tokens * price.completion
    )
    return dollars / 1_000_000


def _database_cost(model: str, counts: Any) -> float | None:
    """genai-prices' own cost of the request, for a model whose sheet does not give it
    (priced by rules the sheet does not follow); None when it prices no input or output
    token now."""
    found = find_model(model)
    if found is None:
        return None
    provider, info = found
    prices = info.get_prices(_now())
    if getattr(prices, "input_mtok", None) is None or getattr(prices, "output_mtok", None) is None:
        return None
    return float(info.calc_price(counts, provider).total_price)


def charge(
    model: str, usage: Usage, overrides: Prices | None = None, sheets: PriceSheets | None = None
) -> Charge:
    """What a request of `usage` cost, and what its cache saved (None when the provider
    said nothing of the cache, or the model has no price); genai-prices' prices from
    `sheets` (see cost_of)."""
    sheets = sheets or PriceSheets()
    cost = cost_of(
        model,
        usage.prompt_tokens,
        usage.completion_tokens,
        overrides,
        cached_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
        sheets=sheets,
    )
    if cost is None or (usage.cached_tokens is None and usage.cache_write_tokens is None):
        return Charge(cost, None)
    uncached = cost_of(
        model, usage.prompt_tokens, usage.completion_tokens, overrides, sheets=sheets
    )
    return Charge(cost, None if uncached is None else uncached - cost)
