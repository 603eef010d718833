"""Checkpoints in the library: exact rollback, undo, fork, prune, diff, storage, damage."""

from __future__ import annotations

from helpers import SID, append_user

from agctl.store import Store

# ---- helpers ---------------------------------------------------------------------------


# ---- failed turns ----------------------------------------------------------------------


# ---- storage ---------------------------------------------------------------------------


# ---- damage ----------------------------------------------------------------------------


# ---- concurrency -----------------------------------------------------------------------


def test_every_write_advances_the_revision(store: Store) -> None:
    store.create_session(SID)
    revs = [store.load_slot(SID).rev]
    for text in ("a", "b", "c"):
        append_user(store, text)
        revs.append(store.load_slot(SID).rev)
    assert revs == sorted(set(revs)), revs


# ---- destroying sessions ---------------------------------------------------------------
