"""A turn: build the view, call the provider, commit the reply — all or nothing.

The provider only yields events; assembling the reply, usage, cost, logging and the
atomic commit are done here, once, for every provider.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agctl.budget import Breakdown, breakdown
from agctl.drafts import new_draft
from agctl.errors import (
    AgctlError,
    CommitPending,
    ContextFull,
    SlotChanged,
    TurnInterrupted,
    UsageError,
)
from agctl.fsio import deferred_interrupts
from agctl.hashing import message_hashes
from agctl.messages import scratch_messages
from agctl.models import (
    Message,
    ModelCost,
    Session,
    Slot,
    utcnow,
)
from agctl.pricing import cost_of
from agctl.providers.base import (
    ChatRequest,
    Event,
    Provider,
    TurnContext,
    Usage,
)
from agctl.reply import ReplyBuilder
from agctl.store import Store
from agctl.view import request_messages

log = logging.getLogger("agctl.turn")


@dataclass
class TurnOptions:
    model: str
    slot: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    system: str | None = None
    scratch: Sequence[str] = ()
    stream: bool = False
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    checkpoint: bool = True
    # The model's context window; None sends without checking the budget.
    window: int | None = None
    # The config's auto-compress; a slot's or the session's own setting wins.
    auto_compress: bool = True
    keep_recent: int = 6
    # A failed turn's prompt is kept as a draft; a replay's prompts are in its transcript.
    keep_draft: bool = True

    def __post_init__(self) -> None:
        """The library refuses what the CLI's option types refuse, for scripts too."""
        import math

        if self.temperature is not None and not (
            math.isfinite(self.temperature) and 0 <= self.temperature <= 2
        ):
            raise UsageError(f"temperature must be a number from 0 to 2, not {self.temperature}")
        if self.max_tokens is not None and not 1 <= self.max_tokens <= 2**63 - 1:
            raise UsageError(f"max_tokens must be from 1 to 2**63-1, not {self.max_tokens}")


@dataclass
class PreparedTurn:
    """Everything decided before the provider is called."""

    session: Session
    slot: Slot
    # None when an empty prompt continues a conversation whose last message is a tool
    # result: the view is sent as it is, and no empty user message is written.
    user_message: Message | None
    request: ChatRequest
    view: list[Message]
    # A draft of the slot kept before this moment is superseded when the turn succeeds.
    started: datetime = field(default_factory=utcnow)
    keep_draft: bool = True
    # The checkpoint of the originals, when the slot was compressed to make room.
    compressed_from: str | None = None
    # The view's tokens (Message.token_count summed).
    tokens: int = 0

    @property
    def prompt(self) -> str:
        return self.user_message.text() if self.user_message is not None else ""

    @property
    def new_messages(self) -> list[Message]:
        return [self.user_message] if self.user_message is not None else []


@dataclass
class TurnResult:
    session_id: str
    slot_id: str
    turn: int
    model: str
    reply: Message
    finish_reason: str | None
    usage: Usage | None
    cost: float | None
    latency: float
    checkpoint: str | None = None
    # The slot as committed (for the next turn's `reuse`); not part of the output.
    slot: Slot | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "slot": self.slot_id,
            "turn": self.turn,
            "model": self.model,
            "reply": self.reply.text(),
            "reasoning": self.reply.reasoning,
            "tool_calls": [c.model_dump(mode="json") for c in self.reply.tool_calls or ()],
            "finish_reason": self.finish_reason,
            "usage": None
            if self.usage is None
            else {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
            },
            "cost": self.cost,
            "latency": round(self.latency, 4),
            "checkpoint": self.checkpoint,
        }


def prepare_turn(
    store: Store,
    session_id: str,
    prompt: str,
    options: TurnOptions,
    reuse: Slot | None = None,
) -> PreparedTurn:
    """Build the request for `prompt`; a readonly slot is refused here, before any call.

    `reuse` is the slot a previous turn committed (as `TurnResult.slot`): a loop of turns
    then skips parsing the slot again when no one else changed it.
    """
    session = store.load_session(session_id)
    slot = store.load_slot(session_id, options.slot or session.current_slot, reuse=reuse)
    slot.check_writable("send a turn")
    user_message: Message | None = Message(role="user", content=prompt, created_at=utcnow())
    if not prompt:
        last = slot.messages[-1] if slot.messages else None
        if last is None or last.role != "tool":
            raise UsageError(
                "the prompt is empty: an empty prompt only continues a conversation whose "
                "last message is a tool result"
            )
        user_message = None
    scratch = scratch_messages(options.scratch)
    view = request_messages(
        session, slot, scratch=scratch, user_input=user_message, system_prompt=options.system
    )
    context = TurnContext(
        session_id=session_id,
        slot_id=slot.id,
        turn=session.turn_count + 1,
        prompt_estimate=view.estimate,
    )
    request = ChatRequest(
        model=options.model,
        messages=view.requests,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        stream=options.stream,
        context=context,
    )
    return PreparedTurn(
        session,
        slot,
        user_message,
        request,
        view.messages,
        keep_draft=options.keep_draft,
        tokens=view.tokens,
    )


def send_turn(
    store: Store,
    session_id: str,
    prompt: str,
    provider: Provider,
    options: TurnOptions,
    on_event: Callable[[Event], None] | None = None,
    reuse: Slot | None = None,
) -> TurnResult:
    """Send one turn and commit it; on any failure write nothing and keep a draft."""
    prepared = prepare_turn(store, session_id, prompt, options, reuse)
    fitting = "interrupted while fitting the request in the window"
    with _kept_on_failure(store, session_id, prepared, fitting):
        prepared = _fit_in_window(store, session_id, prompt, provider, options, prepared)
    request = prepared.request
    builder = ReplyBuilder()
    if log.isEnabledFor(logging.INFO):
        log.info(
            "request sent: provider=%s model=%s slot=%s messages=%d ~%d tokens",
            provider.name,
            request.model,
            prepared.slot.id,
            len(request.messages),
            prepared.tokens,
        )
    started = time.perf_counter()
    with _kept_on_failure(store, session_id, prepared):
        for event in provider.stream(request):
            builder.feed(event)
            if on_event is not None:
                on_event(event)
        reply = builder.message(request.model)
    latency = time.perf_counter() - started
    usage = builder.usage
    cost = (
        cost_of(request.model, usage.prompt_tokens, usage.completion_tokens, options.prices)
        if usage
        else None
    )
    writing = "interrupted before the reply was written"
    with _kept_on_failure(store, session_id, prepared, writing, reply):
        checkpoint = _commit(store, session_id, prepared, reply, usage, cost, options.checkpoint)
    log.info(
        "reply committed: slot=%s turn=%d latency=%.3fs tokens=%s",
        prepared.slot.id,
        request.context.turn,
        latency,
        f"{usage.prompt_tokens}+{usage.completion_tokens}" if usage else "unknown",
    )
    return TurnResult(
        session_id=session_id,
        slot_id=prepared.slot.id,
        turn=request.context.turn,
        model=request.model,
        reply=reply,
        finish_reason=builder.finish_reason,
        usage=usage,
        cost=cost,
        latency=latency,
        checkpoint=checkpoint,
        slot=prepared.slot,
    )


def fit_breakdown(prepared: PreparedTurn, options: TurnOptions, window: int) -> Breakdown:
    """The budget breakdown of a prepared turn's request."""
    return breakdown(
        prepared.session,
        prepared.slot,
        model=options.model,
        window=window,
        scratch=scratch_messages(options.scratch),
        user_input=prepared.user_message,
        system_prompt=options.system,
    )


def warn_over_budget(fit: Breakdown, slot: Slot) -> None:
    """A request that fits the window can still overrun a part's budget: say so, and send.

    Only for the parts the slot's budget sets: an auto share (history gets 64 % of the
    window while compression waits for 92 %) would warn on every turn of a long
    conversation; `ctx show` flags those."""
    chosen = slot.config.budget
    for part, (used, budget) in fit.over_budget().items():
        if chosen is None or getattr(chosen, part, None) is None:
            continue
        log.warning(
            "slot %s: %s uses %d tokens, over its budget of %d by %d",
            slot.id,
            part,
            used,
            budget,
            used - budget,
        )


def _fit_in_window(
    store: Store,
    session_id: str,
    prompt: str,
    provider: Provider,
    options: TurnOptions,
    prepared: PreparedTurn,
) -> PreparedTurn:
    """Compress first if the request would not fit; refuse with ContextFull if it still won't."""
    if options.window is None:
        return prepared
    fit = fit_breakdown(prepared, options, options.window)
    if fit.total <= fit.limit:
        warn_over_budget(fit, prepared.slot)
        return prepared
    auto = prepared.slot.config.auto_compress
    if auto is None:
        auto = prepared.session.auto_compress
    if auto is None:
        auto = options.auto_compress
    if auto:
        from agctl.compress import compress

        log.info("request over the window by %d tokens: compressing", fit.total - fit.limit)
        done = compress(
            store,
            session_id,
            prepared.slot.id,
            strategy="summarize",
            keep_recent=options.keep_recent,
            provider=provider,
            model=options.model,
        )
        prepared = prepare_turn(store, session_id, prompt, options)
        if done.folded:
            prepared.compressed_from = done.before
        fit = fit_breakdown(prepared, options, options.window)
        if fit.total <= fit.limit:
            warn_over_budget(fit, prepared.slot)
            return prepared
        if done.folded:
            raise ContextFull(
                fit.total, fit.limit, fit.window, fit.budget.reserve, options.model, done.before
            )
    raise ContextFull(fit.total, fit.limit, fit.window, fit.budget.reserve, options.model)


def _keep_draft(
    store: Store,
    session_id: str,
    prepared: PreparedTurn,
    error: AgctlError,
    reply: Message | None = None,
) -> None:
    """Save the prompt (and the reply, if one came) of a failed turn; if even that fails,
    put the prompt in the error."""
    if not prepared.keep_draft:
        return
    prompt = prepared.prompt
    # A compression done for the turn is a change of its own, checkpointed before and after.
    if isinstance(error, ContextFull) and error.compressed_from:
        outcome = "the turn was not sent"
    elif prepared.compressed_from:
        outcome = (
            "the slot was compressed to make room (the originals are in checkpoint "
            f"{prepared.compressed_from}), but the turn was not written"
        )
    else:
        outcome = "nothing was written"
    try:
        draft = new_draft(store, session_id, prepared.slot, prompt, str(error), reply)
        store.save_draft(session_id, draft)
    except AgctlError as draft_error:
        error.add_note(f"{outcome}, and the draft could not be kept ({draft_error})")
        error.add_note(f"your prompt was:\n{prompt}")
        return
    # Without --slot, --resume-draft takes the current slot's draft: name any other slot.
    elsewhere = "" if draft.slot == prepared.session.current_slot else f" --slot {draft.slot}"
    error.add_note(
        f"{outcome}; your prompt was kept as a draft: "
        f"send it again with 'agctl turn send --resume-draft{elsewhere}'"
    )


def account(session: Session, model: str, usage: Usage | None, cost: float | None) -> None:
    """Count a turn and its cost into the session: unknown stays unknown (a total that
    left out an unpriced request would be wrong)."""
    session.turn_count += 1
    if usage is None:
        return
    session.cost.prompt_tokens += usage.prompt_tokens
    session.cost.completion_tokens += usage.completion_tokens
    per_model = session.cost.by_model.setdefault(model, ModelCost())
    per_model.requests += 1
    per_model.prompt_tokens += usage.prompt_tokens
    per_model.completion_tokens += usage.completion_tokens
    if cost is None or per_model.cost is None:
        per_model.cost = None
    else:
        per_model.cost += cost
    if cost is None or session.cost.cost is None:
        session.cost.cost = None
    else:
        session.cost.cost += cost


@contextmanager
def _kept_on_failure(
    store: Store,
    session_id: str,
    prepared: PreparedTurn,
    interrupted: str = "interrupted",
    reply: Message | None = None,
) -> Iterator[None]:
    """A step of a turn that, if it fails, keeps the prompt as a draft and re-raises (Ctrl-C
    as TurnInterrupted(`interrupted`)); with the `reply` that came, keeps and shows it too,
    so neither is lost. A CommitPending passes untouched: the turn is committed."""
    try:
        yield
    except CommitPending:
        raise
    except (KeyboardInterrupt, AgctlError) as caught:
        error = caught if isinstance(caught, AgctlError) else TurnInterrupted(interrupted)
        _keep_draft(store, session_id, prepared, error, reply)
        if reply is not None:
            error.add_note(f"the model's reply, which was not written:\n{reply.text()}")
        if error is caught:
            raise
        raise error from None


def check_only_appended(seen: Slot, now: Slot) -> None:
    """Refuse to commit onto a slot that changed since the view was built, unless the
    change is only messages appended after what was seen (another turn's, which stays
    allowed and ordered). Raises SlotChanged."""
    if now.config != seen.config:
        raise SlotChanged(now.id, "its settings changed")
    for zone in ("immutable", "compressed"):
        if message_hashes(getattr(now, zone)) != message_hashes(getattr(seen, zone)):
            raise SlotChanged(now.id, f"its {zone} zone changed")
    if len(now.messages) < len(seen.messages):
        raise SlotChanged(now.id, "messages were removed")
    if message_hashes(now.messages[: len(seen.messages)]) != message_hashes(seen.messages):
        raise SlotChanged(now.id, "messages were edited or replaced")


def _commit(
    store: Store,
    session_id: str,
    prepared: PreparedTurn,
    reply: Message,
    usage: Usage | None,
    cost: float | None,
    checkpoint: bool,
) -> str | None:
    """The turn as one unit of work: its messages appended to the slot, the session's
    count and cost, the superseded draft dropped and the checkpoints, together or not
    at all.

    With `checkpoint`, the session is checkpointed after the turn; if it has no
    checkpoint yet, or was edited since its latest one, its state before the turn is
    checkpointed first, so the turn can be undone exactly. Returns the id of the
    checkpoint written after the turn.
    """
    from agctl.checkpoints import Checkpointer, TurnHint

    checkpointer = Checkpointer(store)
    new = [*prepared.new_messages, reply]
    # The lock is taken first, so Ctrl-C while waiting for it stops the turn cleanly; once
    # it is held, an interrupt waits for the commit to finish and is then dropped.
    with store.transaction(session_id) as tx, deferred_interrupts(reraise=False):
        if checkpoint and checkpointer.needs_baseline(session_id):
            turn = prepared.request.context.turn
            read = TurnHint(slot=prepared.slot, base_rev=None, appended=0)  # not read again
            checkpointer.create(session_id, label=f"before turn {turn}", auto=True, hint=read)
        slot = store.load_slot(session_id, prepared.slot.id, reuse=prepared.slot)
        slot.check_writable("send a turn")
        if slot is not prepared.slot:
            check_only_appended(prepared.slot, slot)
        base_rev = slot.rev
        store.append_messages(session_id, slot, new)
        session = tx.load_session(session_id)
        account(session, prepared.request.model, usage, cost)
        session.updated_at = utcnow()
        tx.put_session(session)
        prepared.slot = slot
        try:
            store.clear_draft(session_id, slot.id, before=prepared.started)
        except AgctlError as exc:  # the turn is written: a draft left behind is only stale
            log.warning("turn committed, but the older draft of its slot stays: %s", exc)
        if not checkpoint:
            return None
        try:
            hint = TurnHint(slot=slot, base_rev=base_rev, appended=len(new))
            label = f"after turn {session.turn_count}"
            return checkpointer.create(session_id, label=label, auto=True, hint=hint).id
        except AgctlError as exc:
            log.warning(
                "turn %d was committed, but its checkpoint was not: %s", session.turn_count, exc
            )
            return None
