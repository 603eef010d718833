"""Checkpoints in the library: exact rollback, undo, fork, prune, diff, storage, damage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import OPTIONS, SID, append_user, dumped_at, dumped_live, edit, turn

from agctl.base.errors import NotFound, SlotChanged
from agctl.base.ids import BASE32_ALPHABET, new_session_id
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_id, checkpoint_offset
from agctl.turn.send import send_turn

# ---- helpers ---------------------------------------------------------------------------


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
