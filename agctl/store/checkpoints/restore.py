"""Going back: rollback (one transaction), fork, and undo along the session's own lineage
of checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from agctl.base.errors import AlreadyExists, NotFound, UsageError
from agctl.base.hashing import content_hash
from agctl.base.ids import validate_id
from agctl.context.cache import session_root
from agctl.context.models import Session, isoformat, utcnow
from agctl.store.checkpoints.files import head, log, open_log, read_checkpoint, removed_ids
from agctl.store.checkpoints.planner import TurnHint, create, save_heads
from agctl.store.checkpoints.reader import load, state
from agctl.store.checkpoints.records import (
    Checkpoint,
    SessionState,
    checkpoint_offset,
    static_session,
    without_zones,
)
from agctl.store.work import reader

if TYPE_CHECKING:
    from agctl.storage.base import Backend
    from agctl.store.work import Work


def rollback(work: Work, identifier: str) -> tuple[Checkpoint, Checkpoint]:
    """Make the session exactly what it was; the replaced state is checkpointed first.

    Returns (the checkpoint restored, the checkpoint of the state replaced).
    """
    backend, session_id = work.opened(), work.session_id
    target = load(backend, session_id, identifier)
    rebuilt = state(backend, session_id, target)
    saved = create(work, label=f"before rollback to {target.id}", auto=True)
    _restore(work, target, rebuilt)
    log.info("rollback: %s to %s (turn %d)", session_id, target.id, target.turn_index)
    return target, saved


def _restore(work: Work, target: Checkpoint, rebuilt: SessionState) -> None:
    from agctl.store.sessions import replace_state  # not loaded by a turn, which only checkpoints

    replace_state(work, rebuilt.session, list(rebuilt.slots.values()))
    history = open_log(work.opened(), work.session_id)
    (last,) = history.append([{"r": checkpoint_offset(target.id)}])
    heads = {
        "end": history.size(),
        "session": {
            "hash": content_hash(static_session(rebuilt.session)),
            "ref": target.session_static,
        },
        "slots": {
            slot_id: {
                "version": rebuilt.slots[slot_id].rev,
                "doc_hash": content_hash(without_zones(rebuilt.slots[slot_id])),
                **entry.model_dump(mode="json"),
            }
            for slot_id, entry in target.slots.items()
        },
    }
    save_heads(work, heads, history, last)


def fork(backend: Backend, session_id: str, identifier: str, new_id: str | None = None) -> Session:
    """A new child session starting from the checkpoint; the original is untouched."""
    from agctl.base.ids import new_session_id
    from agctl.store.sessions import materialize

    if new_id is not None:
        validate_id(new_id, "session")
        if new_id in backend.session_ids():
            raise AlreadyExists(f"session {new_id!r} already exists")
    target = load(backend, session_id, identifier)
    rebuilt = state(backend, session_id, target)
    now = utcnow()
    session = rebuilt.session.model_copy(
        update={
            "id": new_id or new_session_id(),
            "parent_id": session_id,
            "created_at": now,
            "updated_at": now,
            # Where it came from, for `session graph`: the turn and time find the
            # checkpoint again after `store gc` gave it a new id.
            "forked_from": {
                # The session the line of forks began with: their requests share a
                # prompt_cache_key (agctl.context.cache).
                "root": session_root(rebuilt.session),
                "checkpoint": target.id,
                "turn": target.turn_index,
                "created_at": isoformat(target.created_at),
            },
        }
    )
    session = materialize(backend, session, list(rebuilt.slots.values()), drawn_id=new_id is None)
    log.info("fork: %s from %s/%s", session.id, session_id, target.id)
    return session


def _lineage(backend: Backend, session_id: str) -> Iterator[Checkpoint]:
    """The checkpoints the live session descends from, newest first (removed ones too:
    their links still lead on)."""
    history = open_log(backend, session_id)
    offset = head(history)
    while offset is not None:
        checkpoint = read_checkpoint(history, offset)
        yield checkpoint
        offset = checkpoint.parent


def undo_targets(backend: Backend, session_id: str, turns: int) -> dict[int, Checkpoint]:
    """What `undo` would restore for each of the last `turns` turns, by the turn it
    returns to: in the session's own history, the newest checkpoint at that turn that
    is not removed and was not written before an edit."""
    current = reader(backend, session_id).load_session(session_id).turn_count
    wanted = set(range(max(current - turns, 0), current))
    if not wanted:
        return {}
    removed = removed_ids(backend, session_id)
    found: dict[int, Checkpoint] = {}
    for checkpoint in _lineage(backend, session_id):
        if checkpoint.turn_index < min(wanted):
            break
        turn = checkpoint.turn_index
        usable = checkpoint.edit is None and checkpoint.id not in removed
        if turn in wanted and turn not in found and usable:
            found[turn] = checkpoint
            if len(found) == len(wanted):
                break
    return found


def checkpoint_at_turn(backend: Backend, session_id: str, turn: int) -> Checkpoint:
    """The checkpoint at `turn` in the current session's own history (its lineage);
    a checkpoint written before an edit is not one: it holds what the edit replaced."""
    removed = removed_ids(backend, session_id)
    for checkpoint in _lineage(backend, session_id):
        usable = checkpoint.edit is None and checkpoint.id not in removed
        if checkpoint.turn_index == turn and usable:
            return checkpoint
        if checkpoint.turn_index < turn:
            break
    raise NotFound(
        f"no checkpoint of session {session_id!r} at turn {turn} "
        "(automatic checkpoints may have been off)"
    )


def needs_baseline(backend: Backend, session_id: str) -> bool:
    """Whether a turn must checkpoint the state it starts from to be undoable: the
    session has no checkpoint yet, or it was edited since its latest one (which then
    holds the state before the edit, not the state the turn starts from)."""
    history = open_log(backend, session_id)
    latest = head(history) if history.size() else None
    if latest is None:
        return True
    last = history.last()
    found = last[1] if last is not None and last[0] == latest else history.read(latest)
    record = found.get("c")
    return not isinstance(record, dict) or record.get("edit") is not None


def baseline(work: Work, *, label: str, hint: TurnHint) -> Checkpoint | None:
    """Checkpoint the state a turn starts from, when an undo could not return to it
    otherwise (see needs_baseline); None when the latest checkpoint holds it."""
    if not needs_baseline(work.opened(), work.session_id):
        return None
    return create(work, label=label, auto=True, hint=hint)


def undo(work: Work, turns: int = 1) -> tuple[Checkpoint, Checkpoint]:
    """Roll back the last `turns` turns of the session's own history."""
    if turns < 1:
        raise UsageError("the number of turns to undo must be at least 1")
    current = work.load_session().turn_count
    if turns > current:
        raise NotFound(f"session {work.session_id!r} has only {current} turns to undo")
    target = checkpoint_at_turn(work.opened(), work.session_id, current - turns)
    return rollback(work, target.id)
