"""Pins (`msg pin`): a pinned message is metadata that no request carries, and every
compression keeps it verbatim, in its place, or refuses (exit 7) when the pins alone are
over the slot's budget for the messages zone."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    KEEP,
    PROMPT_AT_LIMIT,
    RecordingOffline,
    add,
    dumps,
    msg,
    threshold_session,
    tool_call,
    tool_result,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agctl.base.errors import Conflict, ContextFull, NotFound, PinsOverBudget, ReadonlySlot
from agctl.context.models import (
    Message,
    Slot,
    _plain_message,
    messages_to_openai,
    stored_messages,
)
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.compress import compress, plan_compression, render_transcript, slot_pins
from agctl.turn.send import TurnOptions, send_turn

PROMPT_OVER = PROMPT_AT_LIMIT + "q"  # one token over the window of threshold_session

# ---- the field -------------------------------------------------------------------------


def test_a_pin_is_stored_only_when_true() -> None:
    pinned = Message(role="user", content="x", pinned=True)
    assert pinned.model_dump(mode="json") == {"role": "user", "content": "x", "pinned": True}
    for unset in (False, None):
        dumped = Message(role="user", content="x", pinned=unset).model_dump(mode="json")
        assert dumped == {"role": "user", "content": "x"}


def test_a_stored_pin_reads_back_as_pydantic_reads_it() -> None:
    """stored_messages' fast path knows the field: a pinned message is not an unknown
    field, and a pin of any other value goes to pydantic (which refuses what is not a bool)."""
    data = [
        {"role": "user", "content": "a", "pinned": True},
        {"role": "user", "content": "b", "pinned": False},
        {"role": "assistant", "content": "c"},
    ]
    assert [_plain_message(item) is not None for item in data] == [True, False, True]
    fast = stored_messages(data)
    assert [m.pinned for m in fast] == [True, False, None]
    assert [m.__pydantic_extra__ for m in fast] == [{}, {}, {}]
    assert dumps(fast) == dumps([Message.model_validate(item) for item in data])
    with pytest.raises(ValueError, match="pinned"):
        stored_messages([{"role": "user", "content": "a", "pinned": "maybe"}])


def conversation() -> list[Message]:
    return [
        msg("system", "Rules."),
        msg("user", "Read both files."),
        tool_call(("c1", "cat", '{"p": "a"}'), ("c2", "cat", '{"p": "b"}')),
        tool_result("c1", "contents of a"),
        tool_result("c2", "contents of b"),
        msg("assistant", "Both read."),
        Message(role="assistant", content="Thinking aloud.", reasoning="why", name="bot"),
        msg("user", "u3"),
    ]


def test_pinning_never_changes_what_a_request_sends() -> None:
    """Both serialisers (the plain fast path and pydantic's dump, for tool calls) leave
    the pin out: a request's bytes are the same pinned or not."""
    plain = conversation()
    slot = Slot(id="x", messages=conversation())
    assert slot.pin(range(len(plain))) == list(range(len(plain)))
    assert all(m.pinned for m in slot.messages)
    for reasoning in (True, False):
        assert messages_to_openai(slot.messages, reasoning=reasoning) == messages_to_openai(
            plain, reasoning=reasoning
        )


def test_a_turn_on_a_pinned_slot_sends_the_same_bytes(tmp_path: Path) -> None:
    """Through the whole turn path (view, request, provider): the same request pinned or not."""
    requests = []
    for name, pin in (("plain", False), ("pinned", True)):
        store = Store(tmp_path / name)
        store.create_session("s", system_prompt="sys")
        add(store, "s", None, *conversation())
        if pin:
            store.update_slot("s", None, lambda s: s.pin(range(len(s.messages))))
        provider = RecordingOffline()
        send_turn(store, "s", "next", provider, TurnOptions(model="offline"))
        (request,) = provider.requests
        requests.append(request.messages)
    assert requests[0] == requests[1]


# ---- pin and unpin ---------------------------------------------------------------------


def test_pin_unpin_round_trip_and_undo(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *conversation())
    original = dumps(store.load_slot("s").messages)
    with store.undoable("s", "msg pin"):
        positions = store.update_slot("s", None, lambda s: s.pin([-1, 1, 1]))
    assert positions == [1, 7]
    slot = store.load_slot("s")
    assert slot.pinned() == [1, 7]
    assert [m.pinned for m in slot.messages if m.pinned] == [True, True]
    # Only the pin changed: every other field of those messages is as it was.
    assert [{k: v for k, v in m.items() if k != "pinned"} for m in dumps(slot.messages)] == (
        original
    )
    store.update_slot("s", None, lambda s: s.pin([7], pinned=False))
    assert store.load_slot("s").pinned() == [1]
    store.update_slot("s", None, lambda s: s.pin([1], pinned=False))
    assert dumps(store.load_slot("s").messages) == original

    store.update_slot("s", None, lambda s: s.pin([0]))
    keeper = Checkpointer(store)
    newest = keeper.summaries("s")[0]
    assert newest.label == "before msg pin"
    keeper.rollback("s", newest.id)
    assert dumps(store.load_slot("s").messages) == original


def test_pin_refuses_an_index_out_of_range_and_a_readonly_slot() -> None:
    slot = Slot(id="x", messages=conversation())
    with pytest.raises(NotFound, match="index 8 is out of range"):
        slot.pin([0, 8])
    assert slot.pinned() == []  # nothing pinned when one index is wrong
    slot.config.mode = "readonly"
    with pytest.raises(ReadonlySlot):
        slot.pin([0])


# ---- compression -----------------------------------------------------------------------


def numbered(count: int) -> list[Message]:
    return [msg("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(count)]


def test_truncate_keeps_the_pinned_messages_in_place(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *numbered(10))
    store.update_slot("s", None, lambda s: s.pin([2, 5]))
    done = compress(store, "s", None, strategy="truncate", keep_recent=2)
    assert (done.folded, done.kept) == (6, 4)
    texts = [m.text() for m in store.load_slot("s").messages]
    assert texts == ["message 2", "message 5", "message 8", "message 9"]


def test_a_summary_is_made_of_the_unpinned_messages_only(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *numbered(8))
    store.update_slot("s", None, lambda s: s.pin([1, 3]))
    provider = RecordingOffline()
    compress(store, "s", None, strategy="summarize", keep_recent=2, provider=provider)
    (request,) = provider.requests
    folded = [m for i, m in enumerate(numbered(8)[:6]) if i not in (1, 3)]
    assert request.messages[1]["content"] == render_transcript(folded)
    slot = store.load_slot("s")
    assert [m.text() for m in slot.messages] == ["message 1", "message 3", "message 6", "message 7"]
    assert len(slot.compressed) == 1


class PinningProvider(OfflineProvider):
    """The offline provider, which pins a message while it summarises: another command
    changing the slot while the compression waits for the model."""

    def __init__(self, store: Store, index: int) -> None:
        super().__init__()
        self.store, self.index = store, index

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.store.update_slot("s", None, lambda slot: slot.pin([self.index]))
        return super().stream(request)


def test_a_pin_made_while_a_compression_summarises_is_a_conflict(store: Store) -> None:
    """The plan's hashes cover every message of the range it folds, pinned or not: a pin
    made meanwhile is never folded away."""
    store.create_session("s")
    add(store, "s", None, *numbered(8))
    before = dumps(store.load_slot("s").messages)
    with pytest.raises(Conflict, match="changed while it was being compressed"):
        compress(store, "s", None, keep_recent=2, provider=PinningProvider(store, 3))
    after = dumps(store.load_slot("s").messages)
    assert [m for m in after if m.get("pinned")] == [{**before[3], "pinned": True}]
    assert len(after) == 8 and store.load_slot("s").compressed == []


def test_a_pin_keeps_its_tool_call_group_whole() -> None:
    """A pinned result keeps the call it answers and the call's other results: a request
    never holds a call without its results, or a result without its call."""
    slot = Slot(id="x", messages=[*conversation(), *numbered(3)])
    slot.pin([3])  # the first result
    plan = plan_compression(slot, 2)
    assert plan is not None
    assert plan.pinned == [2, 3, 4]
    kept = plan.kept(slot.messages)
    assert kept == [*slot.messages[:1], *slot.messages[2:5], *slot.messages[-2:]]


def test_nothing_to_fold_when_every_older_message_is_pinned() -> None:
    slot = Slot(id="x", messages=numbered(6))
    slot.pin(range(4))
    assert plan_compression(slot, 2) is None


def test_compress_refuses_pins_over_the_budget_and_changes_nothing(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *numbered(10))
    store.configure_slot("s", None, {"budget": {"history": 10, "tool_results": 0}})
    store.update_slot("s", None, lambda s: s.pin([0, 1]))
    before = dumps(store.load_slot("s").messages)
    tokens = sum(m.token_count() for m in store.load_slot("s").messages[:2])
    assert tokens > 10
    with pytest.raises(PinsOverBudget) as caught:
        compress(store, "s", None, strategy="truncate", keep_recent=2, window=8192)
    assert caught.value.exit_code == 7 and isinstance(caught.value, ContextFull)
    assert (caught.value.total, caught.value.limit) == (tokens, 10)
    assert f"2 pinned messages of slot 'default' hold {tokens} tokens" in str(caught.value)
    assert dumps(store.load_slot("s").messages) == before
    assert Checkpointer(store).summaries("s") == []
    # Under the budget, the same compression runs.
    pins = slot_pins(store.load_slot("s"), 8192)
    assert (pins.messages, pins.tokens, pins.limit) == (2, tokens, 10)
    store.configure_slot("s", None, {"budget": {"history": tokens}})
    assert compress(store, "s", None, strategy="truncate", keep_recent=2, window=8192).folded == 6


def test_a_turn_over_the_window_keeps_a_pin_when_it_compresses(store: Store) -> None:
    original, window = threshold_session(store)
    store.update_slot("s", None, lambda s: s.pin([2]))
    provider = RecordingOffline()
    send_turn(store, "s", PROMPT_OVER, provider, TurnOptions(model="offline", window=window,
                                                             keep_recent=KEEP))  # fmt: skip
    summary_request, turn_request = provider.requests
    assert original[2].text() not in summary_request.messages[1]["content"]
    sent = [m["content"] for m in turn_request.messages]
    kept = [original[2], *original[-KEEP:]]
    assert sent[3 : 3 + len(kept)] == [m.text() for m in kept]
    slot = store.load_slot("s")
    assert slot.messages[1].pinned and slot.messages[1].text() == original[2].text()


def test_a_turn_whose_pins_are_over_the_budget_is_context_full(store: Store) -> None:
    """Auto-compression refuses as `ctx compress` does: nothing summarised, nothing
    dropped, no request sent."""
    _, window = threshold_session(store)
    store.update_slot("s", None, lambda s: s.pin(range(len(s.messages))))
    before = dumps(store.load_slot("s").messages)
    pins = slot_pins(store.load_slot("s"), window)
    assert pins.tokens > pins.limit
    provider = RecordingOffline()
    with pytest.raises(PinsOverBudget):
        send_turn(store, "s", PROMPT_OVER, provider, TurnOptions(model="offline", window=window))
    assert provider.requests == []
    assert dumps(store.load_slot("s").messages) == before
    assert store.load_slot("s").compressed == []


# ---- the property: pinned content survives any sequence of compressions ---------------

ROLES = st.sampled_from(["user", "assistant", "system"])
STEP = st.one_of(
    st.tuples(st.just("append"), ROLES, st.booleans()),
    st.tuples(st.just("pin"), st.integers(-30, 30), st.booleans()),
    st.tuples(st.just("compress"), st.sampled_from(["truncate", "summarize"]), st.integers(0, 5)),
)


def pin_one(index: int, pinned: bool) -> Callable[[Slot], list[int]]:
    return lambda slot: slot.pin([index], pinned=pinned)


@settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(STEP, min_size=1, max_size=40))
def test_any_sequence_of_appends_pins_and_compressions_keeps_every_pin(
    steps: list[tuple[Any, ...]],
) -> None:
    """100 % of pinned content is kept verbatim, in order, by every compression; what
    else is kept keeps its order too."""
    root = tempfile.mkdtemp(prefix="agctl-pins-")
    try:
        store = Store(Path(root) / "data")
        store.create_session("s")
        provider = OfflineProvider()
        for number, step in enumerate(steps):
            kind = step[0]
            if kind == "append":
                _, role, pin = step
                message = Message(role=role, content=f"fact {number}: /srv/{number}.txt")
                message.pinned = True if pin else None
                add(store, "s", None, message)
            elif kind == "pin":
                _, index, pin = step
                with contextlib.suppress(NotFound):  # an index past the end
                    store.update_slot("s", None, pin_one(index, pin))
            else:
                _, strategy, keep = step
                before = dumps(store.load_slot("s").messages)
                compress(
                    store,
                    "s",
                    None,
                    strategy=strategy,
                    keep_recent=keep,
                    provider=provider,
                    checkpoint=False,
                )
                after = dumps(store.load_slot("s").messages)
                assert [m for m in after if m.get("pinned")] == [
                    m for m in before if m.get("pinned")
                ]
                remaining = iter(before)
                assert all(m in remaining for m in after)  # a subsequence: order kept
    finally:
        shutil.rmtree(root, ignore_errors=True)
