"""Compression: fold older messages into the `compressed` zone, by summary or truncation.

The originals are not lost: the session is checkpointed before and after, so the
compression is itself a change that can be diffed and rolled back.

A compression rewrites the request from the compressed zone on (a truncation: from the
first folded message), so a provider's cache of everything after the immutable zone is
lost once; the system prompt and the immutable zone stay cached. `min_tokens` makes a
compression fold enough to pay for that, and `preview_compression` says what it would
invalidate (see docs/cache.md).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.base.errors import Conflict, PinsOverBudget
from agctl.base.vocab import CompressStrategy
from agctl.context.models import Message, Slot, utcnow
from agctl.context.view import tool_safe_cut
from agctl.providers.base import Provider, TurnContext
from agctl.store import Store
from agctl.turn.summaries import (
    SUMMARY_INSTRUCTIONS,
    check_options,
    render_transcript,
    replacement,
    summarize,
)

if TYPE_CHECKING:
    from agctl.turn.hooks import Hooks
    from agctl.turn.loss import LossReport

log = logging.getLogger("agctl.compress")

__all__ = ["SUMMARY_INSTRUCTIONS", "compress", "render_transcript", "summarize"]


@dataclass
class Plan:
    """Which messages a compression folds: messages[head:start], but for the pinned ones
    there (`pinned`, positions), which stay where they are, verbatim."""

    head: int
    start: int
    pinned: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many messages it folds."""
        return self.start - self.head - len(self.pinned)

    def folded(self, messages: Sequence[Message]) -> list[Message]:
        """The messages it folds: those of the range that are not pinned."""
        pinned = set(self.pinned)
        return [messages[i] for i in range(self.head, self.start) if i not in pinned]

    def kept(self, messages: Sequence[Message]) -> list[Message]:
        """`messages` once folded: the head, the pinned ones of the range, the recent ones."""
        pinned = [messages[i] for i in self.pinned]
        return [*messages[: self.head], *pinned, *messages[self.start :]]


def plan_compression(slot: Slot, keep_recent: int) -> Plan | None:
    """Fold all but the last `keep_recent` messages (and a leading system message), and
    but the pinned ones; None when that leaves nothing to fold.

    The cut never separates tool results from the assistant message that called them,
    nor does a pin: a pinned call keeps its results, a pinned result its call.
    """
    messages = slot.messages
    head = 1 if messages and messages[0].role == "system" else 0
    start = max(head, len(messages) - keep_recent)
    start = max(head, tool_safe_cut(messages, start))
    pinned = pinned_groups(messages, head, start)
    if start - head <= len(pinned):
        return None
    return Plan(head=head, start=start, pinned=pinned)


def pinned_groups(messages: Sequence[Message], head: int, start: int) -> list[int]:
    """The positions in messages[head:start] a compression keeps for their pins: each
    pinned message with its tool-call group (an assistant call and the results after it)."""
    kept: list[int] = []
    at = head
    while at < start:
        end = at + 1
        if messages[at].tool_calls:
            while end < start and messages[end].role == "tool":
                end += 1
        if any(messages[i].pinned for i in range(at, end)):
            kept.extend(range(at, end))
        at = end
    return kept


@dataclass
class Pins:
    """A slot's pinned messages against what its budget gives the messages zone."""

    messages: int
    tokens: int
    limit: int  # the history and tool-results parts of the budget, in tokens

    def to_dict(self) -> dict[str, int]:
        return {"messages": self.messages, "tokens": self.tokens, "limit": self.limit}


def slot_pins(slot: Slot, window: int) -> Pins:
    """The slot's pins, and the budget they count against first, for `window`."""
    from agctl.context.budget import effective_budget

    budget = effective_budget(slot, window)
    pinned = [m for m in slot.messages if m.pinned]
    tokens = sum(m.token_count() for m in pinned)
    return Pins(len(pinned), tokens, budget.history + budget.tool_results)


def check_pins_fit(slot: Slot, window: int) -> None:
    """Pins count against the budget first: when the pinned messages alone are over what
    the slot's budget gives the messages zone in `window`, no compression can fit them,
    and PinsOverBudget (exit 7) says so instead of dropping one."""
    pins = slot_pins(slot, window)
    if pins.tokens > pins.limit:
        raise PinsOverBudget(slot.id, pins.messages, pins.tokens, pins.limit)


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
    # What there was to fold, in tokens, when it was under `min_tokens` (nothing folded).
    too_little: int | None = None
    # The facts folded that the summary does not hold (a truncation: all), when any folded.
    loss: LossReport | None = None


@dataclass
class CompressionPreview:
    """What a compression would do to the next request, and to a provider's cache of it."""

    slot: str
    strategy: CompressStrategy
    folded: int  # messages
    folded_tokens: int
    kept: int  # messages left in the messages zone
    # Tokens of the request before the first byte the compression changes: still cached.
    cached_kept: int
    # Tokens from that byte on (up to the memory, scratch and input): cacheable now,
    # sent anew once after the compression.
    invalidated: int
    min_tokens: int
    # Exact for a truncation; for a summary (not known without the model), every fact at risk.
    loss: LossReport | None = None
    # The kinds of fact the compression may not lose (--fail-on-loss).
    fail_on_loss: tuple[str, ...] = ()

    @property
    def refused(self) -> dict[str, int] | None:
        """The facts lost (or, of a summary, at risk) that --fail-on-loss refuses, by kind."""
        if self.loss is None or not self.loss.breaches(self.fail_on_loss):
            return None
        return self.loss.breaches(self.fail_on_loss).counts()

    @property
    def enough(self) -> bool:
        return self.folded > 0 and self.folded_tokens >= self.min_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "strategy": self.strategy,
            "folded": self.folded,
            "folded_tokens": self.folded_tokens,
            "kept": self.kept,
            "cached_kept_tokens": self.cached_kept,
            "invalidated_tokens": self.invalidated,
            "min_tokens": self.min_tokens,
            "would_compress": self.enough,
            "loss": self.loss.to_dict() if self.loss is not None else None,
            "fail_on_loss": list(self.fail_on_loss),
            "refused": self.refused,
        }


def preview_compression(
    store: Store,
    session_id: str,
    slot_id: str | None,
    *,
    strategy: CompressStrategy = "summarize",
    keep_recent: int = 6,
    min_tokens: int = 0,
    window: int | None = None,
    fail_on_loss: Sequence[str] = (),
) -> CompressionPreview:
    """What `compress` would fold, and what of the next request it would stop a provider's
    cache from serving (nothing is called, nothing written); with `window`, pins it
    could not fit raise PinsOverBudget as `compress` would."""
    from agctl.context.view import mode_messages
    from agctl.turn.loss import preview_loss

    session = store.load_session(session_id)
    slot = store.load_slot(session_id, slot_id)
    if window is not None:
        check_pins_fit(slot, window)
    plan = plan_compression(slot, keep_recent)
    folded = plan.folded(slot.messages) if plan is not None else []
    folded_tokens = sum(m.token_count() for m in folded)
    view = mode_messages(slot)
    prompt = session.system_prompt
    cached = (Message(role="system", content=prompt).token_count() if prompt else 0) + sum(
        m.token_count() for m in slot.immutable
    )
    changed = sum(m.token_count() for m in view)
    if strategy == "truncate":  # the compressed zone, and a leading system message, stay
        cached += sum(m.token_count() for m in slot.compressed)
        if plan is not None and plan.head and view and view[0] is slot.messages[0]:
            cached += view[0].token_count()
            changed -= view[0].token_count()
    else:
        changed += sum(m.token_count() for m in slot.compressed)
    return CompressionPreview(
        slot=slot.id,
        strategy=strategy,
        folded=len(folded),
        folded_tokens=folded_tokens,
        kept=len(slot.messages) - len(folded),
        cached_kept=cached if plan is not None else cached + changed,
        invalidated=changed if plan is not None else 0,
        min_tokens=min_tokens,
        loss=preview_loss(slot, folded, strategy) if plan is not None else None,
        fail_on_loss=tuple(fail_on_loss),
    )


def check_as_read(seen: Slot, now: Slot, doing: str, result: str) -> None:
    """A compression (or a summary) is computed from the slot as it was read (`seen`): its
    summary folds that compressed zone and those messages, its cut is placed on them. On
    the slot as it is now, under the lock, only messages appended since may differ (they
    stay after the kept ones); anything else (another compression, a rollback, an edit,
    the slot deleted and made again) is a Conflict, and `result` is not written."""
    from agctl.store.slots import changed_beyond_appends

    what = None if now is seen else changed_beyond_appends(seen, now)
    if what is not None:
        raise Conflict(
            f"slot {now.id!r} changed while it was being {doing} ({what}): the {result}, "
            "computed from the old state, was not written; try again"
        )


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
    min_tokens: int = 0,
    window: int | None = None,
    budget_tokens: int | None = None,
    fail_on_loss: Collection[str] = (),
) -> Compression:
    """Compress a slot's older messages, but for the pinned ones; checkpointed before and
    after, the loss report with the checkpoint after. Fewer than `min_tokens` to fold is
    not worth the cache it invalidates: nothing is done then. With the model's `window`,
    pins over the slot's budget for them raise PinsOverBudget (exit 7) first
    (check_pins_fit). `budget_tokens` bounds a summary (agctl.turn.summaries
    says each strategy). Losing a fact of a kind in `fail_on_loss` raises FactsWouldBeLost
    (exit 7) before anything is written. The slot is the one named (None: the current one
    when it starts), and the summary goes on it only as it was read (check_as_read).

    With `hooks`: PreCompress hooks may cancel it or give the summary (no provider call);
    PostCompress hooks may rewrite the summary or keep fewer messages, before anything is
    written. A hook that blocks raises HookBlocked (exit 9)."""
    from agctl.store.checkpointer import Checkpointer
    from agctl.turn.loss import compression_loss, refuse_loss

    check_options(strategy, instructions=instructions, budget_tokens=budget_tokens)
    slot = store.load_slot(session_id, slot_id)
    slot.check_writable("compress")
    if window is not None:
        check_pins_fit(slot, window)
    plan = plan_compression(slot, keep_recent)
    if plan is None:
        return Compression(slot=slot.id, strategy=strategy, folded=0, kept=len(slot.messages))
    folding = sum(m.token_count() for m in plan.folded(slot.messages))
    if folding < min_tokens:
        log.info("not compressing %s/%s: %d tokens to fold", session_id, slot.id, folding)
        return Compression(
            slot=slot.id,
            strategy=strategy,
            folded=0,
            kept=len(slot.messages),
            too_little=folding,
        )
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
    if given is not None and strategy != "truncate":
        summary = Message(role="system", content=given, created_at=utcnow())
    elif strategy != "truncate":
        summary = replacement(
            strategy,
            slot.compressed,
            plan.folded(slot.messages),
            provider=provider,
            model=model,
            instructions=instructions,
            template=slot.config.summary_template,
            budget=budget_tokens,
            context=TurnContext(session_id=session_id, slot_id=slot.id),
        )
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
    loss = compression_loss(slot, plan.folded(slot.messages), summary.text() if summary else None)
    refuse_loss(slot.id, loss, fail_on_loss)
    checkpointer = Checkpointer(store) if checkpoint else None

    def apply(target: Slot) -> int:
        target.check_writable("compress")
        check_as_read(slot, target, "compressed", "compression")
        target.messages = plan.kept(target.messages)
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
            checkpointer.create(
                session_id,
                label="after compression",
                auto=True,
                loss={"slot": slot.id, "strategy": strategy, **loss.to_dict()},
            )
            if (checkpointer)
            else None
        )
    log.info(
        "compressed %s/%s: %d messages folded (%s), %d kept",
        session_id,
        slot.id,
        plan.count,
        strategy,
        kept,
    )
    return Compression(
        slot=slot.id,
        strategy=strategy,
        folded=plan.count,
        kept=kept,
        before=before.id if before else None,
        after=after.id if after else None,
        summary=summary.text() if summary else None,
        loss=loss,
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
        check_as_read(slot, target, "summarised", "summary")
        target.config.focused = target.config.focused.updated({"summary_override": summary.text()})
        return target

    return store.update_slot(session_id, slot.id, apply, base=slot)
