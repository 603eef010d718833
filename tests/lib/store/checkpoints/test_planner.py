"""agctl.store.checkpoints.planner: what a new checkpoint stores, read from the live slots
when it is made (and the revisions its heads cache goes by)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import OPTIONS, SID, append_user, dumped_at, dumped_live, turn

from agctl.base.errors import SlotChanged
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import send_turn


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
