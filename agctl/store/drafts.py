"""Drafts: the prompt of a turn that did not complete, and whether it may still be sent.

Each slot keeps at most one draft (`drafts/<slot>.json`), so a failure on one slot never
costs another slot its draft. A draft remembers what its slot held when it was kept, so
that sending it again after the slot changed (an edit, another turn, a rollback) is refused
unless forced: the prompt was written for a context that is no longer there.

Which draft a command means when it names no slot: the current slot's, else the only one
the session has; with drafts on several other slots, a usage error lists them.

A shared store that cannot take a draft (its server down) has it kept on this machine
instead (agctl.storage.local_drafts): found beside the store's drafts, the newer one of a
slot used, and removed with the store's (by the turn that commits it, or `draft rm`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from agctl.base.errors import (
    AgctlError,
    CommitPending,
    CorruptDocument,
    NotFound,
    StaleDraft,
    StoreError,
    UsageError,
)
from agctl.base.hashing import content_hash
from agctl.base.ids import validate_id
from agctl.base.vocab import ZONES
from agctl.context.models import Draft, Message, Slot, isoformat
from agctl.store.work import reader, work_on

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.context.models import ToolCall
    from agctl.storage.base import Backend
    from agctl.storage.local_drafts import LocalDrafts

log = logging.getLogger("agctl.store")

STATE_FIELDS = frozenset({"config", *ZONES})
# How "stale" begins when the draft's slot was removed since (`slot rm`).
GONE = "is gone"


# ---- keeping drafts: one per slot, so a failed turn on one slot never replaces another's


def adopt_legacy_draft(backend: Backend, session_id: str) -> CorruptDocument | None:
    """The file backend's draft.json of older agctl, adopted (see FileBackend)."""
    adopt: Callable[[str], CorruptDocument | None] | None
    adopt = getattr(backend, "adopt_legacy_draft", None)
    return adopt(session_id) if adopt is not None else None


def draft_slots(backend: Backend, session_id: str) -> list[str]:
    """The slots that have a draft (a slot removed since included), sorted. Raises
    CorruptDocument for a damaged legacy draft.json, whose slot cannot be known."""
    damage = adopt_legacy_draft(backend, session_id)
    if damage is not None:
        raise damage
    slots = reader(backend, session_id).draft_slots(session_id)
    here = local_drafts(backend)
    return sorted({*slots, *here.slots(session_id)}) if here is not None else slots


def local_drafts(backend: Backend) -> LocalDrafts | None:
    """Where this machine keeps the drafts a shared store could not take (None: the
    store is local, and takes them itself)."""
    here: LocalDrafts | None = getattr(backend, "local_drafts", None)
    return here


def save_draft(backend: Backend, session_id: str, draft: Draft) -> Path | None:
    """Keep a prompt whose turn failed, as its slot's draft, so it can be sent again: in
    the store, or on this machine when a shared store cannot take it (its server down):
    then where it is."""
    adopt_legacy_draft(backend, session_id)
    try:
        with work_on(backend, session_id) as work:
            work.tx.put_draft(draft)
    except CommitPending:
        raise
    except StoreError as exc:
        here = local_drafts(backend)
        if here is None:
            raise
        path = here.put(session_id, draft)
        log.info(
            "the store could not take the draft of slot %s (%s): kept in %s", draft.slot, exc, path
        )
        return path
    return None


def load_draft(backend: Backend, session_id: str, slot_id: str) -> Draft:
    """The slot's draft, as kept (NotFound when it has none): the newer of the store's
    and the one kept on this machine."""
    adopt_legacy_draft(backend, session_id)
    here = local_drafts(backend)
    kept_here = here.get(session_id, slot_id) if here is not None else None
    try:
        kept = reader(backend, session_id).load_draft(session_id, slot_id)
    except NotFound:
        if kept_here is None:
            raise
        return kept_here
    return kept_here if kept_here is not None and kept_here.created_at > kept.created_at else kept


class Superseding(NamedTuple):
    """A turn that supersedes its slot's older draft once committed: it started at
    `started` (a draft kept before then is superseded), and kept its own step log at
    `own` (that one too)."""

    started: datetime
    own: datetime | None = None

    def supersedes(self, draft: Draft) -> bool:
        return draft.created_at < self.started or draft.created_at == self.own


def drop_local_draft(
    backend: Backend, session_id: str, slot_id: str, by: Superseding | None = None
) -> bool:
    """Remove the slot's draft kept on this machine (as clear_draft does the store's: with
    `by`, only one that turn supersedes, and a damaged one is left); whether one was
    removed. A turn calls it once committed: a file is no part of a transaction."""
    here = local_drafts(backend)
    if here is None:
        return False
    if by is not None:
        try:
            draft = here.get(session_id, slot_id)
        except CorruptDocument:
            return False
        if draft is None or not by.supersedes(draft):
            return False
    return here.drop(session_id, slot_id)


def clear_draft(
    backend: Backend, session_id: str, slot_id: str, by: Superseding | None = None
) -> bool:
    """The store's draft of the slot dropped, whole or damaged, and the one kept on this
    machine too; with `by`, only a draft that turn supersedes (a damaged one is left for
    'agctl draft show' to report, and the turn drops the one on this machine once it
    has committed). Whether one was dropped.

    Read, compared and removed in one transaction, so a draft another process keeps
    meanwhile is never removed unseen."""
    adopt_legacy_draft(backend, session_id)
    ours = False
    with work_on(backend, session_id) as work:
        tx = work.tx
        validate_id(slot_id, "slot")
        if by is not None:
            try:
                draft = tx.load_draft(session_id, slot_id)
            except (NotFound, CorruptDocument):
                return False  # none, or damaged: left for 'agctl draft show' to report
            ours = draft.created_at == by.own
            if not by.supersedes(draft):
                return False
        elif slot_id not in tx.draft_slots(session_id):
            return drop_local_draft(backend, session_id, slot_id)
        tx.delete_draft(slot_id)
    if by is None:
        drop_local_draft(backend, session_id, slot_id)
    if ours:
        log.debug("the step log of the turn on slot %s dropped: the turn is committed", slot_id)
    elif by is not None:
        log.info("draft of slot %s dropped: a later turn on it superseded it", slot_id)
    return True


def clear_legacy_draft(backend: Backend, session_id: str) -> None:
    """Remove a damaged legacy draft.json (a readable one is adopted, never removed)."""
    remove: Callable[[str], None] | None = getattr(backend, "remove_legacy_draft", None)
    if remove is not None:
        remove(session_id)


# ---- which draft, and whether it may still be sent


def slot_state(slot: Slot) -> str:
    """A fingerprint of what a turn's request is built from in a slot (its settings and
    zones): times and counts cannot tell an edit or a rollback from no change; content can.
    What is unset is left out, so a setting added to the schema later (unset until set)
    leaves the fingerprint of a slot that does not use it as it was."""
    return content_hash(slot.model_dump(mode="json", include=set(STATE_FIELDS), exclude_none=True))


def new_draft(
    backend: Backend,
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
        slot = reader(backend, session_id).load_slot(session_id, seen.id)
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


def draft_slot(backend: Backend, session_id: str, slot_id: str | None = None) -> str:
    """The slot whose draft is meant: `slot_id` if given (it may have been removed since),
    else the current slot if it has one, else the only slot with a draft."""
    slots = draft_slots(backend, session_id)
    if slot_id is not None:
        if slot_id not in slots:
            others = f" (drafts are kept for: {', '.join(slots)})" if slots else ""
            raise NotFound(f"slot {slot_id!r} of session {session_id!r} has no draft{others}")
        return slot_id
    if not slots:
        raise NotFound(f"session {session_id!r} has no draft")
    current = reader(backend, session_id).load_session(session_id).current_slot
    if current in slots:
        return current
    if len(slots) == 1:
        return slots[0]
    raise UsageError(
        f"session {session_id!r} has drafts for slots {', '.join(slots)}, none for the "
        f"current slot {current!r}: choose one with --slot"
    )


def find_draft(backend: Backend, session_id: str, slot_id: str | None = None) -> Draft:
    """The draft meant by `slot_id` (see draft_slot)."""
    return load_draft(backend, session_id, draft_slot(backend, session_id, slot_id))


def all_drafts(backend: Backend, session_id: str) -> list[Draft | CorruptDocument]:
    """Every draft of the session by slot; a damaged one as its error, so one bad file
    does not hide the others."""
    found: list[Draft | CorruptDocument] = []
    for slot in draft_slots(backend, session_id):
        try:
            found.append(load_draft(backend, session_id, slot))
        except CorruptDocument as exc:
            found.append(exc)
        except NotFound:
            continue  # removed meanwhile
    return found


def remove_draft(
    backend: Backend, session_id: str, slot_id: str | None = None
) -> Draft | CorruptDocument:
    """Drop the draft meant by `slot_id` and return it (or, if it was damaged, why), read
    and removed under the session lock so that a draft a concurrent turn keeps meanwhile
    is never dropped unseen."""
    with work_on(backend, session_id) as work, work.locked():
        try:
            slot = draft_slot(backend, session_id, slot_id)
        except CorruptDocument as damage:  # a damaged legacy draft.json, of no known slot
            if slot_id is not None:
                raise
            clear_legacy_draft(backend, session_id)
            return damage
        try:
            draft: Draft | CorruptDocument = load_draft(backend, session_id, slot)
        except CorruptDocument as damage:
            draft = damage
        clear_draft(backend, session_id, slot)
        return draft


def staleness(backend: Backend, session_id: str, draft: Draft) -> str | None:
    """Why the draft is older than its slot's last change, or None if it is not."""
    slot = reader(backend, session_id).load_slot(session_id, draft.slot)
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


def check_resumable(backend: Backend, session_id: str, draft: Draft) -> None:
    """Refuse (StaleDraft, exit 4) a draft older than its slot's last change."""
    reason = staleness(backend, session_id, draft)
    if reason is not None:
        raise StaleDraft(draft.slot, reason)


def resumable_draft(
    backend: Backend, session_id: str, slot_id: str | None = None, *, force: bool = False
) -> Draft:
    """The draft `turn send --resume-draft` sends again (the one meant by `slot_id`, see
    draft_slot), refused (StaleDraft) when its slot changed since it was kept, unless
    `force`: its prompt was written for a context no longer there."""
    draft = find_draft(backend, session_id, slot_id)
    if not force:
        check_resumable(backend, session_id, draft)
    return draft


# ---- the tool calls a draft keeps waiting, and the answers given for them


def waiting_calls(draft: Draft) -> list[ToolCall]:
    """The calls of the draft's last step that have no result yet: the ones a resumed
    turn answers first (those awaiting approval among them), in the reply's order."""
    from agctl.turn.steps import unanswered

    return unanswered(draft.steps)


# An answer given in advance (agctl.turn.tools.Answer, less "always").
Answer = Literal["yes", "no"]


def given_answers(draft: Draft, approve: Sequence[str], deny: Sequence[str]) -> dict[str, Answer]:
    """The answers `--approve-call` and `--deny-call` give, by call id, to the draft's
    waiting calls: an id names one ("all": each waiting call the other flag does not
    name). An id the draft does not wait on, one both approved and denied, or "all"
    given to both is a UsageError: a decision must never miss its call unseen."""
    waiting = [call.id for call in waiting_calls(draft)]
    named: dict[str, Answer] = {}
    every: Answer | None = None
    flags: tuple[tuple[str, Sequence[str], Answer], ...] = (
        ("--approve-call", approve, "yes"),
        ("--deny-call", deny, "no"),
    )
    for flag, ids, answer in flags:
        for given in ids:
            if given == "all":
                if every is not None and every != answer:
                    raise UsageError("--approve-call all and --deny-call all contradict")
                every = answer
            elif given not in waiting:
                listed = ", ".join(repr(call_id) for call_id in waiting)
                held = f"its waiting calls: {listed}" if waiting else "none waits"
                raise UsageError(
                    f"{flag} {given!r}: the draft of slot {draft.slot!r} has no waiting "
                    f"call with that id ({held}; see 'agctl draft show')"
                )
            elif named.setdefault(given, answer) != answer:
                raise UsageError(f"call {given!r} is given to both --approve-call and --deny-call")
    if every is None:
        return named
    if not waiting:
        raise UsageError(f"the draft of slot {draft.slot!r} has no waiting tool call")
    return {call_id: named.get(call_id, every) for call_id in waiting}


def draft_document(backend: Backend, session_id: str, draft: Draft) -> dict[str, Any]:
    """A draft as `draft show` and `draft rm` report it: "stale" says why --resume-draft
    would refuse it (its slot changed since, or is gone), or is None; "waiting_calls"
    are the tool calls a resumed turn answers first (see waiting_calls)."""
    try:
        stale = staleness(backend, session_id, draft)
    except NotFound as exc:  # its slot was deleted since
        stale = f"{GONE} ({exc})"
    return {
        "session": session_id,
        "slot": draft.slot,
        "created_at": isoformat(draft.created_at),
        "prompt": draft.prompt,
        "error": draft.error,
        "reply": draft.reply.text() if draft.reply is not None else None,
        "stale": stale,
        "waiting_calls": [
            {
                "id": call.id,
                "tool": call.function.name,
                "arguments": call.function.arguments,
                "awaiting_approval": call.id in draft.awaiting_approval,
            }
            for call in waiting_calls(draft)
        ],
    }


def damaged_document(session_id: str, damage: CorruptDocument) -> dict[str, Any]:
    """A draft file that cannot be read, named by its slot when it is a slot's."""
    return {"session": session_id, "slot": getattr(damage, "slot", None), "damaged": str(damage)}
