"""agctl.store.checkpoints.reader: which checkpoints the live state matches, read from
the summaries."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import SID, append_user, edit

from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_offset


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
