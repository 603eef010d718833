"""Merging a branch back: what a slot added since it was derived, into another slot."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agctl.base.errors import Conflict, UsageError
from agctl.base.hashing import message_hashes
from agctl.base.vocab import MergeStrategy
from agctl.context.models import MergeRecord, Message, Slot
from agctl.providers.base import Provider, TurnContext
from agctl.store import Store

log = logging.getLogger("agctl.merge")


def added_since_branch(
    source: Slot, target: Slot, shared: list[Message] | None = None
) -> list[Message]:
    """What `source` added since it branched: its messages that it was not derived with,
    that are not in `target`, and not in `shared` (the slot it was derived from).

    Matching by content keeps this right when either side was compressed, truncated or
    edited since: what the branch was given never counts as added, even if the target
    has since dropped it.
    """
    known = (
        set(source.meta.branch)
        | set(message_hashes(target.messages))
        | set(message_hashes(shared or []))
    )
    hashes = message_hashes(source.messages)
    return [m for m, h in zip(source.messages, hashes, strict=True) if h not in known]


@dataclass
class MergeResult:
    source: str
    target: str
    strategy: MergeStrategy
    merged: int
    appended: int
    skipped: int


def merge_slots(
    store: Store,
    session_id: str,
    source_id: str,
    target_id: str | None = None,
    *,
    strategy: MergeStrategy = "append",
    provider: Provider | None = None,
    model: str = "offline",
) -> MergeResult:
    """Bring what SOURCE added into TARGET (default: the slot SOURCE was derived from).

    Messages merged before (by content) are not merged again; the merge is recorded in
    TARGET's meta.
    """
    from agctl.turn.compress import check_as_read, summarize

    source = store.load_slot(session_id, source_id)
    target_id = target_id or source.meta.parent_id
    if target_id is None:
        raise UsageError(
            f"slot {source.id!r} was not derived from another", hint="give --into SLOT"
        )
    if target_id == source.id:
        raise UsageError("a slot cannot be merged into itself")
    target = store.load_slot(session_id, target_id)
    target.check_writable("merge")
    shared: list[Message] = []
    parent = source.meta.parent_id
    if parent is not None and parent != target.id and parent in store.slot_ids(session_id):
        shared = store.load_slot(session_id, parent).messages
    done = {h for record in target.meta.merges if record.source == source.id for h in record.hashes}
    source_hashes = message_hashes(source.messages)
    already = sum(1 for h in source_hashes if h in done)
    added = added_since_branch(source, target, shared)
    hashes = message_hashes(added)
    fresh = [(h, m) for h, m in zip(hashes, added, strict=True) if h not in done]
    if not fresh:
        return MergeResult(source.id, target.id, strategy, 0, 0, already)
    incoming = [m for _, m in fresh]
    if strategy == "summary":
        if provider is None:
            raise ValueError("a summary merge needs a provider")
        summary = summarize(
            provider,
            model,
            incoming,
            instructions=(
                f"Summarise what was worked out in the branch {source.id!r} below, so that it "
                "can be carried back into the main conversation. Be brief."
            ),
            context=TurnContext(session_id=session_id, slot_id=target.id),
        )
        summary.content = f"From branch {source.id}: {summary.text()}"
        appended = [summary]
    else:
        appended = [m.model_copy() for m in incoming]

    def apply(slot: Slot) -> None:
        slot.check_writable("merge")
        check_as_read(target, slot, "merged into", "merge")
        merged = {h for r in slot.meta.merges if r.source == source.id for h in r.hashes}
        if merged & {h for h, _ in fresh}:
            raise Conflict(
                f"slot {slot.id!r} received a merge from {source.id!r} meanwhile; try again"
            )
        slot.messages.extend(appended)
        slot.meta.merges.append(
            MergeRecord(
                source=source.id,
                strategy=strategy,
                hashes=[h for h, _ in fresh],
                added=len(appended),
            )
        )

    store.update_slot(session_id, target.id, apply, base=target)
    log.info("merged %d messages of %s into %s (%s)", len(fresh), source.id, target.id, strategy)
    return MergeResult(source.id, target.id, strategy, len(fresh), len(appended), already)
