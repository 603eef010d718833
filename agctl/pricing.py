"""Prices per model, in US dollars per million tokens; the config can override any of them.

The table holds list prices at the time of writing for common models; a model it does not
know costs 0 and is reported as unpriced.
"""

from __future__ import annotations

from collections.abc import Mapping

# Providers whose answers no one bills: the offline model, and a cassette's recordings
# (replayed, not asked again). A turn they answer costs 0 whatever its model is called
# (a cassette's replies carry the recorded model's name, as its requests must to match).
FREE_PROVIDERS = frozenset({"offline", "replay"})

# model name (or prefix) -> (prompt, completion) USD per 1M tokens
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "offline": (0.0, 0.0),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3-mini": (1.10, 4.40),
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
    "glm-4-plus": (0.70, 0.70),
    "glm-4-flash": (0.0, 0.0),
}


def price_for(
    model: str, overrides: Mapping[str, tuple[float, float]]
) -> tuple[float, float] | None:
    """The exact entry for `model`, else the longest known prefix; overrides win."""
    table = {**DEFAULT_PRICES, **overrides}
    if model in table:
        return table[model]
    prefixes = [name for name in table if model.startswith(name)]
    return table[max(prefixes, key=len)] if prefixes else None


def answers_free(provider_name: str) -> bool:
    """Whether what this provider answers costs nothing (see FREE_PROVIDERS)."""
    return provider_name in FREE_PROVIDERS


def cost_of(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    overrides: Mapping[str, tuple[float, float]] | None = None,
) -> float | None:
    """Dollars for one request, or None when the model has no known price."""
    price = price_for(model, overrides or {})
    if price is None:
        return None
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000
