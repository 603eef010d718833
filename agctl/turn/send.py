"""A turn: build the view, call the provider, commit the reply — all or nothing.

The provider only yields events; assembling the reply, usage, cost, logging and the
atomic commit are done here, once, for every provider.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from agctl.base.errors import (
    AgctlError,
    ApprovalNeeded,
    ApprovalPending,
    CommitPending,
    ContextFull,
    StepLimit,
    TurnInterrupted,
    UsageError,
    interrupt_signal,
)
from agctl.base.fsio import deferred_interrupts
from agctl.context.budget import Breakdown, breakdown, context_window
from agctl.context.cache import cache_key, sent_marks
from agctl.context.messages import scratch_messages
from agctl.context.models import (
    Message,
    ModelCost,
    Session,
    Slot,
    ToolCall,
    messages_to_openai,
    utcnow,
)
from agctl.context.price_sheets import PriceSheets
from agctl.context.pricing import Charge, Prices, add_costs, answers_free, charge
from agctl.context.view import request_messages, wire_parts_of
from agctl.providers.base import (
    ChatRequest,
    Event,
    Provider,
    TurnContext,
    Usage,
    add_usage,
)
from agctl.store import Store
from agctl.store.drafts import Superseding, clear_draft, drop_local_draft, new_draft
from agctl.store.slots import append_turn, update_session
from agctl.turn.reply import ReplyBuilder
from agctl.turn.steps import CallRecord, Step, ToolBox, run_calls, unanswered

if TYPE_CHECKING:
    from agctl.turn.hooks import Hooks

log = logging.getLogger("agctl.turn")


@dataclass
class TurnOptions:
    model: str
    slot: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    # Model options beyond those (`-o KEY VALUE`), sorted by key and checked against the
    # wire (agctl.providers.options.checked_options; ModelSetup.turn_options does it).
    model_options: tuple[tuple[str, Any], ...] = ()
    system: str | None = None
    scratch: Sequence[str] = ()
    stream: bool = False
    prices: Prices = field(default_factory=dict)
    checkpoint: bool = True
    # The label of the checkpoint after the turn (None: "after turn N"); `agctl serve`
    # names it by the Responses API id it gives the turn before it is sent.
    checkpoint_label: str | None = None
    # The model's context window; None sends without checking the budget.
    window: int | None = None
    # The config's auto-compress; a slot's or the session's own setting wins.
    auto_compress: bool = True
    keep_recent: int = 6
    # The kinds of fact an automatic compression may not lose (agctl.turn.loss).
    fail_on_loss: tuple[str, ...] = ()
    # A failed turn's prompt is kept as a draft; a replay's prompts are in its transcript.
    keep_draft: bool = True
    # The tools offered (None: none), which the model may call ("auto", "none",
    # "required" or a tool's name), how many requests may call tools (one more, with
    # tool_choice "none", then asks for the answer), how many calls run at once, and how
    # many calls one reply and the whole turn may ask for (past either, none of that
    # reply's calls runs: StepLimit, exit 10).
    tools: ToolBox | None = None
    tool_choice: str | None = None
    # Tools the caller runs (OpenAI function definitions: an `agctl serve` client's),
    # offered as `tools` are, but nothing here answers their calls: the turn ends at the
    # first reply, committed with the calls it asks for (finish_reason "tool_calls"); the
    # caller appends a tool message per call and sends the next turn with an empty prompt.
    caller_tools: list[dict[str, Any]] | None = None
    # Whether the model may ask for several calls in one reply (None: the wire's default).
    parallel_tool_calls: bool | None = None
    max_steps: int = 8
    tool_jobs: int = 1
    max_calls_per_reply: int = 32
    max_calls_per_turn: int = 128
    # The hooks the turn fires (TurnStart, TurnEnd, TurnError; its tools and an automatic
    # compression fire theirs); None: none.
    hooks: Hooks | None = None
    # Fencing for two writers on one slot: refuse to commit (SlotMoved, exit 4, the reply
    # kept in the draft) if the slot was written at all since the view was built, even
    # by another turn's append, which is allowed by default.
    if_unchanged: bool = False
    # Told of each tool call as it is answered (ran, denied, refused, replayed): what
    # the command shows of the loop while it runs.
    on_call: Callable[[CallRecord], None] | None = None
    # The JSON Schema the reply must follow (agctl.turn.schema): asked of the provider
    # (agctl.providers.structured), then checked; a reply that does not follow it is
    # ReplyInvalid (exit 11), nothing written, the prompt and the reply in the draft.
    schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """The library refuses what the CLI's option types refuse, for scripts too."""
        import math

        if self.temperature is not None and not (
            math.isfinite(self.temperature) and 0 <= self.temperature <= 2
        ):
            raise UsageError(f"temperature must be a number from 0 to 2, not {self.temperature}")
        if self.max_tokens is not None and not 1 <= self.max_tokens <= 2**63 - 1:
            raise UsageError(f"max_tokens must be from 1 to 2**63-1, not {self.max_tokens}")
        if self.max_steps < 1:
            raise UsageError(f"max_steps must be at least 1, not {self.max_steps}")
        for name in ("tool_jobs", "max_calls_per_reply", "max_calls_per_turn"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.tools is not None and self.caller_tools is not None:
            raise UsageError("a turn's tools are run by agctl or by its caller, not both")


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
    # What the provider's cache saved of the cost (agctl.context.pricing.Charge); None when it
    # said nothing of its cache, or the model has no price.
    cache_saved: float | None = None
    # The slot as committed (for the next turn's `reuse`); not part of the output.
    slot: Slot | None = field(default=None, repr=False, compare=False)
    # The turn's requests, with the tool calls run between them (when tools were offered).
    steps: list[Step] = field(default_factory=list)
    tools_offered: bool = False
    # Each hook run of the turn (HookRun.public()), in order.
    hooks: list[dict[str, Any]] = field(default_factory=list)
    # The slot's focused summary was rewritten after the turn (auto_summary_every).
    summarized: bool = False
    # Answered where no one bills (offline, a cassette): the cost is 0, known.
    free: bool = False
    # Asked for a schema's reply: the reply parsed (valid against the schema).
    structured: bool = False
    parsed: Any = None

    def to_dict(self) -> dict[str, Any]:
        data = self._fields()
        if self.structured:
            data["parsed"] = self.parsed
        if self.tools_offered:
            data["steps"] = [step.to_dict() for step in self.steps]
        if self.hooks:
            data["hooks"] = self.hooks
        if self.summarized:
            data["summarized"] = True
        return data

    def _fields(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "slot": self.slot_id,
            "turn": self.turn,
            "model": self.model,
            "reply": self.reply.text(),
            "reasoning": self.reply.reasoning,
            "tool_calls": [c.model_dump(mode="json") for c in self.reply.tool_calls or ()],
            "finish_reason": self.finish_reason,
            # Every count, null where the provider did not report it.
            "usage": None if self.usage is None else self.usage.counts(),
            "cost": self.cost,
            "cache_saved": self.cache_saved,
            "free": self.free,
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
        session,
        slot,
        scratch=scratch,
        user_input=user_message,
        system_prompt=options.system,
        window=options.window or context_window(options.model),
    )
    context = TurnContext(
        session_id=session_id,
        slot_id=slot.id,
        turn=session.turn_count + 1,
        prompt_estimate=view.estimate,
    )
    tools = options.tools.definitions() if options.tools is not None else options.caller_tools
    request = ChatRequest(
        model=options.model,
        messages=view.requests,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        stream=options.stream,
        context=context,
        tools=tools,
        tool_choice=_tool_choice(options.tool_choice) if tools is not None else None,
        parallel_tool_calls=options.parallel_tool_calls if tools is not None else None,
        cache_key=cache_key(session, slot),
        wire_parts=view.wire_parts,
        breakpoints=view.breakpoints,
        response_schema=options.schema,
        options=options.model_options,
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
    resume: Sequence[Message] = (),
) -> TurnResult:
    """Send one turn and commit it; on any failure write nothing and keep a draft.

    Another writer's turn appended to the slot while the provider answered is allowed
    (this turn goes after it); with `options.if_unchanged` the turn is refused instead
    (SlotMoved, exit 4, the reply kept in the draft) when the slot moved at all.

    With tools offered (`options.tools`), the turn is a loop: each reply that asks for
    tools has its calls answered and sent back, until a reply answers (see _Loop). The
    whole loop commits as one turn. `resume` holds the messages of an earlier attempt's
    steps (a draft's): their tool results are used again, not run again.

    With `options.hooks`, TurnStart hooks may block the turn (exit 9, the prompt kept),
    replace its prompt or add scratch text; TurnEnd hooks see it committed, TurnError
    hooks see it fail."""
    hooks = options.hooks
    prepared = prepare_turn(store, session_id, prompt, options, reuse)
    if not hooks:
        return _send(store, session_id, prompt, provider, options, prepared, on_event, resume)
    hooks.context.update(
        session=session_id,
        slot=prepared.slot.id,
        turn=prepared.request.context.turn,
        model=prepared.request.model,
    )
    first_run = len(hooks.runs)  # a replay's turns share one Hooks
    try:
        if hooks.has("TurnStart"):
            with _kept_on_failure(store, session_id, prepared, "interrupted in a hook"):
                changes = hooks.fire("TurnStart", prompt=prompt, scratch=list(options.scratch))
            if changes:
                from dataclasses import replace

                prompt = changes.get("prompt", prompt)
                # Prepared again on the turn's slot, never on one made current meanwhile.
                scratch = [*options.scratch, *changes.get("scratch", [])]
                options = replace(options, slot=prepared.slot.id, scratch=scratch)
                prepared = prepare_turn(store, session_id, prompt, options, reuse)
        result = _send(store, session_id, prompt, provider, options, prepared, on_event, resume)
    except AgctlError as exc:
        hooks.observe("TurnError", error=str(exc))
        raise
    hooks.observe("TurnEnd", reply=result.reply.text(), checkpoint=result.checkpoint)
    result.hooks = [run.public() for run in hooks.runs[first_run:]]
    return result


def _send(
    store: Store,
    session_id: str,
    prompt: str,
    provider: Provider,
    options: TurnOptions,
    prepared: PreparedTurn,
    on_event: Callable[[Event], None] | None,
    resume: Sequence[Message],
) -> TurnResult:
    fitting = "interrupted while fitting the request in the window"
    with _kept_on_failure(store, session_id, prepared, fitting):
        prepared = _fit_in_window(store, session_id, provider, options, prepared)
    loop = _Loop(prepared, options, resume)
    started = time.perf_counter()
    with _kept_on_failure(store, session_id, prepared, loop=loop):
        loop.run(store, session_id, provider, on_event)
        parsed = loop.checked(options.schema)
    latency = time.perf_counter() - started
    usage = loop.usage
    model = prepared.request.model
    free = answers_free(provider.name)
    sheets = PriceSheets.in_data_dir(store.local_dir)
    priced = loop.charge(model, options.prices, sheets, free=free)
    writing = "interrupted before the reply was written"
    with _kept_on_failure(store, session_id, prepared, writing, loop=loop):
        checkpoint = _commit(
            store,
            session_id,
            prepared,
            loop,
            usage,
            priced,
            options.checkpoint,
            label=options.checkpoint_label,
            if_unchanged=options.if_unchanged,
            free=free,
        )
    try:  # a draft the store could not take, superseded now the turn is committed
        by = Superseding(prepared.started, loop.draft_at)
        drop_local_draft(store.backend, session_id, prepared.slot.id, by)
    except AgctlError as exc:
        log.warning("turn committed, but the older draft kept on this machine stays: %s", exc)
    log.info(
        "reply committed: slot=%s turn=%d requests=%d latency=%.3fs tokens=%s",
        prepared.slot.id,
        prepared.request.context.turn,
        len(loop.steps),
        latency,
        usage.text() if usage else "unknown",
    )
    result = TurnResult(
        session_id=session_id,
        slot_id=prepared.slot.id,
        turn=prepared.request.context.turn,
        model=model,
        reply=loop.messages[-1],
        finish_reason=loop.finish_reason,
        usage=usage,
        cost=priced.cost,
        cache_saved=priced.saved,
        latency=latency,
        checkpoint=checkpoint,
        slot=prepared.slot,
        steps=loop.steps,
        tools_offered=prepared.request.tools is not None,
        free=free,
        structured=options.schema is not None,
        parsed=parsed,
    )
    _auto_summary(store, session_id, provider, options, result)
    return result


def _auto_summary(
    store: Store, session_id: str, provider: Provider, options: TurnOptions, result: TurnResult
) -> None:
    """A focused slot with auto_summary_every N has the model rewrite its summary after
    every N turns, checkpointed. The turn is committed already: a failure only warns."""
    slot = result.slot
    every = slot.config.focused.auto_summary_every if slot is not None else None
    if slot is None or slot.config.mode != "focused" or not every or result.turn % every:
        return
    from agctl.turn.compress import summarize_slot

    try:
        result.slot = summarize_slot(store, session_id, slot.id, provider, model=options.model)
        if options.checkpoint:
            from agctl.store.checkpointer import Checkpointer

            label = f"summary after turn {result.turn}"
            Checkpointer(store).create(session_id, label=label, auto=True)
        result.summarized = True
        log.info("slot %s: summary rewritten after turn %d", slot.id, result.turn)
    except AgctlError as exc:
        log.warning(
            "turn %d was committed, but its slot's summary was not rewritten: %s", result.turn, exc
        )


class _Loop:
    """A turn's requests and what they wrote: each reply, and the answers of the tool
    calls it asked for, in order. A reply that asks for tools when some are offered has
    its calls answered and sent back with the next request, up to `max_steps` requests
    that may call tools; then one more goes with tool_choice "none" to get the answer
    (StepLimit, exit 10, if it still asks). A reply asking for more calls than
    `max_calls_per_reply`, or taking the turn past `max_calls_per_turn`, runs none of
    them (StepLimit). Each step's tool results are kept durably in the slot's draft as
    they come, so a turn killed at step 3 goes on from there (`turn send
    --resume-draft`) without running a tool twice; calls left for a person to approve
    stop the turn (ApprovalPending, exit 9) with the others' results in the draft. With
    no toolbox (the caller's tools, or none), the first reply ends the turn, calls and all."""

    def __init__(
        self, prepared: PreparedTurn, options: TurnOptions, resume: Sequence[Message]
    ) -> None:
        self.prepared = prepared
        self.options = options
        self.toolbox = options.tools
        messages = list(resume)
        if messages and messages[-1].role == "assistant" and not messages[-1].tool_calls:
            messages.pop()  # an answer that was not written: asked for again
        self.messages: list[Message] = messages  # written after the prompt
        self.steps: list[Step] = []  # this attempt's requests
        self.usages: list[Usage | None] = []  # each request's, None where it gave none
        self.finish_reason: str | None = None
        # The turn's requests so far, a resumed attempt's earlier ones included.
        self.requests = sum(m.role == "assistant" for m in messages)
        self.draft_at: datetime | None = None  # when this turn's step log was last kept
        # The calls of the last reply waiting for a person's approval (their ids).
        self.awaiting: list[str] = []
        self.last_request: ChatRequest | None = None  # what the provider has cached

    def _request(self, final: bool) -> ChatRequest:
        """The next request: the prepared one, then with the messages so far after it
        (and, as the last one allowed, with tool_choice "none")."""
        base = self.prepared.request
        if not self.messages and not final:
            return base
        context = base.context._replace(step=self.requests + 1, prompt_estimate=None)
        messages = [*base.messages, *messages_to_openai(self.messages, reasoning=False)]
        parts = wire_parts_of(self.messages, len(base.messages))
        return base._replace(
            messages=messages,
            context=context,
            tool_choice="none" if final else base.tool_choice,
            wire_parts={**(base.wire_parts or {}), **parts} if parts else base.wire_parts,
            # The turn so far stays as it is for its next step: a wire that caches at
            # marks reads it from there.
            breakpoints=(*base.breakpoints, len(messages)),
        )

    def run(
        self,
        store: Store,
        session_id: str,
        provider: Provider,
        on_event: Callable[[Event], None] | None,
    ) -> None:
        with self._toolbox_turn():
            self._answer(store, session_id, unanswered(self.messages))
            while True:
                final = self.toolbox is not None and self.requests >= self.options.max_steps
                request = self._request(final)
                reply = self._send(provider, request, on_event)
                calls = reply.tool_calls or []
                if not calls or self.toolbox is None:
                    return
                if final:
                    raise StepLimit(
                        f"the model still asks for tools after {self.requests} requests "
                        f"(--max-steps {self.options.max_steps})",
                        hint="raise --max-steps, or resume the draft, offering the same tools, "
                        "with 'agctl turn send --resume-draft --max-steps N -T ...'",
                    )
                self._answer(store, session_id, calls)

    @contextmanager
    def _toolbox_turn(self) -> Iterator[None]:
        """The toolbox's turn: begun, and ended however the loop ends (what it opened, an
        MCP server's process, closes with it)."""
        if self.toolbox is None:
            yield
            return
        self.toolbox.begin_turn()
        try:
            yield
        finally:
            self.toolbox.end_turn()

    def _send(
        self,
        provider: Provider,
        request: ChatRequest,
        on_event: Callable[[Event], None] | None,
    ) -> Message:
        if log.isEnabledFor(logging.INFO):
            log.info(
                "request sent: provider=%s model=%s slot=%s step=%d messages=%d ~%d tokens",
                provider.name,
                request.model,
                self.prepared.slot.id,
                request.context.step,
                len(request.messages),
                self.prepared.tokens + sum(m.token_count() for m in self.messages),
            )
        builder = ReplyBuilder()
        self.last_request = request
        events = provider.stream(request)
        if request.response_schema is not None:
            from agctl.turn.schema import reply_text

            events = reply_text(events)
        for event in events:
            builder.feed(event)
            if on_event is not None:
                on_event(event)
        reply = builder.message(request.model)
        if reply.usage is not None and answers_free(provider.name):
            # What `usage --since` reads: this reply cost nothing, whatever its model.
            reply.usage["free"] = True
        self.requests += 1
        self.messages.append(reply)
        self.steps.append(Step(self.requests, reply, finish_reason=builder.finish_reason))
        self.finish_reason = builder.finish_reason
        self.usages.append(builder.usage)
        return reply

    def checked(self, schema: dict[str, Any] | None) -> Any:
        """The answer parsed, when the turn asked for a `schema`'s reply (None when not);
        ReplyInvalid (exit 11) when it is not JSON valid against it. A reply that asks for
        its caller's tools is not the answer yet: it is not checked."""
        reply = self.messages[-1] if self.messages else None
        if schema is None or reply is None or reply.tool_calls:
            return None
        from agctl.turn.schema import checked_reply

        return checked_reply(reply.text(), schema)

    @property
    def usage(self) -> Usage | None:
        """The turn's usage: None when a request gave none (its cost is unknown, and so
        the turn's), a count not reported when a request did not report it."""
        if not self.usages or any(usage is None for usage in self.usages):
            return None
        return functools.reduce(add_usage, cast("list[Usage]", self.usages))

    def charge(self, model: str, prices: Prices, sheets: PriceSheets, *, free: bool) -> Charge:
        """The turn's cost and cache saving, each request priced on its own (a request that
        reported its cache reads keeps its discount beside one that did not); genai-prices'
        prices from the data dir's `sheets`."""
        if free:
            reported = self.usage is not None and self.usage.cached_tokens is not None
            return Charge(0.0, 0.0 if reported else None)
        if self.usage is None:
            return Charge(None, None)
        usages = cast("list[Usage]", self.usages)
        charges = [charge(model, usage, prices, sheets) for usage in usages]
        saved = (
            add_costs(c.saved for c in charges) if self.usage.cached_tokens is not None else None
        )
        return Charge(add_costs(c.cost for c in charges), saved)

    def _answer(self, store: Store, session_id: str, calls: Sequence[ToolCall]) -> None:
        """Run the calls (those a resumed turn has no result for), keep their results."""
        if not calls or self.toolbox is None:
            return
        self._check_calls(len(calls))
        pending: list[tuple[ToolCall, ApprovalNeeded]] = []

        def waiting(call: ToolCall, why: ApprovalNeeded) -> None:
            pending.append((call, why))
            self.awaiting.append(call.id)
            if self.options.on_call is not None:
                name, arguments = call.function.name, call.function.arguments
                self.options.on_call(CallRecord(call.id, name, arguments, outcome="waiting"))

        run_calls(self.toolbox, calls, self.options.tool_jobs, self._answered, waiting)
        if pending:
            raise ApprovalPending(
                [(call.id, call.function.name) for call, _ in pending],
                pending[0][1].reason,
                kept=self.prepared.keep_draft,
            )
        self._keep(store, session_id)

    def _answered(self, message: Message, record: CallRecord) -> None:
        self.messages.append(message)
        if self.steps:
            self.steps[-1].calls.append(record)
        log.info(
            "tool %s [%s]: %s%s in %d ms",
            record.name,
            record.id,
            record.outcome,
            f", exit {record.exit}" if record.exit is not None else "",
            record.duration_ms,
        )
        if self.options.on_call is not None:
            self.options.on_call(record)

    def _check_calls(self, waiting: int) -> None:
        """Refuse (StepLimit) the last reply's calls, all of them, when there are more
        than a reply may ask for, or they take the turn past its limit."""
        asked = [len(m.tool_calls or ()) for m in self.messages if m.role == "assistant"]
        per_reply, per_turn = self.options.max_calls_per_reply, self.options.max_calls_per_turn
        if asked[-1] > per_reply:
            over = (
                f"the model asked for {asked[-1]} tool calls in one reply, more than "
                f"--max-calls-per-reply allows ({per_reply})"
            )
            flag, setting = "--max-calls-per-reply", "max_calls_per_reply"
        elif sum(asked) > per_turn:
            over = (
                f"the model asked for {sum(asked)} tool calls in this turn, more than "
                f"--max-calls-per-turn allows ({per_turn})"
            )
            flag, setting = "--max-calls-per-turn", "max_calls_per_turn"
        else:
            return
        raise StepLimit(
            f"{over}; none of its {waiting} calls was run",
            hint=f"to let them run, raise the limit ('agctl config set {setting} N') and "
            f"resume the draft, offering the same tools ('agctl turn send --resume-draft "
            f"{flag} N -T ...')",
        )

    def _keep(self, store: Store, session_id: str) -> None:
        """The step log: the prompt and every message so far, as the slot's draft (on
        disk for good before the next request), for --resume-draft after a crash."""
        if not self.prepared.keep_draft:
            return
        step = self.requests
        error = f"the turn stopped after step {step}; its tool results are kept"
        prepared = self.prepared
        draft = new_draft(store.backend, session_id, prepared.slot, prepared.prompt, error)
        draft.steps = list(self.messages)
        store.save_draft(session_id, draft)
        self.draft_at = draft.created_at


def _tool_choice(choice: str | None) -> str | dict[str, Any] | None:
    """The wire's tool_choice for --tool-choice: a mode, or one tool by name."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


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
        tools=prepared.request.tools,
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
        from dataclasses import replace

        from agctl.turn.compress import compress

        log.info("request over the window by %d tokens: compressing", fit.total - fit.limit)
        done = compress(
            store,
            session_id,
            prepared.slot.id,
            strategy="summarize",
            keep_recent=options.keep_recent,
            provider=provider,
            model=options.model,
            hooks=options.hooks,
            window=options.window,
            fail_on_loss=options.fail_on_loss,
        )
        # Prepared again on the slot compressed, never on one made current meanwhile.
        on_slot = replace(options, slot=prepared.slot.id)
        prepared = prepare_turn(store, session_id, prepared.prompt, on_slot)
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
    error: Exception,
    reply: Message | None = None,
    steps: Sequence[Message] = (),
    awaiting: Sequence[str] = (),
) -> None:
    """Save the prompt (and the reply, if one came, and the steps so far with the calls
    `awaiting` approval) of a failed turn; if even that fails, put the prompt in the
    error."""
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
    tools = sum(m.role == "tool" for m in steps)
    try:
        # An unexpected error's message alone may say little ('Integer exceeds 64-bit range').
        said = str(error) if isinstance(error, AgctlError) else f"{type(error).__name__}: {error}"
        draft = new_draft(store.backend, session_id, prepared.slot, prompt, said, reply)
        draft.steps = list(steps)
        draft.awaiting_approval = list(awaiting)
        kept_at = store.save_draft(session_id, draft)
    except AgctlError as draft_error:
        lost = (
            f"; the {tools} tool result(s) it got are lost with it (sending the prompt "
            "again runs the tools again)"
            if tools
            else ""
        )
        error.add_note(f"{outcome}, and the draft could not be kept ({draft_error}){lost}")
        error.add_note(f"your prompt was:\n{prompt}")
        return
    # Without --slot, --resume-draft takes the current slot's draft: name any other slot.
    elsewhere = "" if draft.slot == prepared.session.current_slot else f" --slot {draft.slot}"
    results = f", with the {tools} tool result(s) it got (not run again)," if tools else ""
    if kept_at is None:
        where, when = "", ""
    else:
        where, when = (
            f" on this machine ({kept_at}: the store could not take it)",
            " once the store answers",
        )
    if awaiting:
        error.add_note(
            f"{outcome}; your prompt and the calls waiting were kept as a draft{where}: go "
            f"on with 'agctl turn send --resume-draft{elsewhere} --approve-call ID|all' (or "
            f"--deny-call ID|all){when}"
        )
        return
    error.add_note(
        f"{outcome}; your prompt was kept as a draft{results}{where}: "
        f"send it again with 'agctl turn send --resume-draft{elsewhere}'{when}"
    )


def account(
    session: Session,
    model: str,
    usage: Usage | None,
    cost: float | None,
    requests: int = 1,
    *,
    free: bool = False,
    cache_saved: float | None = None,
) -> None:
    """Count a turn (of `requests` requests) and its cost into the session: unknown stays
    unknown (a total that left out an unpriced request would be wrong), a count the
    provider did not report stays not reported, and a `free` turn's requests are counted
    as such, so its 0 reads as known."""
    session.turn_count += 1
    if usage is None:
        return
    session.cost.prompt_tokens += usage.prompt_tokens
    session.cost.completion_tokens += usage.completion_tokens
    turn = ModelCost.of(usage, cost, cache_saved, requests, free=free)
    session.cost.by_model.setdefault(model, ModelCost()).merge(turn)
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
    loop: _Loop | None = None,
) -> Iterator[None]:
    """A step of a turn that, if it fails, keeps the prompt as a draft and re-raises (Ctrl-C,
    SIGTERM or SIGHUP as TurnInterrupted(`interrupted`)); with the messages the `loop` got
    (its steps, and the reply that came), keeps and shows them too, so nothing is lost. An
    unexpected error (a bug) keeps them as well, and goes on as it came. A CommitPending
    passes untouched: the turn is committed."""
    try:
        yield
    except CommitPending:
        raise
    except (KeyboardInterrupt, Exception) as caught:
        if isinstance(caught, KeyboardInterrupt):
            error: Exception = TurnInterrupted(interrupted, signum=interrupt_signal(caught))
        else:
            error = caught
        messages = loop.messages if loop is not None else []
        last = messages[-1] if messages else None
        reply = (
            last if last is not None and last.role == "assistant" and not last.tool_calls else None
        )
        awaiting = loop.awaiting if loop is not None else []
        # A second interrupt (Ctrl-C twice, SIGTERM after a SIGHUP) waits for the draft.
        with deferred_interrupts(reraise=False):
            _keep_draft(store, session_id, prepared, error, reply, messages, awaiting)
        if reply is not None:
            error.add_note(f"the model's reply, which was not written:\n{reply.text()}")
        if error is caught:
            raise
        raise error from None


def _commit(
    store: Store,
    session_id: str,
    prepared: PreparedTurn,
    loop: _Loop,
    usage: Usage | None,
    priced: Charge,
    checkpoint: bool,
    *,
    label: str | None = None,
    if_unchanged: bool = False,
    free: bool = False,
) -> str | None:
    """The turn as one unit of work: its messages appended to the slot, the session's
    count and cost, the superseded draft dropped and the checkpoints, together or not
    at all.

    With `checkpoint`, the session is checkpointed after the turn; if it has no
    checkpoint yet, or was edited since its latest one, its state before the turn is
    checkpointed first, so the turn can be undone exactly. Returns the id of the
    checkpoint written after the turn (labelled `label`, or "after turn N"). With
    `if_unchanged`, a slot written since the view was built is refused (see
    check_unchanged) before anything is written.
    """
    from agctl.store.checkpoints.planner import TurnHint, create
    from agctl.store.checkpoints.restore import baseline

    new = [*prepared.new_messages, *loop.messages]
    sent = sent_marks(loop.last_request) if loop.last_request is not None else None
    seen = prepared.slot
    # The lock is taken first, so Ctrl-C while waiting for it stops the turn cleanly; once
    # it is held, an interrupt waits for the commit to finish and is then dropped.
    with store.work(session_id) as work, work.locked(), deferred_interrupts(reraise=False):
        if checkpoint:
            read = TurnHint(slot=seen, base_rev=None, appended=0)  # not read again
            before = f"before turn {prepared.request.context.turn}"
            baseline(work, label=before, hint=read)
        slot, base_rev = append_turn(work, seen, new, sent=sent, if_unchanged=if_unchanged)
        prepared.slot = slot

        def accounted(session: Session) -> Session:
            model, steps = prepared.request.model, len(loop.steps)
            account(session, model, usage, priced.cost, steps, free=free, cache_saved=priced.saved)
            return session

        session = update_session(work, accounted)
        try:
            by = Superseding(prepared.started, loop.draft_at)
            clear_draft(work.backend, session_id, slot.id, by)
        except AgctlError as exc:  # the turn is written: a draft left behind is only stale
            log.warning("turn committed, but the older draft of its slot stays: %s", exc)
        if not checkpoint:
            return None
        try:
            hint = TurnHint(slot=slot, base_rev=base_rev, appended=len(new))
            after = label or f"after turn {session.turn_count}"
            return create(work, label=after, auto=True, hint=hint).id
        except AgctlError as exc:
            log.warning(
                "turn %d was committed, but its checkpoint was not: %s", session.turn_count, exc
            )
            return None
