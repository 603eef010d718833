"""Moving sessions between stores (`agctl store copy`): any backend to any other, each
session whole with its checkpoint history, all or nothing, and idempotently.

A session is copied as `session export --checkpoints` writes it and `session import`
reads it back (verified on the way in), so what the target holds is, by construction,
what an export of the source says. The checkpoint log travels byte for byte, so each
checkpoint keeps its id; the map of old to new ids is read back from both stores, not
assumed. A session the target already holds identically is skipped; one it holds
differently is a conflict (exit 4), and the sessions copied before it stay copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agctl.errors import Conflict, DataError, NotFound

if TYPE_CHECKING:
    from agctl.store import Store

Outcome = Literal["copied", "skipped"]


@dataclass
class Copied:
    """What became of one session: copied or skipped, and its checkpoints' ids."""

    session_id: str
    outcome: Outcome
    checkpoints: dict[str, str] = field(default_factory=dict)  # source id -> target id


def _comparable(store: Store, session_id: str) -> bytes:
    """The session's export with history, but for who wrote it (the agctl version)."""
    from agctl.interchange import export_session

    exported = export_session(store, session_id, checkpoints=True)
    return exported.model_dump_json(exclude={"agctl_version"}).encode()


def _parents_first(store: Store, session_ids: Sequence[str]) -> list[str]:
    """The sessions ordered so that a parent chosen too comes before its children."""
    chosen = set(session_ids)
    parents = {sid: store.load_session(sid).parent_id for sid in session_ids}
    ordered: list[str] = []
    placed: set[str] = set()

    def place(sid: str, seen: frozenset[str]) -> None:
        if sid in placed:
            return
        parent = parents[sid]
        if parent in chosen and parent not in seen:
            place(parent, seen | {sid})
        placed.add(sid)
        ordered.append(sid)

    for sid in sorted(session_ids):
        place(sid, frozenset())
    return ordered


def _checkpoint_map(source: Store, target: Store, session_id: str) -> dict[str, str]:
    from agctl.checkpoints import Checkpointer

    before = [s.id for s in Checkpointer(source).summaries(session_id)]
    after = [s.id for s in Checkpointer(target).summaries(session_id)]
    if len(before) != len(after):
        raise DataError(
            f"session {session_id!r} has {len(before)} checkpoints in the source but "
            f"{len(after)} in the target after the copy"
        )
    return dict(zip(before, after, strict=True))


def copy_sessions(
    source: Store, target: Store, session_ids: Sequence[str] | None = None
) -> list[Copied]:
    """Copy `session_ids` (default: every session) from `source` to `target`."""
    from agctl.interchange import import_session

    if session_ids is None:
        session_ids = source.session_ids()
    for sid in session_ids:
        if not source.backend.has_session(sid):
            raise NotFound(f"session {sid!r} not found in the source store")
    done: list[Copied] = []
    for sid in _parents_first(source, list(dict.fromkeys(session_ids))):
        exported = _comparable(source, sid)
        if target.backend.has_session(sid):
            if _comparable(target, sid) != exported:
                copied = ", ".join(c.session_id for c in done) or "none"
                raise Conflict(
                    f"session {sid!r} is in the target store already, and differs from the "
                    f"source's (copied before it: {copied})",
                    hint="remove it from the target (agctl --store DST session rm) or leave "
                    "it out (--session)",
                )
            outcome: Outcome = "skipped"
        else:
            import_session(target, exported, source=f"session {sid!r} of the source store")
            outcome = "copied"
        done.append(Copied(sid, outcome, _checkpoint_map(source, target, sid)))
    return done
