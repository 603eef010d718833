"""Removing and pruning checkpoints (agctl.store.checkpoints.prune), and their ids."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import SID, documents, dumped_at, dumped_live, turn

from agctl.base.errors import AmbiguousId, NotFound
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_offset

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
