"""Compression: fold older messages into the `compressed` zone, by summary or truncation.

The originals are not lost: the session is checkpointed before and after, so the
compression is itself a change that can be diffed and rolled back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agctl.errors import Conflict
from agctl.hashing import message_hashes
from agctl.models import Message, Slot, utcnow
from agctl.providers.base import ChatRequest, Provider, TurnContext
from agctl.store import Store
from agctl.view import tool_safe_cut
from agctl.vocab import CompressStrategy

if TYPE_CHECKING:
    from agctl.hooks import Hooks

log = logging.getLogger("agctl.compress")

SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation transcript below for your own later use. Keep facts, "
    "names, numbers, decisions and open questions; drop pleasantries. Be brief."
)


def render_transcript(messages: Sequence[Message]) -> str:
    """Messages as `[role] text` lines, the input of a summary request."""
    lines = []
    for message in messages:
        text = message.text()
        for call in message.tool_calls or ():
            text += f" [calls {call.function.name}({call.function.arguments})]"
        lines.append(f"[{message.role}] {' '.join(text.split())}")
    return "\n".join(lines)


def summarize(
    provider: Provider,
    model: str,
    messages: Sequence[Message],
    *,
    instructions: str | None = None,
    context: TurnContext | None = None,
) -> Message:
    """Ask the provider for a summary of `messages`; return it as a system message."""
    from agctl.reply import ReplyBuilder

    request = ChatRequest(
        model=model,
        messages=[
            {"role": "system", "content": instructions or SUMMARY_INSTRUCTIONS},
            {"role": "user", "content": render_transcript(messages)},
        ],
        context=(context or TurnContext())._replace(purpose="summary"),
    )
    builder = ReplyBuilder()
    for event in provider.stream(request):
        builder.feed(event)
    reply = builder.message(model)
    return Message(
        role="system",
        content=reply.text(),
        created_at=utcnow(),
        model=model,
        usage=reply.usage,
    )


@dataclass
class Plan:
    """Which messages a compression folds: messages[head:start]."""

    head: int
    start: int
    hashes: list[str]


def plan_compression(slot: Slot, keep_recent: int) -> Plan | None:
    """Fold all but the last `keep_recent` messages (and a leading system message).

    The cut never separates tool results from the assistant message that called them.
    """
    messages = slot.messages
    head = 1 if messages and messages[0].role == "system" else 0
    start = max(head, len(messages) - keep_recent)
    start = max(head, tool_safe_cut(messages, start))
    if start <= head:
        return None
    hashes = message_hashes(messages[head:start])
    return Plan(head=head, start=start, hashes=hashes)


@dataclass
class Compression:
    slot: str
    strategy: CompressStrategy
    folded: int
    kept: int
    before: str | None = None
    after: str | None = None
    summary: str | None = None
    # A PreCompress hook said not to.
    cancelled: bool = False


def compress(
    store: Store,
    session_id: str,
    slot_id: str | None,
    *,
    strategy: CompressStrategy = "summarize",
    keep_recent: int = 6,
    provider: Provider | None = None,
    model: str = "offline",
    instructions: str | None = None,
    checkpoint: bool = True,
    hooks: Hooks | None = None,
) -> Compression:
    """Compress a slot's older messages; checkpointed before and after.

    With `hooks`: PreCompress hooks may cancel it or give the summary (no provider call);
    PostCompress hooks may rewrite the summary or keep fewer messages, before anything is
    written. A hook that blocks raises HookBlocked (exit 9)."""
    from agctl.checkpoints import Checkpointer

    slot = store.load_slot(session_id, slot_id)
    slot.check_writable("compress")
    plan = plan_compression(slot, keep_recent)
    if plan is None:
        return Compression(slot=slot.id, strategy=strategy, folded=0, kept=len(slot.messages))
    given: str | None = None
    if hooks:
        hooks.context.update(session=session_id, slot=slot.id)
        changes = hooks.fire("PreCompress", strategy=strategy, keep_recent=keep_recent)
        if changes.get("cancel"):
            log.info("compression of %s/%s cancelled by a PreCompress hook", session_id, slot.id)
            return Compression(
                slot=slot.id, strategy=strategy, folded=0, kept=len(slot.messages), cancelled=True
            )
        given = changes.get("summary")
    summary = None
    if strategy == "summarize":
        if given is not None:
            summary = Message(role="system", content=given, created_at=utcnow())
        else:
            if provider is None:
                raise ValueError("summarize needs a provider")
            folded = [*slot.compressed, *slot.messages[plan.head : plan.start]]
            context = TurnContext(session_id=session_id, slot_id=slot.id)
            summary = summarize(provider, model, folded, instructions=instructions, context=context)
    if hooks and hooks.has("PostCompress"):
        text = summary.text() if summary is not None else None
        changes = hooks.fire(
            "PostCompress", strategy=strategy, keep_recent=keep_recent, summary=text
        )
        if "summary" in changes:
            summary = Message(role="system", content=changes["summary"], created_at=utcnow())
        narrower = changes.get("keep_recent")
        if narrower is not None and narrower < keep_recent:
            plan = plan_compression(slot, narrower) or plan
    checkpointer = Checkpointer(store) if checkpoint else None

    def apply(target: Slot) -> int:
        target.check_writable("compress")
        current = message_hashes(target.messages[plan.head : plan.start])
        if current != plan.hashes:
            raise Conflict(f"slot {target.id!r} changed while it was being compressed; try again")
        target.messages = [*target.messages[: plan.head], *target.messages[plan.start :]]
        if summary is not None:
            target.compressed = [summary]
        return len(target.messages)

    with store.lock(session_id):
        before = (
            checkpointer.create(session_id, label="before compression", auto=True)
            if (checkpointer)
            else None
        )
        kept = store.update_slot(session_id, slot.id, apply, base=slot)
        after = (
            checkpointer.create(session_id, label="after compression", auto=True)
            if (checkpointer)
            else None
        )
    log.info(
        "compressed %s/%s: %d messages folded (%s), %d kept",
        session_id,
        slot.id,
        plan.start - plan.head,
        strategy,
        kept,
    )
    return Compression(
        slot=slot.id,
        strategy=strategy,
        folded=plan.start - plan.head,
        kept=kept,
        before=before.id if before else None,
        after=after.id if after else None,
        summary=summary.text() if summary else None,
    )


def summarize_slot(
    store: Store,
    session_id: str,
    slot_id: str | None,
    provider: Provider,
    *,
    model: str = "offline",
    instructions: str | None = None,
) -> Slot:
    """Summarise a slot's messages into its focused summary_override (shown in focused mode)."""
    slot = store.load_slot(session_id, slot_id)
    slot.check_writable("summarize")
    context = TurnContext(session_id=session_id, slot_id=slot.id)
    summary = summarize(
        provider,
        model,
        [*slot.compressed, *slot.messages],
        instructions=instructions,
        context=context,
    )

    def apply(target: Slot) -> Slot:
        target.check_writable("summarize")
        target.config.focused = target.config.focused.updated({"summary_override": summary.text()})
        return target

    return store.update_slot(session_id, slot.id, apply, base=slot)
