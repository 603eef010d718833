"""Moving sessions between stores (`agctl store copy`): any backend to any other, each
session whole with its checkpoint history, all or nothing, and idempotently.

A session is copied as `session export --checkpoints` writes it and `session import`
reads it back (verified on the way in), so what the target holds is, by construction,
what an export of the source says. The checkpoint log travels byte for byte, so each
checkpoint keeps its id; the map of old to new ids is read back from both stores, not
assumed. A session the target already holds identically is skipped; one it holds
differently is a conflict (exit 4), and the sessions copied before it stay copied.

A damaged session (a document that does not parse, a log failing its checksums, in the
source or in the target's copy it is compared with) is not copied and the copy goes on:
its outcome is "failed", with the reason, and nothing of it is left in the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from agctl.base.errors import AgctlError, Conflict, DataError, InvalidInput, NotFound

if TYPE_CHECKING:
    from agctl.storage.factory import StoreChoice
    from agctl.store import Store

Outcome = Literal["copied", "skipped", "failed"]
# What a damaged session raises (exit 5): it fails alone, and the copy goes on.
DAMAGE = (DataError, InvalidInput)


@dataclass
class Copied:
    """What became of one session: copied, skipped (held already) or failed (damaged, and
    why), and its checkpoints' ids."""

    session_id: str
    outcome: Outcome
    checkpoints: dict[str, str] = field(default_factory=dict)  # source id -> target id
    error: AgctlError | None = None  # why it failed


def _comparable(store: Store, session_id: str) -> bytes:
    """The session's export with history, but for who wrote it (the agctl version)."""
    from agctl.interchange.formats import export_session

    exported = export_session(store, session_id, checkpoints=True)
    return exported.model_dump_json(exclude={"agctl_version"}).encode()


def _parents_first(parents: dict[str, str | None]) -> list[str]:
    """The sessions ordered so that a parent chosen too comes before its children."""
    ordered: list[str] = []
    placed: set[str] = set()

    def place(sid: str, seen: frozenset[str]) -> None:
        if sid in placed:
            return
        parent = parents[sid]
        if parent in parents and parent not in seen:
            place(parent, seen | {sid})
        placed.add(sid)
        ordered.append(sid)

    for sid in sorted(parents):
        place(sid, frozenset())
    return ordered


def _checkpoint_map(source: Store, target: Store, session_id: str) -> dict[str, str]:
    from agctl.store.checkpointer import Checkpointer

    before = [s.id for s in Checkpointer(source).summaries(session_id)]
    after = [s.id for s in Checkpointer(target).summaries(session_id)]
    if len(before) != len(after):
        raise DataError(
            f"session {session_id!r} has {len(before)} checkpoints in the source but "
            f"{len(after)} in the target after the copy"
        )
    return dict(zip(before, after, strict=True))


def _copy_one(
    source: Store, target: Store, sid: str, held: set[str], done: Sequence[Copied]
) -> Copied:
    """Copy one session, or skip it when the target holds it (`held`) identically."""
    from agctl.interchange.formats import import_session

    exported = _comparable(source, sid)
    if sid in held:
        if _comparable(target, sid) != exported:
            copied = ", ".join(c.session_id for c in done if c.outcome != "failed") or "none"
            raise Conflict(
                f"session {sid!r} is in the target store already, and differs from the "
                f"source's (copied before it: {copied})",
                hint="remove it from the target (agctl --store DST session rm) or leave "
                "it out (--session)",
            )
        return Copied(sid, "skipped", _checkpoint_map(source, target, sid))
    import_session(target, exported, source=f"session {sid!r} of the source store")
    try:
        return Copied(sid, "copied", _checkpoint_map(source, target, sid))
    except DAMAGE:
        target.destroy_session(sid, orphan=True)  # not left behind half verified
        raise


def copy_sessions(
    source: Store, target: Store, session_ids: Sequence[str] | None = None
) -> list[Copied]:
    """Copy `session_ids` (default: every session) from `source` to `target`; a damaged
    one fails alone (its Copied says why), the others are copied."""
    if session_ids is None:
        session_ids = source.session_ids()
    for sid in session_ids:
        if not source.backend.has_session(sid):
            raise NotFound(f"session {sid!r} not found in the source store")
    parents: dict[str, str | None] = {}
    unreadable: dict[str, AgctlError] = {}
    for sid in dict.fromkeys(session_ids):
        try:
            parents[sid] = source.load_session(sid).parent_id
        except DAMAGE as exc:
            parents[sid], unreadable[sid] = None, exc
    # Opening the target: a fault of the whole store (a schema from a newer agctl) stops
    # the copy here, before it could fail every session alike.
    held = set(target.session_ids())
    done: list[Copied] = []
    for sid in _parents_first(parents):
        if sid in unreadable:
            done.append(Copied(sid, "failed", error=unreadable[sid]))
            continue
        try:
            done.append(_copy_one(source, target, sid, held, done))
        except DAMAGE as exc:
            done.append(Copied(sid, "failed", error=exc))
        except Conflict as exc:
            for failed in (c for c in done if c.error is not None):
                exc.add_note(f"not copied: session {failed.session_id!r}: {failed.error}")
            raise
    return done


@dataclass
class Transfer:
    """What a copy between two stores did: the stores as messages name them, and what
    became of each session."""

    source: str
    target: str
    sessions: list[Copied]

    def failure(self) -> DataError | None:
        """The error the copy ends with (exit 5) when damaged sessions were not copied,
        naming each and why; None when every session arrived or was held already."""
        failed = [c for c in self.sessions if c.error is not None]
        if not failed:
            return None
        error = DataError(
            f"{len(failed)} of {len(self.sessions)} session(s) not copied, damaged "
            f"({', '.join(c.session_id for c in failed)}); the others were",
            hint="repair or remove them in SRC ('agctl --store SRC -s ID ckpt verify' checks "
            "a log), then copy again: what DST holds already is skipped",
        )
        for c in failed:
            error.add_note(f"session {c.session_id!r}: {c.error}")
        return error


def copy_between(
    source: StoreChoice, target: StoreChoice, session_ids: Sequence[str] | None = None
) -> Transfer:
    """Open the two stores chosen (never the same one twice), copy `session_ids` (default:
    every session) from one to the other as `copy_sessions` does, and close both."""
    from agctl.base.errors import UsageError
    from agctl.store import Store

    if source.spec == target.spec and source.schema == target.schema:
        raise UsageError(f"SRC and DST are the same store ({source.spec.shown})")
    stores: list[Store] = []
    try:
        for choice in (source, target):
            stores.append(Store(choice=choice))
        src, dst = stores
        return Transfer(src.shown, dst.shown, copy_sessions(src, dst, session_ids))
    finally:
        for store in stores:
            store.close()
