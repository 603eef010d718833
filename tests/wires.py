"""One adapter per wire over its loopback fake, so the provider contract suite
(tests/lib/providers/test_contract.py) is the same tests on every wire.

Each adapter starts its wire's fake, builds the provider as a turn does (`build_provider`
over `Resolved`), scripts replies and queues faults in its wire's own terms (an
`overloaded_error` 529 is Anthropic's, a `[DONE]` OpenAI's, a RetryInfo Gemini's), and says
how its key travels. A new wire joins the suite with one adapter and one line in `WIRES`.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from fake_anthropic import FakeAnthropic, anthropic_usage
from fake_gemini import FakeGemini, gemini_usage
from fake_openai import FakeOpenAI, openai_usage
from loopback import LoopbackFake, RecordedRequest

from agctl.config.file import Resolved
from agctl.providers import build_provider
from agctl.providers.http import HttpProvider

# '/', '+' and '=' make every encoding of the key differ from the key itself.
KEY = "sk-contract/Key+Zq7Xw3=Kp9Lm2Vb8N"
# Above Anthropic's least thinking budget (1024 tokens).
THINKING_BUDGET = 2048


class Tokens(NamedTuple):
    """A reply's usage in agctl's terms: `input` all of it, `cached` the part read from the
    provider's cache, `output` all of the reply, `reasoning` the part of it the model
    thought."""

    input: int
    cached: int
    output: int
    reasoning: int = 0


class Call(NamedTuple):
    """A tool call as the contract scripts it: its arguments a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any]


FakeT = TypeVar("FakeT", bound=LoopbackFake[Any, Any])


class WireAdapter(Generic[FakeT]):
    """What the contract asks of a wire, in that wire's own terms."""

    name: ClassVar[str]
    model: ClassVar[str]
    # The header the key travels in (lower case), and its value for a key.
    key_header: ClassVar[str]
    # The status a wire's server sends when it is busy.
    busy_status: ClassVar[int] = 429
    # Whether the wire's usage says how much of the output was reasoning.
    counts_reasoning: ClassVar[bool] = True
    # Whether the wire signs reasoning (a signature that must go back to it, unchanged),
    # and whether the reasoning's text goes back with it.
    signs: ClassVar[bool] = True
    returns_reasoning: ClassVar[bool] = False

    def __init__(self) -> None:
        self._fake: FakeT | None = None

    @property
    def fake(self) -> FakeT:
        if self._fake is None:
            raise RuntimeError(f"the {self.name} fake is not running")
        return self._fake

    @contextlib.contextmanager
    def serving(self) -> Iterator[WireAdapter[FakeT]]:
        """The wire's fake on loopback for one test; a request it found bad fails the test."""
        with self.new_fake() as fake:
            self._fake = fake
            yield self
        self._fake = None
        assert fake.errors == []

    def new_fake(self) -> FakeT:
        raise NotImplementedError

    def key_value(self, key: str) -> str:
        return key

    def provider(
        self,
        *,
        sleep: Callable[[float], None] | None = None,
        thinking: bool = False,
        api_key: str = KEY,
        **limits: Any,
    ) -> HttpProvider:
        """The provider a turn builds for a profile of this wire with `limits` (read_timeout,
        max_retries, ...) and a thinking budget if `thinking` (a wire without one ignores
        it), sleeping with `sleep` between attempts (a recorder: no waiting)."""
        settings = Resolved(
            provider=self.name,
            model=self.model,
            base_url=self.fake.base_url,
            api_key=api_key,
            thinking_budget=THINKING_BUDGET if thinking else None,
            **limits,
        )
        provider = build_provider(settings)
        assert isinstance(provider, HttpProvider), provider
        if sleep is None:
            return provider
        return HttpProvider(provider.wire, provider.settings, sleep=sleep)

    # Replies

    def reply_text(
        self, text: str, *, tokens: Tokens | None = None, chunk_size: int | None = None
    ) -> None:
        """Queue a text reply (its usage as `tokens` say, else the fake's estimate),
        streamed in pieces of `chunk_size` characters (else word by word)."""
        raise NotImplementedError

    def reply_tool_calls(self, calls: Sequence[Call]) -> None:
        """Queue a reply that is these tool calls and nothing else."""
        raise NotImplementedError

    def reply_at_the_limit(self, text: str) -> None:
        """Queue a text reply the server cut at the request's output token limit."""
        raise NotImplementedError

    def reply_reasoning(
        self, reasoning: str, signature: str, *, text: str | None = None, calls: Sequence[Call] = ()
    ) -> None:
        """Queue a reply that reasons (signed with `signature` where the wire signs), then
        answers `text` or makes `calls`."""
        raise NotImplementedError

    # Faults

    def fail_status(
        self, status: int, *, retry_after: float | None = None, message: str = "busy"
    ) -> None:
        """Queue an error status saying `message` in the wire's error body, with a
        Retry-After header when given."""
        self.fake_fail("status", status=status, retry_after=retry_after, message=message)

    def fail_busy(self, wait: float) -> None:
        """Queue the wire's busy status saying, in the wire's own way, to wait `wait` s."""
        raise NotImplementedError

    def fail_slow(self, seconds: float) -> None:
        self.fake_fail("slow", seconds=seconds)

    def fail_garbage(self) -> None:
        """Queue a 200 whose body is an HTML page, not the wire's JSON nor its stream."""
        self.fake_fail("garbage")

    def fail_malformed_sse(self) -> None:
        self.fake_fail("malformed_sse")

    def fail_drop(self) -> None:
        """Queue a reply cut off by the connection closing: a stream after its first
        events, a whole reply before its Content-Length."""
        self.fake_fail("drop_mid_stream")

    def fail_cut_stream(self) -> None:
        """Queue a stream that ends cleanly (the HTTP body complete) before the wire's end:
        its first events, and not what ends the stream."""
        raise NotImplementedError

    def fail_error_mid_stream(self, message: str) -> None:
        """Queue a stream that starts, then sends the wire's error object saying `message`."""
        raise NotImplementedError

    def fake_fail(self, kind: str, **options: Any) -> None:
        fail: Callable[..., None] = self.fake.fail  # type: ignore[attr-defined]
        fail(kind, **options)

    # What the server received

    def requests(self) -> list[RecordedRequest]:
        return self.fake.requests


class OpenAIAdapter(WireAdapter[FakeOpenAI]):
    name = "openai"
    model = "fake-model"
    key_header = "authorization"
    signs = False

    def new_fake(self) -> FakeOpenAI:
        return FakeOpenAI(model=self.model, api_key=KEY)

    def key_value(self, key: str) -> str:
        return f"Bearer {key}"

    def reply_text(
        self, text: str, *, tokens: Tokens | None = None, chunk_size: int | None = None
    ) -> None:
        usage = None
        if tokens is not None:
            usage = openai_usage(
                tokens.input, tokens.output, cached=tokens.cached, reasoning=tokens.reasoning
            )
        self.fake.reply(text, usage=usage, chunk_size=chunk_size)

    def reply_at_the_limit(self, text: str) -> None:
        self.fake.reply(text, finish_reason="length")

    def reply_tool_calls(self, calls: Sequence[Call]) -> None:
        self.fake.reply(tool_calls=[call._asdict() for call in calls])

    def reply_reasoning(
        self, reasoning: str, signature: str, *, text: str | None = None, calls: Sequence[Call] = ()
    ) -> None:
        self.fake.reply(text, reasoning=reasoning, tool_calls=[call._asdict() for call in calls])

    def fail_busy(self, wait: float) -> None:
        # OpenAI's own header, in milliseconds (beside Retry-After, which a proxy may drop).
        self.fake.fail("status", status=429, retry_after_ms=wait * 1000, message="busy")

    def fail_cut_stream(self) -> None:
        # Its `sse` fault always ends with [DONE]: a 200 of the stream's lines without it.
        chunk = {
            "id": "chatcmpl-cut",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}],
        }
        self.fake.fail("garbage", body=b"data: " + json.dumps(chunk).encode() + b"\n\n")

    def fail_error_mid_stream(self, message: str) -> None:
        chunk = {
            "id": "chatcmpl-error",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}],
        }
        error = {"error": {"message": message, "type": "server_error", "code": None}}
        self.fake.fail("sse", events=[chunk, error])


class AnthropicAdapter(WireAdapter[FakeAnthropic]):
    name = "anthropic"
    model = "claude-fake"
    key_header = "x-api-key"
    busy_status = 529
    # Its output_tokens include the thinking, which no count tells apart.
    counts_reasoning = False
    returns_reasoning = True

    def new_fake(self) -> FakeAnthropic:
        return FakeAnthropic(api_key=KEY)

    def reply_text(
        self, text: str, *, tokens: Tokens | None = None, chunk_size: int | None = None
    ) -> None:
        usage = None
        if tokens is not None:
            # Of the input, a tenth written to the cache: input_tokens is what neither read
            # nor wrote, beside the two cache counts.
            written = tokens.input // 10
            usage = anthropic_usage(
                tokens.input - tokens.cached - written,
                tokens.output,
                cache_read=tokens.cached,
                cache_write_5m=written,
            )
        self.fake.reply(text, usage=usage, chunk_size=chunk_size)

    def reply_at_the_limit(self, text: str) -> None:
        self.fake.reply(text, stop_reason="max_tokens")

    def reply_tool_calls(self, calls: Sequence[Call]) -> None:
        self.fake.reply(tool_uses=_uses(calls))

    def reply_reasoning(
        self, reasoning: str, signature: str, *, text: str | None = None, calls: Sequence[Call] = ()
    ) -> None:
        self.fake.reply(text, thinking=reasoning, signature=signature, tool_uses=_uses(calls))

    def fail_busy(self, wait: float) -> None:
        self.fake.fail("status", status=529, retry_after=wait, message="busy")

    def fail_cut_stream(self) -> None:
        message: dict[str, Any] = {
            "id": "msg_cut",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": anthropic_usage(10, 1),
        }
        self.fake.fail(
            "sse",
            events=[
                {"type": "message_start", "message": message},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "partial"},
                },
            ],
        )

    def fail_error_mid_stream(self, message: str) -> None:
        self.fake.fail("stream_error", message=message)


class GeminiAdapter(WireAdapter[FakeGemini]):
    name = "gemini"
    model = "fake-gemini"
    key_header = "x-goog-api-key"
    busy_status = 503

    def new_fake(self) -> FakeGemini:
        # As Gemini 3: a function call sent back without its thought signature is refused.
        return FakeGemini(api_key=KEY, require_signatures=True)

    def reply_text(
        self, text: str, *, tokens: Tokens | None = None, chunk_size: int | None = None
    ) -> None:
        usage = None
        if tokens is not None:
            # Its candidates are the answer alone: the thoughts are counted beside them.
            usage = gemini_usage(
                tokens.input,
                tokens.output - tokens.reasoning,
                cached=tokens.cached,
                thoughts=tokens.reasoning,
            )
        self.fake.reply(text, usage=usage, chunk_size=chunk_size)

    def reply_at_the_limit(self, text: str) -> None:
        self.fake.reply(text, finish_reason="MAX_TOKENS")

    def reply_tool_calls(self, calls: Sequence[Call]) -> None:
        functions = _functions(calls)
        # Signed as Gemini 3 signs calls; by the calls, so the same calls sign alike.
        signature = base64.b64encode(" ".join(call.id for call in calls).encode()).decode()
        self.fake.reply(function_calls=functions, signature=signature)

    def reply_reasoning(
        self, reasoning: str, signature: str, *, text: str | None = None, calls: Sequence[Call] = ()
    ) -> None:
        self.fake.reply(
            text, thought=reasoning, signature=signature, function_calls=_functions(calls)
        )

    def fail_busy(self, wait: float) -> None:
        # Gemini says it in the error body, a google.rpc.RetryInfo detail: no header.
        self.fake.fail("status", status=429, retry_delay=wait, message="busy")

    def fail_cut_stream(self) -> None:
        # Gemini's stream ends with its connection: cut, it lacks the chunk with finishReason.
        chunk = {
            "candidates": [{"content": {"parts": [{"text": "partial"}], "role": "model"}}],
            "usageMetadata": gemini_usage(10, 1),
            "modelVersion": self.model,
        }
        self.fake.fail("sse", events=[chunk])

    def fail_error_mid_stream(self, message: str) -> None:
        chunk = {
            "candidates": [{"content": {"parts": [{"text": "partial"}], "role": "model"}}],
            "modelVersion": self.model,
        }
        error = {"error": {"code": 503, "message": message, "status": "UNAVAILABLE"}}
        self.fake.fail("sse", events=[chunk, error])


def _uses(calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Tool calls as Anthropic's fake takes its tool uses."""
    return [{"id": call.id, "name": call.name, "input": call.arguments} for call in calls]


def _functions(calls: Sequence[Call]) -> list[dict[str, Any]]:
    """Tool calls as Gemini's fake takes its function calls."""
    return [{"id": call.id, "name": call.name, "args": call.arguments} for call in calls]


# A new wire joins the contract suite here.
WIRES: dict[str, type[WireAdapter[Any]]] = {
    "openai": OpenAIAdapter,
    "anthropic": AnthropicAdapter,
    "gemini": GeminiAdapter,
}
