"""agctl.store.slots: the slot rules (create, derive, use, set a mode, delete, update), run
without a file in sight too, and the checkpoint an undoable edit takes before the first change
a rule makes."""

from __future__ import annotations

import pytest
from helpers import OPTIONS, append, append_user, data_dir_files, file_only, snapshot, texts, user

from agctl.base.errors import (
    AlreadyExists,
    NotFound,
    ProtectedSlot,
    ReadonlySlot,
    UsageError,
)
from agctl.context.models import Message
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, slots
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import prepare_turn

SID = "s"


@pytest.fixture
def memory_store() -> Store:
    store = Store(backend=MemoryBackend())
    store.create_session(SID)
    return store


def test_a_new_slot_counts_what_it_holds() -> None:
    slot = slots.new_slot("notes", immutable=[Message(role="user", content="kept")])
    assert (slot.id, len(slot.immutable), slot.meta.parent_id) == ("notes", 1, None)
    assert slot.meta.message_count == 1 and slot.meta.total_tokens > 0


def test_the_slot_rules_work_on_a_store_without_files(memory_store: Store) -> None:
    store = memory_store
    assert store.files is None
    with store.work(SID) as work:
        slots.create_slot(work, "a", make_current=True)
        assert slots.resolve_slot(work.tx, SID, None) == "a"
        slots.append_messages(work, work.load_slot("a"), [Message(role="user", content="hi")])
        derived = slots.derive_slot(work, "b", source="a", strategy="focused")
    assert (derived.config.mode, derived.meta.parent_id) == ("focused", "a")
    assert [m.content for m in derived.messages] == ["hi"]
    assert [slot.id for slot in slots.list_slots(store.backend, SID)] == ["a", "b", "default"]
    with pytest.raises(AlreadyExists, match="slot 'b' already exists in session 's'"):
        store.create_slot(SID, "b")
    with pytest.raises(ProtectedSlot, match="slot 'default' cannot be deleted"):
        store.delete_slot(SID, slots.DEFAULT_SLOT)
    assert store.delete_slot(SID, "a").current_slot == slots.DEFAULT_SLOT


def test_a_rule_given_the_work_is_checkpointed_first_under_undoable(store: Store) -> None:
    store.create_session(SID)
    store.create_slot(SID, "a")
    keeper = Checkpointer(store)
    with store.undoable(SID, "slot rm"), store.work(SID) as work:
        slots.delete_slot(work, "a")
    assert store.slot_ids(SID) == ["default"]
    newest = keeper.load(SID, keeper.ids(SID)[0])
    assert (newest.label, newest.edit) == ("before slot rm", "slot rm")
    keeper.rollback(SID, newest.id)
    assert store.slot_ids(SID) == ["a", "default"]


def test_same_slot_id_in_two_sessions_stays_separate(store: Store) -> None:
    store.create_session("one")
    store.create_session("two")
    append(store, "one", "only in one")
    store.create_slot("one", "notes")
    store.create_slot("two", "notes")
    append(store, "two", "two's note", slot="notes")
    assert texts(store, "one") == ["only in one"] and texts(store, "two") == []
    assert texts(store, "one", "notes") == [] and texts(store, "two", "notes") == ["two's note"]


def test_create_slot_with_defaults_and_duplicates(store: Store) -> None:
    sid = store.create_session("s").id
    slot = store.create_slot(sid, "b")
    assert slot.config.mode == "full" and slot.config.source.kind == "new"
    assert store.slot_ids(sid) == ["b", "default"]
    with pytest.raises(AlreadyExists):
        store.create_slot(sid, "b")
    with pytest.raises(UsageError):
        store.create_slot(sid, "c", mode="sideways")
    with pytest.raises(UsageError):
        store.create_slot(sid, "c", focus={"recent_messages": -2})
    assert store.load_session(sid).current_slot == "default"
    store.create_slot(sid, "d", make_current=True)
    assert store.load_session(sid).current_slot == "d"


def test_static_slot_keeps_presets_in_the_immutable_zone(store: Store) -> None:
    sid = store.create_session("s").id
    preset = [Message(role="system", content="law: tenancy act")]
    slot = store.create_slot(sid, "law", immutable=preset, mode="readonly")
    assert slot.config.source.kind == "static"
    assert store.load_slot(sid, "law").immutable == preset
    assert store.load_slot(sid, "law").messages == []
    with pytest.raises(ReadonlySlot):
        append(store, sid, "x", slot="law")


def test_derive_full_copies_every_zone_and_records_the_parent(store: Store) -> None:
    sid = store.create_session("s").id
    for text in ("u1", "u2", "u3"):
        append(store, sid, text)
    store.update_slot(sid, None, lambda s: s.compressed.append(user("old summary")))
    child = store.derive_slot(sid, "branch")
    assert child.meta.parent_id == "default"
    assert child.config.source.kind == "derived" and child.config.source.parent_id == "default"
    assert child.config.source.strategy == "full"
    assert texts(store, sid, "branch") == ["u1", "u2", "u3"]
    assert [m.text() for m in store.load_slot(sid, "branch").compressed] == ["old summary"]
    append(store, sid, "only in branch", slot="branch")
    assert texts(store, sid, "default") == ["u1", "u2", "u3"]


def test_derive_focused_copies_the_focused_view(store: Store) -> None:
    sid = store.create_session("s").id
    store.update_slot(sid, None, lambda s: s.append(Message(role="system", content="rules")))
    for text in ("u1", "u2", "u3", "u4"):
        append(store, sid, text)
    child = store.derive_slot(
        sid,
        "short",
        strategy="focused",
        focus={"recent_messages": 2, "stride": 1, "summary_override": "earlier: u1, u2"},
    )
    assert child.config.mode == "focused"
    assert child.config.focused.summary_override == "earlier: u1, u2"
    assert texts(store, sid, "short") == ["rules", "u3", "u4"]
    assert len(store.load_slot(sid, "default").messages) == 5


def test_derive_from_a_readonly_slot_gives_a_writable_branch(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "fact")
    store.set_mode(sid, "default", "readonly")
    store.derive_slot(sid, "work", source="default", make_current=True)
    assert store.load_session(sid).current_slot == "work"
    append(store, sid, "my note")
    assert texts(store, sid) == ["fact", "my note"]


def test_derive_from_a_missing_slot(store: Store) -> None:
    sid = store.create_session("s").id
    with pytest.raises(NotFound):
        store.derive_slot(sid, "x", source="ghost")
    assert store.slot_ids(sid) == ["default"]


def test_use_slot_switches_and_refuses_unknown(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "b")
    assert store.use_slot(sid, "b").current_slot == "b"
    append(store, sid, "to b")
    assert texts(store, sid, "b") == ["to b"]
    with pytest.raises(NotFound):
        store.use_slot(sid, "ghost")
    assert store.load_session(sid).current_slot == "b"


def test_set_mode_keeps_messages_and_settings(store: Store) -> None:
    sid = store.create_session("s").id
    for text in ("a", "b", "c"):
        append(store, sid, text)
    slot = store.set_mode(sid, None, "focused", focus={"recent_messages": 1})
    assert slot.config.mode == "focused" and slot.config.focused.recent_messages == 1
    store.set_mode(sid, None, "readonly")
    slot = store.set_mode(sid, None, "focused")
    assert slot.config.focused.recent_messages == 1
    assert texts(store, sid) == ["a", "b", "c"]
    with pytest.raises(UsageError):
        store.set_mode(sid, None, "bogus")


@file_only
def test_readonly_still_reads_derives_and_saves(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "a")
    store.set_mode(sid, None, "readonly")
    before = data_dir_files(store.root)
    with pytest.raises(ReadonlySlot):
        append(store, sid, "b")
    assert data_dir_files(store.root) == before
    assert texts(store, sid) == ["a"]
    store.derive_slot(sid, "copy")
    store.set_mode(sid, None, "readonly", focus={"recent_messages": 3})
    assert store.load_slot(sid).config.focused.recent_messages == 3


def test_delete_protections(store: Store) -> None:
    sid = store.create_session("s").id
    with pytest.raises(ProtectedSlot):
        store.delete_slot(sid, "default")
    store.create_slot(sid, "b", make_current=True)
    with pytest.raises(ProtectedSlot):
        store.delete_slot(sid, "default")
    session = store.delete_slot(sid, "b")
    assert session.current_slot == "default"
    assert store.load_session(sid).current_slot == "default"
    assert store.slot_ids(sid) == ["default"]
    with pytest.raises(NotFound):
        store.delete_slot(sid, "b")


def test_empty_slot_round_trip(store: Store) -> None:
    sid = store.create_session("s").id
    store.create_slot(sid, "empty")
    store.update_slot(sid, "empty", lambda s: None)
    slot = store.load_slot(sid, "empty")
    assert slot.messages == [] and slot.immutable == [] and slot.compressed == []
    assert slot.meta.message_count == 0 and slot.meta.total_tokens == 0


def test_meta_follows_the_messages(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "abcdefgh")
    meta = store.load_slot(sid).meta
    assert meta.message_count == 1 and meta.total_tokens == 2 + 4
    assert meta.updated_at >= meta.created_at


@file_only
def test_failed_change_writes_nothing(store: Store) -> None:
    sid = store.create_session("s").id
    append(store, sid, "a")
    before = snapshot(store.root)

    def bad(slot: object) -> None:
        slot.messages.append(user("half-done"))  # type: ignore[attr-defined]
        raise NotFound("simulated failure mid-change")

    with pytest.raises(NotFound):
        store.update_slot(sid, None, bad)
    assert snapshot(store.root) == before


def test_every_write_advances_the_revision(store: Store) -> None:
    store.create_session(SID)
    revs = [store.load_slot(SID).rev]
    for text in ("a", "b", "c"):
        append_user(store, text)
        revs.append(store.load_slot(SID).rev)
    assert revs == sorted(set(revs)), revs


def test_an_unchanged_slot_is_not_read_again_at_commit(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agctl.storage.file import backend

    prepared = prepare_turn(store, sid, "q", OPTIONS)
    parsed: list[str] = []
    original = backend.parse_document

    def counting(raw: bytes, model: type, path: object) -> object:
        parsed.append(model.__name__)
        return original(raw, model, path)

    monkeypatch.setattr(backend, "parse_document", counting)
    store.update_slot(
        sid, None, lambda s: s.append(Message(role="user", content="x")), base=prepared.slot
    )
    assert "Slot" not in parsed
    assert [m.text() for m in prepared.slot.messages] == ["hi", "x"]
    assert [m.text() for m in store.load_slot(sid).messages] == ["hi", "x"]
