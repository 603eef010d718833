"""A real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions wire format.

Standard library only, so that agctl's httpx client is tested over real sockets, not mocks:

    with FakeOpenAI() as server:
        server.reply(text="hi", reasoning="hmm", tool_calls=[{"name": "f", "arguments": "{}"}])
        server.fail("status", status=429, retry_after=1)
        ...  # point the client at server.base_url, then assert on server.requests

Unscripted requests get `"echo: <last user message>"`. Faults are consumed first, one per
request to a known endpoint; scripted replies are consumed by chat completions only.
Responses use HTTP/1.1: JSON with a Content-Length, streams with chunked transfer encoding.

`FakeOpenAI(cache="openai")` (or "deepseek") answers unscripted usage as that provider's
prefix cache would (tests/cachesim.py): the cached-token fields a real reply carries.

Run `python tests/fake_openai.py --port 8080` to serve in the foreground.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from loopback import GARBAGE_BODY as GARBAGE_BODY
from loopback import Headers as Headers
from loopback import (
    LoopbackFake,
    LoopbackFault,
    LoopbackHandler,
    content_text,
    fragments,
    number_text,
    pieces,
    serve_in_foreground,
)
from loopback import RecordedRequest as RecordedRequest

if TYPE_CHECKING:
    from cachesim import PrefixCache, Rule

FaultKind = Literal[
    "status",
    "malformed_sse",
    "slow",
    "drop_mid_stream",
    "garbage",
    "sse",
    "keepalive",
    "drip",
    "oversize",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
FINGERPRINT = "fp_fake"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    text: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: dict[str, Any] | None
    chunk_size: int | None = None
    # Ollama's shape: every call streamed whole, in one chunk, as index 0.
    same_index: bool = False


@dataclass(frozen=True, kw_only=True)
class Fault(LoopbackFault):
    kind: FaultKind
    error_type: str | None
    code: str | None
    retry_after_ms: float | None = None
    interval: float = 0.1
    size: int = 0
    piece: int = 1


class FakeOpenAI(LoopbackFake[Reply, Fault]):
    """An OpenAI-compatible chat-completions server in a daemon thread, for one test."""

    name = "FakeOpenAI"

    def __init__(
        self,
        *,
        port: int = 0,
        model: str = "fake-model",
        api_key: str | None = None,
        cache: str | None = None,
    ) -> None:
        super().__init__(port=port)
        self.model = model
        self.api_key = api_key
        self.cache = _prefix_cache(cache)
        self._call_numbers = itertools.count(1)

    @property
    def base_url(self) -> str:
        """The root the SDKs take as base URL: requests go to `base_url + "/chat/completions"`."""
        return f"{super().base_url}/v1"

    # Scripting

    def reply(
        self,
        text: str | None = None,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        finish_reason: str | None = None,
        usage: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
        same_index: bool = False,
    ) -> None:
        """Queue the next assistant reply; `text=None` means null content.

        Tool calls are complete calls `{"id"?, "name", "arguments"}` (arguments a JSON string or
        a dict); `finish_reason` defaults to "tool_calls" when there are some, else "stop";
        `usage` is sent verbatim, else estimated from the request and reply lengths.
        `chunk_size` streams text, reasoning and arguments in pieces of that many characters
        (else text by words and arguments in three pieces). `same_index` streams the calls
        as Ollama does: each whole in one chunk, every one as index 0.
        """
        calls = tuple(
            ToolCall(
                id=str(call.get("id") or f"call_fake{next(self._call_numbers)}"),
                name=str(call["name"]),
                arguments=_arguments_text(call.get("arguments", "")),
            )
            for call in tool_calls or ()
        )
        scripted = Reply(
            text=text,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason=finish_reason or ("tool_calls" if calls else "stop"),
            usage=dict(usage) if usage is not None else None,
            chunk_size=chunk_size,
            same_index=same_index,
        )
        self._queue_reply(scripted)

    def fail(
        self,
        kind: FaultKind,
        *,
        status: int = 500,
        message: str | None = None,
        error_type: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        seconds: float = 1.0,
        interval: float = 0.1,
        size: int = 0,
        body: bytes = GARBAGE_BODY,
        events: Sequence[Any] = (),
        piece: int = 1,
    ) -> None:
        """Queue a fault for the next request; faults are consumed before replies, in order.

        status: `status` with an OpenAI error body (and `Retry-After: retry_after`,
            `retry-after-ms: retry_after_ms` if given).
        malformed_sse: one good chunk, then `data: {not json`, then the stream ends.
        slow: wait `seconds` before sending anything, then answer with the echo reply.
        drop_mid_stream: headers and two chunks, then the connection is closed (non-streaming:
            a Content-Length longer than the body sent).
        garbage: 200 with a JSON content type and `body` (not JSON, or JSON of a bad shape).
        sse: 200 and a stream of `events` (objects sent as `data:` JSON, bytes as raw lines),
            then `data: [DONE]`.
        keepalive: for `seconds`, every `interval`, something that carries no data (streams:
            a comment, a ping event, a blank event, an empty delta; JSON: a space), then the
            reply (the next scripted one, else the echo). The server stops by itself.
        drip: the reply (scripted, else the echo) `piece` bytes (default 1) every
            `interval` for `seconds`, then the rest at once.
        oversize: a well-formed echo reply whose text is `size` bytes of "x".
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        fault = Fault(
            kind=kind,
            status=status,
            message=message,
            error_type=error_type,
            code=code,
            retry_after=retry_after,
            seconds=seconds,
            body=body,
            retry_after_ms=retry_after_ms,
            interval=interval,
            size=size,
            events=tuple(events),
            piece=piece,
        )
        self._queue_fault(fault)

    def before_reply(self, hook: Callable[[], object]) -> None:
        """Run `hook` (in the server's thread) when the next chat completion has arrived,
        before it is answered: another writer acting while the client waits, at a known
        moment. An exception it raises is kept in `errors` and the request answered."""
        self._queue_hook(hook)

    def pause_stream(self, after: int) -> threading.Event:
        """Hold the next streamed reply after its first `after` chunks until the returned
        event is set (at most 30 s): a client's reader can act mid-stream at a known moment."""
        return self._queue_pause(after)


class _Handler(LoopbackHandler):
    @property
    def fake(self) -> FakeOpenAI:
        return cast(FakeOpenAI, super().fake)

    # Routing

    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._receive(path)
        routes = {("POST", CHAT_PATH): self._chat, ("GET", MODELS_PATH): self._models}
        handler = routes.get((self.command, path))
        if handler is None:
            self._send_error(404, f"Invalid URL ({self.command} {path})", code="unknown_url")
            return
        stream = isinstance(body, dict) and body.get("stream") is True
        fault = self.fake._next_fault()
        if fault is not None and fault.kind in ("keepalive", "drip", "oversize"):
            if self._authorized():
                handler(body, scripted=fault.kind != "oversize", fault=fault)
            return
        if fault is not None and not self._fault(fault, stream):
            return
        if not self._authorized():
            return
        handler(body, scripted=fault is None)

    def _authorized(self) -> bool:
        expected = self.fake.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self._send_error(401, "Incorrect API key provided.", code="invalid_api_key")
        return False

    def _models(self, body: Any, *, scripted: bool, fault: Fault | None = None) -> None:
        model = {"id": self.fake.model, "object": "model", "created": 0, "owned_by": "fake"}
        self._send_json(200, {"object": "list", "data": [model]})

    def _chat(self, body: Any, *, scripted: bool, fault: Fault | None = None) -> None:
        if not isinstance(body, dict):
            self._send_error(400, "We could not parse the JSON body of your request.")
            return
        if not isinstance(body.get("model"), str):
            self._send_error(400, "you must provide a model parameter", param="model")
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._send_error(400, "Missing required parameter: 'messages'.", param="messages")
            return
        self.fake._run_hook()
        number, queued = self.fake._next_reply(scripted=scripted)
        text = f"echo: {_last_user_text(messages)}"
        if fault is not None and fault.kind == "oversize":
            text = "x" * fault.size
        reply = queued or Reply(
            text=text,
            reasoning=None,
            tool_calls=(),
            finish_reason="stop",
            usage=None,
            chunk_size=1000 if fault is not None and fault.kind == "oversize" else None,
        )
        completion = _Completion(
            id=f"chatcmpl-fake{number}",
            created=int(time.time()),
            model=body["model"],
            reply=reply,
            usage=_usage(self.fake, body, reply),
            include_usage=_include_usage(body),
        )
        stream = body.get("stream") is True
        if fault is not None and fault.kind == "keepalive":
            if not self._keep_alive(fault, stream):
                return
        elif fault is not None and fault.kind == "drip":
            self._drip(fault, completion, stream)
            return
        if stream:
            if fault is None or fault.kind != "keepalive":
                self._start_stream()
            for chunk in self._paced(completion.chunks()):
                self._send_event(chunk)
            self._send_sse_line(b"data: [DONE]")
            self._end_stream()
        elif fault is not None and fault.kind == "keepalive":
            self._send_chunk(json.dumps(completion.response()).encode())
            self._end_stream()
        else:
            self._send_json(200, completion.response())

    def _keep_alive(self, fault: Fault, stream: bool) -> bool:
        """Send what carries no data for `fault.seconds`; False if the server is stopping."""
        if stream:
            self._start_stream()
            empty = {"id": "chatcmpl-keepalive", "object": "chat.completion.chunk"}
            fillers = itertools.cycle(
                [
                    b": keepalive",
                    b'event: ping\ndata: {"type": "ping"}',
                    b"data:",
                    b"data: " + json.dumps({**empty, "choices": [{"delta": {}}]}).encode(),
                ]
            )
        else:
            self._start_json_stream()
        deadline = time.monotonic() + fault.seconds
        while time.monotonic() < deadline:
            if stream:
                self._send_sse_line(next(fillers))
            else:
                self._send_chunk(b" ")
            if not self.fake._sleep(fault.interval):
                self.close_connection = True
                return False
        return True

    def _drip(self, fault: Fault, completion: _Completion, stream: bool) -> None:
        """The reply one byte every `fault.interval` for `fault.seconds`, then the rest."""
        if stream:
            lines = [
                b"data: " + json.dumps(chunk, separators=(",", ":")).encode()
                for chunk in completion.chunks()
            ]
            data = b"".join(line + b"\n\n" for line in [*lines, b"data: [DONE]"])
            self._start_stream()
        else:
            data = json.dumps(completion.response()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
        deadline = time.monotonic() + fault.seconds
        sent = 0
        while sent < len(data) and time.monotonic() < deadline:
            self._write(data[sent : sent + fault.piece], chunked=stream)
            sent += fault.piece
            if not self.fake._sleep(fault.interval):
                self.close_connection = True
                return
        self._write(data[sent:], chunked=stream)
        if stream:
            self._end_stream()

    # Faults

    def _fault(self, fault: Fault, stream: bool) -> bool:
        """Act out a fault; True when the request should then be answered normally."""
        if fault.kind == "status":
            headers: dict[str, str] = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = number_text(fault.retry_after)
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = number_text(fault.retry_after_ms)
            default_type, default_code = _error_kind(fault.status)
            self._send_error(
                fault.status,
                fault.message or f"{HTTPStatus(fault.status).phrase} (injected by FakeOpenAI)",
                error_type=fault.error_type or default_type,
                code=fault.code or default_code,
                headers=headers,
            )
            return False
        plain = self._plain_fault(fault.kind, fault.seconds, fault.body)
        if plain is not None:
            return plain
        if fault.kind == "sse":
            return self._replay(
                fault.events,
                b"\n\n",
                frame=lambda event: self._send_sse_line(b"data: " + json.dumps(event).encode()),
                last=b"data: [DONE]\n\n",
            )
        probe = _Completion(
            id="chatcmpl-fault",
            created=int(time.time()),
            model=self.fake.model,
            reply=Reply("partial reply that never ends", None, (), "stop", None),
            usage={},
            include_usage=False,
        )
        chunks = probe.chunks()
        if fault.kind == "malformed_sse":
            return self._replay([next(chunks)], last=b"data: {not json\n\n")
        return self._drop_mid_stream(  # the first two chunks
            stream,
            itertools.islice(chunks, 2),
            b'{"id": "chatcmpl-fault", "object": "chat.completion", "cho',
        )

    # Writing

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        error = {"message": message, "type": error_type, "param": param, "code": code}
        self._send_json(status, {"error": error}, headers)

    def _send_event(self, chunk: dict[str, Any]) -> None:
        self._send_sse_line(b"data: " + json.dumps(chunk, separators=(",", ":")).encode())


FakeOpenAI.handler = _Handler


@dataclass(frozen=True)
class _Completion:
    """One reply rendered in the wire format, as a whole or as stream chunks."""

    id: str
    created: int
    model: str
    reply: Reply
    usage: dict[str, Any]
    include_usage: bool

    def response(self) -> dict[str, Any]:
        reply = self.reply
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in reply.tool_calls
            ]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": reply.finish_reason,
        }
        return {
            **self._envelope("chat.completion"),
            "choices": [choice],
            "usage": self.usage,
        }

    def chunks(self) -> Iterator[dict[str, Any]]:
        """Role, reasoning pieces, text pieces, tool call fragments, finish, then usage."""
        reply = self.reply
        size = reply.chunk_size
        yield self._chunk({"role": "assistant", "content": "" if reply.text else None})
        for piece in pieces(reply.reasoning or "", size):
            yield self._chunk({"content": None, "reasoning_content": piece})
        for piece in pieces(reply.text or "", size):
            yield self._chunk({"content": piece})
        for index, call in enumerate(reply.tool_calls):
            if reply.same_index:
                whole = {"name": call.name, "arguments": call.arguments}
                yield self._chunk(
                    {
                        "tool_calls": [
                            {"index": 0, "id": call.id, "type": "function", "function": whole}
                        ]
                    }
                )
                continue
            head = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            yield self._chunk({"tool_calls": [head]})
            parts = pieces(call.arguments, size) if size else fragments(call.arguments)
            for fragment in parts:
                tail = {"index": index, "function": {"arguments": fragment}}
                yield self._chunk({"tool_calls": [tail]})
        yield self._chunk({}, finish_reason=reply.finish_reason)
        if self.include_usage:
            yield {**self._envelope("chat.completion.chunk"), "choices": [], "usage": self.usage}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        chunk = {**self._envelope("chat.completion.chunk"), "choices": [choice]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _envelope(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
        }


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _estimate_usage(messages: list[Any], reply: Reply) -> dict[str, Any]:
    prompt_chars = sum(len(content_text(m.get("content"))) for m in messages if isinstance(m, dict))
    reply_chars = len(reply.text or "") + len(reply.reasoning or "")
    reply_chars += sum(len(call.name) + len(call.arguments) for call in reply.tool_calls)
    prompt_tokens = prompt_chars // 4 + 1
    completion_tokens = reply_chars // 4 + 1
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reply.reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": len(reply.reasoning) // 4 + 1}
    return usage


def openai_usage(
    prompt: int,
    completion: int,
    *,
    cached: int = 0,
    reasoning: int = 0,
    cache_write: int | None = None,
) -> dict[str, Any]:
    """A `usage` as OpenAI sends it, for `reply(usage=...)`: the cache reads (and
    OpenRouter's cache writes) in prompt_tokens_details, reasoning in
    completion_tokens_details, each a part of the count it details."""
    details: dict[str, Any] = {"cached_tokens": cached, "audio_tokens": 0}
    if cache_write is not None:
        details["cache_write_tokens"] = cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def deepseek_usage(prompt: int, completion: int, *, hit: int) -> dict[str, Any]:
    """A `usage` as DeepSeek sends it, for `reply(usage=...)`: its cache hits and misses
    beside prompt_tokens (their sum), and no prompt_tokens_details."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_cache_hit_tokens": hit,
        "prompt_cache_miss_tokens": prompt - hit,
    }


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _error_kind(status: int) -> tuple[str, str | None]:
    """The error `type` and `code` OpenAI sends with a status."""
    if status == 401:
        return "invalid_request_error", "invalid_api_key"
    if status == 429:
        return "requests", "rate_limit_exceeded"
    if status >= 500:
        return "server_error", None
    return "invalid_request_error", None


# The prefix-cache mode (FakeOpenAI(cache=...)): the usage a caching provider would send.


def _prefix_cache(rule: str | None) -> PrefixCache | None:
    """The simulated cache of `rule`; imported only when asked (it needs bpe-openai)."""
    if rule is None:
        return None
    from cachesim import PrefixCache

    return PrefixCache(cast("Rule", rule))


def _usage(fake: FakeOpenAI, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """The reply's usage: as scripted, else as the simulated cache counts it, else estimated."""
    if reply.usage is not None:
        return reply.usage
    if fake.cache is None:
        return _estimate_usage(body["messages"], reply)
    from cachesim import reply_message

    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in reply.tool_calls
    ]
    return fake.cache.serve(body, reply_message(reply.text, calls), reply.reasoning)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a fake OpenAI API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--cache", choices=["openai", "deepseek"], help="simulate a prefix cache")
    args = parser.parse_args()
    fake = FakeOpenAI(port=args.port, model=args.model, api_key=args.api_key, cache=args.cache)
    serve_in_foreground(fake)


if __name__ == "__main__":
    main()
