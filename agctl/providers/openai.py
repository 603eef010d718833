"""The OpenAI chat-completions wire: what any OpenAI-compatible server speaks.

Its body is agctl's request form as it is (agctl.providers.body); its replies are
`chat.completion` objects, or `chat.completion.chunk` lines ending with `[DONE]`. Sent
over agctl.providers.http, as every wire is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    chat_completions_url,
)
from agctl.providers.body import request_body
from agctl.providers.fields import (
    MAX_TOKEN_COUNT,
    Malformed,
    a_list,
    a_string,
    a_whole_number,
    an_object,
    kind_of,
)
from agctl.providers.http import HttpProvider, HttpSettings
from agctl.providers.options import OPENAI_OPTIONS

__all__ = ["HttpSettings", "OpenAIProvider", "OpenAIWire", "ReplyParser"]

log = logging.getLogger("agctl.provider")

MAX_TOOL_INDEX = 65535


def _content(message: dict[str, Any], where: str) -> str | None:
    """`content` as text: a string, or a list of text parts (some servers send those)."""
    value = message.get("content")
    if not isinstance(value, list):
        return a_string(message, "content", where)
    texts = []
    for number, item in enumerate(value):
        part = an_object(item, f"{where}.content[{number}]")
        if part.get("type", "text") != "text":
            raise Malformed(f"{where}.content[{number}] is a {part['type']!r} part, not text")
        texts.append(a_string(part, "text", f"{where}.content[{number}]") or "")
    return "".join(texts)


class ReplyParser:
    """The events of one reply, streamed or whole, with every field agctl reads checked."""

    done = False  # the stream's end is its `[DONE]` line, which the transport reads

    def __init__(self) -> None:
        self._calls: set[int] = set()
        self._named: set[int] = set()

    def chunk(self, data: Any) -> list[Event]:
        """Events of one streamed `chat.completion.chunk`."""
        chunk = an_object(data, "the chunk")
        events: list[Event] = []
        for number, item in enumerate(a_list(chunk.get("choices"), "choices")):
            where = f"choices[{number}]"
            choice = an_object(item, where)
            delta = an_object(choice.get("delta"), f"{where}.delta", optional=True)
            events += self._message(delta, f"{where}.delta", streamed=True)
            reason = a_string(choice, "finish_reason", where)
            if reason:
                events.append(Finish(reason))
        return events + self._usage(chunk)

    def completion(self, data: Any) -> list[Event]:
        """Events of one whole `chat.completion` object."""
        reply = an_object(data, "the reply")
        if reply.get("choices") is None:
            raise Malformed("choices is missing")
        choices = a_list(reply["choices"], "choices")
        if not choices:
            raise Malformed("choices is empty")
        choice = an_object(choices[0], "choices[0]")
        if choice.get("message") is None:
            raise Malformed("choices[0].message is missing")
        message = an_object(choice["message"], "choices[0].message")
        events = self._message(message, "choices[0].message", streamed=False)
        events += self._usage(reply)
        events.append(Finish(a_string(choice, "finish_reason", "choices[0]") or "stop"))
        self.end()
        return events

    def end(self) -> None:
        """Check what only the whole reply shows: every tool call got a name."""
        unnamed = sorted(self._calls - self._named)
        if unnamed:
            raise Malformed(f"tool call {unnamed[0]} has no function name")

    def _message(self, message: dict[str, Any], where: str, *, streamed: bool) -> list[Event]:
        events: list[Event] = []
        reasoning_content = a_string(message, "reasoning_content", where)
        reasoning = reasoning_content or a_string(message, "reasoning", where)
        if reasoning:
            events.append(ReasoningDelta(reasoning))
        content = _content(message, where)
        if content:
            events.append(TextDelta(content))
        for number, item in enumerate(a_list(message.get("tool_calls"), f"{where}.tool_calls")):
            events.append(self._tool_call(item, number, f"{where}.tool_calls[{number}]", streamed))
        return events

    def _tool_call(self, item: Any, number: int, where: str, streamed: bool) -> ToolCallDelta:
        call = an_object(item, where)
        index = (
            a_whole_number(call.get("index", number), f"{where}.index", MAX_TOOL_INDEX)
            if streamed
            else number
        )
        function = an_object(call.get("function"), f"{where}.function", optional=streamed)
        name = a_string(function, "name", f"{where}.function")
        if not streamed and not name:
            shown = kind_of(name) if name is None else "empty"
            raise Malformed(f"{where}.function.name is {shown}")
        if "arguments" in function and function["arguments"] is None:
            raise Malformed(f"{where}.function.arguments is null, not a string")
        arguments = a_string(function, "arguments", f"{where}.function") or ""
        self._calls.add(index)
        if name:
            self._named.add(index)
        return ToolCallDelta(
            index, id=a_string(call, "id", where), name=name or None, arguments=arguments
        )

    @staticmethod
    def _usage(container: dict[str, Any]) -> list[Event]:
        """The usage event of a reply that reports one: OpenAI's counts and details, and
        DeepSeek's cache hits and misses (see Usage for what each count means)."""
        usage = an_object(container.get("usage"), "usage", optional=True)
        if not usage:
            return []

        def count(obj: dict[str, Any], key: str, where: str = "usage") -> int | None:
            value = obj.get(key)
            return (
                None if value is None else a_whole_number(value, f"{where}.{key}", MAX_TOKEN_COUNT)
            )

        prompt_details = an_object(
            usage.get("prompt_tokens_details"), "usage.prompt_tokens_details", optional=True
        )
        completion_details = an_object(
            usage.get("completion_tokens_details"),
            "usage.completion_tokens_details",
            optional=True,
        )
        in_details = "usage.prompt_tokens_details"
        hits, misses = (
            count(usage, "prompt_cache_hit_tokens"),
            count(usage, "prompt_cache_miss_tokens"),
        )
        prompt = count(usage, "prompt_tokens")
        if prompt is None and hits is not None and misses is not None:
            prompt = hits + misses
        prompt = prompt or 0
        completion = count(usage, "completion_tokens") or 0
        cached = count(prompt_details, "cached_tokens", in_details)
        parts = {
            "cached_tokens": hits if cached is None else cached,
            "cache_write_tokens": count(prompt_details, "cache_write_tokens", in_details),
            "reasoning_tokens": count(
                completion_details, "reasoning_tokens", "usage.completion_tokens_details"
            ),
        }
        # A part larger than its whole is dropped by the transport (base.Usage.checked).
        return [
            Usage(
                prompt,
                completion,
                cached_tokens=parts["cached_tokens"],
                cache_write_tokens=parts["cache_write_tokens"],
                reasoning_tokens=parts["reasoning_tokens"],
            )
        ]


class OpenAIWire:
    """Chat completions (see the module docstring); `cache_key`: send a request's
    prompt_cache_key (a server that refuses unknown fields: False)."""

    name = "openai"
    stream_end: str | None = "[DONE]"
    options = OPENAI_OPTIONS

    def __init__(self, *, cache_key: bool = False) -> None:
        self.cache_key = cache_key

    def url(self, base_url: str, request: ChatRequest) -> str:
        return chat_completions_url(base_url)

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def headers(self) -> dict[str, str]:
        return {}

    def body(self, request: ChatRequest) -> bytes:
        return request_body(request, cache_key=self.cache_key)

    def reply(self, data: Any) -> list[Event]:
        return ReplyParser().completion(data)

    def parser(self) -> ReplyParser:
        return ReplyParser()

    def retry_delay(self, error: dict[str, Any]) -> float | None:
        return None  # Retry-After (or retry-after-ms) says it


class OpenAIProvider(HttpProvider):
    """Any OpenAI-compatible server: the chat-completions wire over HTTP."""

    def __init__(
        self, settings: HttpSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        super().__init__(OpenAIWire(cache_key=settings.prompt_cache_key), settings, sleep=sleep)
