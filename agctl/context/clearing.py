"""Tool results cleared in the request, never in the store (a slot's `clear_tool_results`).

An old tool result is sent as a stub naming its tool, its size and its digest; the slot
keeps every byte, so diff, rollback, search, export and replay still see it whole.

Which results are cleared is a function of the stored messages alone, the same on every
turn until a new batch is cleared, so a provider's cached prefix is rewritten rarely: the
messages are walked in order with the slot's tokens as the view sends them, and wherever
they pass the trigger, the oldest results not yet cleared (all but the last `keep_last`,
not an excluded tool's, and only those a stub makes shorter) are cleared at once, if
together they save at least `min_tokens`. A later message never uncovers a result an
earlier one cleared: appending only moves the boundary forward, in steps of at least
`min_tokens`.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from pydantic import Field, field_validator

from agctl.base.errors import InvalidInput
from agctl.context.models import BudgetPart, Message, Model, Slot, _empty_list

# The name a stub gives a result whose call is not in the slot (imported without it).
UNKNOWN_TOOL = "unknown tool"


class ClearToolResults(Model):
    """Old tool results replaced by a stub in the request, never in the store (see
    agctl.context.clearing): once the slot passes `trigger`, the oldest results but the
    last `keep_last` are cleared together, and only when that saves `min_tokens`, so the
    request's cached prefix is rewritten rarely. Built only by a slot that clears: the
    slot's config holds it as JSON, since every command builds that model (this one in
    it made a turn 0.6 % longer)."""

    keep_last: int = Field(default=3, ge=0)
    # The slot's tokens (as the view sends them) past which results are cleared: a token
    # count (an integer) or a share of the model's window (a fraction between 0 and 1).
    trigger: BudgetPart = 0.5
    min_tokens: int = Field(default=2048, ge=0)
    exclude: list[str] = Field(default_factory=_empty_list)
    preview: int = Field(default=0, ge=0)

    @field_validator("trigger")
    @classmethod
    def _trigger_given(cls, value: int | float | None) -> int | float:
        if value is None:
            raise ValueError("a trigger is a token count (50000) or a share of the window (0.5)")
        return value

    def trigger_tokens(self, window: int) -> int:
        """The trigger in tokens for `window`."""
        if isinstance(self.trigger, float):
            return int(window * self.trigger)
        return self.trigger or 0


class Clearing(NamedTuple):
    """The slot's messages as a request sends them, and what was cleared of them."""

    messages: list[Message]  # slot.messages, each cleared result replaced by its stub
    positions: tuple[int, ...]  # where the cleared results are in slot.messages
    saved: int  # tokens (Message.token_count) the stubs save
    saved_estimate: int  # the content estimates they save (what the offline provider counts)

    @property
    def results(self) -> int:
        return len(self.positions)


def stub(result: Message, tool: str, preview: int) -> Message:
    """The tool message sent in place of `result`: same call id, its tool, size and digest,
    and its first `preview` characters."""
    text = result.text()
    data = text.encode()
    digest = hashlib.sha256(data).hexdigest()[:12]
    said = f"tool result cleared: {tool}, {len(data)} bytes, sha256 {digest}"
    if preview:
        said += f"; preview: {text[:preview]}"
    return result.model_copy(
        update={"content": f"[{said}]", "tokens": None, "output": None, "output_sha256": None}
    )


def clear_tool_results(slot: Slot, window: int | None) -> Clearing | None:
    """The slot's messages with its old tool results cleared (see the module's doc); None
    when the slot does not clear them, or its trigger is a share and `window` unknown."""
    if slot.config.clear_tool_results is None:
        return None
    setting = setting_of(slot)
    if window is None and isinstance(setting.trigger, float):
        return None
    trigger = setting.trigger_tokens(window or 0)
    stubs, cleared = _cleared(slot, setting, trigger)
    messages = list(slot.messages)
    saved = saved_estimate = 0
    for position in cleared:
        original, replacement = messages[position], stubs[position]
        messages[position] = replacement
        saved += original.token_count() - replacement.token_count()
        saved_estimate += original.content_estimate() - replacement.content_estimate()
    return Clearing(messages, cleared, saved, saved_estimate)


def setting_of(slot: Slot) -> ClearToolResults:
    """The slot's clear_tool_results, validated (one written by hand may be wrong)."""
    from pydantic import ValidationError

    from agctl.base.validation import validation_summary

    try:
        return ClearToolResults.model_validate(slot.config.clear_tool_results)
    except ValidationError as exc:
        raise InvalidInput(
            f"slot {slot.id!r} has an invalid clear_tool_results: {validation_summary(exc)}",
            hint="set it again with 'agctl slot set clear_tool_results JSON', or 'none'",
        ) from None


def _cleared(
    slot: Slot, setting: ClearToolResults, trigger: int
) -> tuple[dict[int, Message], tuple[int, ...]]:
    """The stubs of the results that may be cleared, by position, and the positions cleared."""
    excluded = set(setting.exclude)
    names: dict[str, str] = {}
    total = slot.memo("immutable").tokens + slot.memo("compressed").tokens
    stubs: dict[int, Message] = {}
    eligible: list[int] = []  # positions of the results a stub shortens, in order
    savings = [0]  # savings[i]: what clearing the first i eligible results saves
    cleared = 0  # how many of them are cleared
    for position, message in enumerate(slot.messages):
        tokens = message.token_count()
        total += tokens
        if message.role == "assistant":
            for call in message.tool_calls or ():
                names[call.id] = call.function.name
        elif message.role == "tool":
            tool = names.get(message.tool_call_id or "", UNKNOWN_TOOL)
            if tool not in excluded:
                replacement = stub(message, tool, setting.preview)
                saving = tokens - replacement.token_count()
                if saving > 0:
                    stubs[position] = replacement
                    eligible.append(position)
                    savings.append(savings[-1] + saving)
        if total <= trigger:
            continue
        upto = len(eligible) - setting.keep_last
        if upto > cleared and savings[upto] - savings[cleared] >= setting.min_tokens:
            total -= savings[upto] - savings[cleared]
            cleared = upto
    return stubs, tuple(eligible[:cleared])
