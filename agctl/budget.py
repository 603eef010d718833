"""Context windows, budgets, and where the tokens of the next request go.

`breakdown` is what `ctx show` prints and what a turn checks before it sends anything:
every zone of the request with its tokens, against the model's window minus the reserve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agctl.models import ContextBudget, Message, Session, Slot
from agctl.view import memory_message, mode_messages

# Context windows in tokens, by model name or prefix; the config and profiles override.
CONTEXT_WINDOWS: dict[str, int] = {
    "offline": 8_192,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "o3": 200_000,
    "o4-mini": 200_000,
    "deepseek-chat": 65_536,
    "deepseek-reasoner": 65_536,
    "glm-4": 128_000,
    "glm-4-flash": 128_000,
    "llama3": 8_192,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "qwen2.5": 32_768,
    "mistral": 32_768,
}
DEFAULT_WINDOW = 32_768


def context_window(model: str, overrides: Mapping[str, int] | None = None) -> int:
    """The window of `model`: an override, else the exact entry, else the longest prefix."""
    table = {**CONTEXT_WINDOWS, **(overrides or {})}
    if model in table:
        return table[model]
    prefixes = [name for name in table if model.startswith(name)]
    return table[max(prefixes, key=len)] if prefixes else DEFAULT_WINDOW


def effective_budget(slot: Slot, window: int) -> ContextBudget:
    """The slot's own budget when it has one, else the window split by fixed ratios."""
    return slot.config.budget if slot.config.budget is not None else ContextBudget.auto(window)


@dataclass
class Zone:
    name: str
    messages: list[Message]
    budget_part: str

    @property
    def tokens(self) -> int:
        return sum(m.token_count() for m in self.messages)


@dataclass
class Breakdown:
    """The next request, zone by zone, against the budget and the window."""

    model: str
    window: int
    budget: ContextBudget
    zones: list[Zone] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(zone.tokens for zone in self.zones)

    @property
    def limit(self) -> int:
        """What a request may use: the window minus the reserve kept for the reply."""
        return max(self.window - self.budget.reserve, 0)

    @property
    def room(self) -> int:
        return self.limit - self.total

    def by_part(self) -> dict[str, int]:
        used = {"system": 0, "history": 0, "tools": 0, "tool_results": 0}
        for zone in self.zones:
            used[zone.budget_part] += zone.tokens
        return used

    def to_dict(self) -> dict[str, object]:
        budget = self.budget.model_dump()
        return {
            "model": self.model,
            "window": self.window,
            "reserve": self.budget.reserve,
            "limit": self.limit,
            "total": self.total,
            "room": self.room,
            "zones": [
                {
                    "zone": z.name,
                    "messages": len(z.messages),
                    "tokens": z.tokens,
                    "budget": z.budget_part,
                }
                for z in self.zones
            ],
            "budget": {
                part: {"used": used, "budget": budget[part]}
                for part, used in self.by_part().items()
            },
        }


def breakdown(
    session: Session,
    slot: Slot,
    *,
    model: str,
    window: int,
    scratch: Sequence[Message] = (),
    user_input: Message | None = None,
    system_prompt: str | None = None,
) -> Breakdown:
    """Every zone of the next request on `slot`, in the order the model receives them."""
    prompt = system_prompt if system_prompt is not None else session.system_prompt
    result = Breakdown(model=model, window=window, budget=effective_budget(slot, window))
    history = mode_messages(slot)
    memory = memory_message(session)
    parts = [
        ("system prompt", [Message(role="system", content=prompt)] if prompt else [], "system"),
        ("memory", [memory] if memory else [], "system"),
        ("immutable", list(slot.immutable), "system"),
        ("compressed", list(slot.compressed), "history"),
        ("messages", [m for m in history if m.role != "tool"], "history"),
        ("tool results", [m for m in history if m.role == "tool"], "tool_results"),
        ("scratch", list(scratch), "system"),
        ("input", [user_input] if user_input else [], "history"),
    ]
    result.zones = [Zone(name, messages, part) for name, messages, part in parts]
    return result
