"""Checkpoints: snapshots of a whole session, rollback, diff and fork — in O(delta) space.

A session's backend keeps (the file backend under `sessions/<id>/checkpoints/`; the format
is in docs/checkpoints.md):

    the log        append-only records (agctl.store.checkpoints.pack): message nodes,
                   document blobs and the checkpoints that refer to them; a checkpoint's
                   id is its offset there
    the index      one summary line per checkpoint, for listing; a cache that repairs
                   itself from the log
    the heads      what the latest checkpoint refers to, per slot, with the revision of
                   the slot it saw; a cache that lets the next checkpoint skip unchanged
                   slots and store only new messages
    removed ids    of removed checkpoints (until `store gc` writes the log again without
                   them: the live checkpoints then get new ids)

A checkpoint costs its new messages plus a small record; reading one walks only its own
chains, whatever the number of checkpoints.

The package is a stack, each module importing only those below it: records (the stored
shapes and ids) · files (the log, index and removed set) · planner (what a new checkpoint
must store; the heads cache) · reader · restore (rollback, fork, undo) · verify · prune ·
diff · gc (reclaiming what only removed checkpoints reached). A change takes the session's
unit of work (agctl.store.work.Work) and writes through it; a read takes the backend and the
session id. The Checkpointer, one object over them all, sits above them in
agctl.store.checkpointer. This module only re-exports, each name when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Each name is imported from its module when first used, so that a command (a turn) loads
# only the modules it needs: a turn's checkpoint never loads diff (difflib), prune or
# verify (nor builds their reports).
_LAZY = {
    "diff_states": "agctl.store.checkpoints.diff",
    "Batch": "agctl.store.checkpoints.planner",
    "Pending": "agctl.store.checkpoints.planner",
    "TurnHint": "agctl.store.checkpoints.planner",
    "VOLATILE_SESSION": "agctl.store.checkpoints.records",
    "Checkpoint": "agctl.store.checkpoints.records",
    "CheckpointHistory": "agctl.store.checkpoints.verify",
    "CheckpointSummary": "agctl.store.checkpoints.records",
    "GcReport": "agctl.store.checkpoints.gc",
    "LogReport": "agctl.store.checkpoints.verify",
    "Pruned": "agctl.store.checkpoints.prune",
    "SessionState": "agctl.store.checkpoints.records",
    "SlotEntry": "agctl.store.checkpoints.records",
    "checkpoint_id": "agctl.store.checkpoints.records",
    "checkpoint_offset": "agctl.store.checkpoints.records",
    "messages_to_json": "agctl.store.checkpoints.records",
}

if TYPE_CHECKING:
    from agctl.store.checkpoints.diff import diff_states
    from agctl.store.checkpoints.gc import GcReport
    from agctl.store.checkpoints.planner import Batch, Pending, TurnHint
    from agctl.store.checkpoints.prune import Pruned
    from agctl.store.checkpoints.records import (
        VOLATILE_SESSION,
        Checkpoint,
        CheckpointSummary,
        SessionState,
        SlotEntry,
        checkpoint_id,
        checkpoint_offset,
        messages_to_json,
    )
    from agctl.store.checkpoints.verify import CheckpointHistory, LogReport


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agctl.store.checkpoints' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "VOLATILE_SESSION",
    "Batch",
    "Checkpoint",
    "CheckpointHistory",
    "CheckpointSummary",
    "GcReport",
    "LogReport",
    "Pending",
    "Pruned",
    "SessionState",
    "SlotEntry",
    "TurnHint",
    "checkpoint_id",
    "checkpoint_offset",
    "diff_states",
    "messages_to_json",
]
