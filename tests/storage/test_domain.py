"""The domain over each backend, through the Store facade: rollback, fork, prune, cost,
and an export that is the same from every one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agctl.base.errors import NotFound
from agctl.interchange.formats import export_session, import_session
from agctl.interchange.transfer import copy_sessions
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import SessionState
from agctl.turn.send import TurnOptions, TurnResult, send_turn

SID = "s"


def turn(store: Store, prompt: str, sid: str = SID) -> TurnResult:
    return send_turn(store, sid, prompt, OfflineProvider(), TurnOptions(model="offline"))


def dumped(state: SessionState) -> dict[str, Any]:
    return {
        "session": state.session.model_dump(mode="json", exclude={"rev"}),
        "slots": {
            slot_id: slot.model_dump(mode="json", exclude={"rev"})
            for slot_id, slot in state.slots.items()
        },
    }


def live(store: Store, sid: str = SID) -> dict[str, Any]:
    return dumped(Checkpointer(store).live_state(sid))


def at(store: Store, identifier: str, sid: str = SID) -> dict[str, Any]:
    keeper = Checkpointer(store)
    return dumped(keeper.state(sid, keeper.load(sid, identifier)))


def checkpointed_turns(store: Store, count: int) -> dict[str, dict[str, Any]]:
    """`count` turns, each checkpointed: the live state each checkpoint saw."""
    seen = {}
    for number in range(1, count + 1):
        result = turn(store, f"prompt {number}")
        assert result.checkpoint is not None
        seen[result.checkpoint] = live(store)
        store.memory_set(SID, "last", str(number))
    return seen


def log_size(store: Store, sid: str = SID) -> int:
    backend = getattr(store, "backend", None)
    if backend is None:  # the file Store before it runs over a backend
        path = Checkpointer(store).directory(sid) / "log"
        return path.stat().st_size if path.exists() else 0
    size: int = backend.checkpoint_log(sid).size()
    return size


def test_rollback_restores_the_state_a_checkpoint_saw(store: Store) -> None:
    store.create_session(SID, system_prompt="Be brief.")
    seen = checkpointed_turns(store, 3)
    first = next(iter(seen))
    assert live(store) != seen[first]
    keeper = Checkpointer(store)

    restored, saved = keeper.rollback(SID, first)

    assert restored.id == first
    assert live(store) == at(store, first) == seen[first]
    assert at(store, saved.id)["slots"] != seen[first]["slots"]
    texts = [m.text() for m in store.load_slot(SID).messages if m.role == "user"]
    assert texts == ["prompt 1"]


def test_a_rollback_of_a_rollback_restores_the_replaced_state(store: Store) -> None:
    store.create_session(SID)
    seen = checkpointed_turns(store, 3)
    replaced = live(store)
    keeper = Checkpointer(store)
    _, saved = keeper.rollback(SID, next(iter(seen)))
    assert at(store, saved.id) == replaced
    keeper.rollback(SID, saved.id)
    assert live(store) == replaced


def test_a_fork_and_its_parent_never_change_each_other(store: Store) -> None:
    store.create_session(SID)
    first = turn(store, "shared")
    turn(store, "parent only")
    assert first.checkpoint is not None
    child = Checkpointer(store).fork(SID, first.checkpoint, "child")
    assert child.parent_id == SID

    parent_before = live(store)
    turn(store, "child only", sid="child")
    assert live(store) == parent_before
    child_before = live(store, "child")
    turn(store, "parent again")
    assert live(store, "child") == child_before

    def user_texts(sid: str) -> list[str]:
        return [m.text() for m in store.load_slot(sid).messages if m.role == "user"]

    assert user_texts("child") == ["shared", "child only"]
    assert user_texts(SID) == ["shared", "parent only", "parent again"]


def test_prune_keeps_the_newest_and_they_still_restore(store: Store) -> None:
    store.create_session(SID)
    seen = checkpointed_turns(store, 5)
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    pruned = keeper.prune(SID, 2, everything=True)
    assert (pruned.kept, pruned.removed) == (ids[:2], ids[2:])
    assert keeper.ids(SID) == ids[:2]
    for identifier in ids[2:]:
        with pytest.raises(NotFound):
            keeper.load(SID, identifier)
    for identifier in ids[:2]:
        keeper.rollback(SID, identifier)
        assert live(store) == seen[identifier]


def test_a_turn_adds_to_the_checkpoint_log_what_it_adds_not_the_slot(store: Store) -> None:
    store.create_session(SID, system_prompt="Be brief.")
    added = []
    for number in range(1, 81):
        before = log_size(store)
        turn(store, f"prompt number {number:03}: tell me about it")
        added.append(log_size(store) - before)
    assert len(store.load_slot(SID).messages) == 160
    early, late = max(added[1:10]), max(added[-10:])
    assert 0 < late <= 1.5 * early, (early, late)


def test_a_session_exports_byte_for_byte_the_same_from_every_store(
    store: Store, tmp_path: Path
) -> None:
    """An export is a function of the session alone, never of where its log or the log's
    index were written: a history with an edit, a rollback and an undo made on a file
    store exports the same after a copy here, and again after its export is imported."""
    origin = Store(tmp_path / "origin")
    origin.create_session(SID, system_prompt="Be brief.")
    checkpointed_turns(origin, 3)
    with origin.undoable(SID, "msg edit"):
        origin.update_slot(SID, None, lambda slot: slot.edit(0, "prompt one"))
    keeper = Checkpointer(origin)
    keeper.rollback(SID, keeper.summaries(SID)[-2].id)  # back to the first turn
    turn(origin, "after the rollback")
    keeper.undo(SID)
    turn(origin, "after the undo")
    assert any(s.edit for s in keeper.summaries(SID))

    def exported(where: Store) -> bytes:
        return export_session(where, SID, checkpoints=True).model_dump_json().encode()

    expected = exported(origin)
    assert [r.outcome for r in copy_sessions(origin, store)] == ["copied"]
    assert exported(store) == expected
    store.destroy_session(SID)
    import_session(store, expected)
    assert exported(store) == expected
    assert live(store) == live(origin)
