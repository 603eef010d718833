"""`agctl serve`'s chat completions: an OpenAI request made an agctl turn on a slot.

Which conversation: the session and slot a request names (by path or header), else the
session a fingerprint of its first messages names, so a client that resends the whole
history lands in the same session every time (made when new, with the request's system
prompt). Which slot: the one named, else the session's current one, or, when the
request's history does not simply go on from that one, whichever of the session's slots
it goes on from furthest (a client back on a branch an earlier regenerated message
made); in a fingerprint's session the slot a request lands on becomes the current one.
A system prompt the request sends is its turn's (else the session's).

What the request's history says, against the slot's messages (compared as the model
sees them: role, text, tool calls):
- none, in a session the request names (the client sends only the new message): the
  slot's own context is used; in a session its fingerprint found, the client started
  again from its first message (a regenerated first reply), which branches as below;
- the same as the slot's: a pure extension, the turn appends to the slot;
- longer, the slot's a prefix of it: the missing messages are appended first;
- different from message k on (an edited or regenerated message): a new slot is derived
  with the slot's first k messages, then the request's from k on, so the old branch is
  kept (`session graph` shows both); the turn goes there.
A compressed slot holds its summary and the messages it kept: those are looked for in
the request's history where they are (the history still holds what was folded), so a
client resending everything goes on from the summary, not from a copy of it all. All of
this is decided and written under the session's lock, in one transaction. A request with
a history that goes on from a slot another request's turn is going on from at that
moment gets a branch there (two continuations, two branches: never one slot holding
both); a request that sends only its new message appends, as `agctl turn send` does.
The last message is the new input (a user message), or the last messages are: tool
results answering the calls of the assistant message before them (the client ran the
tools it offered, agctl.serve.tools), appended to the slot like the messages it lacks,
and the turn goes on from them with no new prompt. Every turn is an agctl turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from agctl.base.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.context.models import Message, Slot
    from agctl.providers.base import Event
    from agctl.serve.flights import Flight
    from agctl.serve.tools import ClientTools
    from agctl.store import Store
    from agctl.turn.send import TurnResult
    from agctl.turn.setup import ModelChoice

# A session a fingerprint names: this prefix and 16 hex digits.
FINGERPRINT_PREFIX = "srv-"
# How many places in a client's history are tried for a compressed slot's kept messages.
ANCHORS = 8


@dataclass(frozen=True)
class Chat:
    """A chat completions request, checked: the messages before the new input (system
    messages first), the input, and the options a turn takes."""

    system: str | None
    history: list[Message]
    prompt: str
    stream: bool
    temperature: float | None
    max_tokens: int | None
    # The trailing tool messages when they are the input (the prompt is then empty).
    results: list[Message] = field(default_factory=list)
    tools: ClientTools | None = None


def parse_chat(body: Any) -> Chat:
    """A request body checked as OpenAI's API would (InvalidInput naming the field)."""
    from pydantic import ValidationError

    from agctl.base.validation import validation_summary
    from agctl.context.models import Message, plain_request_message
    from agctl.serve.tools import parse_tools, sent_back

    if not isinstance(body, dict):
        raise InvalidInput("the request body is not a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("messages: a non-empty array of messages is required")
    parsed = []
    for index, item in enumerate(messages):
        try:
            parsed.append(plain_request_message(item) or Message.from_openai(sent_back(item)))
        except ValidationError as exc:
            raise InvalidInput(f"messages[{index}]: {validation_summary(exc)}") from None
    results = _trailing_results(parsed)
    before = parsed[: len(parsed) - len(results)]
    prompt = ""
    if not results:
        last = before.pop()
        if last.role != "user" or not last.text():
            raise InvalidInput(
                "messages: the last message must be a user message with text, or tool results"
            )
        prompt = last.text()
    leading = 0
    while leading < len(before) and before[leading].role == "system":
        leading += 1
    system = "\n\n".join(m.text() for m in before[:leading]) or None
    return Chat(
        system=system,
        history=before[leading:],
        prompt=prompt,
        stream=_option(body, "stream", "bool") or False,
        temperature=_option(body, "temperature", "number"),
        max_tokens=_option(body, "max_tokens", "int")
        or _option(body, "max_completion_tokens", "int"),
        results=results,
        tools=parse_tools(body),
    )


def _trailing_results(messages: list[Message]) -> list[Message]:
    """The tool messages that end `messages`."""
    start = len(messages)
    while start and messages[start - 1].role == "tool":
        start -= 1
    return messages[start:]


def _option(body: dict[str, Any], name: str, kind: str) -> Any:
    """An optional field of `kind` (bool, int or number), None when absent or null."""
    value = body.get(name)
    if value is None:
        return None
    fits = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
    }[kind]
    if not fits:
        raise InvalidInput(f"{name}: expected a {'boolean' if kind == 'bool' else kind}")
    return value


def fingerprint(chat: Chat) -> str:
    """The session a client resending its whole history lands in: a hash of its system
    prompt and its first message (the new input, when there is no history yet), the same
    from its first request to its last."""
    from agctl.context.models import messages_to_openai

    first = messages_to_openai(chat.history[:1], reasoning=False)
    if not first:
        first = [{"role": "user", "content": chat.prompt}]
    data = orjson.dumps([chat.system, first], option=orjson.OPT_SORT_KEYS)
    return FINGERPRINT_PREFIX + hashlib.sha256(data).hexdigest()[:16]


def divergence(stored: Sequence[Message], given: Sequence[Message]) -> int:
    """How many leading messages the two histories share, as the model sees them (their
    request forms, each side made in one call: 1,000 messages in 1.0 ms, not 1.6)."""
    from agctl.context.models import messages_to_openai

    count = min(len(stored), len(given))
    mine = messages_to_openai(stored[:count], reasoning=False)
    theirs = messages_to_openai(given[:count], reasoning=False)
    return _run(mine, theirs)


def _run(mine: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> int:
    """How many leading request forms the two share."""
    for shared, (ours, others) in enumerate(zip(mine, theirs, strict=False)):
        if not _same(ours, others):
            return shared
    return min(len(mine), len(theirs))


def _same(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether two request forms are the same JSON: equal dicts whose values are all text
    are; otherwise their JSON decides (1, 1.0 and True are equal in Python, not on the wire)."""
    if mine != theirs:
        return False
    if all(type(value) is str for value in mine.values()):
        return True
    return orjson.dumps(mine, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        theirs, option=orjson.OPT_SORT_KEYS
    )


@dataclass
class Placed:
    """Where a request's turn goes: the session, the slot, and whether the slot is new (a
    branch made at `branched_at` messages, the request's history diverging there)."""

    session: str
    slot: str
    branched_from: str | None = None
    branched_at: int | None = None
    appended: int = 0
    # The slot as read here (the one the last turn left, when nobody wrote it since: see
    # agctl.serve.warm) when nothing was written to it here: the turn reuses it rather
    # than parse the slot again (send_turn's `reuse`; 4 ms at 1,000 messages).
    read: Slot | None = None


def place(
    store: Store,
    chat: Chat,
    session: str | None,
    slot: str | None,
    flight: Flight | None = None,
) -> Placed:
    """Find (or make) the session and slot of `chat`, and bring the slot to the request's
    history (see the module): append what it lacks, or branch where they differ. A request
    with a history whose slot another request's turn (`flight`s) is going on from at the
    same moment branches there: two continuations are two branches, never interleaved."""
    from agctl.base.ids import validate_id
    from agctl.serve.flights import running
    from agctl.serve.warm import warm_slots
    from agctl.turn.steps import check_results

    # A session found by its fingerprint is a client's that resends its whole history,
    # from the first message: no history there is the first message again (a regenerated
    # first reply), not a new message for the slot's context.
    whole = session is None
    if session is None:
        session = fingerprint(chat)
        if chat.results and session not in store.session_ids():
            check_results(chat.history, chat.results)  # refused before anything is made
        _open_session(store, session, chat.system)
    else:
        validate_id(session, "session")
        if session not in store.session_ids():
            raise NotFound(f"no session {session!r}")
    # One transaction, the session's lock held from the read to the last write: two
    # requests at once never both append what the slot lacks, nor name a branch alike.
    with store.work(session) as work, work.locked():
        named = slot
        slot = store.resolve_slot(session, slot)
        target = store.load_slot(session, slot, reuse=warm_slots(store).take(session, slot))
        placed = Placed(session, target.id, read=target)
        if not chat.history and not whole:
            # Only the new input: it goes on from the slot (tool results after its calls;
            # the same results again, after a turn that failed, are already there).
            if _ends_with(target.messages, chat.results):
                return placed
            check_results(target.messages, chat.results)
            return _extend(store, placed, chat.results)
        if chat.results:
            check_results(chat.history, chat.results)
        given = [*chat.history, *chat.results]
        match = Match.of(target, given)
        if not match.extends and named is None:
            # Another of the session's slots may be where this history goes on (a branch
            # an earlier regenerated message made): the one that goes furthest.
            match = _best(store, session, match, given)
        if match.slot.id != target.id:
            placed = Placed(session, match.slot.id)
        busy = flight is not None and not running(store).mark(
            session, match.slot.id, flight, alone=True
        )
        if not match.extends or busy:
            placed.branched_from, placed.branched_at = match.slot.id, match.stored
            placed.slot = _branch(store, session, match.slot, match.stored, match.found)
            placed.read = None
            if flight is not None:
                running(store).mark(session, placed.slot, flight)
        if named is None and placed.slot != slot:
            store.use_slot(session, placed.slot)  # where its next request looks first
        return _extend(store, placed, given[match.given :])


def _ends_with(stored: Sequence[Message], results: Sequence[Message]) -> bool:
    """Whether `results` (tool messages) are the last of `stored` already."""
    from agctl.context.models import messages_to_openai

    if not results or len(results) > len(stored):
        return False
    tail = messages_to_openai(stored[-len(results) :], reasoning=False)
    return _run(tail, messages_to_openai(results, reasoning=False)) == len(results)


def _open_session(store: Store, session: str, system: str | None) -> None:
    """Make the session a fingerprint names unless it exists (two first requests at once:
    the second finds the one the first made)."""
    import contextlib

    from agctl.base.errors import AlreadyExists

    if session not in store.session_ids():
        with contextlib.suppress(AlreadyExists):
            store.create_session(session, system_prompt=system, title="agctl serve")


def _extend(store: Store, placed: Placed, missing: Sequence[Message]) -> Placed:
    """`placed`, the messages its slot lacks appended to it."""
    if missing:
        store.update_slot(placed.session, placed.slot, lambda s: s.messages.extend(missing))
        placed.appended = len(missing)
        placed.read = None
    return placed


def _best(store: Store, session: str, match: Match, given: list[Message]) -> Match:
    """The best of `match` and the matches of the session's other slots."""
    best = match
    for other in store.slot_ids(session):
        if other != match.slot.id:
            found = Match.of(store.load_slot(session, other), given)
            if found.rank() > best.rank():
                best = found
    return best


@dataclass
class Match:
    """How a client's history meets a slot: the slot's first `stored` messages are the
    history's up to `given` (what follows in the history, the slot lacks); it `extends`
    the slot when all of the slot's messages are there. A compressed slot holds only the
    messages it kept after its summary: they are looked for in the history where they
    are, not from its first message (`found`: False when none is there)."""

    slot: Slot
    stored: int
    given: int
    found: bool = True

    @property
    def extends(self) -> bool:
        return self.found and self.stored == len(self.slot.messages)

    def rank(self) -> tuple[bool, int]:
        """Better: a pure extension, then the most of the history matched."""
        return (self.extends, self.given if self.found else -1)

    @classmethod
    def of(cls, slot: Slot, given: Sequence[Message]) -> Match:
        from agctl.context.models import messages_to_openai

        # The slot's request forms as its memo keeps them (made once for a warm slot).
        mine = slot.memo("messages").requests()
        theirs = messages_to_openai(list(given), reasoning=False)
        if not slot.compressed:
            shared = _run(mine, theirs)
            return cls(slot, shared, shared)
        # The messages kept: those pinned from before the summary first (in the history,
        # in their order), then the recent run, found where it is in the history; at
        # most ANCHORS places are tried for it, the latest first.
        start = 0
        while start < len(mine) and slot.messages[start].pinned:
            start += 1
        best = cls(slot, 0, 0, found=False)
        if start == len(mine):
            return best
        places = [at for at in range(len(theirs) - 1, -1, -1) if _same(mine[start], theirs[at])]
        for at in places[:ANCHORS]:
            if not _in_order(mine[:start], theirs[:at]):
                continue
            shared = _run(mine[start:], theirs[at:])
            if not best.found or start + shared > best.stored:
                best = cls(slot, start + shared, at + shared)
            if best.extends:
                break
        return best


def _in_order(some: Sequence[dict[str, Any]], within: Sequence[dict[str, Any]]) -> bool:
    """Whether `some` are all in `within`, in their order."""
    rest = iter(within)
    return all(any(_same(one, other) for other in rest) for one in some)


def _branch(store: Store, session: str, target: Slot, shared: int, summarised: bool = True) -> str:
    """A slot derived from `target` holding its first `shared` messages (and its summary
    of earlier ones, unless not `summarised`): its name is the target's without the
    numbers branches add, and the next free number (`default-2`, then `default-3` from
    either), so names never grow."""
    import re

    taken = set(store.slot_ids(session))
    root = re.sub(r"(-[0-9]+)+$", "", target.id) or target.id
    number = 2
    while f"{root}-{number}" in taken:
        number += 1
    name = f"{root}-{number}"
    store.derive_slot(session, name, source=target.id)

    def keep(slot: Slot) -> None:
        del slot.messages[shared:]
        if not summarised:
            slot.compressed.clear()

    store.update_slot(session, name, keep)
    return name


def run_chat(
    store: Store,
    chat: Chat,
    choice: ModelChoice,
    *,
    session: str | None = None,
    slot: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    record: Path | None = None,
) -> tuple[Placed, TurnResult]:
    """Place `chat` and send its turn (the one way a request becomes a turn); `record`
    appends the request and its reply to that cassette."""
    placed = place(store, chat, session, slot)
    return placed, send_chat(store, chat, placed, choice, on_event=on_event, record=record)


def send_chat(
    store: Store,
    chat: Chat,
    placed: Placed,
    choice: ModelChoice,
    *,
    on_event: Callable[[Event], None] | None = None,
    record: Path | None = None,
) -> TurnResult:
    """Send the turn of `chat`, placed (so that the server refuses a request it cannot
    place before it answers), streamed upstream when the client asked for a stream;
    `on_event` hears its events either way."""
    from agctl.serve.warm import warm_slots
    from agctl.turn.send import send_turn
    from agctl.turn.setup import TurnChoice, plan_turn

    offered = chat.tools.turn_fields() if chat.tools is not None else {}
    plan = plan_turn(
        store,
        placed.session,
        TurnChoice(choice, record=record),
        slot=placed.slot,
        stream=chat.stream,
        temperature=chat.temperature,
        max_tokens=chat.max_tokens,
        # The client's system prompt, when it sends one (else the session's).
        system=chat.system,
        **offered,
    )
    result = send_turn(
        store,
        placed.session,
        chat.prompt,
        plan.provider(),
        plan.options,
        on_event=on_event,
        reuse=placed.read,
    )
    if result.slot is not None:
        warm_slots(store).keep(placed.session, result.slot)
    return result


def completion(placed: Placed, result: TurnResult, created: int) -> dict[str, Any]:
    """The chat.completion document of a turn."""
    from agctl.serve.tools import message_document

    usage = result.usage
    return {
        "id": completion_id(placed, result),
        "object": "chat.completion",
        "created": created,
        "model": result.model,
        "choices": [
            {
                "index": 0,
                "message": message_document(result.reply),
                "finish_reason": result.finish_reason or "stop",
            }
        ],
        "usage": usage_document(usage),
    }


def usage_document(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    prompt, done = usage.prompt_tokens, usage.completion_tokens
    shown: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": done,
        "total_tokens": prompt + done,
    }
    if usage.cached_tokens is not None:
        shown["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    return shown


def completion_id(placed: Placed, result: TurnResult) -> str:
    """A completion's id: its session, slot and turn (the checkpoint when there is one)."""
    return f"chatcmpl-{placed.session}.{placed.slot}.{result.checkpoint or result.turn}"


def chunk(
    ident: str, model: str, created: int, delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    """One chat.completion.chunk of a streamed reply."""
    return {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
