"""One line saying what pydantic refused, for the message of an AgctlError."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


def validation_summary(exc: ValidationError, root: str = "") -> str:
    """'where: why' of the first error, plus how many more there are. `where` is the dotted
    path of the field, else `root` (what the whole input is); with neither, just 'why'."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or root
    why = first["msg"].removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {why}{more}" if where else f"{why}{more}"


# The wires each wire setting is for, and the least thinking budget a wire takes.
WIRE_SETTINGS = {"cache_ttl": ("anthropic",), "thinking_budget": ("anthropic", "gemini")}
LEAST_THINKING = {"anthropic": 1024, "gemini": -1}  # Gemini: -1 lets the model choose


def wire_setting_problem(
    provider: str, cache_ttl: str | None, thinking_budget: int | None
) -> str | None:
    """What is wrong with a profile's (or a turn's) wire settings for `provider`: one its
    wire has no use for, or a thinking budget below the wire's least; None when nothing."""
    for name, value in (("cache_ttl", cache_ttl), ("thinking_budget", thinking_budget)):
        wires = WIRE_SETTINGS[name]
        if value is not None and provider not in wires:
            kinds = " and ".join(wires) + (" providers" if len(wires) > 1 else " provider")
            return f"{name} is a setting of the {kinds}, not of {provider}"
    least = LEAST_THINKING.get(provider)
    if thinking_budget is not None and least is not None and thinking_budget < least:
        return (
            f"thinking_budget {thinking_budget} is below the {provider} provider's least ({least})"
        )
    return None
