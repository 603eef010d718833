"""Checkpoints: snapshots of a whole session, rollback, diff and fork — in O(delta) space.

A session's backend keeps (the file backend under `sessions/<id>/checkpoints/`; the format
is in docs/checkpoints.md):

    the log        append-only records (agctl.pack): message nodes, document blobs and the
                   checkpoints that refer to them; a checkpoint's id is its offset there
    the index      one summary line per checkpoint, for listing; a cache that repairs
                   itself from the log
    the heads      what the latest checkpoint refers to, per slot, with the revision of
                   the slot it saw; a cache that lets the next checkpoint skip unchanged
                   slots and store only new messages
    removed ids    of removed checkpoints

A checkpoint costs its new messages plus a small record; reading one walks only its own
chains, whatever the number of checkpoints.

The package is a stack, each module importing only those below it: records (the stored
shapes and ids) · files (the log, index and removed set) · planner (what a new checkpoint
must store; the heads cache) · reader · restore (rollback, fork, undo) · verify · prune ·
diff · checkpointer (the Checkpointer, one object over them). This module only re-exports.
"""

from __future__ import annotations

from agctl.checkpoints.checkpointer import Checkpointer
from agctl.checkpoints.diff import diff_states
from agctl.checkpoints.planner import Batch, Pending, TurnHint
from agctl.checkpoints.records import (
    VOLATILE_SESSION,
    Checkpoint,
    CheckpointHistory,
    CheckpointSummary,
    LogReport,
    Pruned,
    SessionState,
    SlotEntry,
    checkpoint_id,
    checkpoint_offset,
    messages_to_json,
)

__all__ = [
    "VOLATILE_SESSION",
    "Batch",
    "Checkpoint",
    "CheckpointHistory",
    "CheckpointSummary",
    "Checkpointer",
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
