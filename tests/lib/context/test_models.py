"""Documents: message round trips, versions, unknown fields, slot operations, budget, tokens."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agctl.base import schema
from agctl.base.errors import NotFound, ReadonlySlot, SchemaTooNew, UsageError
from agctl.context.models import ContextBudget, FocusedConfig, Message, Session, Slot, SlotConfig
from agctl.context.tokens import estimate_text

OPENAI_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "x"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "need the weather",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "content": "12C", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "12C in Oslo.", "name": "bot", "refusal": None},
]


@pytest.mark.parametrize("data", OPENAI_MESSAGES)
def test_openai_round_trip_is_lossless(data: dict[str, Any]) -> None:
    assert Message.from_openai(data).to_openai() == data


def test_reasoning_is_stored_as_reasoning_and_metadata_stays_out_of_openai() -> None:
    message = Message.from_openai(OPENAI_MESSAGES[2])
    assert message.reasoning == "need the weather"
    message.tokens = 7
    message.model = "deepseek-reasoner"
    assert "tokens" not in message.to_openai() and "model" not in message.to_openai()
    stored = message.model_dump(mode="json")
    assert stored["tokens"] == 7 and "name" not in stored
    assert Message.model_validate(stored) == message


@pytest.mark.parametrize(
    "data",
    [
        {"role": "robot", "content": "hi"},
        {"role": "user"},
        {"role": "tool", "content": "x"},
        {"role": "user", "content": 5},
        {"role": "user", "content": "x", "tokens": -1},
    ],
)
def test_invalid_messages_are_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate(data)


def test_unknown_fields_survive_a_rewrite_at_every_level() -> None:
    data = Slot(id="s", messages=[Message(role="user", content="hi")]).model_dump(mode="json")
    data["future_top"] = {"x": 1}
    data["config"]["future_config"] = [1, 2]
    data["messages"][0]["future_message"] = "kept"
    again = Slot.model_validate_json(Slot.model_validate(data).model_dump_json())
    dumped = again.model_dump(mode="json")
    assert dumped["future_top"] == {"x": 1}
    assert dumped["config"]["future_config"] == [1, 2]
    assert dumped["messages"][0]["future_message"] == "kept"


def test_missing_optional_fields_get_defaults() -> None:
    slot = Slot.model_validate({"id": "bare"})
    assert slot.config.mode == "full" and slot.messages == [] and slot.schema_version == "1.0"
    session = Session.model_validate({"id": "s"})
    assert session.current_slot == "default" and session.memory == {}


def test_newer_major_version_is_refused_naming_both_versions() -> None:
    with pytest.raises(SchemaTooNew) as caught:
        Slot.model_validate({"id": "s", "schema_version": "2.0"})
    assert "2.0" in str(caught.value) and "1.0" in str(caught.value)


def test_newer_minor_version_is_read_and_its_version_kept() -> None:
    slot = Slot.model_validate({"id": "s", "schema_version": "1.7", "new_field": True})
    assert slot.model_dump(mode="json")["schema_version"] == "1.7"


def test_upgrade_chain_runs_each_step_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def to_1_1(data: dict[str, Any]) -> dict[str, Any]:
        calls.append("1.1")
        return {**data, "title": data.pop("name", None)}

    def to_1_2(data: dict[str, Any]) -> dict[str, Any]:
        calls.append("1.2")
        return {**data, "turn_count": int(data.get("turns", 0))}

    monkeypatch.setitem(schema.CURRENT, "session", (1, 2))
    monkeypatch.setitem(schema.MIGRATIONS, "session", [((1, 1), to_1_1), ((1, 2), to_1_2)])
    session = Session.model_validate(
        {"id": "old", "schema_version": "1.0", "name": "legacy", "turns": "3"}
    )
    assert calls == ["1.1", "1.2"]
    assert session.title == "legacy" and session.turn_count == 3
    assert session.schema_version == "1.2"
    calls.clear()
    Session.model_validate({"id": "mid", "schema_version": "1.1"})
    assert calls == ["1.2"]


def test_malformed_schema_version_is_refused() -> None:
    with pytest.raises(ValidationError):
        Slot.model_validate({"id": "s", "schema_version": "one"})


def slot_with(*texts: str, mode: str = "full") -> Slot:
    slot = Slot(id="s", messages=[Message(role="user", content=t) for t in texts])
    slot.config.mode = mode  # type: ignore[assignment]
    return slot


def test_message_operations_with_negative_indexes() -> None:
    slot = slot_with("a", "b", "c")
    assert slot.get(-1).text() == "c" and slot.position(-3) == 0
    assert slot.insert(-1, Message(role="assistant", content="x")) == 2
    assert [m.text() for m in slot.messages] == ["a", "b", "x", "c"]
    assert slot.insert(4, Message(role="user", content="end")) == 4
    assert slot.edit(-5, "A")[1].text() == "A"
    assert [(i, m.text()) for i, m in [slot.remove(1)]] == [(1, "b")]
    assert slot.pop()[0] == 3
    assert slot.pop(0)[1].text() == "A"
    assert [m.text() for m in slot.messages] == ["x", "c"]
    assert slot.find({"assistant"}) == [0]
    assert slot.retain({"user"}) == 1
    assert slot.clear() == 1 and slot.messages == []


@pytest.mark.parametrize("index", [3, -4, 100])
def test_out_of_range_index_is_not_found(index: int) -> None:
    with pytest.raises(NotFound, match="3 messages"):
        slot_with("a", "b", "c").get(index)


def test_edit_of_a_tool_call_message_is_refused() -> None:
    slot = Slot(
        id="s",
        messages=[Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "f"}}])],
    )
    with pytest.raises(UsageError):
        slot.edit(0, "text")


WRITES = [
    ("append", lambda s: s.append(Message(role="user", content="x"))),
    ("insert", lambda s: s.insert(0, Message(role="user", content="x"))),
    ("edit", lambda s: s.edit(0, "x")),
    ("remove", lambda s: s.remove(0)),
    ("pop", lambda s: s.pop()),
    ("retain", lambda s: s.retain({"user"})),
    ("clear", lambda s: s.clear()),
    ("import", lambda s: s.extend([Message(role="user", content="x")])),
]


@pytest.mark.parametrize(("action", "write"), WRITES, ids=[w[0] for w in WRITES])
def test_readonly_slot_refuses_every_write(action: str, write: Any) -> None:
    slot = slot_with("a", "b", mode="readonly")
    before = slot.model_dump()
    with pytest.raises(ReadonlySlot, match=action):
        write(slot)
    assert slot.model_dump() == before


def test_refresh_meta_counts_every_zone() -> None:
    slot = Slot(
        id="s",
        immutable=[Message(role="system", content="abcd")],
        messages=[Message(role="user", content="abcdefgh", tokens=100)],
    )
    slot.refresh_meta()
    assert slot.meta.message_count == 2
    assert slot.meta.total_tokens == (4 + 1) + 100


def test_budget_auto_splits_the_whole_window() -> None:
    budget = ContextBudget.auto(128_000)
    assert budget.total == 128_000
    assert budget.history > budget.tool_results > budget.reserve > 0
    assert ContextBudget.auto(1).total == 1
    with pytest.raises(ValueError):
        ContextBudget.auto(0)


def test_focused_config_updates_ignore_none_and_clear_summary() -> None:
    focus = FocusedConfig(recent_messages=4, summary_override="S")
    assert focus.updated({"recent_messages": None}).recent_messages == 4
    assert focus.updated({"summary_override": ""}).summary_override is None
    with pytest.raises(ValidationError):
        focus.updated({"recent_messages": -1})
    assert SlotConfig().focused.keep_system is True


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("你好世界", 4), ("hello 世界", 4), ("😀", 1)],
)
def test_token_estimate_is_script_aware(text: str, tokens: int) -> None:
    assert estimate_text(text) == tokens
