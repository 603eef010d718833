"""`agctl serve`'s Responses API: `POST /v1/responses` made an agctl turn, and `GET
/v1/responses/ID` the reply a stored response left.

A response id names a session, a slot and a checkpoint: `resp_SESSION~SLOT~NONCE`
(session and slot ids never hold `~`, so it splits one way), the checkpoint the one
written after the turn, labelled with the id. The id is drawn before the turn, not
taken from the checkpoint, because a stream announces it (response.created) before the
reply is written; it is found again by that label, so `ckpt gc`, which renumbers
checkpoints, keeps it.

Which conversation:
- `previous_response_id` names one: when its slot still holds exactly what the response
  left and no other turn of this server is running on it, the turn appends there; when
  the slot has moved on (an older response named), or another turn will append to it
  (two requests at once naming the same response: OpenAI's two branches), a new slot is
  derived holding the slot as that response left it, named as a regenerated chat
  message's branch is (`default-2`), so the old branch is kept and `session graph`
  shows both. A path or header naming another session is refused; a slot named beside
  it is not checked, the response's own slot (or its fork) follows from the id.
- else the session (and slot) a path or header names gets the input after its context;
- else a new session. Not a fingerprint of the input, as chat completions do: a
  Responses client sends only its new input and chains with previous_response_id, so a
  request without one starts a conversation by the API's meaning, and two
  conversations that both open with "hello" must not share a slot.

Two requests naming one response: the fork is decided before the turn, while the
session's lock is held, from the turns this process has in flight on the slot
(agctl.serve.flights; a turn's mark lasts until its flight has landed), so neither
pays for a request sent twice and neither reply is written after one it never saw.
Another writer (`agctl turn send`, a chat completion on the same slot, another server
on the same store) is fenced by the turn's `if_unchanged`: when it wrote the slot while
the model answered, the turn is refused (409, exit 4), its reply kept in the slot's
draft, rather than written after a message it never saw (a retry forks: paid again, but
only then).

The input's messages go after the slot's messages and the last one, a user message, is
the turn's prompt. A turn commits only its prompt and reply, so the input's earlier
messages are written by place() before it; when the turn fails they are taken out
again, if the slot is still as place() left it (a fork made for the turn stays: it
holds the turn's draft). `instructions` are that request's system prompt only (`turn
send --system`), never the session's: a later request without them sends none, as
OpenAI's do not carry over, and a chain whose requests all carry the same instructions
sends the same first bytes every time. Text only: images, files, audio, tools and
function call items are refused with a 400 naming the field. `store: false` runs the
turn on an in-memory copy of the session with the slot (agctl.storage.memory): nothing
is written to the store, and its id, labelling no checkpoint, is unknown to a later
request (404).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agctl.base.errors import AgctlError, InvalidInput, NotFound
from agctl.base.ids import BASE32_ALPHABET
from agctl.serve.chat import Placed, _option
from agctl.serve.flights import running

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.context.models import Message, Slot
    from agctl.providers.base import Event, Usage
    from agctl.serve.flights import Flight
    from agctl.store import Store
    from agctl.turn.send import TurnResult
    from agctl.turn.setup import ModelChoice

RESPONSE_PREFIX = "resp_"
SEPARATOR = "~"
NONCE_LENGTH = 16
# The input parts that are text, and the roles a message of the input may have.
TEXT_PARTS = frozenset({"input_text", "output_text"})
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
# Request fields whose features agctl serve does not have: refused, not ignored.
REFUSED = {
    "tools": "tools are not served on /v1/responses (chat completions has them)",
    "conversation": "conversations are not served; chain with previous_response_id",
    "background": "background responses are not served",
    "prompt": "prompt templates are not served",
}


@dataclass(frozen=True)
class ResponseId:
    """A response's id: the session and slot of its turn, and the nonce that labels the
    checkpoint written after it."""

    session: str
    slot: str
    nonce: str

    def __str__(self) -> str:
        return RESPONSE_PREFIX + SEPARATOR.join((self.session, self.slot, self.nonce))

    @classmethod
    def parse(cls, text: object, field: str = "previous_response_id") -> ResponseId:
        """The id `text` spells (InvalidInput, naming `field`, when it spells none)."""
        from agctl.base.errors import InvalidId
        from agctl.base.ids import validate_id

        parts = (
            text.removeprefix(RESPONSE_PREFIX).split(SEPARATOR)
            if isinstance(text, str) and text.startswith(RESPONSE_PREFIX)
            else []
        )
        try:
            session, slot, nonce = parts
            validate_id(session, "session")
            validate_id(slot, "slot")
        except (ValueError, InvalidId):
            shape = f"{RESPONSE_PREFIX}SESSION{SEPARATOR}SLOT{SEPARATOR}NONCE"
            raise InvalidInput(f"{field}: {text!r} is not a response id ({shape})") from None
        if len(nonce) != NONCE_LENGTH or not set(nonce) <= set(BASE32_ALPHABET):
            raise InvalidInput(f"{field}: {text!r} is not a response id (its nonce)")
        return cls(session, slot, nonce)

    @classmethod
    def drawn(cls, session: str, slot: str) -> ResponseId:
        nonce = "".join(secrets.choice(BASE32_ALPHABET) for _ in range(NONCE_LENGTH))
        return cls(session, slot, nonce)


@dataclass(frozen=True)
class Ask:
    """A Responses API request, checked: the input's messages before the new one, the new
    one (the prompt), and the options a turn takes."""

    messages: list[Message]
    prompt: str
    instructions: str | None
    previous: ResponseId | None
    store: bool
    stream: bool
    temperature: float | None
    max_output_tokens: int | None


def parse_response(body: Any) -> Ask:
    """A request body checked as OpenAI's API would (InvalidInput naming the field)."""
    if not isinstance(body, dict):
        raise InvalidInput("the request body is not a JSON object")
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False, [], {}):
            raise InvalidInput(f"{name}: {why}")
    text = body.get("text")
    shape = text.get("format") if isinstance(text, dict) else None
    if isinstance(shape, dict) and shape.get("type") not in (None, "text"):
        raise InvalidInput(f"text.format: {shape.get('type')!r} is not served, only 'text'")
    given = body.get("input")
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise InvalidInput("input: a string or a non-empty array of input items is required")
    messages = [_input_message(item, f"input[{index}]") for index, item in enumerate(given)]
    *before, last = messages
    if last.role != "user" or not last.text():
        raise InvalidInput("input: the last item must be a user message with text")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput("instructions: expected a string")
    previous = body.get("previous_response_id")
    return Ask(
        messages=before,
        prompt=last.text(),
        instructions=instructions or None,
        previous=None if previous is None else ResponseId.parse(previous),
        store=_option(body, "store", "bool") is not False,
        stream=_option(body, "stream", "bool") or False,
        temperature=_option(body, "temperature", "number"),
        max_output_tokens=_option(body, "max_output_tokens", "int"),
    )


def _input_message(item: Any, where: str) -> Message:
    """One input item, a message with text content, as agctl keeps it."""
    from agctl.context.models import Message

    if not isinstance(item, dict):
        raise InvalidInput(f"{where}: an input item is a JSON object")
    kind = item.get("type", "message")
    if kind != "message":
        raise InvalidInput(f"{where}: {kind!r} items are not served, only messages")
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise InvalidInput(f"{where}.role: expected one of {', '.join(ROLES)}")
    content = item.get("content")
    if isinstance(content, str):
        return Message(role=role, content=content)
    if not isinstance(content, list):
        raise InvalidInput(f"{where}.content: expected a string or an array of parts")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise InvalidInput(
                f"{where}.content[{index}]: {kind!r} parts are not served, only text "
                "(input_text, output_text)"
            )
        texts.append(part["text"])
    return Message(role=role, content="".join(texts))


@dataclass
class Placement:
    """Where a response's turn goes: the store it is written to (an in-memory copy for
    `store: false`), the session and slot there, the id drawn for it, and the slot's
    revision once place() wrote the input's earlier messages (None: it wrote none)."""

    store: Store
    placed: Placed
    id: ResponseId
    written: int | None = None

    def withdraw(self, failed: Exception) -> None:
        """Take the input's earlier messages out of the slot again (its turn `failed`), if
        the slot is still as place() left them: nobody wrote it since."""
        placed, count = self.placed, self.placed.appended
        if self.written is None or not count:
            return

        def take_back(slot: Slot) -> None:
            del slot.messages[-count:]

        try:
            with self.store.work(placed.session) as work, work.locked() as tx:
                if tx.slot_rev(placed.session, placed.slot) != self.written:
                    failed.add_note(
                        f"the input's {count} earlier messages stay in slot {placed.slot!r}: "
                        "it was written since they were"
                    )
                    return
                self.store.update_slot(placed.session, placed.slot, take_back)
        except AgctlError as exc:
            failed.add_note(
                f"the input's {count} earlier messages stay in slot {placed.slot!r}: {exc}"
            )
            return
        placed.appended = 0


def place(
    store: Store,
    ask: Ask,
    session: str | None,
    slot: str | None,
    flight: Flight | None = None,
) -> Placement:
    """Find (or make) the session and slot of `ask` (see the module), the input's earlier
    messages appended; with `store: false` all of it on an in-memory copy. The turn's
    `flight` is marked on its slot, so a request naming the same response while it runs
    forks rather than append to a slot this turn will write."""
    from agctl.base.ids import validate_id

    if ask.previous is not None:
        if session is not None and session != ask.previous.session:
            raise InvalidInput(
                f"previous_response_id: {ask.previous} is of session "
                f"{ask.previous.session!r}, but the request names session {session!r}"
            )
        session, slot = ask.previous.session, ask.previous.slot
        if session not in store.session_ids():
            raise _unknown(ask.previous)
    elif session is not None:
        validate_id(session, "session")
        if session not in store.session_ids():
            raise NotFound(f"no session {session!r}")
    if not ask.store:
        return _unstored(store, ask, session, slot)
    if session is None:
        session = store.create_session(title="agctl serve").id
    with store.work(session) as work, work.locked() as tx:
        placed = _follow(store, ask, session, slot, flight)
        _append(store, placed, ask.messages)
        written = tx.slot_rev(session, placed.slot) if placed.appended else None
    return Placement(store, placed, ResponseId.drawn(placed.session, placed.slot), written)


def _follow(
    store: Store, ask: Ask, session: str, slot: str | None, flight: Flight | None
) -> Placed:
    """The slot the turn goes to: the one named, or for a previous response its slot
    when it is as the response left it and no other turn runs on it, else a slot
    derived holding that (the turn's `flight` marked on the slot it goes to)."""
    from agctl.serve.chat import _branch

    def marked(placed: Placed) -> Placed:
        if flight is not None:
            running(store).mark(placed.session, placed.slot, flight)
        return placed

    if ask.previous is None:
        return marked(Placed(session, store.load_slot(session, slot).id))
    left = _left(store, ask.previous)
    if ask.previous.slot not in store.slot_ids(session):
        raise NotFound(f"{ask.previous}: slot {ask.previous.slot!r} was deleted since")
    live = store.load_slot(session, ask.previous.slot)
    zones = live.compressed == left.compressed and live.immutable == left.immutable
    head = zones and live.messages == left.messages
    if head and (flight is None or running(store).mark(session, live.id, flight, alone=True)):
        return Placed(session, live.id)
    shared = 0
    while zones and shared < min(len(live.messages), len(left.messages)):
        if live.messages[shared] != left.messages[shared]:
            break
        shared += 1
    branch = _branch(store, session, live, shared)
    if not zones or shared < len(left.messages):

        def restore(derived: Slot) -> None:
            derived.compressed = list(left.compressed)
            derived.messages = list(left.messages)

        store.update_slot(session, branch, restore)
    return marked(Placed(session, branch, branched_from=live.id, branched_at=shared))


def _left(store: Store, response: ResponseId) -> Slot:
    """The slot as the stored response `response` left it."""
    from agctl.store.checkpointer import Checkpointer

    checkpoints = Checkpointer(store)
    label = str(response)
    if response.session in store.session_ids():
        for summary in checkpoints.summaries(response.session):  # newest first
            if summary.label == label:
                found = checkpoints.load(response.session, summary.id)
                left = checkpoints.state(response.session, found).slots.get(response.slot)
                if left is not None:
                    return left
    raise _unknown(response)


def _unknown(response: ResponseId) -> NotFound:
    return NotFound(f"no response {str(response)!r} (a response with store: false is not kept)")


def _append(store: Store, placed: Placed, messages: list[Message]) -> None:
    if messages:
        store.update_slot(placed.session, placed.slot, lambda s: s.messages.extend(messages))
        placed.appended = len(messages)


def _unstored(store: Store, ask: Ask, session: str | None, slot: str | None) -> Placement:
    """The placement of a `store: false` request: a memory store holding the session with
    only the slot the turn reads (as the previous response left it, when one is named)."""
    from agctl.storage.memory import MemoryBackend
    from agctl.store import Store

    scratch = Store(backend=MemoryBackend())
    if session is None:
        made = scratch.create_session(title="agctl serve")
        placed = Placed(made.id, made.current_slot)
    else:
        with store.work(session):
            if ask.previous is not None:
                read = _left(store, ask.previous)
            else:
                read = store.load_slot(session, slot)
            copied = store.load_session(session)
        copied = copied.model_copy(update={"current_slot": read.id, "parent_id": None})
        scratch.materialize_session(copied, [read])
        placed = Placed(session, read.id)
    _append(scratch, placed, ask.messages)
    return Placement(scratch, placed, ResponseId.drawn(placed.session, placed.slot))


def answer(
    placement: Placement,
    ask: Ask,
    choice: ModelChoice,
    on_event: Callable[[Event], None] | None = None,
    record: Path | None = None,
) -> TurnResult:
    """Send the placed turn; a stored one is checkpointed, the checkpoint labelled with
    the response's id (the one way a response id finds its state again). One that
    follows a previous response is refused (SlotMoved) if anything else wrote its slot
    meanwhile; a failed one takes the input's earlier messages out again."""
    from agctl.turn.send import send_turn
    from agctl.turn.setup import TurnChoice, plan_turn

    store, placed = placement.store, placement.placed
    try:
        plan = plan_turn(
            store,
            placed.session,
            TurnChoice(choice, record=record),
            slot=placed.slot,
            stream=ask.stream,
            temperature=ask.temperature,
            max_tokens=ask.max_output_tokens,
            system=ask.instructions,
            checkpoint=ask.store,
            checkpoint_label=str(placement.id) if ask.store else None,
            if_unchanged=ask.previous is not None,
        )
        return send_turn(
            store, placed.session, ask.prompt, plan.provider(), plan.options, on_event=on_event
        )
    except Exception as failed:
        placement.withdraw(failed)
        raise


# ---- documents -------------------------------------------------------------------------


def document(
    response: ResponseId,
    ask: Ask | None,
    created: float,
    *,
    model: str,
    text: str | None,
    usage: Usage | None,
    status: str = "completed",
) -> dict[str, Any]:
    """The response document: `text` None while it is being written (no output yet)."""
    output = [] if text is None else [output_message(response, text, status)]
    return {
        "id": str(response),
        "object": "response",
        "created_at": created,
        "completed_at": time.time() if status == "completed" else None,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": ask.instructions if ask is not None else None,
        "max_output_tokens": ask.max_output_tokens if ask is not None else None,
        "metadata": {},
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "previous_response_id": str(ask.previous) if ask and ask.previous else None,
        "store": ask.store if ask is not None else True,
        "temperature": ask.temperature if ask is not None else None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "none",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage_document(usage),
    }


def output_message(response: ResponseId, text: str, status: str) -> dict[str, Any]:
    """The one output item: the assistant's message, its text a single part."""
    return {
        "type": "message",
        "id": f"msg_{str(response).removeprefix(RESPONSE_PREFIX)}",
        "role": "assistant",
        "status": status,
        "content": [text_part(text)],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def usage_document(usage: Usage | None) -> dict[str, Any] | None:
    """The Responses API's usage; a detail the provider did not report is 0 there (the
    API's shape has no unknown), as it is left out of chat completions."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens or 0,
            "cache_write_tokens": usage.cache_write_tokens or 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def stored(store: Store, text: str) -> dict[str, Any]:
    """The document of the stored response `text` names: the reply its checkpoint holds
    (what the request asked is not kept: its options are shown unset)."""
    from agctl.providers.base import Usage

    response = ResponseId.parse(text, "response id")
    left = _left(store, response)
    reply = next((m for m in reversed(left.messages) if m.role == "assistant"), None)
    if reply is None:
        raise NotFound(f"no response {text!r}")
    created = reply.created_at.timestamp() if reply.created_at is not None else 0
    counted = Usage.from_counts(reply.usage or {})
    return document(
        response, None, created, model=reply.model or "", text=reply.text(), usage=counted
    )


class Events:
    """The server-sent events of a streamed response, numbered in order: created, the
    output item and its text part added, the text's deltas, then all of it done and the
    response completed (or failed)."""

    def __init__(self, response: ResponseId, ask: Ask, created: float, model: str) -> None:
        self.response = response
        self.ask = ask
        self.created = created
        self.model = model
        # No part yet: response.content_part.added adds the one the deltas go to.
        self.item = {**output_message(response, "", "in_progress"), "content": []}
        self.number = 0

    def _event(self, kind: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        event = {"type": kind, "sequence_number": self.number, **fields}
        self.number += 1
        return kind, event

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.item["id"], "output_index": 0, "content_index": 0}

    def _document(self, status: str, text: str | None = None, **more: Any) -> dict[str, Any]:
        given = {"model": self.model, "usage": None, **more}
        return document(self.response, self.ask, self.created, text=text, status=status, **given)

    def started(self) -> list[tuple[str, dict[str, Any]]]:
        begun = self._document("in_progress")
        return [
            self._event("response.created", response=begun),
            self._event("response.in_progress", response=begun),
            self._event("response.output_item.added", output_index=0, item=self.item),
            self._event("response.content_part.added", **self._at(), part=text_part("")),
        ]

    def delta(self, piece: str) -> tuple[str, dict[str, Any]]:
        return self._event("response.output_text.delta", **self._at(), delta=piece, logprobs=[])

    def completed(self, result: TurnResult) -> list[tuple[str, dict[str, Any]]]:
        text = result.reply.text()
        done = self._document("completed", text, model=result.model, usage=result.usage)
        done["agctl"] = {
            "session": result.session_id,
            "slot": result.slot_id,
            "checkpoint": result.checkpoint,
        }
        return [
            self._event("response.output_text.done", **self._at(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._at(), part=text_part(text)),
            self._event("response.output_item.done", output_index=0, item=done["output"][0]),
            self._event("response.completed", response=done),
        ]

    def failed(self, message: str, code: int) -> list[tuple[str, dict[str, Any]]]:
        """An error event (with agctl's exit code), then the response failed."""
        gone = self._document("failed")
        gone["error"] = {"code": "server_error", "message": message}
        return [
            self._event("error", code=str(code), message=message, param=None),
            self._event("response.failed", response=gone),
        ]
