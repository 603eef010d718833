"""A real HTTP server on 127.0.0.1 speaking Anthropic's Messages API (`POST /v1/messages`).

Standard library only, so that agctl's httpx client is tested over real sockets, not mocks:

    with FakeAnthropic(api_key="sk-ant-test") as server:
        server.reply(text="hi", thinking="hmm", tool_uses=[{"name": "f", "input": {}}])
        server.fail("status", status=529, retry_after=1)
        ...  # point the client at server.base_url, then assert on server.requests

Every request needs a key (the one given, else any) in `x-api-key` or, as the official SDK
(2.x) sends it, `Authorization: Bearer`, and an `anthropic-version`, as the real API does.
Unscripted requests get `"echo: <last user text>"`. Faults are consumed first, one per request;
scripted replies are consumed by answered messages only. Whole replies are JSON with a
Content-Length; streams are server-sent events (`event:` and `data:` lines) in the documented
order, with chunked transfer encoding.

Usage is estimated as tests/fake_openai.py does, characters / 4 + 1, per block (a prefix's
tokens are the sum of its blocks'), unless scripted, and a prompt cache is simulated from the
request's `cache_control` breakpoints: the prompt is the blocks in render order (tools, system,
messages); a breakpoint's prefix is the bytes of every block up to and including the marked
one. The longest cached prefix ending at a breakpoint or within the 20 blocks before one is
read (`cache_read_input_tokens`); the prefixes of the breakpoints after it are written
(`cache_creation_input_tokens`, split by each breakpoint's TTL in `cache_creation`) when at
least `min_cache_tokens` long; the rest is `input_tokens`.
Entries never expire (a test's life is shorter than the 5-minute TTL).

Run `python tests/fake_anthropic.py --port 8080` to serve in the foreground.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal, cast, get_args

from loopback import (
    GARBAGE_BODY,
    LoopbackFake,
    LoopbackFault,
    LoopbackHandler,
    content_text,
    fragments,
    number_text,
    pieces,
    serve_in_foreground,
)

FaultKind = Literal[
    "status", "stream_error", "malformed_sse", "garbage", "drop_mid_stream", "slow", "sse"
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
MESSAGES_PATH = "/v1/messages"
MAX_BREAKPOINTS = 4
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # the documented pattern of a tool_use id
LOOKBACK_BLOCKS = 20  # the documented distance the cache looks back from a breakpoint
STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal")
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
BLOCK_TYPES = {
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
}


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    text: str | None
    thinking: str | None
    signature: str
    redacted: tuple[str, ...]
    tool_uses: tuple[ToolUse, ...]
    stop_reason: str
    stop_sequence: str | None
    usage: dict[str, Any] | None
    chunk_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class Fault(LoopbackFault):
    kind: FaultKind
    error_type: str | None


@dataclass(frozen=True)
class Breakpoint:
    """A `cache_control` mark: the block it ends, the prefix's key and tokens, its TTL."""

    block: int
    key: str
    tokens: int
    ttl: str


class FakeAnthropic(LoopbackFake[Reply, Fault]):
    """An Anthropic Messages API server in a daemon thread, for one test."""

    name = "FakeAnthropic"

    def __init__(
        self,
        *,
        port: int = 0,
        api_key: str | None = None,
        min_cache_tokens: int = 1024,
    ) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.min_cache_tokens = min_cache_tokens
        self._cache: dict[str, str] = {}  # prefix key -> the TTL it was written with
        self._tool_numbers = itertools.count(1)

    # Scripting

    def reply(
        self,
        text: str | None = None,
        *,
        thinking: str | None = None,
        signature: str | None = None,
        redacted_thinking: Sequence[str] = (),
        tool_uses: Sequence[Mapping[str, Any]] | None = None,
        stop_reason: str | None = None,
        stop_sequence: str | None = None,
        usage: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        """Queue the next reply: content blocks thinking, redacted thinking, text, tool uses.

        `signature` defaults to one derived from the thinking; `redacted_thinking` is the
        opaque `data` of each redacted block. Tool uses are `{"id"?, "name", "input"}` (input
        a dict or its JSON text). `stop_reason` defaults to "tool_use" when there are some,
        else "end_turn"; `usage` is sent verbatim, else estimated (with the cache simulated).
        `chunk_size` streams text, thinking and input JSON in pieces of that many characters
        (else text and thinking by words, input JSON in three pieces).
        """
        if stop_reason is not None and stop_reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {stop_reason!r}; expected one of {STOP_REASONS}")
        uses = tuple(
            ToolUse(
                id=str(use.get("id") or f"toolu_fake{next(self._tool_numbers):04d}"),
                name=str(use["name"]),
                input=_tool_input(use.get("input", {})),
            )
            for use in tool_uses or ()
        )
        scripted = Reply(
            text=text,
            thinking=thinking,
            signature=signature or _signature(thinking or ""),
            redacted=tuple(redacted_thinking),
            tool_uses=uses,
            stop_reason=stop_reason or ("tool_use" if uses else "end_turn"),
            stop_sequence=stop_sequence,
            usage=dict(usage) if usage is not None else None,
            chunk_size=chunk_size,
        )
        self._queue_reply(scripted)

    def fail(
        self,
        kind: FaultKind,
        *,
        status: int = 500,
        message: str | None = None,
        error_type: str | None = None,
        retry_after: float | None = None,
        seconds: float = 1.0,
        body: bytes = GARBAGE_BODY,
        events: Sequence[Any] = (),
    ) -> None:
        """Queue a fault for the next request; faults are consumed before replies, in order.

        status: `status` with Anthropic's error body (529 is `overloaded_error`), and
            `retry-after: retry_after` if given.
        stream_error: a stream that starts (message_start, a text block's first delta), then
            an `error` event (`error_type`, default overloaded_error) and the end of the
            stream; a whole request gets the same error as a 529.
        malformed_sse: message_start, then `data: {not json`, then the stream ends.
        garbage: 200 with a JSON content type and `body` (not JSON, or JSON of a bad shape).
        drop_mid_stream: the first events, then the connection is closed (whole replies: a
            Content-Length longer than the body sent).
        slow: wait `seconds` before sending anything, then answer with the echo reply.
        sse: 200 and a stream of `events` (objects sent as `event: <type>` and `data:` JSON,
            bytes as raw lines), then the end of the stream.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        self._queue_fault(
            Fault(
                kind=kind,
                status=status,
                message=message,
                error_type=error_type,
                retry_after=retry_after,
                seconds=seconds,
                body=body,
                events=tuple(events),
            )
        )

    def before_reply(self, hook: Callable[[], object]) -> None:
        """Run `hook` (in the server's thread) when the next valid message request has
        arrived, before it is answered; an exception it raises is kept in `errors`."""
        self._queue_hook(hook)

    def pause_stream(self, after: int) -> threading.Event:
        """Hold the next streamed reply after its first `after` events until the returned
        event is set (at most 30 s): a client's reader can act mid-stream at a known moment."""
        return self._queue_pause(after)

    def cached_prefixes(self) -> int:
        """How many prefixes the simulated cache holds."""
        with self._lock:
            return len(self._cache)

    # Used by the handler

    def _serve_cache(
        self, breakpoints: list[Breakpoint], prefixes: list[tuple[str, int]]
    ) -> tuple[int, int, int]:
        """Read the longest cached prefix, write the later breakpoints' prefixes: the tokens
        read, and those written with a 5-minute and with a 1-hour TTL."""
        with self._lock:
            read, read_block = 0, -1
            for mark in reversed(breakpoints):
                first = max(0, mark.block - LOOKBACK_BLOCKS)
                hit = next(
                    (b for b in range(mark.block, first - 1, -1) if prefixes[b][0] in self._cache),
                    None,
                )
                if hit is not None:
                    read_block, read = hit, prefixes[hit][1]
                    break
            written = {"5m": 0, "1h": 0}
            done = read
            for mark in breakpoints:
                if mark.block <= read_block or mark.tokens < self.min_cache_tokens:
                    continue
                self._cache[mark.key] = mark.ttl
                written[mark.ttl] += mark.tokens - done
                done = mark.tokens
            return read, written["5m"], written["1h"]


class RequestError(Exception):
    """A request the real API would refuse with 400: its message names the field."""


class _Handler(LoopbackHandler):
    extra_headers = (("request-id", "req_fake"),)
    event_stream_type = "text/event-stream; charset=utf-8"

    @property
    def fake(self) -> FakeAnthropic:
        return cast(FakeAnthropic, super().fake)

    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._receive(path)
        if (self.command, path) != ("POST", MESSAGES_PATH):
            self._send_error(404, "not_found_error", "Not found")
            return
        stream = isinstance(body, dict) and body.get("stream") is True
        fault = self.fake._next_fault()
        if fault is not None and not self._fault(fault, stream):
            return
        if not self._authorized():
            return
        try:
            _validate(body)
        except RequestError as exc:
            self._send_error(400, "invalid_request_error", str(exc))
            return
        self._messages(body, scripted=fault is None)

    def _authorized(self) -> bool:
        bearer = self.headers.get("Authorization") or ""
        key = self.headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()
        if not key:
            self._send_error(401, "authentication_error", "x-api-key header is required")
            return False
        if self.fake.api_key is not None and key != self.fake.api_key:
            self._send_error(401, "authentication_error", "invalid x-api-key")
            return False
        if not self.headers.get("anthropic-version"):
            self._send_error(400, "invalid_request_error", "anthropic-version: header is required")
            return False
        return True

    def _messages(self, body: dict[str, Any], *, scripted: bool) -> None:
        self.fake._run_hook()
        number, queued = self.fake._next_reply(scripted=scripted)
        reply = queued or Reply(
            text=f"echo: {_last_user_text(body['messages'])}",
            thinking=None,
            signature="",
            redacted=(),
            tool_uses=(),
            stop_reason="end_turn",
            stop_sequence=None,
            usage=None,
        )
        message = _Message(
            id=f"msg_fake{number:04d}",
            model=body["model"],
            reply=reply,
            usage=_usage(self.fake, body, reply),
        )
        if body.get("stream") is not True:
            self._send_json(200, message.response())
            return
        self._start_stream()
        for event in self._paced(message.events()):
            self._send_event(event)
        self._end_stream()

    # Faults

    def _fault(self, fault: Fault, stream: bool) -> bool:
        """Act out a fault; True when the request should then be answered normally."""
        if fault.kind == "status" or (fault.kind == "stream_error" and not stream):
            status = 529 if fault.kind == "stream_error" else fault.status
            headers = {}
            if fault.retry_after is not None:
                headers["retry-after"] = number_text(fault.retry_after)
            phrase = "Overloaded" if status == 529 else HTTPStatus(status).phrase
            self._send_error(
                status,
                fault.error_type or ERROR_TYPES.get(status, "api_error"),
                fault.message or f"{phrase} (injected by FakeAnthropic)",
                headers,
            )
            return False
        plain = self._plain_fault(fault.kind, fault.seconds, fault.body)
        if plain is not None:
            return plain
        if fault.kind == "sse":
            return self._replay(fault.events, b"\n\n")
        probe = _Message(
            id="msg_fault",
            model="fake-model",
            reply=Reply("partial reply that never ends", None, "", (), (), "end_turn", None, None),
            usage=anthropic_usage(10, 1),
        )
        events = probe.events()
        if fault.kind == "stream_error":
            self._start_stream()
            for _ in range(4):  # message_start, ping, content_block_start, the first delta
                self._send_event(next(events))
            error = {
                "type": fault.error_type or "overloaded_error",
                "message": fault.message or "Overloaded",
            }
            self._send_event({"type": "error", "error": error})
            self._end_stream()
            return False
        if fault.kind == "malformed_sse":
            return self._replay(
                [next(events)], last=b"event: content_block_start\ndata: {not json\n\n"
            )
        return self._drop_mid_stream(  # message_start, ping, content_block_start, a delta
            stream,
            itertools.islice(events, 4),
            b'{"id": "msg_fault", "type": "message", "role": "assis',
        )

    # Writing

    def _send_error(
        self, status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        error = {"type": "error", "error": {"type": error_type, "message": message}}
        self._send_json(status, {**error, "request_id": "req_fake"}, headers)

    def _send_event(self, event: dict[str, Any]) -> None:
        data = json.dumps(event, separators=(",", ":")).encode()
        self._send_chunk(b"event: %s\ndata: %s\n\n" % (str(event["type"]).encode(), data))


FakeAnthropic.handler = _Handler


@dataclass(frozen=True)
class _Message:
    """One reply rendered in the wire format, as a whole message or as stream events."""

    id: str
    model: str
    reply: Reply
    usage: dict[str, Any]

    def blocks(self) -> list[dict[str, Any]]:
        reply = self.reply
        blocks: list[dict[str, Any]] = []
        if reply.thinking is not None:
            blocks.append(
                {"type": "thinking", "thinking": reply.thinking, "signature": reply.signature}
            )
        blocks += [{"type": "redacted_thinking", "data": data} for data in reply.redacted]
        if reply.text is not None:
            blocks.append({"type": "text", "text": reply.text})
        blocks += [
            {"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}
            for use in reply.tool_uses
        ]
        return blocks

    def response(self) -> dict[str, Any]:
        return {
            **self._envelope(),
            "content": self.blocks(),
            "stop_reason": self.reply.stop_reason,
            "stop_sequence": self.reply.stop_sequence,
            "usage": self.usage,
        }

    def events(self) -> Iterator[dict[str, Any]]:
        """message_start, a ping, each block's start, deltas and stop, message_delta, stop."""
        size = self.reply.chunk_size
        start_usage = {**self.usage, "output_tokens": 1}
        message = {
            **self._envelope(),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        yield {"type": "message_start", "message": message}
        yield {"type": "ping"}
        for index, block in enumerate(self.blocks()):
            kind = block["type"]
            if kind == "thinking":
                head: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": piece}
                    for piece in pieces(block["thinking"], size)
                ]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            elif kind == "text":
                head = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": piece} for piece in pieces(block["text"], size)
                ]
            elif kind == "tool_use":
                head = {**block, "input": {}}
                arguments = json.dumps(block["input"])
                parts = pieces(arguments, size) if size else fragments(arguments)
                deltas = [
                    {"type": "input_json_delta", "partial_json": piece} for piece in ["", *parts]
                ]
            else:  # redacted_thinking comes whole in its start event
                head, deltas = block, []
            yield {"type": "content_block_start", "index": index, "content_block": head}
            for delta in deltas:
                yield {"type": "content_block_delta", "index": index, "delta": delta}
            yield {"type": "content_block_stop", "index": index}
        yield {
            "type": "message_delta",
            "delta": {
                "stop_reason": self.reply.stop_reason,
                "stop_sequence": self.reply.stop_sequence,
            },
            "usage": {"output_tokens": self.usage["output_tokens"]},
        }
        yield {"type": "message_stop"}

    def _envelope(self) -> dict[str, Any]:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}


# The request


def _validate(body: Any) -> None:
    """Refuse what the real API refuses with 400, naming the field as it does."""
    if not isinstance(body, dict):
        raise RequestError("There was an error parsing the body of your request as JSON")
    if not isinstance(body.get("model"), str):
        raise RequestError("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise RequestError("max_tokens: Field required (an integer of at least 1)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: at least one message is required")
    system = body.get("system")
    if system is not None and not _text_blocks(system):
        raise RequestError("system: Input should be a string or a list of text blocks")
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        raise RequestError("tools: Input should be a valid list")
    for number, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise RequestError(f"tools.{number}.name: Field required")
        if not isinstance(tool.get("input_schema"), dict):
            raise RequestError(f"tools.{number}.input_schema: Field required")
    thinking = body.get("thinking")
    if thinking is not None:
        budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
        if isinstance(thinking, dict) and thinking.get("type") == "enabled":
            if not isinstance(budget, int) or budget < 1024:
                raise RequestError("thinking.enabled.budget_tokens: Input should be >= 1024")
            if budget >= max_tokens:
                raise RequestError("`max_tokens` must be greater than `thinking.budget_tokens`")
        elif not isinstance(thinking, dict) or thinking.get("type") != "disabled":
            raise RequestError("thinking: Input tag does not match 'enabled' or 'disabled'")
    tool_uses: set[str] = set()
    for number, message in enumerate(messages):
        _validate_message(number, message, tool_uses)
    marks = _marks(body)
    if len(marks) > MAX_BREAKPOINTS:
        raise RequestError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    ttls = [_ttl(control) for _, control in marks]
    for number, (where, _) in enumerate(marks):
        if ttls[number] == "1h" and "5m" in ttls[:number]:
            raise RequestError(
                f"{where}.cache_control.ttl: a ttl='1h' cache_control block must not come after "
                "a ttl='5m' cache_control block. Note that blocks are processed in the following "
                "order: `tools`, `system`, `messages`."
            )


def _marks(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Where each `cache_control` is (`system.1`, `messages.3.content.0`), in render order."""
    places: list[tuple[str, Any]] = []
    for number, tool in enumerate(body.get("tools") or []):
        places.append((f"tools.{number}", tool))
    system = body.get("system")
    for number, block in enumerate(system if isinstance(system, list) else []):
        places.append((f"system.{number}", block))
    for number, message in enumerate(body["messages"]):
        content = message["content"]
        for place, block in enumerate(content if isinstance(content, list) else []):
            places.append((f"messages.{number}.content.{place}", block))
    return [(where, block["cache_control"]) for where, block in places if "cache_control" in block]


def _ttl(control: Any) -> str:
    return "1h" if isinstance(control, dict) and control.get("ttl") == "1h" else "5m"


def _text_blocks(system: Any) -> bool:
    """Whether `system` is a string or a list of text blocks."""
    if isinstance(system, str):
        return True
    return isinstance(system, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in system
    )


def _validate_message(number: int, message: Any, tool_uses: set[str]) -> None:
    """One message: its role, its blocks, and each tool result answering a tool use just before."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise RequestError(f"messages.{number}.role: Input should be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        tool_uses.clear()
        return
    if not isinstance(content, list):
        raise RequestError(f"messages.{number}.content: Input should be a string or a list")
    asked = set()
    for place, block in enumerate(content):
        where = f"messages.{number}.content.{place}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES:
            raise RequestError(f"{where}: Input tag {kind!r} does not match any expected tag")
        if kind == "tool_use":
            if message["role"] != "assistant" or not isinstance(block.get("id"), str):
                raise RequestError(f"{where}: tool_use blocks need an id, from the assistant")
            if not TOOL_USE_ID.fullmatch(block["id"]):
                raise RequestError(
                    f"{where}.id: String should match pattern '{TOOL_USE_ID.pattern}'"
                )
            asked.add(block["id"])
        elif kind == "tool_result" and block.get("tool_use_id") not in tool_uses:
            raise RequestError(
                f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{block.get('tool_use_id')}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        elif kind == "thinking" and not isinstance(block.get("signature"), str):
            raise RequestError(f"{where}.signature: Field required")
    tool_uses.clear()
    tool_uses.update(asked)


def _blocks(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The prompt's blocks in the cache's render order: tools, system, then messages."""
    blocks: list[dict[str, Any]] = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    system = body.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks += [b for b in system if isinstance(b, dict)]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks += [{**b, "role": message["role"]} for b in content if isinstance(b, dict)]
    return blocks


def _block_text(block: Mapping[str, Any]) -> str:
    """The characters a block is counted by."""
    if "input_schema" in block:
        return (
            str(block["name"])
            + str(block.get("description", ""))
            + json.dumps(block["input_schema"])
        )
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind == "tool_use":
        return str(block.get("name", "")) + json.dumps(block.get("input", {}))
    if kind == "tool_result":
        return content_text(block.get("content", ""))
    return json.dumps(block)


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "".join(_block_text(b) for b in content if b.get("type") in ("text", "tool_result"))
    return ""


# Usage and the cache


def _breakpoints(body: Mapping[str, Any]) -> tuple[list[Breakpoint], list[tuple[str, int]]]:
    """The request's breakpoints, and the cache key and tokens of the prefix ending at each
    block: a block counts len(text) // 4 + 1 tokens, as tests/fake_openai.py estimates."""
    digest = hashlib.sha256(str(body["model"]).encode())
    prefixes: list[tuple[str, int]] = []
    marks: list[Breakpoint] = []
    tokens = 0
    for number, block in enumerate(_blocks(body)):
        bare = {name: value for name, value in block.items() if name != "cache_control"}
        digest.update(json.dumps(bare, sort_keys=True).encode() + b"\n")
        tokens += len(_block_text(block)) // 4 + 1
        prefixes.append((digest.copy().hexdigest(), tokens))
        if "cache_control" in block:
            marks.append(Breakpoint(number, prefixes[-1][0], tokens, _ttl(block["cache_control"])))
    return marks, prefixes


def _usage(fake: FakeAnthropic, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The reply's usage: as scripted, else estimated with the simulated cache's counts."""
    if reply.usage is not None:
        return reply.usage
    marks, prefixes = _breakpoints(body)
    prompt = prefixes[-1][1] if prefixes else 0
    read, written_5m, written_1h = fake._serve_cache(marks, prefixes)
    output = len(reply.text or "") + len(reply.thinking or "")
    output += sum(len(use.name) + len(json.dumps(use.input)) for use in reply.tool_uses)
    written = written_5m + written_1h
    return anthropic_usage(
        prompt - read - written,
        output // 4 + 1,
        cache_read=read,
        cache_write_5m=written_5m,
        cache_write_1h=written_1h,
    )


def anthropic_usage(
    input_tokens: int,
    output_tokens: int,
    *,
    cache_read: int = 0,
    cache_write_5m: int = 0,
    cache_write_1h: int = 0,
) -> dict[str, Any]:
    """A `usage` as Anthropic sends it, for `reply(usage=...)`: `input_tokens` are the prompt's
    tokens after the last cache read or write, the cache fields are beside it, not in it."""
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_write_5m + cache_write_1h,
        "cache_read_input_tokens": cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": cache_write_5m,
            "ephemeral_1h_input_tokens": cache_write_1h,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _tool_input(value: Any) -> dict[str, Any]:
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, dict):
        raise ValueError(f"a tool use's input is a JSON object, not {parsed!r}")
    return parsed


def _signature(thinking: str) -> str:
    """A stand-in for the opaque signature: base64, derived from the thinking it signs."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest() * 2).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Anthropic API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require this x-api-key")
    parser.add_argument("--min-cache-tokens", type=int, default=1024)
    args = parser.parse_args()
    fake = FakeAnthropic(
        port=args.port, api_key=args.api_key, min_cache_tokens=args.min_cache_tokens
    )
    serve_in_foreground(fake)


if __name__ == "__main__":
    main()
