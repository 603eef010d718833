"""Checkpoints in the library: exact rollback, undo, fork, prune, diff, storage, damage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import (
    data_dir_files,
    documents,
    dumped_at,
    dumped_live,
    file_only,
    turn,
)

from agctl.base.errors import (
    AlreadyExists,
    AmbiguousId,
    NotFound,
    SlotChanged,
    UsageError,
)
from agctl.base.ids import BASE32_ALPHABET, new_session_id
from agctl.context.models import Message, Session, Slot, isoformat
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    ToolCallDelta,
    Usage,
)
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import (
    checkpoint_id,
    checkpoint_offset,
)
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline")
SID = "s"


# ---- helpers ---------------------------------------------------------------------------


def append_user(store: Store, text: str, slot: str | None = None) -> None:
    message = Message(role="user", content=text)
    store.update_slot(SID, slot, lambda target: target.append(message))


def edit(store: Store, index: int, text: str, slot: str | None = None) -> None:
    store.update_slot(SID, slot, lambda target: target.edit(index, text))


class ToolCallProvider:
    """Replies with reasoning and one tool call, as a reasoning model calling a tool would."""

    name = "tool-call"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        yield ReasoningDelta("The tide table has the answer.")
        yield ToolCallDelta(0, id="call_7", name="lookup")
        yield ToolCallDelta(0, arguments='{"q": "tides"}')
        yield Usage(prompt_tokens=40, completion_tokens=9)
        yield Finish("tool_calls")


class EditingProvider(OfflineProvider):
    """Offline replies, but another writer edits the first message while the model thinks
    (or, with `append`, adds a message after the last)."""

    def __init__(self, store: Store, *, append: bool = False) -> None:
        super().__init__()
        self.store = store
        self.append = append

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        if self.append:
            message = Message(role="user", content="appended meanwhile")
            self.store.update_slot(SID, None, lambda slot: slot.messages.append(message))
        else:
            self.store.update_slot(SID, None, lambda slot: slot.edit(0, "edited meanwhile"))
        yield from super().stream(request)


def hand_edit(store: Store, slot_id: str | None, change: Any) -> None:
    """Rewrite the JSON of the session document (slot_id None) or of a slot, as another tool
    or a newer agctl would: none of agctl's rules run and no checkpoint is taken."""
    with store.transaction(SID) as tx:
        if slot_id is None:
            session = tx.load_session(SID).model_dump(mode="json")
            change(session)
            tx.put_session(Session.model_validate(session))
        else:
            slot = tx.load_slot(SID, slot_id).model_dump(mode="json")
            change(slot)
            tx.put_slot(Slot.model_validate(slot))


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


# ---- remove, prune, ids ----------------------------------------------------------------


def history(store: Store, turns: int) -> dict[str, dict[str, Any]]:
    """A session with `turns` checkpointed turns: the documents each checkpoint saw."""
    store.create_session(SID)
    keeper = Checkpointer(store)
    seen: dict[str, dict[str, Any]] = {}
    baseline = documents(store)
    for number in range(1, turns + 1):
        result = turn(store, f"prompt {number}")
        assert result.checkpoint is not None
        seen[result.checkpoint] = documents(store)
        store.memory_set(SID, "last", str(number))
    seen[keeper.create(SID, label="manual").id] = documents(store)
    oldest = keeper.ids(SID)[-1]
    seen[oldest] = baseline
    assert len(seen) == turns + 2
    return seen


def test_prune_keeps_the_newest_and_they_still_restore_exactly(store: Store) -> None:
    seen = history(store, 6)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    assert ids == sorted(seen, key=checkpoint_offset, reverse=True)

    pruned = keeper.prune(SID, 3, everything=True)
    removed = pruned.removed

    assert (pruned.kept, removed, pruned.kept_for_undo) == (ids[:3], ids[3:], [])
    assert keeper.ids(SID) == ids[:3]
    for identifier in ids[:3]:
        keeper.rollback(SID, identifier)
        assert documents(store) == seen[identifier]
    for identifier in removed:
        with pytest.raises(NotFound):
            keeper.load(SID, identifier)
        with pytest.raises(NotFound):
            keeper.rollback(SID, identifier)
        with pytest.raises(NotFound):
            keeper.resolve(SID, identifier)
    assert keeper.prune(SID, 100).removed == []


def test_remove_one_leaves_the_others_restorable(store: Store) -> None:
    seen = history(store, 4)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    doomed = ids[2]

    assert keeper.remove(SID, [doomed]) == [doomed]

    assert keeper.ids(SID) == [i for i in ids if i != doomed]
    with pytest.raises(NotFound):
        keeper.load(SID, doomed)
    with pytest.raises(NotFound):
        keeper.remove(SID, [doomed])
    for identifier in keeper.ids(SID):
        keeper.rollback(SID, identifier)
        assert documents(store) == seen[identifier]


def test_prune_to_zero_then_turns_checkpoint_again(store: Store) -> None:
    history(store, 2)
    keeper = Checkpointer(store)
    keeper.prune(SID, 0)
    assert keeper.ids(SID) == []
    result = turn(store, "again")
    assert result.checkpoint is not None
    assert keeper.ids(SID)[0] == result.checkpoint
    assert dumped_at(store, result.checkpoint) == dumped_live(store)


def test_ids_resolve_by_unique_prefix(store: Store) -> None:
    history(store, 3)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    for identifier in ids:
        prefix = next(
            identifier[:n]
            for n in range(1, len(identifier) + 1)
            if [i for i in ids if i.startswith(identifier[:n])] == [identifier]
        )
        assert keeper.resolve(SID, prefix) == identifier
        assert keeper.resolve(SID, identifier) == identifier
    shared = ids[0][0]
    assert sum(i.startswith(shared) for i in ids) > 1
    with pytest.raises(AmbiguousId) as excinfo:
        keeper.resolve(SID, shared)
    assert sorted(excinfo.value.candidates) == sorted(i for i in ids if i.startswith(shared))
    with pytest.raises(NotFound):
        keeper.resolve(SID, "zzzz")
    with pytest.raises(NotFound):
        keeper.load(SID, "0001")  # inside a record, not a checkpoint


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


# ---- failed turns ----------------------------------------------------------------------


# ---- storage ---------------------------------------------------------------------------


# ---- damage ----------------------------------------------------------------------------


# ---- concurrency -----------------------------------------------------------------------


def test_a_checkpoint_sees_appends_made_during_the_model_call(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    result = send_turn(store, SID, "two", EditingProvider(store, append=True), OPTIONS)
    assert store.load_slot(SID).messages[2].text() == "appended meanwhile"
    assert result.checkpoint is not None
    assert dumped_at(store, result.checkpoint) == dumped_live(store)


def test_an_edit_made_during_the_model_call_refuses_the_turn(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    before = Checkpointer(store).ids(SID)
    with pytest.raises(SlotChanged):
        send_turn(store, SID, "two", EditingProvider(store), OPTIONS)
    assert store.load_slot(SID).messages[0].text() == "edited meanwhile"
    assert len(store.load_slot(SID).messages) == 2
    assert Checkpointer(store).ids(SID) == before


def test_a_slot_made_again_under_its_old_id_never_repeats_a_revision(store: Store) -> None:
    """The heads cache skips a slot whose revision it saw: a new slot of the same id
    must not come back at that revision (before revisions, an inode and size that recur
    did this)."""
    store.create_session(SID)
    store.create_slot(SID, "x")
    append_user(store, "aaaa", "x")
    keeper = Checkpointer(store)
    keeper.create(SID)
    seen = store.load_slot(SID, "x").rev
    store.delete_slot(SID, "x")
    store.create_slot(SID, "x")
    append_user(store, "bbbb", "x")
    assert store.load_slot(SID, "x").rev != seen
    checkpoint = keeper.create(SID)
    assert dumped_at(store, checkpoint.id) == dumped_live(store)


def test_every_write_advances_the_revision(store: Store) -> None:
    store.create_session(SID)
    revs = [store.load_slot(SID).rev]
    for text in ("a", "b", "c"):
        append_user(store, text)
        revs.append(store.load_slot(SID).rev)
    assert revs == sorted(set(revs)), revs


# ---- destroying sessions ---------------------------------------------------------------


def test_checkpoint_ids_are_base32_offsets_in_the_alphabet_of_session_ids() -> None:
    pinned = {0: "0000", 31: "000z", 1_234_567: "15nm7", 32**5: "100000"}
    assert {offset: checkpoint_id(offset) for offset in pinned} == pinned
    assert all(checkpoint_offset(identifier) == o for o, identifier in pinned.items())
    assert set("".join(pinned.values())) <= set(BASE32_ALPHABET)
    assert new_session_id(1_800_000_000)[:7] == "1nmkmg0"  # the same digits, time-sortable
    with pytest.raises(NotFound):
        checkpoint_offset("00il")  # letters base32 leaves out to be read unambiguously


def test_the_live_state_is_matched_reading_only_the_checkpoints_of_its_size(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints of one turn, slot and slot count differ by their message counts, which
    the summaries keep: only those as large as the live slots are read and compared."""
    from agctl.store.checkpoints import reader

    store.create_session(SID)
    keeper = Checkpointer(store)
    made = []
    for text in ("a", "b", "c", "d"):
        append_user(store, text)
        made.append(keeper.create(SID, label=text))
    for _ in range(2):  # back to "a", "b": the slot file rewritten, so read and hashed
        store.update_slot(SID, None, lambda slot: slot.pop())
    read: list[int] = []
    original = reader.read_checkpoint

    def counted(history: Any, offset: int) -> Any:
        read.append(offset)
        return original(history, offset)

    monkeypatch.setattr(reader, "read_checkpoint", counted)
    summaries = keeper.summaries(SID)
    assert {(s.turn_index, s.slot_count) for s in summaries} == {(0, 1)}

    assert keeper.matching_live(SID, summaries) == {made[1].id}
    assert read == [checkpoint_offset(made[1].id)]
    edit(store, 1, "B")  # as many messages, other content: read, and no match
    read.clear()
    assert keeper.matching_live(SID, keeper.summaries(SID)) == set()
    assert read == [checkpoint_offset(made[1].id)]
