"""The Checkpointer: one object over a Store for every checkpoint job, each done by the
checkpoints package's module for it (planner, reader, restore, verify, prune, gc, diff).

It sits above the rules, as the Store does: a change opens the session's unit of work
(`Store.work`, which wires in the undo checkpoint of an undoable command) and hands it
down; a read first finishes a commit a killed writer left half applied, then reads the
backend. verify, prune, gc and diff are imported by the methods that use them: a turn's
checkpoint loads neither difflib nor their reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agctl.context.models import Session
from agctl.store.checkpoints import planner, reader, restore
from agctl.store.checkpoints.planner import TurnHint
from agctl.store.checkpoints.records import Checkpoint, CheckpointSummary, SessionState

if TYPE_CHECKING:
    from agctl.storage.base import Backend
    from agctl.store import Store
    from agctl.store.checkpoints.gc import GcReport
    from agctl.store.checkpoints.pack import Log
    from agctl.store.checkpoints.prune import Pruned
    from agctl.store.checkpoints.verify import CheckpointHistory, LogReport


class Checkpointer:
    """Create, list, read, diff, roll back to, fork from and remove checkpoints."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _backend(self, session_id: str) -> Backend:
        """The backend to read the session through, once any commit a killed writer left
        half applied is finished (none is, inside a transaction open on the session: it
        reads its own writes)."""
        backend = self.store.backend
        if backend.in_transaction(session_id) is None:
            self.store.settle(session_id)
        return backend

    # ---- create (planner) ----------------------------------------------------------

    def create(
        self,
        session_id: str,
        *,
        label: str | None = None,
        auto: bool = False,
        hint: TurnHint | None = None,
        edit: str | None = None,
        loss: dict[str, Any] | None = None,
    ) -> Checkpoint:
        """Snapshot the session as it is now; only what is not stored yet is written."""
        with self.store.work(session_id) as work:
            return planner.create(work, label=label, auto=auto, hint=hint, edit=edit, loss=loss)

    # ---- read (reader) -------------------------------------------------------------

    def summaries(self, session_id: str) -> list[CheckpointSummary]:
        return reader.summaries(self._backend(session_id), session_id)

    def ids(self, session_id: str) -> list[str]:
        return reader.ids(self._backend(session_id), session_id)

    def resolve(self, session_id: str, prefix: str) -> str:
        return reader.resolve(self._backend(session_id), session_id, prefix)

    def load(self, session_id: str, identifier: str) -> Checkpoint:
        return reader.load(self._backend(session_id), session_id, identifier)

    def state(self, session_id: str, checkpoint: Checkpoint) -> SessionState:
        return reader.state(self._backend(session_id), session_id, checkpoint)

    def live_state(self, session_id: str) -> SessionState:
        return reader.live_state(self._backend(session_id), session_id)

    def matching_live(self, session_id: str, summaries: Sequence[CheckpointSummary]) -> set[str]:
        return reader.matching_live(self._backend(session_id), session_id, summaries)

    # ---- rollback, fork, undo (restore) --------------------------------------------

    def rollback(self, session_id: str, identifier: str) -> tuple[Checkpoint, Checkpoint]:
        with self.store.work(session_id) as work:
            return restore.rollback(work, identifier)

    def fork(self, session_id: str, identifier: str, new_id: str | None = None) -> Session:
        return restore.fork(self._backend(session_id), session_id, identifier, new_id)

    def undo_targets(self, session_id: str, turns: int) -> dict[int, Checkpoint]:
        return restore.undo_targets(self._backend(session_id), session_id, turns)

    def checkpoint_at_turn(self, session_id: str, turn: int) -> Checkpoint:
        return restore.checkpoint_at_turn(self._backend(session_id), session_id, turn)

    def needs_baseline(self, session_id: str) -> bool:
        return restore.needs_baseline(self._backend(session_id), session_id)

    def undo(self, session_id: str, turns: int = 1) -> tuple[Checkpoint, Checkpoint]:
        with self.store.work(session_id) as work:
            return restore.undo(work, turns)

    # ---- verify, export and import (verify) ----------------------------------------

    def verify(self, session_id: str) -> LogReport:
        from agctl.store.checkpoints import verify

        return verify.verify(self._backend(session_id), session_id)

    def verify_log(self, session_id: str, history: Log) -> LogReport:
        from agctl.store.checkpoints import verify

        return verify.verify_log(session_id, history)

    def export_history(self, session_id: str) -> CheckpointHistory:
        """Read in a unit of work, so that the log and its removed ids are of one commit."""
        from agctl.store.checkpoints import verify

        with self.store.work(session_id) as work:
            return verify.export_history(work.opened(), session_id)

    def verify_import(self, session_id: str, data: bytes) -> None:
        from agctl.store.checkpoints import verify

        verify.verify_import(session_id, data)

    # ---- remove (prune, gc) --------------------------------------------------------

    def remove(self, session_id: str, identifiers: Sequence[str]) -> list[str]:
        from agctl.store.checkpoints import prune

        with self.store.work(session_id) as work:
            return prune.remove(work, identifiers)

    def prune(self, session_id: str, keep: int, *, everything: bool = False) -> Pruned:
        from agctl.store.checkpoints import prune

        with self.store.work(session_id) as work:
            return prune.prune(work, keep, everything=everything)

    def gc(self, session_id: str, *, dry_run: bool = False) -> GcReport:
        """Reclaim what only removed checkpoints reached; the live ones get new ids."""
        from agctl.store.checkpoints import gc

        with self.store.work(session_id) as work:
            return gc.gc(work, dry_run=dry_run)

    # ---- diff ----------------------------------------------------------------------

    def diff(self, session_id: str, a: str, b: str | None = None) -> dict[str, Any]:
        from agctl.store.checkpoints import diff

        return diff.diff(self._backend(session_id), session_id, a, b)
