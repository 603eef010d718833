"""The embedded default: a deterministic provider that needs no network and no key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agctl.base.errors import InvalidInput, ProviderError
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text
from agctl.providers import base


@dataclass
class ScriptedReply:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, str]] = field(default_factory=list)


# A script's entry for one turn: its reply, or the replies of its steps (a tool loop).
ScriptedTurn = ScriptedReply | list[ScriptedReply]


def load_script(path: Path) -> list[ScriptedTurn]:
    """Canned replies, one a turn: JSON (array or lines) of strings or {content,
    reasoning, tool_calls}, or of arrays of them (the replies of one turn's steps)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the script: {exc.strerror}") from None
    try:
        items: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            items = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(
                f"{path}: the script is neither JSON nor JSON lines: {exc}"
            ) from None
    if not isinstance(items, list):
        raise InvalidInput(f"{path}: the script must be a list of replies")
    turns: list[ScriptedTurn] = []
    for number, item in enumerate(items):
        if isinstance(item, list):
            if not item:
                raise InvalidInput(f"{path}: reply {number}: a turn's steps cannot be empty")
            turns.append(
                [
                    _scripted(step, f"{path}: reply {number}, step {n}", f"{number}_{n}")
                    for n, step in enumerate(item, 1)
                ]
            )
        else:
            turns.append(_scripted(item, f"{path}: reply {number}", number))
    return turns


def _scripted(item: Any, where: str, number: int | str) -> ScriptedReply:
    if isinstance(item, str):
        return ScriptedReply(content=item)
    if not (isinstance(item, dict) and ("content" in item or "tool_calls" in item)):
        raise InvalidInput(f"{where} must be a string or an object")
    for name in ("content", "reasoning"):
        if item.get(name) is not None and not isinstance(item[name], str):
            raise InvalidInput(f"{where}: {name} must be a string")
    calls = item.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidInput(f"{where}: tool_calls must be a list")
    if not all(isinstance(c, dict) and "name" in c for c in calls):
        raise InvalidInput(f"{where}: each tool call needs a name")
    return ScriptedReply(
        content=item.get("content"),
        reasoning=item.get("reasoning"),
        tool_calls=[
            {
                "id": str(c.get("id", f"call_{number}_{i}")),
                "name": str(c["name"]),
                "arguments": _arguments(c.get("arguments", "{}")),
            }
            for i, c in enumerate(calls)
        ],
    )


def _arguments(value: Any) -> str:
    """A call's arguments as the wire carries them: a JSON text (an object given in the
    script is written as one)."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _words(text: str) -> Iterator[str]:
    """Split text into stream-sized pieces that join back to exactly `text`."""
    yield from (m.group(0) for m in re.finditer(r"\S+\s*|\s+", text))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _shorten(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def offline_summary(text: str, budget: int | None = None) -> str:
    """The extractive summary of a summary request's text (a transcript, or a rolling
    summary request's previous summary and new messages), in the `budget` tokens it was
    asked for if any: deterministic, no model."""
    from agctl.context.extractive import extract, transcript_entries

    return extract(transcript_entries(text), budget)


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each message of a request."""
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            texts.append(content)
    return texts


def offline_answer(messages: list[dict[str, Any]]) -> str:
    """An evaluation probe's answer read from the request alone: the sentence of the
    context before the question (the last message's first line) that shares most words
    with it (agctl.context.extractive.answer)."""
    from agctl.context.extractive import answer

    *context, question = _texts(messages) or [""]
    return answer(question.split("\n", 1)[0], context)


def offline_judgement(messages: list[dict[str, Any]]) -> str:
    """An evaluation judge's grade without a model: YES when the answer holds the
    expected text (case and spacing aside), read from the judge request's lines."""
    fields = dict(
        line.split(": ", 1)
        for line in _last_user_text(messages).splitlines()
        if line.startswith(("Expected: ", "Answer: "))
    )

    def flat(text: str) -> str:
        return " ".join(text.split()).casefold()

    expected, said = flat(fields.get("Expected", "")), flat(fields.get("Answer", ""))
    return "YES" if expected and expected in said else "NO"


class OfflineProvider:
    """Replies that name the slot, the turn and the last user message (a turn asking for a
    schema's reply: a small instance of the schema); or a script's replies.

    A script is read from its first entry by each provider made for it, so by each
    command (`turn send --script`, `turn replay --script`): the first turn the command
    sends gets entry 1, the next turn entry 2, whatever turns the session had before.
    A turn's tool-loop steps take the steps of its entry, by their number in the turn."""

    name = "offline"

    def __init__(self, script: list[ScriptedTurn] | None = None) -> None:
        self.script = script
        # The turns this provider has answered: (session, slot, turn) of the last one,
        # and how many, so that a turn's later steps keep its entry.
        self._last_turn: tuple[str, str, int] | None = None
        self._turns = 0

    def _scripted_turn(self, context: base.TurnContext) -> int:
        """The number of the script entry for this request: the next one for a new turn."""
        key = (context.session_id, context.slot_id, context.turn)
        if key != self._last_turn:
            self._last_turn = key
            self._turns += 1
        return self._turns

    def _reply(self, request: base.ChatRequest) -> ScriptedReply:
        context = request.context
        if context.purpose == "summary":
            text = _last_user_text(request.messages)
            return ScriptedReply(content=offline_summary(text, context.budget))
        if context.purpose == "probe":
            return ScriptedReply(content=offline_answer(request.messages))
        if context.purpose == "judge":
            return ScriptedReply(content=offline_judgement(request.messages))
        if self.script is not None:
            number = self._scripted_turn(context)
            if number > len(self.script):
                raise ProviderError(
                    f"the offline script has {len(self.script)} replies, one a turn this "
                    f"command sends; its turn {number} (the session's turn {context.turn}) "
                    "has none"
                )
            replies = self.script[number - 1]
            if isinstance(replies, ScriptedReply):
                return replies
            if context.step > len(replies):
                raise ProviderError(
                    f"the offline script has {len(replies)} steps for reply {number}; "
                    f"step {context.step} has none"
                )
            return replies[context.step - 1]
        if request.response_schema is not None:
            from agctl.providers.structured import example_instance

            instance = example_instance(request.response_schema)
            return ScriptedReply(content=orjson.dumps(instance).decode())
        said = _shorten(_last_user_text(request.messages))
        text = (
            f'Offline reply to turn {context.turn} in slot "{context.slot_id}": '
            f'you said "{said}" ({len(request.messages)} messages in context).'
        )
        return ScriptedReply(content=text)

    def stream(self, request: base.ChatRequest) -> Iterator[base.Event]:
        reply = self._reply(request)
        if reply.reasoning:
            yield base.ReasoningDelta(reply.reasoning)
        for piece in _words(reply.content or ""):
            yield base.TextDelta(piece)
        for index, call in enumerate(reply.tool_calls):
            yield base.ToolCallDelta(index, id=call["id"], name=call["name"])
            yield base.ToolCallDelta(index, arguments=call["arguments"])
        prompt = request.context.prompt_estimate
        if prompt is None:
            prompt = sum(
                MESSAGE_OVERHEAD + estimate_content(m.get("content")) for m in request.messages
            )
        completion = estimate_text(reply.content or "") + sum(
            estimate_text(c["arguments"]) for c in reply.tool_calls
        )
        yield base.Usage(prompt_tokens=prompt, completion_tokens=completion)
        yield base.Finish("tool_calls" if reply.tool_calls else "stop")
