"""agctl.turn.next_request: a slot's next request counted with what a command line chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agctl.context.models import Message
from agctl.store import Store
from agctl.turn.next_request import next_request
from agctl.turn.setup import ModelChoice, ToolsChoice

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    """Tool `cat`, defined in a file (as --tools-file gives it)."""
    path = tmp_path / "tools.json"
    tool = {"name": "cat", "description": "Run cat", "parameters": SCHEMA, "command": ["cat"]}
    path.write_text(json.dumps([tool]))
    return path


def test_the_next_request_counts_the_prompt_and_the_tools_offered(
    store: Store, tools_file: Path
) -> None:
    sid = store.create_session(model="gpt-4o").id
    bare = next_request(store, sid, None, ModelChoice(), ToolsChoice())
    assert bare.outlook is None
    assert (bare.slot.id, bare.breakdown.model) == ("default", "gpt-4o")
    asked = next_request(
        store,
        sid,
        None,
        ModelChoice(model="gpt-4o-mini"),
        ToolsChoice(names=("cat",), tools_file=tools_file),
        prompt="a question of some length",
        cache=True,
    )
    zones = {zone.name: zone.tokens for zone in asked.breakdown.zones}
    assert zones["tool definitions"] > 0
    assert asked.breakdown.total > bare.breakdown.total + zones["tool definitions"]
    assert asked.breakdown.model == "gpt-4o-mini"
    assert asked.outlook is not None and asked.outlook.last_sent is None


THINKING = {"type": "thinking", "thinking": "Two steps.", "signature": "EqQBCgIYAhIM"}
REPLIES_WITH_PARTS = [
    Message(role="user", content="first"),
    Message(
        role="assistant",
        content="one",
        wire_parts={"anthropic": [THINKING, {"type": "redacted_thinking", "data": "EmwKAhgB"}]},
    ),
    Message(role="user", content="second"),
    Message(
        role="assistant",
        content="two",
        wire_parts={"anthropic": [THINKING], "gemini": [{"thoughtSignature": "CiQB"}]},
    ),
]


def test_the_next_request_counts_the_wire_parts_its_view_holds(store: Store) -> None:
    """Each wire's parts, over the messages the slot's view sends: none in a slot without
    any; a focused view that leaves a reply out leaves its parts out."""
    sid = store.create_session(model="gpt-4o").id
    assert next_request(store, sid, None, ModelChoice(), ToolsChoice()).wire_parts == {}
    store.append_messages(sid, store.load_slot(sid, None), REPLIES_WITH_PARTS)
    found = next_request(store, sid, None, ModelChoice(), ToolsChoice(), cache=True)
    assert found.wire_parts == {"anthropic": 3, "gemini": 1}
    store.set_mode(sid, None, "focused", focus={"recent_messages": 2, "stride": 1})
    focused = next_request(store, sid, None, ModelChoice(), ToolsChoice())
    assert focused.wire_parts == {"anthropic": 1, "gemini": 1}
