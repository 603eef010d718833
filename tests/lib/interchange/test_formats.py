"""Import and export of messages (OpenAI arrays and JSON lines) and of whole sessions."""

from __future__ import annotations

import json

import pytest

from agctl.base.errors import InvalidInput
from agctl.context.models import Message
from agctl.interchange.formats import (
    export_messages,
    export_session,
    import_session,
    parse_messages,
)
from agctl.store import Store

MESSAGES = [
    Message(role="system", content="rules"),
    Message(role="user", content="héllo 世界", tokens=9, model="m"),
    Message(
        role="assistant",
        tool_calls=[{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        reasoning="think",
    ),
    Message(role="tool", content="done", tool_call_id="c1"),
]


def test_openai_export_drops_metadata_and_round_trips_the_chat() -> None:
    data = export_messages(MESSAGES, "openai")
    decoded = json.loads(data)
    assert decoded[1] == {"role": "user", "content": "héllo 世界"}
    assert decoded[2]["reasoning_content"] == "think"
    back = parse_messages(data, "openai")
    assert [m.to_openai() for m in back] == [m.to_openai() for m in MESSAGES]


def test_jsonl_export_keeps_metadata() -> None:
    data = export_messages(MESSAGES, "jsonl")
    assert len(data.splitlines()) == 4
    assert parse_messages(data, "jsonl") == MESSAGES
    assert parse_messages(data) == MESSAGES


@pytest.mark.parametrize(
    "data",
    [
        b'[{"role": "user", "content": "a"}]',
        b'{"messages": [{"role": "user", "content": "a"}]}',
        b'{"role": "user", "content": "a"}\n',
        b'\n{"role": "user", "content": "a"}\n\n',
    ],
)
def test_auto_detects_the_shape(data: bytes) -> None:
    assert [m.text() for m in parse_messages(data)] == ["a"]


def test_empty_array_is_no_messages() -> None:
    assert parse_messages(b"[]") == []


@pytest.mark.parametrize(
    ("data", "fmt", "error"),
    [
        (b"[{", "auto", "line 1 is not valid JSON"),
        (b"[{", "openai", "not valid JSON"),
        (b'{"role": "user", "content": "a"}', "openai", "expected a JSON array"),
        (b'[{"role": "user", "content": "a"}, 3]', "auto", "message 1 is not a JSON object"),
        (
            b'[{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]',
            "auto",
            "message 1 is invalid: role",
        ),
        (b'{"role": "user", "content": "a"}\n{"role": "user"}', "jsonl", "message 1 is invalid"),
        (b'{"role": "user", "content": "a"}\nnot json', "jsonl", "line 2 is not valid JSON"),
    ],
)
def test_invalid_input_names_the_message(data: bytes, fmt: str, error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        parse_messages(data, fmt, "chat.json")  # type: ignore[arg-type]


def test_an_export_without_a_default_slot_is_refused(store: Store) -> None:
    store.create_session("s")
    store.create_slot("s", "other", make_current=True)
    document = export_session(store, "s")
    document.slots = [s for s in document.slots if s.id != "default"]
    with pytest.raises(InvalidInput, match="default"):
        import_session(store, document.model_dump_json().encode(), as_id="t")
    assert "t" not in store.session_ids()


def test_an_import_whose_parent_chain_loops_is_refused(store: Store) -> None:
    """Before: a session imported as its own parent made `session rm -r` loop forever."""
    store.create_session("a")
    exported = export_session(store, "a").model_dump(mode="json")
    exported["session"]["parent_id"] = "x"
    with pytest.raises(InvalidInput, match="loop"):
        import_session(store, json.dumps(exported).encode(), as_id="x")
    store.create_session("y", parent_id="a")
    exported["session"]["parent_id"] = "y"
    store.destroy_session("a", orphan=True)
    # y's parent 'a' is gone; importing 'a' with parent y would close the loop a -> y -> a
    with pytest.raises(InvalidInput, match="loop"):
        import_session(store, json.dumps(exported).encode(), as_id="a")
    assert store.session_ids() == ["y"]
