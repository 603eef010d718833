"""agctl.store.slots: the slot rules as functions of the store, run without a file in sight, and
the checkpoint an undoable edit takes before the first change a rule makes."""

from __future__ import annotations

import pytest

from agctl.base.errors import AlreadyExists, ProtectedSlot
from agctl.context.models import Message
from agctl.storage.memory import MemoryBackend
from agctl.store import Store, slots
from agctl.store.checkpointer import Checkpointer

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
