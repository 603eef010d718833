"""The diff of two checkpoints (agctl.store.checkpoints.diff)."""

from __future__ import annotations

from helpers import OPTIONS, SID, ToolCallProvider, append_user, edit, hand_edit, turn

from agctl.context.models import Message, Slot
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import send_turn

# ---- diff ------------------------------------------------------------------------------


def tokens(slot: Slot) -> int:
    return sum(m.token_count() for m in (*slot.immutable, *slot.compressed, *slot.messages))


def test_diff_reports_every_kind_of_change(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    append_user(store, "hello")
    store.create_slot(SID, "other")
    for text in ("x", "y", "z"):
        append_user(store, text, "other")
    store.create_slot(SID, "gone")
    store.memory_set(SID, "k1", "v1")
    store.memory_set(SID, "k2", "v2")
    first = turn(store, "first question")
    assert first.checkpoint is not None
    a = first.checkpoint
    before = {slot.id: tokens(slot) for slot in store.list_slots(SID)}

    edit(store, 0, "hello again")
    second = turn(store, "second question")
    store.set_mode(SID, "default", "focused", focus={"summary_override": "Short."})
    store.update_slot(SID, "other", lambda slot: slot.remove(1))
    store.delete_slot(SID, "gone")
    store.derive_slot(SID, "fresh", make_current=True)
    store.memory_set(SID, "k1", "v1b")
    store.memory_remove(SID, "k2")
    store.memory_set(SID, "k3", "v3")
    b = keeper.create(SID, label="b").id
    after = {slot.id: tokens(slot) for slot in store.list_slots(SID)}

    diff = keeper.diff(SID, a, b)

    default = diff["slots"]["changed"]["default"]
    assert default["config"] == {
        "mode": ["full", "focused"],
        "focused.summary_override": [None, "Short."],
    }
    messages = default["messages"]
    assert messages["changed"] == [
        {"index": 0, "role": "user", "old": "hello", "new": "hello again"}
    ]
    assert [(m["index"], m["role"]) for m in messages["added"]] == [(3, "user"), (4, "assistant")]
    assert messages["added"][0]["text"] == "second question"
    assert messages["added"][1]["text"].startswith("Offline reply to turn 2")
    assert len(messages["added"][1]["text"]) <= 70
    assert messages["removed"] == []
    assert default["tokens"] == after["default"] - before["default"]
    assert "immutable" not in default and "compressed" not in default
    other = diff["slots"]["changed"]["other"]
    assert other["messages"] == {
        "added": [],
        "removed": [{"index": 1, "role": "user", "text": "y"}],
        "changed": [],
    }
    assert other["tokens"] == after["other"] - before["other"] < 0
    assert diff["slots"]["created"] == ["fresh"]
    assert diff["slots"]["deleted"] == ["gone"]
    assert sorted(diff["slots"]["changed"]) == ["default", "other"]
    assert diff["current_slot"] == ["default", "fresh"]
    assert diff["turn_count"] == [1, 2]
    assert diff["memory"] == {
        "added": {"k3": "v3"},
        "removed": {"k2": "v2"},
        "changed": {"k1": ["v1", "v1b"]},
    }
    assert diff["tokens"] == sum(after.values()) - sum(before.values())
    assert (diff["from"], diff["to"]) == (a, b)
    assert second.checkpoint is not None

    against_live = keeper.diff(SID, a)
    assert against_live == {**diff, "to": "live"}
    store.memory_set(SID, "k4", "v4")
    assert keeper.diff(SID, a)["memory"]["added"] == {"k3": "v3", "k4": "v4"}
    assert keeper.diff(SID, b)["memory"] == {"added": {"k4": "v4"}, "removed": {}, "changed": {}}


def test_diff_of_a_checkpoint_with_itself_is_empty(store: Store) -> None:
    store.create_session(SID)
    result = turn(store, "one")
    assert result.checkpoint is not None
    diff = Checkpointer(store).diff(SID, result.checkpoint, result.checkpoint)
    assert diff["slots"] == {"created": [], "deleted": [], "changed": {}}
    assert diff["memory"] == {"added": {}, "removed": {}, "changed": {}}
    assert diff["turn_count"] == [1, 1] and diff["tokens"] == 0


def test_diff_of_zones_and_tool_calls(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    a = keeper.create(SID).id
    send_turn(store, SID, "look it up", ToolCallProvider(), OPTIONS)
    store.create_slot(SID, "static", immutable=[Message(role="system", content="Pirate.")])
    hand_edit(
        store,
        "static",
        lambda doc: doc.update(compressed=[{"role": "system", "content": "Earlier."}]),
    )
    static_before = keeper.create(SID).id
    hand_edit(
        store,
        "static",
        lambda doc: doc.update(immutable=[{"role": "system", "content": "Ninja."}], compressed=[]),
    )
    added = keeper.diff(SID, a)["slots"]["changed"]["default"]["messages"]["added"]
    assert [(m["index"], m["role"]) for m in added] == [(0, "user"), (1, "assistant")]
    static = keeper.diff(SID, static_before)["slots"]["changed"]["static"]
    assert static["immutable"]["changed"] == [
        {"index": 0, "role": "system", "old": "Pirate.", "new": "Ninja."}
    ]
    assert static["compressed"]["removed"] == [{"index": 0, "role": "system", "text": "Earlier."}]


def test_diff_previews_tool_calls_by_name(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    a = keeper.create(SID).id
    send_turn(store, SID, "look it up", ToolCallProvider(), OPTIONS)
    added = keeper.diff(SID, a)["slots"]["changed"]["default"]["messages"]["added"]
    assert added[1] == {"index": 1, "role": "assistant", "text": "lookup()"}
