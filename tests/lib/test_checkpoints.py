"""Checkpoints in the library: exact rollback, undo, fork, prune, diff, storage, damage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import checkpoints_dir, dying_after_one_change, stored_documents

from agctl.checkpoints import (
    Checkpoint,
    Checkpointer,
    SessionState,
    checkpoint_id,
    checkpoint_offset,
)
from agctl.errors import (
    AlreadyExists,
    AmbiguousId,
    CorruptDocument,
    HasChildren,
    NotFound,
    ProviderError,
    SlotChanged,
    TurnInterrupted,
    UsageError,
)
from agctl.ids import BASE32_ALPHABET, new_session_id
from agctl.models import Message, Slot
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agctl.providers.offline import OfflineProvider
from agctl.storage.file.layout import RESTORE_JOURNAL
from agctl.store import Store
from agctl.turns import TurnOptions, TurnResult, send_turn

OPTIONS = TurnOptions(model="offline")
SID = "s"


# ---- helpers ---------------------------------------------------------------------------


def turn(store: Store, prompt: str, *, sid: str = SID, checkpoint: bool = True) -> TurnResult:
    options = TurnOptions(model="offline", checkpoint=checkpoint)
    return send_turn(store, sid, prompt, OfflineProvider(), options)


def append_user(store: Store, text: str, slot: str | None = None) -> None:
    message = Message(role="user", content=text)
    store.update_slot(SID, slot, lambda target: target.append(message))


def edit(store: Store, index: int, text: str, slot: str | None = None) -> None:
    store.update_slot(SID, slot, lambda target: target.edit(index, text))


def documents(store: Store, sid: str = SID) -> dict[str, Any]:
    """The session document and every slot, parsed, keyed by their path in the session dir."""
    return stored_documents(store, sid)


def dumped(state: SessionState) -> dict[str, Any]:
    return {
        "session": state.session.model_dump(mode="json"),
        "slots": {slot_id: slot.model_dump(mode="json") for slot_id, slot in state.slots.items()},
    }


def live(store: Store, sid: str = SID) -> dict[str, Any]:
    return dumped(Checkpointer(store).live_state(sid))


def at(store: Store, identifier: str, sid: str = SID) -> dict[str, Any]:
    keeper = Checkpointer(store)
    return dumped(keeper.state(sid, keeper.load(sid, identifier)))


def session_files(store: Store, sid: str) -> dict[str, bytes]:
    """Every byte of a session's directory (the lock file aside)."""
    directory = store.session_dir(sid)
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name not in (".lock", "journal")
    }


def log_path(store: Store, sid: str = SID) -> Path:
    return checkpoints_dir(store, sid) / "log"


def log_records(store: Store, sid: str = SID) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(offset, line, record) for every line of the checkpoint log."""
    offset = 0
    for line in log_path(store, sid).read_bytes().splitlines(keepends=True):
        yield offset, line, json.loads(line.rpartition(b"\t")[0] or line)
        offset += len(line)


def node_offset(store: Store, content: str) -> tuple[int, bytes]:
    """The offset and line of the message node holding `content`."""
    for offset, line, record in log_records(store):
        if "h" in record and record["m"].get("content") == content:
            return offset, line
    raise AssertionError(f"no node holds {content!r}")


def overwrite(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


def checkpoint_bytes(store: Store, sid: str = SID) -> int:
    return sum(p.stat().st_size for p in checkpoints_dir(store, sid).iterdir())


def live_bytes(store: Store, sid: str = SID) -> int:
    directory = store.session_dir(sid)
    slots = sum(p.stat().st_size for p in (directory / "slots").iterdir())
    return (directory / "session.json").stat().st_size + slots


class ToolCallProvider:
    """Replies with reasoning and one tool call, as a reasoning model calling a tool would."""

    name = "tool-call"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        yield ReasoningDelta("The tide table has the answer.")
        yield ToolCallDelta(0, id="call_7", name="lookup")
        yield ToolCallDelta(0, arguments='{"q": "tides"}')
        yield Usage(prompt_tokens=40, completion_tokens=9)
        yield Finish("tool_calls")


class FailingProvider:
    """Streams part of a reply, then fails the way a provider or a user would."""

    name = "failing"

    def __init__(self, error: BaseException | None, text: str = "partial ") -> None:
        self.error = error
        self.text = text

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        if self.text:
            yield TextDelta(self.text)
        if self.error is not None:
            raise self.error
        yield Finish("stop")


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


def hand_edit(path: Path, change: Any) -> None:
    """Rewrite a JSON document by hand, as another tool or a newer agctl would."""
    document = json.loads(path.read_bytes())
    change(document)
    path.write_text(json.dumps(document, indent=2))


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
    directory = store.session_dir(SID)
    hand_edit(directory / "slots" / "focus.json", add_extras)
    hand_edit(directory / "session.json", lambda doc: doc.update(x_session={"a": [1, None]}))
    return Checkpointer(store)


def change_everything(store: Store) -> None:
    directory = store.session_dir(SID)
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
    hand_edit(directory / "slots" / "focus.json", lambda doc: doc.pop("x_plugin"))
    hand_edit(directory / "session.json", lambda doc: doc.pop("x_session"))


# ---- exact rollback --------------------------------------------------------------------


def test_the_rich_session_has_everything_the_rollback_must_restore(store: Store) -> None:
    build_rich_session(store)
    state = live(store)
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
    assert at(store, checkpoint.id) == live(store)
    assert checkpoint.label == "rich" and not checkpoint.auto
    assert checkpoint.turn_index == 4


def test_rollback_restores_every_field_of_every_document(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID, label="rich")
    expected_files, expected_models = documents(store), live(store)
    change_everything(store)
    changed = documents(store)
    assert "slots/later.json" in changed and "slots/static.json" not in changed
    assert changed != expected_files

    restored, saved = keeper.rollback(SID, checkpoint.id)

    assert restored.id == checkpoint.id
    assert saved.turn_index == 6 and saved.label == f"before rollback to {checkpoint.id}"
    assert documents(store) == expected_files
    assert live(store) == expected_models
    slot_files = sorted(p.name for p in (store.session_dir(SID) / "slots").iterdir())
    assert slot_files == ["copy.json", "default.json", "focus.json", "static.json"]
    assert not (store.session_dir(SID) / RESTORE_JOURNAL).exists()


def test_a_rollback_of_a_rollback_restores_the_replaced_state(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID)
    change_everything(store)
    replaced_files, replaced_models = documents(store), live(store)

    _, saved = keeper.rollback(SID, checkpoint.id)
    assert at(store, saved.id) == replaced_models
    keeper.rollback(SID, saved.id)

    assert documents(store) == replaced_files
    assert live(store) == replaced_models


def test_checkpoints_after_a_rollback_are_exact_too(store: Store) -> None:
    keeper = build_rich_session(store)
    checkpoint = keeper.create(SID)
    change_everything(store)
    keeper.rollback(SID, checkpoint.id)
    store.use_slot(SID, "default")
    store.set_mode(SID, "default", "full")
    result = turn(store, "a new branch")
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)


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


def test_without_checkpoints_there_is_nothing_to_undo_to(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    result = turn(store, "one", checkpoint=False)
    turn(store, "two", checkpoint=False)
    assert result.checkpoint is None
    assert keeper.ids(SID) == []
    assert not checkpoints_dir(keeper.store, SID).exists()
    before = documents(store)
    with pytest.raises(NotFound, match="automatic checkpoints may have been off"):
        keeper.undo(SID)
    assert documents(store) == before


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
    expected = live(store)
    change_everything(store)

    child = keeper.fork(SID, checkpoint.id, "child")

    assert (child.id, child.parent_id) == ("child", SID)
    state = live(store, "child")
    assert state["slots"] == expected["slots"]
    moved = {"id", "parent_id", "created_at", "updated_at"}
    assert {k: v for k, v in state["session"].items() if k not in moved} == {
        k: v for k, v in expected["session"].items() if k not in moved
    }
    assert state["session"]["x_session"] == {"a": [1, None]}
    assert store.parent("child") == SID and store.children(SID) == ["child"]
    assert keeper.ids("child") == []
    with pytest.raises(AlreadyExists):
        keeper.fork(SID, checkpoint.id, "child")
    generated = keeper.fork(SID, checkpoint.id)
    assert generated.id != "child" and generated.parent_id == SID


def test_a_fork_and_its_parent_do_not_touch_each_other(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    first = turn(store, "shared")
    turn(store, "parent only")
    assert first.checkpoint is not None
    keeper.fork(SID, first.checkpoint, "child")

    parent_bytes = session_files(store, SID)
    in_child = turn(store, "child only", sid="child")
    assert session_files(store, SID) == parent_bytes
    assert in_child.turn == 2

    child_bytes = session_files(store, "child")
    turn(store, "parent again")
    assert session_files(store, "child") == child_bytes

    child_texts = [m.text() for m in store.load_slot("child").messages if m.role == "user"]
    parent_texts = [m.text() for m in store.load_slot(SID).messages if m.role == "user"]
    assert child_texts == ["shared", "child only"]
    assert parent_texts == ["shared", "parent only", "parent again"]
    assert in_child.checkpoint is not None
    assert at(store, in_child.checkpoint, "child") == live(store, "child")


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
    assert at(store, result.checkpoint) == live(store)


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
        store.session_dir(SID) / "slots" / "static.json",
        lambda doc: doc.update(compressed=[{"role": "system", "content": "Earlier."}]),
    )
    static_before = keeper.create(SID).id
    hand_edit(
        store.session_dir(SID) / "slots" / "static.json",
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


@pytest.mark.parametrize(
    ("error", "text", "raised"),
    [
        (ProviderError("HTTP 500"), "partial ", ProviderError),
        (None, "", ProviderError),  # an empty reply
        (KeyboardInterrupt(), "partial ", TurnInterrupted),
    ],
    ids=["provider-error", "empty-reply", "interrupted"],
)
def test_a_failed_turn_leaves_no_checkpoint(
    store: Store, error: BaseException | None, text: str, raised: type[Exception]
) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    with pytest.raises(raised):
        send_turn(store, SID, "first", FailingProvider(error, text), OPTIONS)
    assert keeper.ids(SID) == []
    assert not log_path(store).exists()

    turn(store, "second")
    ids = keeper.ids(SID)
    before = {
        name: data
        for name, data in session_files(store, SID).items()
        if name != "drafts/default.json"
    }
    with pytest.raises(raised):
        send_turn(store, SID, "third", FailingProvider(error, text), OPTIONS)
    assert keeper.ids(SID) == ids
    after = session_files(store, SID)
    assert json.loads(after.pop("drafts/default.json"))["prompt"] == "third"
    assert after == before


# ---- storage ---------------------------------------------------------------------------


def test_checkpoint_storage_grows_linearly(store: Store) -> None:
    store.create_session(SID, system_prompt="Be brief.")
    added: dict[int, int] = {}
    for number in range(1, 201):
        before = checkpoint_bytes(store) if number > 1 else 0
        turn(store, f"prompt number {number}: tell me something about the number {number}")
        added[number] = checkpoint_bytes(store) - before
    total, state = checkpoint_bytes(store), live_bytes(store)
    assert len(Checkpointer(store).ids(SID)) == 201
    assert total <= 3.5 * state, (total, state)
    assert added[200] <= 2 * added[20], (added[20], added[200])
    assert added[20] <= 2 * added[200], (added[20], added[200])


# ---- damage ----------------------------------------------------------------------------


def four_turns(store: Store) -> dict[int, tuple[str, dict[str, Any]]]:
    """Turn number -> (its checkpoint id, the documents it saw)."""
    store.create_session(SID)
    seen = {}
    for number in range(1, 5):
        result = turn(store, f"prompt {number}")
        assert result.checkpoint is not None
        seen[number] = (result.checkpoint, documents(store))
    return seen


@pytest.mark.parametrize("damage", ["changed-byte", "torn-record"])
def test_a_damaged_node_breaks_only_the_checkpoints_that_use_it(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    path = log_path(store)
    offset, line = node_offset(store, "prompt 3")
    if damage == "changed-byte":
        overwrite(path, offset + line.index(b"prompt 3"), b"prompt X")
    else:
        half = len(line) // 2
        overwrite(path, offset + half, b" " * (len(line) - half - 1))
    live_before, ids = session_files(store, SID), keeper.ids(SID)

    for number in (3, 4):
        identifier = seen[number][0]
        with pytest.raises(CorruptDocument) as excinfo:
            keeper.rollback(SID, identifier)
        assert excinfo.value.path == path
        assert str(path) in str(excinfo.value)
        assert f"byte {offset}" in str(excinfo.value)
        with pytest.raises(CorruptDocument):
            keeper.diff(SID, identifier)
    assert session_files(store, SID) == live_before
    assert keeper.ids(SID) == ids

    keeper.rollback(SID, seen[2][0])
    assert documents(store) == seen[2][1]
    result = turn(store, "a fresh third")
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)
    keeper.rollback(SID, seen[1][0])
    assert documents(store) == seen[1][1]


def test_a_garbled_checkpoint_record_is_reported_as_corrupt(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    identifier = seen[2][0]
    overwrite(log_path(store), checkpoint_offset(identifier) + 2, b"XXXX")
    with pytest.raises(CorruptDocument) as excinfo:
        keeper.rollback(SID, identifier)
    assert excinfo.value.path == log_path(store)


def test_a_garbled_checkpoint_record_leaves_the_others_usable(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    overwrite(log_path(store), checkpoint_offset(seen[2][0]) + 2, b"XXXX")
    for number in (4, 3, 1):
        keeper.rollback(SID, seen[number][0])
        assert documents(store) == seen[number][1]


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_lost_index_is_rebuilt_from_the_log(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    keeper.remove(SID, [seen[1][0]])
    summaries = keeper.summaries(SID)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    if damage == "deleted":
        index.unlink()
    else:
        index.write_bytes(b'\x00\xffnot json\n{"id": 3\n')

    assert keeper.summaries(SID) == summaries
    assert keeper.summaries(SID) == summaries  # and again, from the rebuilt index
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert keeper.ids(SID) == [result.checkpoint, *(s.id for s in summaries)]
    assert at(store, result.checkpoint) == live(store)
    keeper.rollback(SID, seen[3][0])
    assert documents(store) == seen[3][1]


def test_one_garbled_index_line_is_repaired(store: Store) -> None:
    four_turns(store)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    lines = index.read_bytes().splitlines()
    lines[2] = b"garbage"
    index.write_bytes(b"\n".join(lines) + b"\n")
    assert keeper.ids(SID) == ids


@pytest.mark.parametrize("damage", ["deleted", "garbage", "not-an-object"])
def test_lost_heads_are_rebuilt_and_the_next_checkpoint_is_exact(store: Store, damage: str) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    heads = checkpoints_dir(keeper.store, SID) / "heads.json"
    if damage == "deleted":
        heads.unlink()
    elif damage == "garbage":
        heads.write_bytes(b"\x00{garbage")
    else:
        heads.write_bytes(b"[1, 2]")
    store.derive_slot(SID, "side")
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)
    assert keeper.ids(SID)[0] == result.checkpoint
    keeper.rollback(SID, seen[2][0])
    assert documents(store) == seen[2][1]


def test_heads_without_slots_are_rebuilt(store: Store) -> None:
    four_turns(store)
    keeper = Checkpointer(store)
    (checkpoints_dir(keeper.store, SID) / "heads.json").write_bytes(b"{}")
    result = turn(store, "after the repair")
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)


def test_a_torn_last_line_in_the_log_is_tolerated(store: Store) -> None:
    seen = four_turns(store)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    with open(log_path(store), "ab") as handle:
        handle.write(b'{"h": "0123", "p": -1, "m": {"role": "us')  # a crash mid-append

    assert keeper.ids(SID) == ids
    result = turn(store, "after the crash")
    assert result.checkpoint is not None
    assert keeper.ids(SID) == [result.checkpoint, *ids]
    assert at(store, result.checkpoint) == live(store)
    keeper.rollback(SID, seen[3][0])
    assert documents(store) == seen[3][1]
    keeper.rollback(SID, result.checkpoint)
    assert at(store, result.checkpoint) == live(store)


# ---- an interrupted rollback -----------------------------------------------------------


def test_an_interrupted_rollback_is_finished_by_the_next_writer(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    store.derive_slot(SID, "copy")
    store.memory_set(SID, "k", "v")
    target = keeper.create(SID, label="target")
    expected = live(store)
    turn(store, "two")
    store.delete_slot(SID, "copy")
    store.derive_slot(SID, "later", make_current=True)
    store.memory_set(SID, "k", "changed")

    # The rollback died after its commit point, having rewritten one document of four (two
    # slots, a stray, the session): the next writer finishes it first.
    with dying_after_one_change():
        keeper.rollback(SID, target.id)
    assert store.pending_recovery(SID)

    append_user(store, "new", "default")

    assert not store.pending_recovery(SID)
    now = live(store)
    assert now["session"] == expected["session"]
    assert sorted(now["slots"]) == ["copy", "default"]
    assert now["slots"]["copy"] == expected["slots"]["copy"]
    default, wanted = now["slots"]["default"], expected["slots"]["default"]
    assert default["messages"] == [*wanted["messages"], {"role": "user", "content": "new"}]
    assert {k: v for k, v in default.items() if k not in ("messages", "meta")} == {
        k: v for k, v in wanted.items() if k not in ("messages", "meta")
    }
    result = turn(store, "three")
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)


def test_a_restore_journal_of_older_agctl_is_dropped(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    before = live(store)
    journal = store.session_dir(SID) / "checkpoints" / "restoring.json"
    journal.write_bytes(json.dumps({"checkpoint": "zzzz"}).encode())
    store.memory_set(SID, "k", "v")
    assert not journal.exists()
    after = live(store)
    assert after["slots"] == before["slots"]
    assert after["session"]["memory"] == {"k": "v"}


# ---- concurrency -----------------------------------------------------------------------


def test_a_checkpoint_sees_appends_made_during_the_model_call(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    result = send_turn(store, SID, "two", EditingProvider(store, append=True), OPTIONS)
    assert store.load_slot(SID).messages[2].text() == "appended meanwhile"
    assert result.checkpoint is not None
    assert at(store, result.checkpoint) == live(store)


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
    assert at(store, checkpoint.id) == live(store)


def test_every_write_advances_the_revision(store: Store) -> None:
    store.create_session(SID)
    revs = [store.load_slot(SID).rev]
    for text in ("a", "b", "c"):
        append_user(store, text)
        revs.append(store.load_slot(SID).rev)
    assert revs == sorted(set(revs)), revs


# ---- destroying sessions ---------------------------------------------------------------


def test_destroying_a_session_removes_its_checkpoints(store: Store) -> None:
    store.create_session(SID)
    store.create_session("keep")
    turn(store, "one")
    turn(store, "kept", sid="keep")
    assert checkpoints_dir(store, SID).is_dir()
    store.destroy_session(SID)
    assert not store.session_dir(SID).exists()
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["keep"]
    assert len(Checkpointer(store).ids("keep")) == 2


def test_recursive_destroy_removes_a_fork_child_and_orphans_keep_theirs(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    first = turn(store, "one")
    assert first.checkpoint is not None
    keeper.fork(SID, first.checkpoint, "child")
    turn(store, "in the child", sid="child")
    keeper.fork("child", keeper.ids("child")[0], "grandchild")

    with pytest.raises(HasChildren) as excinfo:
        store.destroy_session(SID)
    assert excinfo.value.children == ["child"]
    destroyed = store.destroy_session("child", orphan=True)
    assert (destroyed.destroyed, destroyed.orphaned) == (["child"], ["grandchild"])
    assert store.parent("grandchild") is None
    assert store.load_session("grandchild").parent_id == "child"

    keeper.fork(SID, first.checkpoint, "child2")
    turn(store, "in the second child", sid="child2")
    result = store.destroy_session(SID, recursive=True)
    assert result.destroyed == [SID, "child2"] and result.orphaned == []
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == ["grandchild"]
    assert live(store, "grandchild")["slots"]["default"]["messages"][-2]["content"] == (
        "in the child"
    )


def test_checkpoint_ids_are_base32_offsets_in_the_alphabet_of_session_ids() -> None:
    pinned = {0: "0000", 31: "000z", 1_234_567: "15nm7", 32**5: "100000"}
    assert {offset: checkpoint_id(offset) for offset in pinned} == pinned
    assert all(checkpoint_offset(identifier) == o for o, identifier in pinned.items())
    assert set("".join(pinned.values())) <= set(BASE32_ALPHABET)
    assert new_session_id(1_800_000_000)[:7] == "1nmkmg0"  # the same digits, time-sortable
    with pytest.raises(NotFound):
        checkpoint_offset("00il")  # letters base32 leaves out to be read unambiguously


def test_a_checkpoint_id_is_the_offset_of_its_record_in_the_log(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    checkpoint = keeper.create(SID, label="hello")
    assert isinstance(checkpoint, Checkpoint)
    offset = checkpoint_offset(checkpoint.id)
    records = {o: r for o, _, r in log_records(store)}
    assert records[offset]["c"]["label"] == "hello"
    assert records[offset]["c"]["turn_index"] == 0
