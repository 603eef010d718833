"""Removing checkpoints: by id, or all but the newest and what `undo` still needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agctl.base.errors import NotFound
from agctl.store.checkpoints.files import removed_ids
from agctl.store.checkpoints.reader import ids, summaries
from agctl.store.checkpoints.restore import undo_targets

if TYPE_CHECKING:
    from agctl.store.work import Work


@dataclass
class Pruned:
    """What `prune` removed, and what it kept: the newest, and what `undo` still needs."""

    removed: list[str]
    kept: list[str]
    kept_for_undo: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"removed": self.removed, "kept": self.kept, "kept_for_undo": self.kept_for_undo}


def remove(work: Work, identifiers: Sequence[str]) -> list[str]:
    """Remove checkpoints; the history they share with others stays."""
    backend, session_id = work.opened(), work.session_id
    live = set(ids(backend, session_id))
    for identifier in identifiers:
        if identifier not in live:
            raise NotFound(f"checkpoint {identifier!r} not found")
    work.tx.set_removed_checkpoints(removed_ids(backend, session_id) | set(identifiers))
    return list(identifiers)


def prune(work: Work, keep: int, *, everything: bool = False) -> Pruned:
    """Keep the newest `keep` checkpoints and, unless `everything`, the ones `undo`
    needs for the last `keep` turns; remove the rest."""
    backend, session_id = work.opened(), work.session_id
    found = summaries(backend, session_id)
    newest = [s.id for s in found[:keep]]
    protected = (
        set()
        if everything or not keep
        else {c.id for c in undo_targets(backend, session_id, keep).values()}
    )
    for_undo = [s.id for s in found[keep:] if s.id in protected]
    doomed = [s.id for s in found[keep:] if s.id not in protected]
    if doomed:
        remove(work, doomed)
    return Pruned(removed=doomed, kept=newest, kept_for_undo=for_undo)
