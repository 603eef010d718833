"""What the model sees: the mode's view of a slot, and the whole request view."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from agctl.base.vocab import ZONES
from agctl.context.models import FocusedConfig, Message, Session, Slot, messages_to_openai


def tool_safe_cut(messages: Sequence[Message], start: int) -> int:
    """Move a cut back so no tool result is kept without the assistant message that called it."""
    while 0 < start < len(messages) and messages[start].role == "tool":
        start -= 1
    return start


def focused_messages(
    messages: Sequence[Message], focus: FocusedConfig, *, with_summary: bool = True
) -> list[Message]:
    """The focused view of the incremental zone.

    Order: the first system message (when `keep_system`), the summary override as a system
    message, then the recent messages. The summary stands before the recent messages
    because it summarises what came before them.

    The recent messages are at least the last `recent_messages`: old ones are dropped
    `stride` at a time (counted from the first droppable message), so the window's start
    stays put while the slot grows by up to `stride` messages, and a provider's prefix
    cache keeps serving the request until it moves.
    """
    head: list[Message] = []
    rest_from = 0
    if focus.keep_system and messages and messages[0].role == "system":
        head.append(messages[0])
        rest_from = 1
    if with_summary and focus.summary_override:
        head.append(Message(role="system", content=focus.summary_override))
    if focus.recent_messages == 0:
        return head
    dropped = max(0, len(messages) - rest_from - focus.recent_messages)
    dropped -= dropped % focus.stride
    start = max(rest_from, tool_safe_cut(messages, rest_from + dropped))
    return head + list(messages[start:])


def mode_messages(slot: Slot) -> list[Message]:
    """The slot's mode's view of its incremental zone."""
    if slot.config.mode == "focused":
        return focused_messages(slot.messages, slot.config.focused)
    return list(slot.messages)


def slot_view(slot: Slot, window: int | None = None, *, clear: bool = True) -> list[Message]:
    """The slot's own part of a request: immutable + compressed + the mode's view of
    messages (old tool results cleared when the slot clears them, its trigger taken of
    the model's `window`, unless not to `clear`: an export shows them whole)."""
    if slot.config.clear_tool_results is None or not clear:
        return [*slot.immutable, *slot.compressed, *mode_messages(slot)]
    from agctl.context.clearing import clear_tool_results

    clearing = clear_tool_results(slot, window)
    history = slot.messages if clearing is None else clearing.messages
    if slot.config.mode == "focused":
        history = focused_messages(history, slot.config.focused)
    return [*slot.immutable, *slot.compressed, *history]


def wire_part_counts(messages: Iterable[Message]) -> dict[str, int]:
    """How many wire parts `messages` hold (Message.wire_parts: what is sent back only to
    the wire a reply came from), by wire name."""
    counts: dict[str, int] = {}
    for message in messages:
        for wire, parts in (message.wire_parts or {}).items():
            counts[wire] = counts.get(wire, 0) + len(parts)
    return dict(sorted(counts.items()))


def memory_message(session: Session) -> Message | None:
    """The session memory as one system message, when the session puts it in context."""
    if not session.memory_in_context or not session.memory:
        return None
    lines = [f"- {key}: {value}" for key, value in sorted(session.memory.items())]
    return Message(role="system", content="Known facts (session memory):\n" + "\n".join(lines))


def request_view(
    session: Session,
    slot: Slot,
    *,
    scratch: Sequence[Message] = (),
    user_input: Message | None = None,
    system_prompt: str | None = None,
    window: int | None = None,
    clear: bool = True,
) -> list[Message]:
    """The exact list of messages a model would receive for the next turn on `slot`
    (with the model's `window`, when the slot clears old tool results; with `clear`
    False, those results whole: what a page of the conversation shows).

    Order: system prompt, immutable, compressed, the mode's view of messages, session
    memory (when in context), scratch, the new input. What changes least comes first, so
    a provider's prefix cache keeps it: a `memory set` re-sends the memory and what
    follows it, never the conversation before it.
    """
    head, tail = _around(session, scratch, user_input, system_prompt)
    return [*head, *slot_view(slot, window, clear=clear), *tail]


def _around(
    session: Session,
    scratch: Sequence[Message],
    user_input: Message | None,
    system_prompt: str | None,
) -> tuple[list[Message], list[Message]]:
    """What a request holds before the slot's messages (the system prompt) and after them
    (memory, scratch, the new input)."""
    prompt = system_prompt if system_prompt is not None else session.system_prompt
    head: list[Message] = [Message(role="system", content=prompt)] if prompt else []
    memory = memory_message(session)
    tail = [*([memory] if memory is not None else []), *scratch]
    if user_input is not None:
        tail.append(user_input)
    return head, tail


class RequestView(NamedTuple):
    """The next turn's messages, in a request's form too, with their sums."""

    messages: list[Message]
    requests: list[dict[str, Any]]
    tokens: int  # token_count() summed
    estimate: int  # the content estimates summed (what the offline provider counts)
    # Where the next turn's request begins the same (ChatRequest.breakpoints): the ends of
    # the system prompt and immutable zone, of the compressed zone, of the history.
    breakpoints: tuple[int, ...] = ()

    @property
    def wire_parts(self) -> dict[int, dict[str, list[dict[str, Any]]]] | None:
        """The wire parts of the messages that hold some, by position (ChatRequest.wire_parts)."""
        return wire_parts_of(self.messages)


def wire_parts_of(
    messages: Sequence[Message], start: int = 0
) -> dict[int, dict[str, list[dict[str, Any]]]] | None:
    """The wire parts of `messages` by position (counted from `start`), None when none has
    any (ChatRequest.wire_parts)."""
    parts = {
        start + at: message.wire_parts
        for at, message in enumerate(messages)
        if message.wire_parts is not None
    }
    return parts or None


def zone_ends(head: int, zones: Sequence[int]) -> tuple[int, ...]:
    """The counts of leading messages at which each zone ends, after `head` messages
    before them (the system prompt): the first zone's end covers the head too; empty ones
    add nothing."""
    ends: list[int] = []
    total = head
    for size in zones:
        total += size
        if total and (not ends or total > ends[-1]):
            ends.append(total)
    return tuple(ends)


def request_messages(
    session: Session,
    slot: Slot,
    *,
    scratch: Sequence[Message] = (),
    user_input: Message | None = None,
    system_prompt: str | None = None,
    window: int | None = None,
) -> RequestView:
    """`request_view` with its request form and sums. The slot's zones come from their
    memos (agctl.context.models.ZoneMemo): only messages new since the last turn are serialised
    and counted, so a turn's cost does not grow with the slot (focused mode: its view). A
    slot that clears old tool results (agctl.context.clearing) sends their stubs, its
    trigger taken of the model's `window`."""
    head, tail = _around(session, scratch, user_input, system_prompt)
    if slot.config.mode == "focused" or slot.config.clear_tool_results is not None:
        own = slot_view(slot, window)
        shown = own[len(slot.immutable) + len(slot.compressed) :]
        view = [*head, *own, *tail]
        return RequestView(
            view,
            messages_to_openai(view, reasoning=False),
            sum(m.token_count() for m in view),
            sum(m.content_estimate() for m in view),
            zone_ends(len(head), (len(slot.immutable), len(slot.compressed), len(shown))),
        )
    memos = [slot.memo(zone) for zone in ZONES]
    extra = [*head, *tail]
    requests = messages_to_openai(head, reasoning=False)
    for memo in memos:
        requests += memo.requests()
    requests += messages_to_openai(tail, reasoning=False)
    return RequestView(
        [*head, *slot.immutable, *slot.compressed, *slot.messages, *tail],
        requests,
        sum(m.token_count() for m in extra) + sum(memo.tokens for memo in memos),
        sum(m.content_estimate() for m in extra) + sum(memo.estimate for memo in memos),
        zone_ends(len(head), [len(slot.immutable), len(slot.compressed), len(slot.messages)]),
    )
