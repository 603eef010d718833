"""The focused view and the request view."""

from __future__ import annotations

from agctl.context.models import FocusedConfig, Message, Session, Slot, SlotConfig
from agctl.context.view import focused_messages, request_messages, request_view, slot_view


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(call_id: str) -> Message:
    return Message(
        role="assistant",
        tool_calls=[{"id": call_id, "function": {"name": "lookup", "arguments": "{}"}}],
    )


def result(call_id: str) -> Message:
    return Message(role="tool", content="ok", tool_call_id=call_id)


def texts(messages: list[Message]) -> list[str]:
    return [m.text() or f"<{m.role}>" for m in messages]


SYSTEM = Message(role="system", content="rules")
CONVERSATION = [SYSTEM, user("u1"), assistant("a1"), user("u2"), assistant("a2")]


def test_recent_keeps_last_n_and_the_first_system_message() -> None:
    view = focused_messages(CONVERSATION, FocusedConfig(stride=1, recent_messages=2))
    assert texts(view) == ["rules", "u2", "a2"]


def test_keep_system_off_drops_the_system_message() -> None:
    view = focused_messages(
        CONVERSATION, FocusedConfig(stride=1, recent_messages=2, keep_system=False)
    )
    assert texts(view) == ["u2", "a2"]


def test_system_message_not_repeated_when_inside_the_window() -> None:
    view = focused_messages(CONVERSATION, FocusedConfig(stride=1, recent_messages=50))
    assert texts(view) == texts(CONVERSATION)


def test_keep_system_only_applies_to_a_leading_system_message() -> None:
    messages = [user("u1"), SYSTEM, user("u2")]
    view = focused_messages(messages, FocusedConfig(stride=1, recent_messages=1))
    assert texts(view) == ["u2"]


def test_recent_zero_keeps_only_system_and_summary() -> None:
    focus = FocusedConfig(stride=1, recent_messages=0, summary_override="so far: nothing")
    assert texts(focused_messages(CONVERSATION, focus)) == ["rules", "so far: nothing"]
    focus = FocusedConfig(stride=1, recent_messages=0, keep_system=False)
    assert focused_messages(CONVERSATION, focus) == []


def test_summary_is_a_system_message_before_the_recent_ones() -> None:
    view = focused_messages(
        CONVERSATION, FocusedConfig(stride=1, recent_messages=1, summary_override="S")
    )
    assert [(m.role, m.text()) for m in view] == [
        ("system", "rules"),
        ("system", "S"),
        ("assistant", "a2"),
    ]


def test_cut_never_separates_tool_results_from_their_call() -> None:
    messages = [user("u1"), call("c1"), result("c1"), assistant("a1")]
    view = focused_messages(messages, FocusedConfig(stride=1, recent_messages=2))
    assert texts(view) == ["<assistant>", "ok", "a1"]


def test_cut_moves_back_over_several_tool_results() -> None:
    messages = [user("u1"), call("c1"), result("c1"), result("c1"), result("c1")]
    view = focused_messages(messages, FocusedConfig(stride=1, recent_messages=1, keep_system=False))
    assert [m.role for m in view] == ["assistant", "tool", "tool", "tool"]


def test_cut_after_the_tool_group_is_left_alone() -> None:
    messages = [call("c1"), result("c1"), user("u1"), assistant("a1")]
    view = focused_messages(messages, FocusedConfig(stride=1, recent_messages=2))
    assert texts(view) == ["u1", "a1"]


def test_empty_messages() -> None:
    assert focused_messages([], FocusedConfig(stride=1, recent_messages=3)) == []


def test_slot_view_orders_zones_and_filters_only_messages() -> None:
    slot = Slot(
        id="s",
        config=SlotConfig(mode="focused", focused=FocusedConfig(stride=1, recent_messages=1)),
        immutable=[Message(role="system", content="preset")],
        compressed=[Message(role="system", content="summary of old")],
        messages=[user("u1"), assistant("a1")],
    )
    assert texts(slot_view(slot)) == ["preset", "summary of old", "a1"]
    slot.config.mode = "readonly"
    assert texts(slot_view(slot)) == ["preset", "summary of old", "u1", "a1"]


def test_request_view_adds_system_prompt_scratch_and_input() -> None:
    session = Session(id="s1", system_prompt="be brief")
    slot = Slot(id="default", messages=[user("u1")])
    view = request_view(
        session,
        slot,
        scratch=[Message(role="system", content="cwd=/tmp")],
        user_input=user("next"),
    )
    assert texts(view) == ["be brief", "u1", "cwd=/tmp", "next"]
    assert texts(request_view(Session(id="s2"), slot)) == ["u1"]
    override = request_view(session, slot, system_prompt="just this turn")
    assert texts(override) == ["just this turn", "u1"]


def test_breakpoints_are_the_ends_of_the_zones_before_memory_scratch_and_input() -> None:
    session = Session(id="s1", system_prompt="be brief", memory={"k": "v"}, memory_in_context=True)
    slot = Slot(
        id="default",
        immutable=[Message(role="system", content="preset")],
        compressed=[Message(role="system", content="summary")],
        messages=[user("u1"), assistant("a1")],
    )
    view = request_messages(session, slot, scratch=[SYSTEM], user_input=user("next"))
    # system prompt + immutable, + compressed, + history; memory, scratch and input after.
    assert view.breakpoints == (2, 3, 5)
    assert texts(view.messages[: view.breakpoints[-1]])[-1] == "a1"
    assert len(view.messages) == 8
    # An empty zone adds no mark, and no system prompt moves every mark back by one.
    bare = Slot(id="default", messages=[user("u1")])
    assert request_messages(Session(id="s2"), bare, user_input=user("x")).breakpoints == (1,)
    assert request_messages(Session(id="s3"), Slot(id="default")).breakpoints == ()


def test_a_focused_slot_marks_the_end_of_its_window() -> None:
    slot = Slot(
        id="default",
        config=SlotConfig(mode="focused", focused=FocusedConfig(stride=1, recent_messages=2)),
        messages=[user("u1"), assistant("a1"), user("u2"), assistant("a2")],
    )
    view = request_messages(Session(id="s", system_prompt="p"), slot, user_input=user("n"))
    assert texts(view.messages) == ["p", "u2", "a2", "n"]
    assert view.breakpoints == (1, 3)


def test_the_wire_parts_of_a_view_are_by_position() -> None:
    signed = Message(
        role="assistant",
        content="a1",
        wire_parts={"anthropic": [{"type": "thinking", "thinking": "t", "signature": "s"}]},
    )
    slot = Slot(id="default", messages=[user("u1"), signed])
    view = request_messages(Session(id="s", system_prompt="p"), slot, user_input=user("n"))
    assert view.wire_parts == {2: signed.wire_parts}
    # Never in the request form any wire sends as it is (OpenAI's).
    assert "wire_parts" not in view.requests[2]
    assert view.requests[2] == {"role": "assistant", "content": "a1"}
    assert request_messages(Session(id="s"), Slot(id="default")).wire_parts is None
