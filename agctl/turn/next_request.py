"""The next request of a slot, counted and not sent (`ctx show`): where its tokens go,
against the budget and the window, and what of it a provider's cache is expected to serve.

Kept apart from agctl.turn.setup, which every turn imports: a turn never counts this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agctl.context.budget import Breakdown
    from agctl.context.cache import CacheOutlook
    from agctl.context.models import Slot
    from agctl.store import Store
    from agctl.turn.setup import ModelChoice, ModelSetup, ToolsChoice


class NextRequest(NamedTuple):
    """Where the tokens of a slot's next request go (`ctx show`): its zones against the
    budget, the wire parts its view holds by wire, and with `cache` asked, what of it the
    provider's cache is expected to serve."""

    setup: ModelSetup
    slot: Slot
    breakdown: Breakdown
    wire_parts: dict[str, int]
    outlook: CacheOutlook | None = None


def next_request(
    store: Store,
    session_id: str,
    slot_id: str | None,
    choice: ModelChoice,
    tools: ToolsChoice,
    *,
    prompt: str | None = None,
    system: str | None = None,
    scratch: tuple[str, ...] = (),
    cache: bool = False,
) -> NextRequest:
    """The next request of a slot, with what a command line chose (the model, the tools
    offered, the prompt, system prompt and scratch text of a turn), counted, not sent."""
    from agctl.context.budget import breakdown
    from agctl.context.messages import prompt_message, scratch_messages
    from agctl.context.view import slot_view, wire_part_counts
    from agctl.turn.setup import ModelSetup
    from agctl.turn.tools import definitions

    setup = ModelSetup.chosen(store, session_id, choice)
    offered = definitions(setup.offered_specs_now(tools).values()) if tools.chosen else None
    session = store.load_session(session_id)
    slot = store.load_slot(session_id, slot_id)
    model = setup.settings.model
    counted = breakdown(
        session,
        slot,
        model=model,
        window=setup.window,
        scratch=scratch_messages(scratch),
        user_input=prompt_message(prompt),
        system_prompt=system,
        tools=offered,
    )
    parts = wire_part_counts(slot_view(slot))
    if not cache:
        return NextRequest(setup, slot, counted, parts)
    from agctl.context.cache import cache_outlook

    outlook = cache_outlook(
        session,
        slot,
        model=model,
        scratch=scratch_messages(scratch),
        user_input=prompt_message(prompt),
        system_prompt=system,
        tools=offered,
        tool_tokens=sum(z.tokens for z in counted.zones if z.name == "tool definitions"),
        prices=setup.config.price_overrides(),
        window=setup.window,
    )
    return NextRequest(setup, slot, counted, parts, outlook)
