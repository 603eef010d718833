"""Restoring a checkpoint (agctl.store.checkpoints.restore): exact rollback, undo and fork."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import (
    OPTIONS,
    SID,
    ToolCallProvider,
    data_dir_files,
    documents,
    dumped_at,
    dumped_live,
    edit,
    file_only,
    hand_edit,
    turn,
)

from agctl.base.errors import AlreadyExists, NotFound, UsageError
from agctl.context.models import Message, isoformat
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import send_turn


def add_extras(document: dict[str, Any]) -> None:
    document["x_plugin"] = {"pinned": [1, 2], "by": "reviewer"}
    document["config"]["x_color"] = "teal"
    document["meta"]["x_seen"] = "2026-01-01T00:00:00Z"
    document["messages"][0]["x_note"] = "kept verbatim"
    document["compressed"] = [{"role": "system", "content": "Compressed: we said hello."}]


def build_rich_session(store: Store) -> Checkpointer:
    """Several turns, derived/switched/deleted slots, every mode, memory, tool calls, extras."""
    store.create_session(SID, system_prompt="Be brief.", title="rich", model="offline")
    turn(store, "first question")
    turn(store, "second question")
    store.derive_slot(SID, "copy", strategy="full")
    store.derive_slot(
        SID,
        "focus",
        strategy="focused",
        focus={"recent_messages": 2, "summary_override": "We greeted each other."},
        make_current=True,
    )
    turn(store, "in the focused slot")
    send_turn(store, SID, "look it up", ToolCallProvider(), OPTIONS)
    tool_reply = Message(role="tool", tool_call_id="call_7", content='{"tide": "high"}')
    store.update_slot(SID, None, lambda slot: slot.append(tool_reply))
    store.create_slot(
        SID,
        "static",
        immutable=[
            Message(role="system", content="You are a pirate."),
            Message(role="user", content="Ahoy"),
        ],
    )
    store.create_slot(SID, "gone")
    store.use_slot(SID, "gone")
    store.delete_slot(SID, "gone")
    store.set_mode(SID, "copy", "readonly")
    store.set_mode(SID, "default", "focused", focus={"summary_override": "So far: two questions."})
    store.memory_set(SID, "goal", "ship it")
    store.memory_set(SID, "scratch", "temporary")
    store.memory_remove(SID, "scratch")
    store.use_slot(SID, "focus")
    hand_edit(store, "focus", add_extras)
    hand_edit(store, None, lambda doc: doc.update(x_session={"a": [1, None]}))
    return Checkpointer(store)


def change_everything(store: Store) -> None:
    turn(store, "after the checkpoint")
    store.use_slot(SID, "default")
    store.set_mode(SID, "default", "full", focus={"summary_override": ""})
    turn(store, "back in default")
    store.set_mode(SID, "copy", "full")
    edit(store, 0, "rewritten", "copy")
    store.delete_slot(SID, "static")
    store.derive_slot(SID, "later", strategy="focused")
    store.memory_set(SID, "goal", "changed")
    store.memory_set(SID, "extra", "new")
    store.update_session(SID, lambda session: setattr(session, "title", "renamed"))
    hand_edit(store, "focus", lambda doc: doc.pop("x_plugin"))
    hand_edit(store, None, lambda doc: doc.pop("x_session"))


# ---- exact rollback --------------------------------------------------------------------


def test_the_rich_session_has_everything_the_rollback_must_restore(store: Store) -> None:
    build_rich_session(store)
    state = dumped_live(store)
    slots = state["slots"]
    assert sorted(slots) == ["copy", "default", "focus", "static"]
    assert state["session"]["current_slot"] == "focus"
    assert state["session"]["turn_count"] == 4
    assert state["session"]["memory"] == {"goal": "ship it"}
    assert state["session"]["x_session"] == {"a": [1, None]}
    assert state["session"]["cost"]["by_model"]["offline"]["requests"] == 4
    assert slots["copy"]["config"]["mode"] == "readonly"
    assert slots["default"]["config"]["mode"] == "focused"
    assert slots["default"]["config"]["focused"]["summary_override"] == "So far: two questions."
    assert slots["static"]["config"]["source"]["kind"] == "static"
    assert len(slots["static"]["immutable"]) == 2
    focus = slots["focus"]
    assert focus["x_plugin"] == {"pinned": [1, 2], "by": "reviewer"}
    assert focus["config"]["x_color"] == "teal"
    assert focus["meta"]["x_seen"] == "2026-01-01T00:00:00Z"
    assert focus["messages"][0]["x_note"] == "kept verbatim"
    assert focus["compressed"] == [{"role": "system", "content": "Compressed: we said hello."}]
    call = next(m for m in focus["messages"] if m.get("tool_calls"))
    assert call["reasoning"] == "The tide table has the answer."
    assert call["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": "tides"}'}
    assert focus["messages"][-1]["tool_call_id"] == "call_7"


def test_a_checkpoint_reads_back_exactly_the_state_it_saw(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID, label="rich")
    assert dumped_at(store, checkpoint.id) == dumped_live(store)
    assert checkpoint.label == "rich" and not checkpoint.auto
    assert checkpoint.turn_index == 4


def test_rollback_restores_every_field_of_every_document(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID, label="rich")
    expected_files, expected_models = documents(store), dumped_live(store)
    change_everything(store)
    changed = documents(store)
    assert "slot:later" in changed and "slot:static" not in changed
    assert changed != expected_files

    restored, saved = keeper.rollback(SID, checkpoint.id)

    assert restored.id == checkpoint.id
    assert saved.turn_index == 6 and saved.label == f"before rollback to {checkpoint.id}"
    assert documents(store) == expected_files
    assert dumped_live(store) == expected_models
    assert store.slot_ids(SID) == ["copy", "default", "focus", "static"]


def test_a_rollback_of_a_rollback_restores_the_replaced_state(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID)
    change_everything(store)
    replaced_files, replaced_models = documents(store), dumped_live(store)

    _, saved = keeper.rollback(SID, checkpoint.id)
    assert dumped_at(store, saved.id) == replaced_models
    keeper.rollback(SID, saved.id)

    assert documents(store) == replaced_files
    assert dumped_live(store) == replaced_models


def test_checkpoints_after_a_rollback_are_exact_too(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID)
    change_everything(store)
    keeper.rollback(SID, checkpoint.id)
    store.use_slot(SID, "default")
    store.set_mode(SID, "default", "full")
    result = turn(store, "a new branch")
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)


# ---- undo ------------------------------------------------------------------------------


def test_undo_returns_to_the_state_after_an_earlier_turn(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    after = {0: documents(store)}
    for number in range(1, 5):
        turn(store, f"prompt {number}")
        after[number] = documents(store)

    restored, saved = keeper.undo(SID, 2)
    assert (restored.turn_index, saved.turn_index) == (2, 4)
    assert documents(store) == after[2]
    keeper.undo(SID)
    assert documents(store) == after[1]
    keeper.undo(SID)
    assert documents(store) == after[0]

    with pytest.raises(NotFound, match="only 0 turns"):
        keeper.undo(SID)
    assert documents(store) == after[0]


def test_undo_beyond_the_history_is_not_found_and_changes_nothing(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    turn(store, "two")
    before, ids = documents(store), keeper.ids(SID)
    with pytest.raises(NotFound, match="only 2 turns"):
        keeper.undo(SID, 3)
    with pytest.raises(UsageError):
        keeper.undo(SID, 0)
    assert documents(store) == before and keeper.ids(SID) == ids


def test_undo_across_a_turn_sent_without_checkpoint(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    after_one = documents(store)
    turn(store, "two", checkpoint=False)
    turn(store, "three")
    with pytest.raises(NotFound, match="turn 2"):
        keeper.undo(SID, 1)
    keeper.undo(SID, 2)
    assert documents(store) == after_one


def test_undo_after_switching_branches_stays_on_the_branch(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "a1")
    turn(store, "a2")
    after_a2 = documents(store)
    turn(store, "a3")
    _, branch_a = keeper.undo(SID, 2)  # back at turn 1; branch a (turn 3) is saved
    turn(store, "b2")
    keeper.rollback(SID, branch_a.id)  # back on branch a; branch b (turn 2) is saved
    keeper.undo(SID, 1)
    assert documents(store) == after_a2


# ---- fork ------------------------------------------------------------------------------


def test_fork_starts_a_child_from_the_checkpoint(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID)
    expected = dumped_live(store)
    change_everything(store)

    child = keeper.fork(SID, checkpoint.id, "child")

    assert (child.id, child.parent_id) == ("child", SID)
    state = dumped_live(store, "child")
    assert state["slots"] == expected["slots"]
    moved = {"id", "parent_id", "created_at", "updated_at", "forked_from"}
    assert {k: v for k, v in state["session"].items() if k not in moved} == {
        k: v for k, v in expected["session"].items() if k not in moved
    }
    assert state["session"]["x_session"] == {"a": [1, None]}
    assert state["session"]["forked_from"] == {
        "root": SID,  # the line's first session: its requests' prompt_cache_key
        "checkpoint": checkpoint.id,
        "turn": checkpoint.turn_index,
        "created_at": isoformat(checkpoint.created_at),
    }
    assert store.parent("child") == SID and store.children(SID) == ["child"]
    assert keeper.ids("child") == []
    with pytest.raises(AlreadyExists):
        keeper.fork(SID, checkpoint.id, "child")
    generated = keeper.fork(SID, checkpoint.id)
    assert generated.id != "child" and generated.parent_id == SID


@file_only
def test_a_fork_and_its_parent_do_not_touch_each_other(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    first = turn(store, "shared")
    turn(store, "parent only")
    assert first.checkpoint is not None
    keeper.fork(SID, first.checkpoint, "child")

    parent_bytes = data_dir_files(store.root, SID)
    in_child = turn(store, "child only", sid="child")
    assert data_dir_files(store.root, SID) == parent_bytes
    assert in_child.turn == 2

    child_bytes = data_dir_files(store.root, "child")
    turn(store, "parent again")
    assert data_dir_files(store.root, "child") == child_bytes

    child_texts = [m.text() for m in store.load_slot("child").messages if m.role == "user"]
    parent_texts = [m.text() for m in store.load_slot(SID).messages if m.role == "user"]
    assert child_texts == ["shared", "child only"]
    assert parent_texts == ["shared", "parent only", "parent again"]
    assert in_child.checkpoint is not None
    assert dumped_at(store, in_child.checkpoint, "child") == dumped_live(store, "child")
