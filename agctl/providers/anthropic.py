"""The Anthropic Messages API wire (`POST /v1/messages`): agctl's OpenAI-shaped request as
a Messages body, and Messages replies (whole, or as server-sent events) as agctl's events.

The request's leading system messages become the top-level `system`; a later system message
(session memory, a summary, scratch) a user message in `<system>` tags; tool results
`tool_result` blocks in one user message; the thinking blocks a reply came with (kept on
its message as wire parts) go back first in its assistant message, verbatim. Where the
request's prefix is known to stay the same next turn (ChatRequest.breakpoints), the block
that ends it gets a `cache_control` mark: Anthropic caches only at marks the client places.
That block is the last of the prefix's own, wherever its messages went: a system block when
the prefix ends in the leading system run, one tool result of several merged in a message.
What the API refuses and agctl's history may hold is sent as it accepts it: a tool_use id
seen before in the body gets a suffix, empty text is left out, and the tools the history
called are defined (none callable) when the request offers none.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal, cast

import orjson

from agctl.base.errors import UsageError
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
    a_list,
    a_string,
    a_whole_number,
    an_object,
)
from agctl.providers.options import ANTHROPIC_OPTIONS

log = logging.getLogger("agctl.provider")

WIRE = "anthropic"
# The API refuses a request with more cache_control marks than this.
MAX_BREAKPOINTS = 4
MAX_BLOCK_INDEX = 65535
# agctl's finish reason for each of Anthropic's stop reasons; any other (pause_turn, one
# added later) is kept as it is.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# The shortest prefix a model caches, in tokens, by a part of its name (Anthropic's prompt
# caching docs); every other model 1024. A mark on a shorter prefix caches nothing but
# still counts against MAX_BREAKPOINTS, so none is placed there.
MIN_CACHE_TOKENS = (
    ("claude-3-haiku", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-haiku-4-5", 4096),
    ("claude-opus-4-5", 4096),
)
DEFAULT_MIN_CACHE_TOKENS = 1024
# A prefix's tokens are estimated as its encoded bytes over this.
BYTES_PER_TOKEN = 4
# Blocks the API refuses a cache_control mark on.
UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
_NOT_IN_TOOL_ID = re.compile(r"[^a-zA-Z0-9_-]")
# OpenAI's tool_choice modes as Anthropic's.
TOOL_CHOICES = {"auto": "auto", "none": "none", "required": "any"}
# The tool_choice types that force a call, which the API refuses with thinking.
FORCING = frozenset({"any", "tool"})
# The text of a message whose content is empty: the API refuses an empty text block and a
# message with no block, and dropping the message would join its neighbours' roles and
# change what the conversation says was said.
EMPTY = "(empty)"
# The beta that lets a cache mark live 1 hour where that TTL is not generally available.
EXTENDED_TTL_BETA = "extended-cache-ttl-2025-04-11"
# What a tool only the history names (no tool offered this request) is described as.
HISTORY_TOOL = "Kept for the conversation's earlier calls; not offered now."

# Where a block is in the body: (-1, n) is system[n], (m, n) messages[m].content[n].
Place = tuple[int, int]


def min_cache_tokens(model: str) -> int:
    """The shortest prefix `model` caches, in tokens (see MIN_CACHE_TOKENS)."""
    return next(
        (tokens for part, tokens in MIN_CACHE_TOKENS if part in model), DEFAULT_MIN_CACHE_TOKENS
    )


def messages_url(base_url: str) -> str:
    """The Messages endpoint under a host root (as the official SDK takes it) or a …/v1."""
    root = base_url.rstrip("/")
    return root + ("/messages" if root.endswith("/v1") else "/v1/messages")


class AnthropicWire:
    """The Messages API's format (see the module docstring and agctl.providers.wire)."""

    name = WIRE
    stream_end: str | None = "message_stop"
    options = ANTHROPIC_OPTIONS

    def __init__(
        self,
        *,
        cache_ttl: Literal["5m", "1h"] = "5m",
        thinking_budget: int | None = None,
        version: str = "2023-06-01",
        default_max_tokens: int = 4096,
    ) -> None:
        self.cache_control: dict[str, str] = {"type": "ephemeral"}
        if cache_ttl == "1h":
            self.cache_control["ttl"] = "1h"
        self.thinking_budget = thinking_budget
        self.version = version
        self.default_max_tokens = default_max_tokens

    def url(self, base_url: str, request: ChatRequest) -> str:
        return messages_url(base_url)

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        if self.cache_control.get("ttl") == "1h":
            headers["anthropic-beta"] = EXTENDED_TTL_BETA
        return headers

    def body(self, request: ChatRequest) -> bytes:
        """The Messages body: model, max_tokens, system, messages, tools, tool_choice,
        temperature, the model options by key, thinking, stream, in that order, each only
        when it has a value."""
        encoded = _Encoding(request)
        tail: dict[str, Any] = {}
        if request.tools:
            tail["tools"] = [_tool(number, tool) for number, tool in enumerate(request.tools)]
            choice = _tool_choice(request.tool_choice, request.parallel_tool_calls)
            if choice is not None:
                if self.thinking_budget is not None and choice["type"] in FORCING:
                    # The API refuses it (a 400 after the request): said here, before it.
                    raise UsageError(
                        f"tool_choice {request.tool_choice!r} forces a tool call, which the "
                        f"anthropic wire refuses with a thinking_budget "
                        f"({self.thinking_budget}): choose 'auto' or 'none', or no budget"
                    )
                tail["tool_choice"] = choice
        elif encoded.tool_names:
            # The API refuses tool_use and tool_result blocks in a request without tools:
            # the tools the history called are defined, bare, and none may be called.
            tail["tools"] = [
                {"name": name, "description": HISTORY_TOOL, "input_schema": {"type": "object"}}
                for name in sorted(encoded.tool_names)
            ]
            tail["tool_choice"] = {"type": "none"}
        if request.response_schema is not None:
            self._schema_tool(request, tail)
        if request.temperature is not None:
            if self.thinking_budget is None:
                tail["temperature"] = request.temperature
            else:
                log.warning(
                    "temperature %g left out: the anthropic wire refuses it with thinking",
                    request.temperature,
                )
        tail.update(request.options)
        if self.thinking_budget is not None:
            tail["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if request.stream:
            tail["stream"] = True
        tools_size = len(orjson.dumps(tail["tools"])) if "tools" in tail else 0
        messages = encoded.encoded(
            request.breakpoints,
            self.cache_control,
            min_cache_tokens(request.model) * BYTES_PER_TOKEN - tools_size,
        )
        head: dict[str, Any] = {"model": request.model, "max_tokens": self._max_tokens(request)}
        if encoded.system:
            head["system"] = encoded.system
        opening = orjson.dumps(head)[:-1] + b',"messages":['
        closing = b"]," + orjson.dumps(tail)[1:] if tail else b"]}"
        if not messages:
            return opening + closing
        # Joined once: the first message carries the body's opening, the last its closing.
        messages[0] = opening + messages[0]
        messages[-1] += closing
        return b",".join(messages)

    def _schema_tool(self, request: ChatRequest, tail: dict[str, Any]) -> None:
        """Ask for a reply that follows the request's schema as Anthropic's docs do: one
        tool whose input_schema is the schema, forced (the reply's tool_use input is the
        reply: agctl.providers.structured.reply_text). Forcing leaves no other tool callable
        and is refused with thinking: both said here, before the request."""
        from agctl.providers.structured import SCHEMA_TOOL, SCHEMA_TOOL_DESCRIPTION

        schema = request.response_schema
        problem = None
        if request.tools:
            problem = "offers tools, and the reply would have to be a call of none of them"
        elif self.thinking_budget is not None:
            problem = f"has a thinking_budget ({self.thinking_budget}), which refuses that"
        elif not isinstance(schema, dict) or schema.get("type") != "object":
            problem = "has a schema whose root is not an object (--schema-multi wraps a list)"
        if problem is not None:
            raise UsageError(
                "the anthropic wire asks for a schema's reply by forcing a tool call, and "
                f"this turn {problem}"
            )
        tool = {"name": SCHEMA_TOOL, "description": SCHEMA_TOOL_DESCRIPTION}
        tail["tools"] = [*tail.get("tools", ()), {**tool, "input_schema": schema}]
        tail["tool_choice"] = {"type": "tool", "name": SCHEMA_TOOL}

    def _max_tokens(self, request: ChatRequest) -> int:
        budget = self.thinking_budget
        if request.max_tokens is not None:
            if budget is not None and request.max_tokens <= budget:
                # The API refuses it (a 400 after the request): said here, before it.
                raise UsageError(
                    f"max_tokens {request.max_tokens} leaves nothing after the thinking "
                    f"budget ({budget} tokens): the anthropic wire needs more than the budget"
                )
            return request.max_tokens
        if budget is not None:
            # The budget is part of max_tokens: what is left is the answer's.
            return budget + self.default_max_tokens
        return self.default_max_tokens

    def reply(self, data: Any) -> list[Event]:
        """The events of a whole `message` object."""
        message = an_object(data, "the reply")
        if message.get("content") is None:
            raise Malformed("content is missing")
        events: list[Event] = []
        for index, item in enumerate(a_list(message["content"], "content")):
            where = f"content[{index}]"
            block = an_object(item, where)
            kind = a_string(block, "type", where)
            if kind == "text":
                if text := a_string(block, "text", where):
                    events.append(TextDelta(text))
            elif kind == "thinking":
                thinking = a_string(block, "thinking", where) or ""
                if thinking:
                    events.append(ReasoningDelta(thinking))
                events.append(_thinking_part(thinking, a_string(block, "signature", where)))
            elif kind == "redacted_thinking":
                events.append(_redacted_part(block, where))
            elif kind == "tool_use":
                name = a_string(block, "name", where)
                if not name:
                    raise Malformed(f"{where}.name is {'empty' if name == '' else 'missing'}")
                arguments = an_object(block.get("input"), f"{where}.input", optional=True)
                events.append(
                    ToolCallDelta(
                        index,
                        id=a_string(block, "id", where),
                        name=name,
                        arguments=orjson.dumps(arguments).decode(),
                    )
                )
            # Other blocks (a server tool's, one added later) are not agctl's to read.
        usage = an_object(message.get("usage"), "usage", optional=True)
        if usage:
            events.append(_usage(usage, "usage"))
        events.append(Finish(_finish(a_string(message, "stop_reason", "the reply") or "end_turn")))
        return events

    def parser(self) -> StreamParser:
        return StreamParser()

    def retry_delay(self, error: dict[str, Any]) -> float | None:
        return None  # the retry-after header says it


# The JSON of a plain text message up to its text, and after it: a long slot's messages,
# nearly all plain, are encoded from these with no object made for them (measured at 5,000
# messages: half the time of building and dumping their dicts, and no garbage collection
# of the slot's objects set off on the way).
PLAIN_OPENINGS = {
    role: f'{{"role":"{role}","content":[{{"type":"text","text":'.encode()
    for role in ("user", "assistant")
}
PLAIN_CLOSING = b"}]}"


class _Encoding:
    """A request's messages as the Messages API's system blocks and messages (each as its
    JSON, or as a dict while it may still grow), with where the prefix through each
    breakpoint ends, to place cache marks at."""

    def __init__(self, request: ChatRequest) -> None:
        self.system: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any] | bytes] = []
        # For the last message of each breakpoint's prefix, the last block of the prefix
        # a mark may go on.
        self.ends: dict[int, Place] = {}
        # The names of the tools the history's calls called.
        self.tool_names: set[str] = set()
        # The tool_use ids given so far, the id each original id was last given, and the
        # next suffix to try for each base id (see _call_id).
        self._given: set[str] = set()
        self._latest: dict[str | None, str] = {}
        self._suffixes: dict[str, int] = {}
        parts = request.wire_parts or {}
        wanted = {count - 1 for count in request.breakpoints}
        messages, ends, system = self.messages, self.ends, self.system
        end_at, end_block = -1, -1  # where the last block a mark may go on is, so far
        in_tool_run = False
        for number, message in enumerate(request.messages):
            role, content = message.get("role"), message.get("content")
            if (
                type(content) is str
                and content
                and (
                    role == "user"
                    or (
                        role == "assistant"
                        and not message.get("tool_calls")
                        and number not in parts
                    )
                )
            ):
                messages.append(PLAIN_OPENINGS[role] + orjson.dumps(content) + PLAIN_CLOSING)
                end_at, end_block = len(messages) - 1, 0
            elif role == "system" and not messages:
                text = _text(content, number, "system")
                if text:  # the API refuses an empty system block, which says nothing anyway
                    system.append({"type": "text", "text": text})
                    end_at, end_block = -1, len(system) - 1
            else:
                blocks = self._blocks(message, number, in_tool_run, parts)
                # A message's own blocks are its last ones, and the thinking it came with
                # (which a mark may not go on) comes first: its last block is marked, if
                # any is.
                if blocks and blocks[-1]["type"] not in UNMARKABLE:
                    end_at, end_block = len(messages) - 1, len(blocks) - 1
            in_tool_run = role == "tool"
            if number in wanted and end_block >= 0:
                ends[number] = (end_at, end_block)

    def _blocks(
        self,
        message: dict[str, Any],
        number: int,
        in_tool_run: bool,
        parts: dict[int, dict[str, list[dict[str, Any]]]],
    ) -> list[dict[str, Any]]:
        """Add a message that is not plain text (tool calls, results, parts, images, a
        system message among the others); its blocks."""
        role, content = message.get("role"), message.get("content")
        blocks: list[dict[str, Any]]
        if role == "tool":
            call_id = message.get("tool_call_id")
            result = {
                "type": "tool_result",
                "tool_use_id": self._latest.get(_key(call_id)) or _tool_id(call_id),
                "content": _tool_content(content, number),
            }
            last = self.messages[-1] if in_tool_run else None
            if isinstance(last, dict):
                last["content"].append(result)
                return cast("list[dict[str, Any]]", last["content"])
            blocks = [result]
        elif role == "assistant":
            sent_back = parts.get(number, {}).get(WIRE, ())
            blocks = _assistant_blocks(message, content, number, sent_back, self._call_id)
            self.tool_names.update(
                block["name"]
                for block in blocks
                if block["type"] == "tool_use" and isinstance(block["name"], str)
            )
        elif role == "user":
            blocks = _user_blocks(content, number) or [{"type": "text", "text": EMPTY}]
        elif role == "system":
            # No system role among messages: the text goes in a user message, tagged.
            text = _text(content, number, "system")
            blocks = [{"type": "text", "text": f"<system>\n{text}\n</system>"}]
        else:
            raise UsageError(
                f"message {number} has role {role!r}, which the anthropic wire cannot send"
            )
        self.messages.append(
            {"role": "assistant" if role == "assistant" else "user", "content": blocks}
        )
        return blocks

    def _call_id(self, call_id: Any) -> str:
        """A call's id, unique in the body as the API requires: its own as the API accepts
        one (_tool_id), else that with the first free `_<n>` after it (agctl names an id-less
        call `call_<n>`, so a history holds `call_0` many times). It depends only on the
        calls before it, so a message's ids stay the same as messages are added after it."""
        base = given = _tool_id(call_id)
        while given in self._given:
            suffix = self._suffixes.get(base, 2)
            self._suffixes[base] = suffix + 1
            given = f"{base}_{suffix}"
        self._given.add(given)
        self._latest[_key(call_id)] = given
        return given

    def encoded(
        self, breakpoints: tuple[int, ...], cache_control: dict[str, str], min_bytes: int
    ) -> list[bytes]:
        """The messages' JSON, with `cache_control` on the block ending each breakpoint's
        prefix where that prefix is at least `min_bytes` long (the model's minimum, less
        the tools before it): at most MAX_BREAKPOINTS, the last ones."""
        encoded = [m if type(m) is bytes else orjson.dumps(m) for m in self.messages]
        places = sorted({self.ends[count - 1] for count in breakpoints if count - 1 in self.ends})
        # The bytes of the system and the messages through each place (a message counted
        # whole: an estimate), each followed by its comma.
        system = list(itertools.accumulate(len(orjson.dumps(block)) + 1 for block in self.system))
        before = system[-1] if system else 0
        last = max((at for at, _ in places), default=-1)
        through = list(itertools.accumulate(len(data) + 1 for data in encoded[: last + 1]))
        long_enough = [
            (at, block)
            for at, block in places
            if (system[block] if at < 0 else before + through[at]) >= min_bytes
        ]
        marked: dict[int, dict[str, Any]] = {}  # the marked messages, by place
        for at, block in long_enough[-MAX_BREAKPOINTS:]:
            if at < 0:
                self.system[block] = {**self.system[block], "cache_control": cache_control}
                continue
            if at not in marked:
                message = self.messages[at]
                message = orjson.loads(message) if isinstance(message, bytes) else dict(message)
                message["content"] = list(message["content"])
                marked[at] = message
            content = marked[at]["content"]
            content[block] = {**content[block], "cache_control": cache_control}
        for at, message in marked.items():
            encoded[at] = orjson.dumps(message)
        return encoded


def _text(content: Any, number: int, role: str) -> str:
    """A message's content as text: a string, or its text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.get("type") != "text":
            raise _unsendable(part, number, role)
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def _unsendable(part: Any, number: int, role: str) -> UsageError:
    kind = part.get("type") if isinstance(part, dict) else type(part).__name__
    return UsageError(
        f"message {number} ({role}) has a {kind!r} content part, which the anthropic wire "
        "cannot send"
    )


def _user_blocks(content: Any, number: int) -> list[dict[str, Any]]:
    """A user message's content as blocks: text, and images (inline data or a URL); no
    empty text, which the API refuses."""
    if content is None or isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if text := str(part.get("text", "")):
                blocks.append({"type": "text", "text": text})
        elif kind == "image_url":
            blocks.append(_image(part, number))
        else:
            raise _unsendable(part, number, "user")
    return blocks


def _image(part: dict[str, Any], number: int) -> dict[str, Any]:
    """An OpenAI image_url part as an image block: a data: URL's bytes inline, else the URL."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if isinstance(url, str) and url.startswith("data:"):
        header, _, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if encoding == "base64" and data:
            source = {"type": "base64", "media_type": media_type, "data": data}
            return {"type": "image", "source": source}
    elif isinstance(url, str) and url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise UsageError(
        f"message {number} has an image the anthropic wire cannot send: a base64 data: URL "
        "or an http(s) URL is needed"
    )


def _tool_content(content: Any, number: int) -> str | list[dict[str, Any]]:
    """A tool message's content as a tool result's: its text, or its blocks."""
    if content is None or isinstance(content, str):
        return content or ""
    return _user_blocks(content, number) or ""


def _assistant_blocks(
    message: dict[str, Any],
    content: Any,
    number: int,
    sent_back: Iterable[Any],
    call_id: Callable[[Any], str],
) -> list[dict[str, Any]]:
    """The thinking the reply came with (verbatim, first, as the API requires), its text,
    then a tool_use block for each of its calls (its id from `call_id`); a placeholder text
    if that is nothing."""
    blocks: list[dict[str, Any]] = [dict(part) for part in sent_back]
    text = content if type(content) is str else _text(content, number, "assistant")
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call_id(call.get("id")),
                "name": function.get("name"),
                "input": _tool_input(function.get("arguments") or ""),
            }
        )
    return blocks or [{"type": "text", "text": EMPTY}]


def _tool_id(call_id: Any) -> str:
    """A call's id as the API accepts one (letters, digits, _ and -): another wire's id
    (`functions.get_weather:0`) with every other character as `_`; `call` for none."""
    return _NOT_IN_TOOL_ID.sub("_", call_id) if isinstance(call_id, str) and call_id else "call"


def _key(call_id: Any) -> str | None:
    """A call's original id as a key to the id it was given (None for a non-string)."""
    return call_id if isinstance(call_id, str) else None


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the JSON object the API requires for `input`. A model may
    have sent arguments that are not one (broken JSON, a list): that call is still sent
    back, so the conversation stays valid, as {"arguments": <the text>}, the text kept."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _tool(number: int, tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function definition as an Anthropic tool."""
    function = tool.get("function") if tool.get("type") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise UsageError(
            f"tool {number} is not a function definition, which the anthropic wire cannot send"
        )
    definition: dict[str, Any] = {"name": function["name"]}
    if function.get("description"):
        definition["description"] = function["description"]
    definition["input_schema"] = function.get("parameters") or {
        "type": "object",
        "properties": {},
    }
    return definition


def _tool_choice(
    choice: str | dict[str, Any] | None, parallel: bool | None
) -> dict[str, Any] | None:
    """OpenAI's tool_choice and parallel_tool_calls as Anthropic's tool_choice."""
    if choice is None:
        anthropic: dict[str, Any] | None = None if parallel is not False else {"type": "auto"}
    elif isinstance(choice, str) and choice in TOOL_CHOICES:
        anthropic = {"type": TOOL_CHOICES[choice]}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        anthropic = {"type": "tool", "name": choice["function"].get("name")}
    else:
        raise UsageError(f"tool_choice {choice!r} is not one the anthropic wire can send")
    if anthropic is not None and parallel is False and anthropic["type"] != "none":
        anthropic["disable_parallel_tool_use"] = True
    return anthropic


# ---- reading a reply ---------------------------------------------------------------------


def _finish(stop_reason: str) -> str:
    return FINISH_REASONS.get(stop_reason, stop_reason)


def _thinking_part(thinking: str, signature: str | None) -> WirePart:
    """A thinking block as it must go back: its whole text with its signature."""
    return WirePart(WIRE, {"type": "thinking", "thinking": thinking, "signature": signature or ""})


def _redacted_part(block: dict[str, Any], where: str) -> WirePart:
    return WirePart(
        WIRE, {"type": "redacted_thinking", "data": a_string(block, "data", where) or ""}
    )


def _usage(usage: dict[str, Any], where: str) -> Usage:
    """Anthropic's counts as agctl's (see Usage): the input beside the cache reads and
    writes, not including them, so the prompt is their sum."""
    written = a_count(usage, "cache_creation_input_tokens", where)
    read = a_count(usage, "cache_read_input_tokens", where)
    creation = an_object(usage.get("cache_creation"), f"{where}.cache_creation", optional=True)
    # A 1-hour share larger than the writes is dropped by the transport (Usage.checked).
    hour = a_count(creation, "ephemeral_1h_input_tokens", f"{where}.cache_creation")
    prompt = (a_count(usage, "input_tokens", where) or 0) + (read or 0) + (written or 0)
    return Usage(
        prompt,
        a_count(usage, "output_tokens", where) or 0,
        cached_tokens=read,
        cache_write_tokens=written,
        cache_write_1h_tokens=hour,
    )


class _Block:
    """A content block a stream has started and not yet stopped."""

    def __init__(self, kind: str | None) -> None:
        self.kind = kind
        self.thinking: list[str] = []
        self.signature = ""
        self.has_input = False
        self.start_input = "{}"  # the input content_block_start gave, as compact JSON


class StreamParser:
    """The events of one streamed message, an event (its `data:` JSON) at a time."""

    def __init__(self) -> None:
        self.done = False
        self._started = False
        self._blocks: dict[int, _Block] = {}
        self._unnamed: set[int] = set()
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None

    def chunk(self, data: Any) -> list[Event]:
        event = an_object(data, "the event")
        kind = a_string(event, "type", "the event")
        if kind is None:
            raise Malformed("the event has no type")
        if kind == "message_start":
            message = an_object(event.get("message"), "message_start.message")
            self._started = True
            self._add_usage(message.get("usage"), "message_start.message.usage")
        elif kind == "content_block_start":
            return self._start(event)
        elif kind == "content_block_delta":
            return self._delta(event)
        elif kind == "content_block_stop":
            return self._stop(event)
        elif kind == "message_delta":
            delta = an_object(event.get("delta"), "message_delta.delta", optional=True)
            self._stop_reason = a_string(delta, "stop_reason", "message_delta.delta") or (
                self._stop_reason
            )
            self._add_usage(event.get("usage"), "message_delta.usage")
        elif kind == "message_stop":
            self.done = True
            events: list[Event] = []
            if self._usage:
                events.append(_usage(self._usage, "usage"))
            if self._stop_reason is not None:
                events.append(Finish(_finish(self._stop_reason)))
            return events
        # ping, and event types added later (the docs say to expect them), carry nothing.
        return []

    def end(self) -> None:
        """Check what only the whole stream shows: it began, and every tool use was named."""
        if not self._started:
            raise Malformed("the stream has no message_start")
        if self._unnamed:
            raise Malformed(f"tool use {min(self._unnamed)} has no name")

    def _add_usage(self, value: Any, where: str) -> None:
        usage = an_object(value, where, optional=True)
        _usage(usage, where)  # every field checked where it arrives
        # message_delta's counts are the final ones; message_start's stand where it has none.
        self._usage.update((key, count) for key, count in usage.items() if count is not None)

    def _index(self, event: dict[str, Any], kind: str) -> int:
        return a_whole_number(event.get("index"), f"{kind}.index", MAX_BLOCK_INDEX)

    def _start(self, event: dict[str, Any]) -> list[Event]:
        index = self._index(event, "content_block_start")
        where = "content_block_start.content_block"
        block = an_object(event.get("content_block"), where)
        kind = a_string(block, "type", where)
        self._blocks[index] = started = _Block(kind)
        if kind == "text":
            text = a_string(block, "text", where)
            return [TextDelta(text)] if text else []
        if kind == "thinking":
            started.thinking.append(a_string(block, "thinking", where) or "")
            started.signature = a_string(block, "signature", where) or ""
            return [ReasoningDelta(started.thinking[0])] if started.thinking[0] else []
        if kind == "redacted_thinking":
            return [_redacted_part(block, where)]
        if kind == "tool_use":
            name = a_string(block, "name", where)
            if not name:
                self._unnamed.add(index)
            # Anthropic starts a tool use with an empty input and streams it; a compatible
            # server may give it whole here and stream none.
            start_input = an_object(block.get("input"), f"{where}.input", optional=True)
            if start_input:
                started.start_input = orjson.dumps(start_input).decode()
            return [ToolCallDelta(index, id=a_string(block, "id", where), name=name or None)]
        return []

    def _delta(self, event: dict[str, Any]) -> list[Event]:
        index = self._index(event, "content_block_delta")
        block = self._blocks.get(index)
        if block is None:
            raise Malformed(f"content_block_delta for block {index}, which has not started")
        where = "content_block_delta.delta"
        delta = an_object(event.get("delta"), where)
        kind = (block.kind, a_string(delta, "type", where))
        if kind == ("text", "text_delta"):
            text = a_string(delta, "text", where)
            return [TextDelta(text)] if text else []
        if kind == ("thinking", "thinking_delta"):
            thinking = a_string(delta, "thinking", where) or ""
            block.thinking.append(thinking)
            return [ReasoningDelta(thinking)] if thinking else []
        if kind == ("thinking", "signature_delta"):
            block.signature += a_string(delta, "signature", where) or ""
        elif kind == ("tool_use", "input_json_delta"):
            arguments = a_string(delta, "partial_json", where)
            if arguments:
                block.has_input = True
                return [ToolCallDelta(index, arguments=arguments)]
        # Others (citations, a server tool's input) are not agctl's to read.
        return []

    def _stop(self, event: dict[str, Any]) -> list[Event]:
        index = self._index(event, "content_block_stop")
        block = self._blocks.pop(index, None)
        if block is None:
            raise Malformed(f"content_block_stop for block {index}, which has not started")
        if block.kind == "thinking":
            return [_thinking_part("".join(block.thinking), block.signature)]
        if block.kind == "tool_use" and not block.has_input:
            # No input streamed: the input it started with ({} for a call without
            # arguments, as whole).
            return [ToolCallDelta(index, arguments=block.start_input)]
        return []
