"""A turn costs what it adds: zone memos keep each message's count and request form."""

from __future__ import annotations

import pytest

from agctl.context.models import Message, Slot, messages_to_openai
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn


def said(number: int) -> Message:
    role = "user" if number % 2 == 0 else "assistant"
    return Message(role=role, content=f"message {number} " + "word " * (number % 7))


def tool(number: int) -> Message:
    return Message(role="tool", tool_call_id=f"c{number}", content="result " * number)


def sums(messages: list[Message]) -> tuple[int, int, int, int]:
    tools = [m for m in messages if m.role == "tool"]
    return (
        sum(m.token_count() for m in messages),
        sum(m.token_count() for m in tools),
        len(tools),
        sum(m.content_estimate() for m in messages),
    )


def memo_sums(slot: Slot) -> tuple[int, int, int, int]:
    memo = slot.memo("messages")
    return memo.tokens, memo.tool_tokens, memo.tool_messages, memo.estimate


def test_the_memo_follows_appends_edits_removals_and_copies() -> None:
    slot = Slot(id="s", messages=[said(n) for n in range(6)])
    assert memo_sums(slot) == sums(slot.messages)
    slot.messages += [tool(7), said(8)]
    assert memo_sums(slot) == sums(slot.messages)
    slot.edit(2, "a much longer text than the one it had before, to count differently")
    assert memo_sums(slot) == sums(slot.messages)
    slot.remove(0)
    slot.messages[3] = said(99)  # replaced in place, not through a method
    assert memo_sums(slot) == sums(slot.messages)
    copy = Slot.model_validate_json(slot.model_dump_json())
    copy._memos = slot._memos  # equal messages, other objects: still the same sums
    assert memo_sums(copy) == sums(copy.messages)
    slot.clear()
    assert memo_sums(slot) == (0, 0, 0, 0)


def test_the_request_form_is_that_of_the_whole_zone() -> None:
    slot = Slot(id="s", messages=[said(n) for n in range(5)])
    first = list(slot.memo("messages").requests())
    assert first == messages_to_openai(slot.messages, reasoning=False)
    slot.messages.append(Message(role="assistant", content="hm", reasoning="secret"))
    assert slot.memo("messages").requests() == messages_to_openai(slot.messages, reasoning=False)
    assert all("reasoning_content" not in d for d in slot.memo("messages").requests())


@pytest.mark.parametrize("mode", ["full", "focused"])
def test_a_turn_counts_only_what_is_new(
    store: Store, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    store.create_session("s")
    store.update_slot("s", None, lambda s: s.messages.extend(said(n) for n in range(500)))
    store.set_mode("s", None, mode)
    options = TurnOptions(model="offline", window=10_000_000, auto_compress=False)
    provider = OfflineProvider()
    first = send_turn(store, "s", "warm up", provider, options)
    counted: list[int] = []
    real = Message.token_count

    def counting(self: Message) -> int:
        counted.append(1)
        return real(self)

    monkeypatch.setattr(Message, "token_count", counting)
    send_turn(store, "s", "and now", provider, options, reuse=first.slot)
    # The focused view counts its own messages (up to recent + stride - 1 = 25), twice.
    assert len(counted) < 60, f"a turn onto 500 messages counted {len(counted)} of them"
