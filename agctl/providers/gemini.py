"""The Gemini API's wire: `models/{model}:generateContent`, and `:streamGenerateContent?alt=sse`
whose every `data:` line is a whole GenerateContentResponse; the stream ends with its
connection.

agctl's OpenAI-shaped messages become `contents` of `user` and `model` turns: the leading
system messages the `systemInstruction`, a later one (a summary, memory) a user turn
wrapped in `<system>` tags, an assistant's tool calls `functionCall` parts, and a run of
tool results one user turn of `functionResponse` parts, each named after the call it
answers (Gemini pairs them by name and order; by id where it gave one).

What only Gemini reads back is kept on the assistant message as `gemini` wire parts, each
naming the part of the reply it rode on: `{"call": n, "thoughtSignature"?, "id"?}` for the
reply's call number n, `{"text": true, "thoughtSignature"}` for its text (the message keeps
one text, so the last such signature goes back on it, which holds EMPTY if the text is
empty), `{"thought": true, "thoughtSignature"}` for a thought. Google's thinking guide says
to "return the entire response with all parts" and "don't merge one part with a signature
with another part without a signature": a thought's signature goes back on a thought part
of its own, first in the turn as the thought came first, not on the answer's text; agctl
keeps no thoughts as input, so that part holds EMPTY as its text. A call's id is sent back
(on the functionCall and on its functionResponse) only when such a part says Gemini gave
it: an id agctl made up (`call_0`) or another wire's is never sent, since Gemini 2.x refuses
an `id` it does not expect, while Gemini 3 gives one with every call and wants it back.

Gemini refuses an empty part (`{"text": ""}`: "required oneof field 'data' must have one
initialized field", proto3 JSON reading "" as unset) and an empty `parts`, while an agctl
message may be empty (`msg append user ""`): empty texts are left out, a content left with
no part gets one holding EMPTY, and an empty system message adds nothing.

Gemini caches a request's prefix implicitly, comparing what it was sent: every content's
bytes depend on its own message and those before it only, so a growing conversation
keeps its earlier bytes (request.breakpoints, for wires that mark them, are not needed).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import orjson

from agctl.base.errors import ProviderError, UsageError
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    WirePart,
)
from agctl.providers.fields import (
    Malformed,
    a_count,
    a_flag,
    a_list,
    a_string,
    an_object,
    kind_of,
)
from agctl.providers.options import GEMINI_OPTIONS

WIRE = "gemini"
DEFAULT_VERSION = "v1beta"
_VERSION = re.compile(r"v\d+(?:(?:alpha|beta)\d*)?")
_ROLES = {"user": "user", "assistant": "model"}
_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
# The text of a content that would have no part (every text empty), and of the thought part
# a thought's signature goes back on: a fixed word, so that the content's bytes stay the same
# from turn to turn (the implicit cache) and the model sees that nothing was there.
EMPTY = "(empty)"
# Gemini's finish reasons (FinishReason) that mean its filters stopped the reply.
FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
# Gemini's other finish reasons but STOP (whose word depends on the calls) in agctl's
# (OpenAI's) words; one not listed is kept exactly as sent, so that nothing it carries is
# changed out of the redactor's sight.
_FINISHES = {
    "MAX_TOKENS": "length",
    **dict.fromkeys(FILTERED, "content_filter"),
    **{
        reason: reason.lower()
        for reason in (
            "LANGUAGE",
            "OTHER",
            "MALFORMED_FUNCTION_CALL",
            "UNEXPECTED_TOOL_CALL",
            "TOO_MANY_TOOL_CALLS",
            "IMAGE_OTHER",
            "NO_IMAGE",
            "FINISH_REASON_UNSPECIFIED",
        )
    },
}


class GeminiWire:
    """The Gemini API's format (see the module docstring); `thinking_budget` asks a thinking
    model for that many thinking tokens (-1: as many as it likes, 0: none) and its thoughts."""

    name = WIRE
    stream_end: str | None = None
    options = GEMINI_OPTIONS

    def __init__(self, *, thinking_budget: int | None = None) -> None:
        if thinking_budget is not None and (
            type(thinking_budget) is not int or thinking_budget < -1
        ):
            raise UsageError(
                f"a Gemini thinking budget is a number of tokens, or -1 (dynamic), "
                f"not {thinking_budget!r}"
            )
        self.thinking_budget = thinking_budget

    def url(self, base_url: str, request: ChatRequest) -> str:
        base = base_url.rstrip("/")
        if not _VERSION.fullmatch(base.rpartition("/")[2]):
            base += "/" + DEFAULT_VERSION
        model = request.model.removeprefix("models/")
        if not model:
            raise UsageError(f"no model named for the {WIRE} wire (got {request.model!r})")
        method = "streamGenerateContent?alt=sse" if request.stream else "generateContent"
        return f"{base}/models/{quote(model, safe='-._~')}:{method}"

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def headers(self) -> dict[str, str]:
        return {}

    def body(self, request: ChatRequest) -> bytes:
        return orjson.dumps(self.payload(request))

    def payload(self, request: ChatRequest) -> dict[str, Any]:
        """The request as a GenerateContentRequest (the model is in the URL; Gemini has no
        counterpart of parallel_tool_calls, which is left out)."""
        system, contents = _contents(request)
        payload: dict[str, Any] = {}
        if system:
            payload["systemInstruction"] = {"parts": [{"text": text} for text in system]}
        payload["contents"] = contents
        if request.tools:
            payload["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
            if request.tool_choice is not None:
                payload["toolConfig"] = {"functionCallingConfig": _mode(request.tool_choice)}
        config: dict[str, Any] = {}
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if request.max_tokens is not None:
            config["maxOutputTokens"] = request.max_tokens
        config.update(request.options)  # generationConfig's own fields
        if self.thinking_budget is not None:
            config["thinkingConfig"] = {
                "thinkingBudget": self.thinking_budget,
                "includeThoughts": self.thinking_budget != 0,
            }
        if request.response_schema is not None:
            # responseJsonSchema takes JSON Schema as it is (additionalProperties, type
            # lists), where responseSchema takes only an OpenAPI subset that refuses them.
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = request.response_schema
        if config:
            payload["generationConfig"] = config
        return payload

    def reply(self, data: Any) -> list[Event]:
        return GeminiParser().whole(data)

    def parser(self) -> GeminiParser:
        return GeminiParser()

    def retry_delay(self, error: dict[str, Any]) -> float | None:
        """The `retryDelay` of a google.rpc.RetryInfo detail ("30s", "1.5s"), if any."""
        details = error.get("error")
        details = details.get("details") if isinstance(details, dict) else None
        for detail in details if isinstance(details, list) else ():
            if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith(
                "google.rpc.RetryInfo"
            ):
                continue
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return max(float(delay[:-1]), 0.0)
                except ValueError:
                    return None
        return None


# ---- the request -------------------------------------------------------------------------


def _contents(request: ChatRequest) -> tuple[list[str], list[dict[str, Any]]]:
    """The system instruction's texts and the contents of `request`'s messages."""
    messages = request.messages
    wire_parts = request.wire_parts or {}
    system: list[str] = []
    start = 0
    while start < len(messages) and messages[start].get("role") == "system":
        text = _text(messages[start], start)
        if text:
            system.append(text)
        start += 1
    # Each call id answered so far: its function's name, and whether Gemini gave the id.
    calls: dict[str, tuple[str, bool]] = {}
    contents: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] | None = None  # the parts of the open run of tool results
    for position in range(start, len(messages)):
        message = messages[position]
        role = message.get("role")
        content = message.get("content")
        if type(content) is str and (
            role == "user"
            or (
                role == "assistant"
                and content
                and not message.get("tool_calls")
                and position not in wire_parts
            )
        ):
            # Most of a long conversation: plain text, built here without the general
            # path's calls (measured: 4.5 ms to 3.5 ms for a body of 5,000 messages).
            answers = None
            contents.append({"role": _ROLES[role], "parts": [{"text": content or EMPTY}]})
            continue
        if role == "tool":
            if answers is None:
                answers = []
                contents.append({"role": "user", "parts": answers})
            answers.append(_function_response(message, position, calls))
            continue
        answers = None
        if role == "user":
            contents.append({"role": "user", "parts": _user_parts(message, position)})
        elif role == "assistant":
            parts = (wire_parts.get(position) or {}).get(WIRE) or []
            contents.append(_model_content(message, position, parts, calls))
        elif role == "system":
            text = f"<system>\n{_text(message, position)}\n</system>"
            contents.append({"role": "user", "parts": [{"text": text}]})
        else:
            raise UsageError(f"message {position} has role {role!r}, which the {WIRE} wire lacks")
    return system, contents


def _text(message: dict[str, Any], position: int) -> str:
    """A message's content as text: a string, or text parts joined."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.get("type") != "text":
            raise _unsupported(part, position, message.get("role"))
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def _unsupported(part: dict[str, Any], position: int, role: Any) -> UsageError:
    return UsageError(
        f"message {position} ({role}) has a {part.get('type')!r} part, which the {WIRE} wire "
        "cannot send there"
    )


def _user_parts(message: dict[str, Any], position: int) -> list[dict[str, Any]]:
    """A user message's parts: its text, and its images given inline (`data:` URLs)."""
    content = message.get("content")
    if not isinstance(content, list):
        return [{"text": content or EMPTY}]
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            text = str(part.get("text", ""))
            if text:
                parts.append({"text": text})
            continue
        image = part.get("image_url") if kind == "image_url" else None
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str) or not url.startswith("data:"):
            raise UsageError(
                f"message {position} (user) has a {kind!r} part that is not an inline "
                f"image (a data: URL), which the {WIRE} wire cannot send"
            )
        header, _, data = url[5:].partition(",")
        mime, _, encoding = header.partition(";")
        if encoding != "base64" or not mime:
            raise UsageError(
                f"message {position} (user) has an image that is not a base64 data: URL "
                f"with a media type, which the {WIRE} wire needs"
            )
        parts.append({"inlineData": {"mimeType": mime, "data": data}})
    return parts or [{"text": EMPTY}]


def _model_content(
    message: dict[str, Any],
    position: int,
    wire_parts: list[dict[str, Any]],
    calls: dict[str, tuple[str, bool]],
) -> dict[str, Any]:
    """An assistant message as a `model` content: its thought's signature, its text, then
    its calls, each with the thought signature (and the id) Gemini gave it."""
    signatures: dict[int | str, str] = {}
    ids: dict[int, str] = {}
    for kept in wire_parts:
        call = kept.get("call")
        at: int | str | None = (
            call
            if type(call) is int
            else next((k for k in ("thought", "text") if kept.get(k)), None)
        )
        signature = kept.get("thoughtSignature")
        if at is not None and isinstance(signature, str):
            signatures[at] = signature
        if type(call) is int and isinstance(kept.get("id"), str):
            ids[call] = kept["id"]
    parts: list[dict[str, Any]] = []
    if "thought" in signatures:
        parts.append({"text": EMPTY, "thought": True, "thoughtSignature": signatures["thought"]})
    text = _text(message, position)
    if text or "text" in signatures:
        part: dict[str, Any] = {"text": text or EMPTY}
        if "text" in signatures:
            part["thoughtSignature"] = signatures["text"]
        parts.append(part)
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        call_id = call.get("id")
        name = function.get("name") or ""
        gemini_id = call_id is not None and ids.get(number) == call_id
        function_call: dict[str, Any] = {"name": name, "args": _args(function.get("arguments"))}
        if gemini_id:
            function_call = {"id": call_id, **function_call}
        part = {"functionCall": function_call}
        if number in signatures:
            part["thoughtSignature"] = signatures[number]
        parts.append(part)
        if call_id is not None:
            calls[call_id] = (name, gemini_id)
    return {"role": "model", "parts": parts or [{"text": EMPTY}]}


def _args(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object Gemini takes. Arguments that are no JSON object (a
    model can send anything) go as {"arguments": their text}, so the model sees what it
    sent; none at all as {}."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _function_response(
    message: dict[str, Any], position: int, calls: dict[str, tuple[str, bool]]
) -> dict[str, Any]:
    """A tool result as a `functionResponse` part, named after the call it answers."""
    call_id = message.get("tool_call_id")
    name, gemini_id = calls.get(call_id, ("", False)) if isinstance(call_id, str) else ("", False)
    name = name or message.get("name") or ""
    if not name:
        raise UsageError(
            f"message {position} is a tool result for call {call_id!r}, which no earlier "
            f"assistant message made: the {WIRE} wire needs the function's name"
        )
    response: dict[str, Any] = {"name": name, "response": {"result": _text(message, position)}}
    if gemini_id:
        response = {"id": call_id, **response}
    return {"functionResponse": response}


def _declaration(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function definition as a FunctionDeclaration: its parameters (JSON Schema)
    as `parametersJsonSchema`, which takes all of JSON Schema (`parameters` takes an OpenAPI
    subset only)."""
    function = tool.get("function")
    if tool.get("type", "function") != "function" or not isinstance(function, dict):
        raise UsageError(f"a {tool.get('type')!r} tool, which the {WIRE} wire cannot offer")
    declaration: dict[str, Any] = {"name": function.get("name")}
    if function.get("description"):
        declaration["description"] = function["description"]
    if function.get("parameters") is not None:
        declaration["parametersJsonSchema"] = function["parameters"]
    return declaration


def _mode(choice: str | dict[str, Any]) -> dict[str, Any]:
    """OpenAI's tool_choice as a functionCallingConfig."""
    if isinstance(choice, str) and choice in _MODES:
        return {"mode": _MODES[choice]}
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise UsageError(f"tool_choice {choice!r} is none the {WIRE} wire knows")
    return {"mode": "ANY", "allowedFunctionNames": [name]}


# ---- the reply ---------------------------------------------------------------------------


class GeminiParser:
    """The events of one reply, whole or streamed, with every field agctl reads checked.

    A stream's chunks report usage as running totals: the last one is given once, with the
    finish (and again only if a later chunk changes it)."""

    # A Gemini stream ends with its connection, not with an event.
    done = False

    def __init__(self) -> None:
        self._calls = 0
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._given: Usage | None = None

    def whole(self, data: Any) -> list[Event]:
        """Events of one whole GenerateContentResponse."""
        response = an_object(data, "the reply")
        if not a_list(response.get("candidates"), "candidates") and not _blocked(response):
            raise Malformed(
                f"candidates is {'missing' if 'candidates' not in response else 'empty'}"
            )
        events, finish, usage = self._read(response)
        if finish is None:
            raise Malformed("candidates[0].finishReason is missing")
        return events + ([usage] if usage is not None else []) + [Finish(self._reason(finish))]

    def chunk(self, data: Any) -> list[Event]:
        """Events of one streamed chunk (a GenerateContentResponse)."""
        events, finish, usage = self._read(an_object(data, "the chunk"))
        self._usage = usage or self._usage
        if finish is not None:
            self._finish = self._reason(finish)
        reason = self._finish
        if reason is not None and self._usage is not None and self._usage != self._given:
            events.append(self._usage)
            self._given = self._usage
        if finish is not None and reason is not None:
            events.append(Finish(reason))
        return events

    def end(self) -> None:
        if self._finish is None:
            raise Malformed("the stream ended before a finish reason")

    def _read(self, response: dict[str, Any]) -> tuple[list[Event], str | None, Usage | None]:
        """The events of a response's parts, its finish reason and its usage."""
        candidates = a_list(response.get("candidates"), "candidates")
        if not candidates:
            blocked = _blocked(response)
            if blocked is not None:
                raise ProviderError(f"Gemini refused the prompt: it was blocked ({blocked})")
            return [], None, _usage(response)
        candidate = an_object(candidates[0], "candidates[0]")
        content = an_object(candidate.get("content"), "candidates[0].content", optional=True)
        events: list[Event] = []
        where = "candidates[0].content.parts"
        for number, item in enumerate(a_list(content.get("parts"), where)):
            events += self._part(an_object(item, f"{where}[{number}]"), f"{where}[{number}]")
        finish = a_string(candidate, "finishReason", "candidates[0]") or None
        return events, finish, _usage(response)

    def _part(self, part: dict[str, Any], where: str) -> list[Event]:
        signature = a_string(part, "thoughtSignature", where)
        if part.get("functionCall") is not None:
            where = f"{where}.functionCall"
            return self._call(an_object(part["functionCall"], where), where, signature)
        events: list[Event] = []
        text = a_string(part, "text", where)
        thought = a_flag(part, "thought", where)
        if text:
            events.append(ReasoningDelta(text) if thought else TextDelta(text))
        if signature:
            events.append(
                WirePart(
                    WIRE, {"thought" if thought else "text": True, "thoughtSignature": signature}
                )
            )
        return events

    def _call(self, call: dict[str, Any], where: str, signature: str | None) -> list[Event]:
        name = a_string(call, "name", where)
        if not name:
            raise Malformed(f"{where}.name is {'empty' if name == '' else kind_of(name)}")
        args = an_object(call.get("args"), f"{where}.args", optional=True)
        call_id = a_string(call, "id", where) or None
        number = self._calls
        self._calls += 1
        events: list[Event] = [
            ToolCallDelta(number, id=call_id, name=name, arguments=orjson.dumps(args).decode())
        ]
        kept: dict[str, Any] = {"call": number}
        if call_id is not None:
            kept["id"] = call_id
        if signature:
            kept["thoughtSignature"] = signature
        if len(kept) > 1:
            events.append(WirePart(WIRE, kept))
        return events

    def _reason(self, finish: str) -> str:
        """Gemini's finish reason in agctl's (OpenAI's) words."""
        if finish == "STOP":
            return "tool_calls" if self._calls else "stop"
        return _FINISHES.get(finish, finish)


def _blocked(response: dict[str, Any]) -> str | None:
    """Why the prompt was blocked, when it was."""
    feedback = an_object(response.get("promptFeedback"), "promptFeedback", optional=True)
    return a_string(feedback, "blockReason", "promptFeedback") or None


def _usage(response: dict[str, Any]) -> Usage | None:
    """A response's usageMetadata in agctl's terms (see Usage)."""
    where = "usageMetadata"
    metadata = an_object(response.get(where), where, optional=True)
    if not metadata:
        return None
    thoughts = a_count(metadata, "thoughtsTokenCount", where)
    return Usage(
        a_count(metadata, "promptTokenCount", where) or 0,
        (a_count(metadata, "candidatesTokenCount", where) or 0) + (thoughts or 0),
        cached_tokens=a_count(metadata, "cachedContentTokenCount", where),
        reasoning_tokens=thoughts,
    )
