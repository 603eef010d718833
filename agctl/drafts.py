"""Drafts: the prompt of a turn that did not complete, and whether it may still be sent.

A session keeps one draft (`draft.json`), for the slot its turn was sent to. The draft
remembers what that slot held when it was kept, so that sending it again after the slot
changed (an edit, another turn, a rollback) is refused unless forced: the prompt was
written for a context that is no longer there.
"""

from __future__ import annotations

from agctl.errors import AgctlError, NotFound, StaleDraft
from agctl.models import Draft, Message, Slot, isoformat
from agctl.pack import content_hash
from agctl.store import Store

STATE_FIELDS = frozenset({"config", "immutable", "compressed", "messages"})


def slot_state(slot: Slot) -> str:
    """A fingerprint of what a turn's request is built from in a slot (its settings and
    zones): times and counts cannot tell an edit or a rollback from no change; content can."""
    return content_hash(slot.model_dump(mode="json", include=set(STATE_FIELDS)))


def new_draft(
    store: Store,
    session_id: str,
    seen: Slot,
    prompt: str,
    error: str,
    reply: Message | None = None,
) -> Draft:
    """The draft of a failed turn built from `seen`, recording the slot as it is stored now
    (it may have changed while the model answered), or as seen if it cannot be read.

    Read afresh, never reusing `seen`: a commit that failed may have appended the turn to
    it in memory, and the draft would then describe a slot that never was."""
    try:
        slot = store.load_slot(session_id, seen.id)
    except AgctlError:
        slot = seen
    return Draft(
        prompt=prompt,
        slot=slot.id,
        error=error,
        reply=reply,
        slot_state=slot_state(slot),
        slot_messages=len(slot.messages),
    )


def find_draft(store: Store, session_id: str, slot_id: str | None = None) -> Draft:
    """The session's draft; with `slot_id`, only if it is that slot's."""
    draft = store.load_draft(session_id)
    if slot_id is not None and draft.slot != slot_id:
        raise NotFound(
            f"slot {slot_id!r} has no draft (the draft of session {session_id!r} is for "
            f"slot {draft.slot!r}; to send it to {slot_id!r}: "
            f"agctl draft show | agctl turn send - --slot {slot_id})"
        )
    return draft


def staleness(store: Store, session_id: str, draft: Draft) -> str | None:
    """Why the draft is older than its slot's last change, or None if it is not."""
    slot = store.load_slot(session_id, draft.slot)
    kept = isoformat(draft.created_at)
    if draft.slot_state is None:
        # Kept by an agctl that did not record the slot: only its time to go by.
        if slot.meta.updated_at > draft.created_at:
            return f"changed at {isoformat(slot.meta.updated_at)}, the draft was kept at {kept}"
        return None
    if slot_state(slot) == draft.slot_state:
        return None
    if draft.slot_messages is not None and draft.slot_messages != len(slot.messages):
        what = f"{draft.slot_messages} messages then, {len(slot.messages)} now"
    else:
        what = "its messages or settings were changed"
    return f"changed since the draft was kept at {kept}: {what}"


def check_resumable(store: Store, session_id: str, draft: Draft) -> None:
    """Refuse (StaleDraft, exit 4) a draft older than its slot's last change."""
    reason = staleness(store, session_id, draft)
    if reason is not None:
        raise StaleDraft(draft.slot, reason)
