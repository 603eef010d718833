"""Context windows, budgets, and where the tokens of the next request go.

`breakdown` is what `ctx show` prints and what a turn checks before it sends anything:
every zone of the request with its tokens, against the model's window minus the reserve.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from agctl.base.errors import UsageError
from agctl.base.validation import validation_summary
from agctl.context.models import BUDGET_PARTS, ContextBudget, Message, Session, Slot, TokenBudget
from agctl.context.tokens import estimate_text

if TYPE_CHECKING:
    from agctl.store.work import Work
from agctl.context.view import focused_messages, memory_message, mode_messages

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


def effective_budget(slot: Slot, window: int) -> TokenBudget:
    """The slot's own budget in tokens for `window`; its unset parts (all of them when it
    has none) are the window split by fixed ratios."""
    return (slot.config.budget or ContextBudget()).resolve(window)


def updated_budget(current: ContextBudget | None, changes: Mapping[str, Any]) -> ContextBudget:
    """`current` with `changes` applied: a part not named keeps its value (or stays auto),
    a part set to None goes back to auto."""
    unknown = sorted(set(changes) - set(BUDGET_PARTS))
    if unknown:
        raise UsageError(
            f"unknown budget part {unknown[0]!r}; choose from {', '.join(BUDGET_PARTS)}"
        )
    data = (current or ContextBudget()).model_dump()
    data.update(changes)
    try:
        return ContextBudget.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"budget part {validation_summary(exc)}") from None


def check_limit(budget: ContextBudget, window: int, model: str) -> TokenBudget:
    """The budget in tokens, refused when its reserve leaves a request no room."""
    tokens = budget.resolve(window)
    limit = window - tokens.reserve
    if limit <= 0:
        raise UsageError(
            f"budget refused: a reserve of {tokens.reserve} tokens leaves no room for the "
            f"request in the {window}-token window of {model} (limit {limit}); "
            "lower the reserve"
        )
    return tokens


def set_budget(
    work: Work,
    slot_id: str | None,
    changes: Mapping[str, Any] | None,
    *,
    window: int,
    model: str,
) -> Slot:
    """Change some parts of a slot's budget (None: back to auto), checked against `window`."""

    def apply(slot: Slot) -> Slot:
        budget = None if changes is None else updated_budget(slot.config.budget, changes)
        check_limit(budget or ContextBudget(), window, model)
        slot.config.budget = budget
        return slot

    from agctl.store.slots import update_slot

    return update_slot(work, slot_id, apply)


class Zone(NamedTuple):
    """One part of the next request: how many messages, and their tokens."""

    name: str
    messages: int
    tokens: int
    budget_part: str

    @classmethod
    def of(cls, name: str, messages: Sequence[Message], budget_part: str) -> Zone:
        return cls(name, len(messages), sum(m.token_count() for m in messages), budget_part)

    @classmethod
    def of_tools(cls, tools: Sequence[Mapping[str, Any]]) -> Zone:
        """The tool definitions offered (its `messages` counts definitions): each is sent
        as JSON beside the messages, so its tokens are those of its compact JSON."""
        tokens = sum(definition_tokens(tool) for tool in tools)
        return cls("tool definitions", len(tools), tokens, "tools")


def definition_tokens(tool: Mapping[str, Any]) -> int:
    """Tokens of one tool definition of the request's `tools` parameter."""
    return estimate_text(json.dumps(tool, ensure_ascii=False, separators=(",", ":")))


@dataclass
class Breakdown:
    """The next request, zone by zone, against the budget and the window."""

    model: str
    window: int
    budget: TokenBudget
    zones: list[Zone] = field(default_factory=list)
    # With the slot's clear_tool_results on: the tool results its view sends as stubs,
    # and the tokens that saves (agctl.context.clearing); None when off.
    cleared: tuple[int, int] | None = None

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

    def over_budget(self) -> dict[str, tuple[int, int]]:
        """The parts that use more than their budget: part -> (used, budget)."""
        budget = self.budget.model_dump()
        return {
            part: (used, budget[part])
            for part, used in self.by_part().items()
            if used > budget[part]
        }

    def to_dict(self) -> dict[str, object]:
        budget = self.budget.model_dump()
        over = self.over_budget()
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
                    "messages": z.messages,
                    "tokens": z.tokens,
                    "budget": z.budget_part,
                }
                for z in self.zones
            ],
            "budget": {
                part: {"used": used, "budget": budget[part], "over": part in over}
                for part, used in self.by_part().items()
            },
            "over_budget": list(over),
            "cleared_tool_results": None
            if self.cleared is None
            else {"results": self.cleared[0], "tokens_saved": self.cleared[1]},
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
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> Breakdown:
    """Every zone of the next request on `slot`: its messages in the order the model
    receives them, then the definitions of the `tools` offered beside them."""
    prompt = system_prompt if system_prompt is not None else session.system_prompt
    result = Breakdown(model=model, window=window, budget=effective_budget(slot, window))
    memory = memory_message(session)
    immutable, compressed = slot.memo("immutable"), slot.memo("compressed")
    clearing = None
    if slot.config.clear_tool_results is not None:
        from agctl.context.clearing import clear_tool_results

        clearing = clear_tool_results(slot, window)
    if slot.config.mode == "focused":
        history = (
            mode_messages(slot)
            if clearing is None
            else focused_messages(clearing.messages, slot.config.focused)
        )
        said = Zone.of("messages", [m for m in history if m.role != "tool"], "history")
        results = Zone.of("tool results", [m for m in history if m.role == "tool"], "tool_results")
        if clearing is not None:
            shown = {id(m) for m in history}
            stubs = [clearing.messages[p] for p in clearing.positions]
            kept = [
                (p, s) for p, s in zip(clearing.positions, stubs, strict=True) if id(s) in shown
            ]
            saved = sum(slot.messages[p].token_count() - s.token_count() for p, s in kept)
            result.cleared = (len(kept), saved)
    else:  # the whole zone: its memo has the sums, whatever its length
        memo = slot.memo("messages")
        count = len(memo.seen) - memo.tool_messages
        said = Zone("messages", count, memo.tokens - memo.tool_tokens, "history")
        saved = 0 if clearing is None else clearing.saved
        results = Zone("tool results", memo.tool_messages, memo.tool_tokens - saved, "tool_results")
        if clearing is not None:
            result.cleared = (clearing.results, clearing.saved)
    result.zones = [
        Zone.of(
            "system prompt", [Message(role="system", content=prompt)] if prompt else [], "system"
        ),
        Zone("immutable", len(immutable.seen), immutable.tokens, "system"),
        Zone("compressed", len(compressed.seen), compressed.tokens, "history"),
        said,
        results,
        Zone.of("memory", [memory] if memory else [], "system"),
        Zone.of("scratch", list(scratch), "system"),
        Zone.of("input", [user_input] if user_input else [], "history"),
        Zone.of_tools(tools or ()),
    ]
    return result
