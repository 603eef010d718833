"""A real HTTP server on 127.0.0.1 speaking the Gemini API (generativelanguage v1beta).

Standard library only, so that a Gemini client is tested over real sockets, not mocks:

    with FakeGemini(api_key="k") as server:
        server.reply(text="hi", thought="hmm", function_calls=[{"name": "f", "args": {}}])
        server.fail("status", status=429, retry_delay=2)
        ...  # point the client at server.base_url, then assert on server.requests

Endpoints: `POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent` (`?alt=sse`: SSE `data:` lines, each a whole
GenerateContentResponse; without it, one JSON array of them), `GET /v1beta/models`.
The key goes in `x-goog-api-key` (or `?key=`): a missing one gets Google's 403
PERMISSION_DENIED, a wrong one its 400 INVALID_ARGUMENT / API_KEY_INVALID.

A request Gemini refuses gets its 400 INVALID_ARGUMENT: an unknown field, a part with no
data or two (`"text": ""` is none: Google reads JSON as proto3 does, "" as unset), in
`contents` or in `systemInstruction`, an empty `parts`, a model turn's calls not answered
one for one by the next content, an unsigned call when `require_signatures` is set.

Unscripted requests get `"echo: <last user text>"`. Faults are consumed first, one per
request to a generate endpoint; scripted replies are consumed by generate requests only.
Thought parts are sent only when the request asks `thinkingConfig.includeThoughts`
(thoughtsTokenCount is counted either way), as Gemini does. A thought signature goes on
the first functionCall part, else on the last part (streams: the last text chunk).

Implicit caching: a request whose leading blocks (model, systemInstruction, tools and
toolConfig as one block, then each `contents` entry) are byte-identical (as re-serialised
compactly, key order kept) to a prefix of an earlier request's gets that prefix's tokens as
`cachedContentTokenCount`, when they reach `cache_min_tokens`. Tokens are estimated as
fake_openai does: characters // 4 (+ 1 for a whole prompt or reply).

Run `python tests/fake_gemini.py --port 8080` to serve in the foreground.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal, cast, get_args
from urllib.parse import parse_qs, urlsplit

from loopback import (
    GARBAGE_BODY,
    LoopbackFake,
    LoopbackFault,
    LoopbackHandler,
    number_text,
    pieces,
    serve_in_foreground,
)

FaultKind = Literal["status", "malformed_sse", "slow", "drop_mid_stream", "garbage", "sse"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
API_VERSION = "v1beta"
GENERATE_PATH = re.compile(
    rf"^/{API_VERSION}/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$"
)
MODELS_PATH = f"/{API_VERSION}/models"
# The minimum prefix Gemini's implicit cache reports (2.5 Flash: 1,024 tokens).
CACHE_MIN_TOKENS = 1024
MISSING_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
INVALID_KEY = "API key not valid. Please pass a valid API key."
# google.rpc.Code names by HTTP status, as the `status` of an error body.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
REQUEST_FIELDS = {
    "model",
    "contents",
    "tools",
    "toolConfig",
    "safetySettings",
    "systemInstruction",
    "generationConfig",
    "cachedContent",
}
GENERATION_FIELDS = {
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "responseModalities",
    "candidateCount",
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseLogprobs",
    "logprobs",
    "enableEnhancedCivicAnswers",
    "speechConfig",
    "thinkingConfig",
    "mediaResolution",
}
THINKING_FIELDS = {"thinkingBudget", "includeThoughts", "thinkingLevel"}
PART_DATA = {
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
}
PART_FIELDS = PART_DATA | {"thought", "thoughtSignature", "videoMetadata", "partMetadata"}


@dataclass(frozen=True)
class FunctionCall:
    name: str
    args: dict[str, Any]
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    text: str | None
    thought: str | None
    signature: str | None
    function_calls: tuple[FunctionCall, ...]
    finish_reason: str
    usage: dict[str, Any] | None
    chunk_size: int | None = None
    block_reason: str | None = None
    usage_apart: bool = False


@dataclass(frozen=True, kw_only=True)
class Fault(LoopbackFault):
    kind: FaultKind
    retry_delay: float | None


class GeminiError(Exception):
    """A request the real API refuses: its HTTP status and message."""

    def __init__(self, status: int, message: str, details: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = list(details)


class FakeGemini(LoopbackFake[Reply, Fault]):
    """A Gemini API server in a daemon thread, for one test."""

    name = "FakeGemini"

    def __init__(
        self,
        *,
        port: int = 0,
        api_key: str | None = None,
        cache_min_tokens: int = CACHE_MIN_TOKENS,
        require_signatures: bool = False,
    ) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.cache_min_tokens = cache_min_tokens
        self.require_signatures = require_signatures
        self._prefixes: set[bytes] = set()
        self._signatures = itertools.count(1)

    def url(self, model: str, *, stream: bool = False) -> str:
        """The full URL of a model's generate method (streams with `alt=sse`)."""
        if stream:
            return f"{self.base_url}/{API_VERSION}/models/{model}:streamGenerateContent?alt=sse"
        return f"{self.base_url}/{API_VERSION}/models/{model}:generateContent"

    # Scripting

    def reply(
        self,
        text: str | None = None,
        *,
        thought: str | None = None,
        signature: str | None = None,
        function_calls: Sequence[Mapping[str, Any]] | None = None,
        finish_reason: str = "STOP",
        usage: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
        block_reason: str | None = None,
        usage_apart: bool = False,
    ) -> None:
        """Queue the next model reply.

        Function calls are `{"name", "args"?, "id"?}`, sent whole (streams: all in one chunk).
        `signature` is the thought signature; replies with function calls get a generated one
        when none is given (Gemini 3 always signs them). `finish_reason` is Gemini's (STOP,
        MAX_TOKENS, SAFETY, RECITATION, MALFORMED_FUNCTION_CALL, ...); with no text, thought
        or calls the candidate has no content. `block_reason` refuses the prompt instead:
        no candidates, `promptFeedback.blockReason`. `usage` is sent verbatim as
        usageMetadata, else estimated. `chunk_size` streams text in pieces of that many
        characters (else word by word); `usage_apart` ends the stream with a chunk that has
        no parts, only finishReason and the final usage.
        """
        calls = tuple(
            FunctionCall(
                name=str(call["name"]),
                args=dict(call.get("args") or {}),
                id=str(call["id"]) if call.get("id") is not None else None,
            )
            for call in function_calls or ()
        )
        if signature is None and calls:
            signature = _signature(next(self._signatures))
        scripted = Reply(
            text=text,
            thought=thought,
            signature=signature,
            function_calls=calls,
            finish_reason=finish_reason,
            usage=dict(usage) if usage is not None else None,
            chunk_size=chunk_size,
            block_reason=block_reason,
            usage_apart=usage_apart,
        )
        self._queue_reply(scripted)

    def fail(
        self,
        kind: FaultKind,
        *,
        status: int = 500,
        message: str | None = None,
        retry_delay: float | None = None,
        retry_after: float | None = None,
        seconds: float = 1.0,
        body: bytes = GARBAGE_BODY,
        events: Sequence[Any] = (),
    ) -> None:
        """Queue a fault for the next generate request; faults come before replies, in order.

        status: `status` with Google's error body; `retry_delay` adds a google.rpc.RetryInfo
            detail (`"retryDelay": "2s"`, as Gemini says how long to wait), `retry_after` a
            `Retry-After` header (as a proxy in front of it might).
        malformed_sse: one good chunk, then `data: {not json`, then the stream ends.
        slow: wait `seconds` before sending anything, then answer with the echo reply.
        drop_mid_stream: headers and two chunks, then the connection is closed (whole replies:
            a Content-Length longer than the body sent).
        garbage: 200 with a JSON content type and `body` (not JSON, or JSON of a bad shape).
        sse: 200 and a stream of `events` (objects sent as `data:` JSON, bytes as raw lines).
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        self._queue_fault(
            Fault(
                kind=kind,
                status=status,
                message=message,
                retry_delay=retry_delay,
                retry_after=retry_after,
                seconds=seconds,
                body=body,
                events=tuple(events),
            )
        )

    # Used by the handler

    def _cached_tokens(self, model: str, body: dict[str, Any]) -> int:
        """The tokens of the longest known prefix (if long enough); remember this request's."""
        cumulative = hashlib.sha256()
        matched_chars = chars = 0
        keys = []
        for block, block_chars in _blocks(model, body):
            cumulative.update(hashlib.sha256(block).digest())
            chars += block_chars
            keys.append((cumulative.copy().digest(), chars))
        with self._lock:
            for key, prefix_chars in keys:
                if key in self._prefixes:
                    matched_chars = prefix_chars
            self._prefixes.update(key for key, _ in keys)
        tokens = matched_chars // 4
        return tokens if tokens and tokens >= self.cache_min_tokens else 0


class _GeminiHandler(LoopbackHandler):
    @property
    def fake(self) -> FakeGemini:
        return cast(FakeGemini, super().fake)

    # Routing

    def _route(self) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        body = self._receive(split.path)
        generate = GENERATE_PATH.match(split.path)
        if self.command == "GET" and split.path == MODELS_PATH:
            if self._key_accepted(query):
                self._send_json(200, {"models": [{"name": "models/fake-gemini"}]})
            return
        if self.command != "POST" or generate is None:
            self._send_error(404, f"Method not found: {self.command} {split.path}")
            return
        streaming = generate["method"] == "streamGenerateContent"
        sse = streaming and query.get("alt") == ["sse"]
        fault = self.fake._next_fault()
        if fault is not None and not self._act_out(fault, streaming):
            return
        if not self._key_accepted(query):
            return
        try:
            request = _validate(body, self.fake.require_signatures)
        except GeminiError as refused:
            self._send_error(refused.status, refused.message, details=refused.details)
            return
        self._generate(generate["model"], request, streaming, sse, scripted=fault is None)

    def _key_accepted(self, query: Mapping[str, list[str]]) -> bool:
        key = self.headers.get("x-goog-api-key") or next(iter(query.get("key", [])), None)
        if not key:
            self._send_error(403, MISSING_KEY)
            return False
        if self.fake.api_key is not None and key != self.fake.api_key:
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
            self._send_error(400, INVALID_KEY, details=[info])
            return False
        return True

    def _generate(
        self, model: str, body: dict[str, Any], streaming: bool, sse: bool, *, scripted: bool
    ) -> None:
        number, queued = self.fake._next_reply(scripted=scripted)
        reply = queued or Reply(
            text=f"echo: {_last_user_text(body['contents'])}",
            thought=None,
            signature=None,
            function_calls=(),
            finish_reason="STOP",
            usage=None,
        )
        cached = self.fake._cached_tokens(model, body)
        response = _Response(
            response_id=f"fake-response-{number}",
            model=model,
            reply=reply,
            usage=reply.usage if reply.usage is not None else _estimate(body, reply, cached),
            include_thoughts=_include_thoughts(body),
        )
        if not streaming:
            self._send_json(200, response.whole())
        elif sse:
            self._start_stream()
            for chunk in response.chunks():
                self._send_event(chunk)
            self._end_stream()
        else:
            self._start_json_stream()
            for index, chunk in enumerate(response.chunks()):
                self._send_chunk((b"[" if index == 0 else b",\r\n") + json.dumps(chunk).encode())
            self._send_chunk(b"]")
            self._end_stream()

    # Faults

    def _act_out(self, fault: Fault, streaming: bool) -> bool:
        """Act out a fault; True when the request should then be answered normally."""
        if fault.kind == "status":
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = number_text(fault.retry_after)
            details = []
            if fault.retry_delay is not None:
                details.append(
                    {
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": f"{number_text(fault.retry_delay)}s",
                    }
                )
            message = fault.message or (
                f"{HTTPStatus(fault.status).phrase} (injected by FakeGemini)"
            )
            self._send_error(fault.status, message, details=details, headers=headers)
            return False
        plain = self._plain_fault(fault.kind, fault.seconds, fault.body)
        if plain is not None:
            return plain
        if fault.kind == "sse":
            return self._replay(fault.events, b"\r\n\r\n")
        probe = _Response(
            response_id="fake-response-fault",
            model="fake-gemini",
            reply=Reply("partial reply that never ends", None, None, (), "STOP", None),
            usage={"promptTokenCount": 1, "totalTokenCount": 1},
            include_thoughts=False,
        )
        chunks = probe.chunks()
        if fault.kind == "malformed_sse":
            return self._replay([next(chunks)], last=b"data: {not json\r\n\r\n")
        return self._drop_mid_stream(  # the first two chunks
            streaming,
            itertools.islice(chunks, 2),
            b'{"candidates": [{"content": {"parts": [{"text": "partial',
            "application/json; charset=UTF-8",
        )

    # Writing

    def _send_event(self, chunk: dict[str, Any]) -> None:
        """One SSE event, ended by CRLF CRLF as Google's servers end them."""
        self._send_chunk(b"data: " + _compact(chunk) + b"\r\n\r\n")

    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj, indent=2, ensure_ascii=False).encode()
        self._send_bytes(status, data, "application/json; charset=UTF-8", headers)

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        details: Sequence[Any] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Google's error body: `{"error": {"code", "message", "status", "details"?}}`."""
        error: dict[str, Any] = {
            "code": status,
            "message": message,
            "status": STATUS_NAMES.get(status, "UNKNOWN"),
        }
        if details:
            error["details"] = list(details)
        self._send_json(status, {"error": error}, headers)


FakeGemini.handler = _GeminiHandler


@dataclass(frozen=True)
class _Response:
    """One reply as a GenerateContentResponse, whole or as stream chunks."""

    response_id: str
    model: str
    reply: Reply
    usage: dict[str, Any]
    include_thoughts: bool

    def whole(self) -> dict[str, Any]:
        reply = self.reply
        if reply.block_reason is not None:
            return self._envelope(None, self.usage, block=True)
        parts: list[dict[str, Any]] = []
        if reply.thought is not None and self.include_thoughts:
            parts.append({"text": reply.thought, "thought": True})
        if reply.text is not None:
            parts.append({"text": reply.text})
        parts.extend(_call_part(call) for call in reply.function_calls)
        _sign(parts, reply)
        return self._envelope(parts, self.usage, finish=True)

    def chunks(self) -> Iterator[dict[str, Any]]:
        """Thought pieces, text pieces, then every call in one chunk, finishReason on the
        last; each chunk's usageMetadata the running totals (the last one the reply's), and
        with `usage_apart` the final counts in a chunk of their own, as Gemini 3 sends them."""
        reply = self.reply
        if reply.block_reason is not None:
            yield self._envelope(None, self.usage, block=True)
            return
        groups: list[list[dict[str, Any]]] = []
        if reply.thought is not None and self.include_thoughts:
            groups += [
                [{"text": p, "thought": True}] for p in pieces(reply.thought, reply.chunk_size)
            ]
        groups += [[{"text": p}] for p in pieces(reply.text or "", reply.chunk_size)]
        if reply.function_calls:
            groups.append([_call_part(call) for call in reply.function_calls])
        if groups:
            _sign(groups[-1], reply)
        thought_total = sum(_part_chars(g[0]) for g in groups if g[0].get("thought"))
        answer_total = sum(_part_chars(p) for g in groups for p in g if not p.get("thought"))
        thought_sent = answer_sent = 0
        for index, parts in enumerate(groups):
            for part in parts:
                if part.get("thought"):
                    thought_sent += _part_chars(part)
                else:
                    answer_sent += _part_chars(part)
            last = index == len(groups) - 1 and not reply.usage_apart
            usage = (
                self.usage
                if last
                else _running(
                    self.usage,
                    thought_sent / thought_total if thought_total else 1.0,
                    answer_sent / answer_total if answer_total else 1.0,
                )
            )
            yield self._envelope(parts, usage, finish=last)
        if not groups or reply.usage_apart:
            yield self._envelope(None, self.usage, finish=True)

    def _envelope(
        self,
        parts: list[dict[str, Any]] | None,
        usage: dict[str, Any],
        *,
        finish: bool = False,
        block: bool = False,
    ) -> dict[str, Any]:
        response: dict[str, Any] = {}
        if block:
            response["promptFeedback"] = {"blockReason": self.reply.block_reason}
        else:
            candidate: dict[str, Any] = {}
            if parts:
                candidate["content"] = {"parts": parts, "role": "model"}
            if finish:
                candidate["finishReason"] = self.reply.finish_reason
            candidate["index"] = 0
            response["candidates"] = [candidate]
        response["usageMetadata"] = usage
        response["modelVersion"] = self.model
        response["responseId"] = self.response_id
        return response


def _running(usage: dict[str, Any], thought: float, answer: float) -> dict[str, Any]:
    """The usage after `thought` and `answer` (fractions) of the reply were sent: the
    thoughts' and candidates' counts so far, and their total."""
    running = dict(usage)
    total = running.get("totalTokenCount", 0)
    for name, fraction in (("thoughtsTokenCount", thought), ("candidatesTokenCount", answer)):
        if name in running:
            so_far = int(running[name] * fraction)
            total -= running[name] - so_far
            running[name] = so_far
    if "totalTokenCount" in running:
        running["totalTokenCount"] = total
    return running


def _call_part(call: FunctionCall) -> dict[str, Any]:
    function_call: dict[str, Any] = {"name": call.name, "args": call.args}
    if call.id is not None:
        function_call = {"id": call.id, **function_call}
    return {"functionCall": function_call}


def _sign(parts: list[dict[str, Any]], reply: Reply) -> None:
    """Put the signature where Gemini does: the first call, else the last part."""
    if reply.signature is None or not parts:
        return
    calls = [part for part in parts if "functionCall" in part]
    (calls[0] if calls else parts[-1])["thoughtSignature"] = reply.signature


def _signature(number: int) -> str:
    """An opaque base64 signature, as Gemini's are."""
    return base64.b64encode(f"fake-thought-signature-{number}".encode()).decode()


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# Requests


def _camel(name: str) -> str:
    """The lowerCamel form of a proto field name (Google's JSON accepts both spellings)."""
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _check_fields(obj: Mapping[str, Any], known: set[str], where: str) -> None:
    for name in obj:
        if _camel(name) not in known:
            raise GeminiError(
                400,
                f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': "
                "Cannot find field.",
            )


def _get(obj: Mapping[str, Any], name: str) -> Any:
    """A field by its lowerCamel or its snake_case name."""
    if name in obj:
        return obj[name]
    return obj.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name))


def _validate(body: Any, require_signatures: bool) -> dict[str, Any]:
    """The request if Gemini would take it, else the GeminiError it would answer."""
    if not isinstance(body, dict):
        raise GeminiError(400, "Invalid JSON payload received. Expected an object.")
    _check_fields(body, REQUEST_FIELDS, "")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise GeminiError(400, "* GenerateContentRequest.contents: contents is not specified\n")
    system = _get(body, "systemInstruction")
    if system is not None:
        system_parts = system.get("parts") if isinstance(system, dict) else None
        if not isinstance(system_parts, list):
            raise GeminiError(400, "* GenerateContentRequest.system_instruction.parts: required\n")
        for j, part in enumerate(system_parts):
            _check_part(part, f"system_instruction.parts[{j}]")
    for i, content in enumerate(contents):
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            raise GeminiError(400, f"* GenerateContentRequest.contents[{i}].parts: required\n")
        if not content["parts"]:
            raise GeminiError(
                400,
                f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be "
                "empty.\n",
            )
        if content.get("role", "user") not in ("user", "model"):
            raise GeminiError(400, "Please use a valid role: user, model.")
        for j, part in enumerate(content["parts"]):
            _check_part(part, f"contents[{i}].parts[{j}]")
            call = _get(part, "functionCall")
            if require_signatures and call is not None and not _get(part, "thoughtSignature"):
                first = not any(_get(p, "functionCall") is not None for p in content["parts"][:j])
                if first:
                    raise GeminiError(
                        400,
                        f"Function call `{call.get('name')}` in the {i + 1}. content block "
                        "is missing a `thought_signature`.",
                    )
    _check_responses(contents)
    config = _get(body, "generationConfig")
    if config is not None:
        if not isinstance(config, dict):
            raise GeminiError(400, "Invalid value at 'generation_config': expected an object")
        _check_fields(config, GENERATION_FIELDS, "generation_config")
        thinking = _get(config, "thinkingConfig")
        if isinstance(thinking, dict):
            _check_fields(thinking, THINKING_FIELDS, "generation_config.thinking_config")
    return body


def _check_part(part: Any, where: str) -> None:
    if not isinstance(part, dict):
        raise GeminiError(400, f"Invalid value at '{where}': expected an object")
    _check_fields(part, PART_FIELDS, where)
    # Google reads JSON as proto3 does: an empty string is a field left unset, so a part
    # whose only data is `"text": ""` has none.
    present = [name for name in part if _camel(name) in PART_DATA and part[name] != ""]
    if len(present) != 1:
        raise GeminiError(
            400,
            f"* GenerateContentRequest.{where}.data: required oneof field 'data' must have "
            "one initialized field\n",
        )
    call = _get(part, "functionCall")
    if call is not None and not (isinstance(call, dict) and call.get("name")):
        raise GeminiError(400, f"* GenerateContentRequest.{where}.function_call.name: empty\n")
    response = _get(part, "functionResponse")
    if response is not None and not (
        isinstance(response, dict)
        and response.get("name")
        and isinstance(response.get("response"), dict)
    ):
        raise GeminiError(
            400, f"* GenerateContentRequest.{where}.function_response: name and response\n"
        )


def _check_responses(contents: list[Any]) -> None:
    """Each model turn's calls are answered, by the next content, with as many responses."""
    for i, content in enumerate(contents[:-1]):
        calls = sum(_get(p, "functionCall") is not None for p in content["parts"])
        answers = sum(_get(p, "functionResponse") is not None for p in contents[i + 1]["parts"])
        if calls and answers != calls:
            raise GeminiError(
                400,
                "Please ensure that the number of function response parts is equal to the "
                "number of function call parts of the function call turn.",
            )


def _include_thoughts(body: dict[str, Any]) -> bool:
    config = _get(body, "generationConfig") or {}
    thinking = _get(config, "thinkingConfig") or {}
    return _get(thinking, "includeThoughts") is True


def _last_user_text(contents: list[Any]) -> str:
    """The last user content's text, else the names of the function responses it carries."""
    for content in reversed(contents):
        if content.get("role", "user") == "user":
            parts = content["parts"]
            text = "".join(str(part.get("text", "")) for part in parts)
            answered = [_get(part, "functionResponse") for part in parts]
            names = [str(response["name"]) for response in answered if response is not None]
            return text or " ".join(f"functionResponse {name}" for name in names)
    return ""


# Tokens and the implicit cache


def _part_chars(part: Mapping[str, Any]) -> int:
    if isinstance(part.get("text"), str):
        return len(part["text"])
    return sum(len(json.dumps(value)) for name, value in part.items() if _camel(name) in PART_DATA)


def _content_chars(content: Any) -> int:
    if not isinstance(content, dict):
        return 0
    return sum(_part_chars(part) for part in content.get("parts") or [] if isinstance(part, dict))


def _head_chars(body: dict[str, Any]) -> int:
    """The system instruction's text and the tool declarations' JSON."""
    tools = _get(body, "tools")
    return _content_chars(_get(body, "systemInstruction")) + (
        len(json.dumps(tools)) if tools else 0
    )


def _blocks(model: str, body: dict[str, Any]) -> Iterator[tuple[bytes, int]]:
    """The request's cacheable blocks in order, with their characters."""
    head = {
        "model": model,
        "systemInstruction": _get(body, "systemInstruction"),
        "tools": _get(body, "tools"),
        "toolConfig": _get(body, "toolConfig"),
    }
    yield _compact(head), _head_chars(body)
    for content in body["contents"]:
        yield _compact(content), _content_chars(content)


def prompt_chars(body: dict[str, Any]) -> int:
    """The characters the fake counts in a request: system text, tools JSON, contents."""
    return _head_chars(body) + sum(_content_chars(c) for c in body["contents"])


def _estimate(body: dict[str, Any], reply: Reply, cached: int) -> dict[str, Any]:
    prompt = prompt_chars(body) // 4 + 1
    reply_chars = len(reply.text or "")
    reply_chars += sum(len(call.name) + len(json.dumps(call.args)) for call in reply.function_calls)
    candidates = reply_chars // 4 + 1
    thoughts = len(reply.thought) // 4 + 1 if reply.thought is not None else 0
    return gemini_usage(prompt, candidates, cached=cached, thoughts=thoughts)


def gemini_usage(
    prompt: int, candidates: int, *, cached: int = 0, thoughts: int = 0
) -> dict[str, Any]:
    """A `usageMetadata` as Gemini sends it, for `reply(usage=...)`: the cached tokens a part
    of promptTokenCount, thoughts apart from candidatesTokenCount, both in the total; the
    counts that are zero left out."""
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": candidates}
    usage["totalTokenCount"] = prompt + candidates + thoughts
    if cached:
        usage["cachedContentTokenCount"] = cached
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    if cached:
        usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Gemini API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--api-key", default=None, help="require this key (else any key)")
    parser.add_argument("--cache-min-tokens", type=int, default=CACHE_MIN_TOKENS)
    args = parser.parse_args()
    fake = FakeGemini(port=args.port, api_key=args.api_key, cache_min_tokens=args.cache_min_tokens)
    serve_in_foreground(fake)


if __name__ == "__main__":
    main()
