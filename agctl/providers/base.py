"""The provider interface: one method that turns a request into a stream of events.

Everything else — assembling the reply, usage, cost, recording, committing — is done
once, around `Provider.stream`, for every provider (see agctl.turn.send).
"""

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from agctl.base.errors import AgctlError
from agctl.base.hashing import request_fingerprint

if TYPE_CHECKING:
    from agctl.base.redact import Redactor


def chat_completions_url(base_url: str) -> str:
    """The endpoint an OpenAI-compatible server answers on, under its base URL (…/v1)."""
    return base_url.rstrip("/") + "/chat/completions"


# Named tuples rather than frozen dataclasses: as immutable and as typed, and made with a
# tenth of the work at import (a turn imports them; measured, 1.4% of a turn's instructions).
class TextDelta(NamedTuple):
    text: str
    type: Literal["text"] = "text"


class ReasoningDelta(NamedTuple):
    text: str
    type: Literal["reasoning"] = "reasoning"


class ToolCallDelta(NamedTuple):
    """A fragment of tool call number `index`: id and name come first, arguments in pieces."""

    # The wire format's name (tool_calls[].index); it hides tuple.index, which nothing uses.
    index: int  # type: ignore[assignment]
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    type: Literal["tool_call"] = "tool_call"


class Usage(NamedTuple):
    """A request's tokens as its provider counted them. A count None was not reported (never
    read as 0). Every wire is brought to one meaning: `prompt_tokens` is all the input,
    cache reads and writes included (OpenAI's and DeepSeek's prompt_tokens, Gemini's
    promptTokenCount; Anthropic's input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens); `completion_tokens` all the output, reasoning included
    (Gemini: candidatesTokenCount + thoughtsTokenCount)."""

    prompt_tokens: int
    completion_tokens: int
    # Of prompt_tokens, read from the provider's cache: OpenAI's
    # prompt_tokens_details.cached_tokens, DeepSeek's prompt_cache_hit_tokens, Anthropic's
    # cache_read_input_tokens, Gemini's cachedContentTokenCount.
    cached_tokens: int | None = None
    # Of prompt_tokens, written to the cache (billed above the input price by some):
    # Anthropic's cache_creation_input_tokens, OpenRouter's
    # prompt_tokens_details.cache_write_tokens.
    cache_write_tokens: int | None = None
    # Of completion_tokens, the model's reasoning: OpenAI's
    # completion_tokens_details.reasoning_tokens, Gemini's thoughtsTokenCount.
    reasoning_tokens: int | None = None
    # Of cache_write_tokens, those kept an hour (priced above the 5-minute ones): Anthropic's
    # cache_creation.ephemeral_1h_input_tokens.
    cache_write_1h_tokens: int | None = None
    type: Literal["usage"] = "usage"

    def counts(self) -> dict[str, int | None]:
        """Every count by name, None where not reported (what JSON output shows)."""
        return {name: getattr(self, name) for name in USAGE_COUNTS}

    def reported(self) -> dict[str, int]:
        """The counts reported, by name (what a stored reply keeps)."""
        return {name: value for name, value in self.counts().items() if value is not None}

    def text(self, unit: str = "") -> str:
        """For people: '1200+35' (and `unit`), then the parts reported: '1200+35 tokens
        (1024 cached, 20 reasoning)'."""
        parts = [
            f"{value} {word}"
            for value, word in (
                (self.cached_tokens, "cached"),
                (self.cache_write_tokens, "written to cache"),
                (self.cache_write_1h_tokens, "of them for 1 h"),
                (self.reasoning_tokens, "reasoning"),
            )
            if value is not None
        ]
        details = f" ({', '.join(parts)})" if parts else ""
        return f"{self.prompt_tokens}+{self.completion_tokens}{unit}{details}"

    def checked(self) -> "Usage":
        """These counts with any part larger than its whole not counted (None), with a
        warning: a server's cached or cache-write tokens beyond its prompt tokens, reasoning
        beyond the completion, 1-hour writes beyond the writes. Every wire's usage passes
        here (agctl.providers.http), so a cost is never made of a count that cannot be."""
        wholes = {
            "cached_tokens": ("prompt_tokens", self.prompt_tokens),
            "cache_write_tokens": ("prompt_tokens", self.prompt_tokens),
            "reasoning_tokens": ("completion_tokens", self.completion_tokens),
            "cache_write_1h_tokens": ("cache_write_tokens", self.cache_write_tokens),
        }
        dropped: dict[str, Any] = {}
        for name, (whole_name, whole) in wholes.items():
            value, whole = getattr(self, name), whole or 0  # a part of nothing reported
            if value is not None and value > whole:
                import logging

                logging.getLogger("agctl.provider").warning(
                    "the server reported %d %s, more than the %d %s they are part of: not counted",
                    value,
                    name.removesuffix("_tokens").replace("_", " ") + " tokens",
                    whole,
                    whole_name.removesuffix("_tokens").replace("_", " ") + " tokens",
                )
                dropped[name] = None
        return self._replace(**dropped) if dropped else self

    @classmethod
    def from_counts(cls, data: Mapping[str, Any]) -> "Usage | None":
        """The usage a stored reply holds (see `reported`), or None when it holds none;
        a count that is not a whole number is read as not reported."""

        def count(name: str) -> int | None:
            value = data.get(name)
            return value if type(value) is int and value >= 0 else None

        prompt, completion = count("prompt_tokens"), count("completion_tokens")
        if prompt is None or completion is None:
            return None
        return cls(
            prompt,
            completion,
            cached_tokens=count("cached_tokens"),
            cache_write_tokens=count("cache_write_tokens"),
            reasoning_tokens=count("reasoning_tokens"),
            cache_write_1h_tokens=count("cache_write_1h_tokens"),
        )


USAGE_COUNTS = ("prompt_tokens", "completion_tokens", *Usage._fields[2:-1])


def add_usage(first: Usage, second: Usage) -> Usage:
    """Two requests' usage together: a count either did not report is not reported."""

    def both(a: int | None, b: int | None) -> int | None:
        return None if a is None or b is None else a + b

    return Usage(
        first.prompt_tokens + second.prompt_tokens,
        first.completion_tokens + second.completion_tokens,
        cached_tokens=both(first.cached_tokens, second.cached_tokens),
        cache_write_tokens=both(first.cache_write_tokens, second.cache_write_tokens),
        reasoning_tokens=both(first.reasoning_tokens, second.reasoning_tokens),
        cache_write_1h_tokens=both(first.cache_write_1h_tokens, second.cache_write_1h_tokens),
    )


class Finish(NamedTuple):
    reason: str
    type: Literal["finish"] = "finish"


class WirePart(NamedTuple):
    """A part of a reply that only the wire it came from understands and that must go back
    to it unchanged: Anthropic's thinking blocks with their signatures and its redacted
    thinking, Gemini's thought signatures. The reply keeps them on its message
    (Message.wire_parts, by wire), and only that wire's encoder sends them again."""

    wire: str
    part: dict[str, Any]
    type: Literal["part"] = "part"


Event = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish | WirePart
EVENT_TYPES: dict[str, type[Event]] = {
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "tool_call": ToolCallDelta,
    "usage": Usage,
    "finish": Finish,
    "part": WirePart,
}


def event_to_dict(event: Event) -> dict[str, Any]:
    fields = {k: v for k, v in event._asdict().items() if v is not None and k != "type"}
    return {"type": event.type, **fields}


def event_from_dict(data: dict[str, Any]) -> Event:
    """The event a dict of event_to_dict holds; fields a newer agctl added are left out."""
    kind = EVENT_TYPES[data["type"]]
    return kind(**{k: v for k, v in data.items() if k != "type" and k in kind._fields})


class TurnContext(NamedTuple):
    """What a provider may know about the turn beyond the wire request (never sent)."""

    session_id: str = ""
    slot_id: str = ""
    turn: int = 1
    # "turn" for a conversation turn, "summary" when agctl asks for a summary, "probe"
    # and "judge" for the questions and gradings of an evaluation (agctl.evals).
    purpose: str = "turn"
    # Which request of the turn this is: a tool loop sends one a step.
    step: int = 1
    # The request's content estimated (Message.content_estimate summed), when the turn
    # already knows it: the offline provider's prompt tokens, not counted again.
    prompt_estimate: int | None = None
    # The tokens a summary is asked (in words, in its prompt) to stay within: what the
    # offline provider's extract keeps to, as a model would.
    budget: int | None = None


class ChatRequest(NamedTuple):
    """One chat-completions request: the model input plus how to deliver it."""

    model: str
    messages: list[dict[str, Any]]
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = False
    context: TurnContext = TurnContext()
    # The tools offered (OpenAI function definitions), and which the model may call:
    # "auto", "none", "required" or {"type": "function", "function": {"name": ...}}.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # Routes the request to the cache holding its prefix (agctl.context.cache.cache_key): sent as
    # `prompt_cache_key` where the profile allows; delivery, not model input.
    cache_key: str | None = None
    # The wire parts of the messages that have some (Message.wire_parts), by the message's
    # position in `messages`: what a wire's encoder sends back with that message.
    wire_parts: dict[int, dict[str, list[dict[str, Any]]]] | None = None
    # Where the request's prefix is known to stay the same on the next turn, as counts of
    # leading messages (the end of the system prompt and immutable zone, of the compressed
    # zone, of the history), ascending: where a wire that caches at marks the client places
    # (Anthropic's cache_control) puts them. Delivery, not model input.
    breakpoints: tuple[int, ...] = ()
    # The JSON Schema the reply must follow (turn send --schema), which each wire asks for
    # its own way (agctl.providers.structured); model input: its response_format is a
    # parameter, and so part of the fingerprint.
    response_schema: dict[str, Any] | None = None
    # Model options beyond temperature and max tokens (`-o KEY VALUE`), sorted by key and
    # checked against the wire (agctl.providers.options): sent after agctl's own
    # parameters, and part of the model input (a changed option is a cassette miss).
    options: tuple[tuple[str, Any], ...] = ()

    def params(self) -> dict[str, Any]:
        """The request's parameters, each only when set (so a request without tools, or
        without options, has the same input, and fingerprint, as before they existed)."""
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if self.tools:
            params["tools"] = self.tools
            if self.tool_choice is not None:
                params["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                params["parallel_tool_calls"] = self.parallel_tool_calls
        if self.response_schema is not None:
            from agctl.providers.structured import response_format

            params["response_format"] = response_format(self.response_schema)
        params.update(self.options)
        return params

    def model_input(self) -> dict[str, Any]:
        """What determines the reply: model, messages and parameters (not delivery), and the
        messages' wire parts when they have some (so a request without any has the same
        input, and fingerprint, as before wire parts existed)."""
        data: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages,
            "params": self.params(),
        }
        if self.wire_parts:
            data["wire_parts"] = [[at, self.wire_parts[at]] for at in sorted(self.wire_parts)]
        return data

    def fingerprint(self) -> str:
        """A stable hash of the model input, for cassettes."""
        return request_fingerprint(self.model_input())

    def payload(self, *, cache_key: bool = False) -> dict[str, Any]:
        """The chat-completions JSON body; with `cache_key` (the profile allows it), the
        request's prompt_cache_key last."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages, **self.params()}
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if cache_key and self.cache_key:
            body["prompt_cache_key"] = self.cache_key
        return body


class Provider(Protocol):
    """A model backend. Implementations differ only in `stream`."""

    name: str

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        """Yield the reply to `request` as events; raise ProviderError on failure."""
        ...


class RedactingProvider:
    """Wraps a provider so that no event or error it gives carries a secret."""

    def __init__(self, inner: Provider, redactor: "Redactor") -> None:
        self.inner = inner
        self.redactor = redactor
        self.name = inner.name

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        return redacted_events(self.inner.stream(request), self.redactor)


def redacted_events(events: Iterator[Event], redactor: "Redactor") -> Iterator[Event]:
    """`events` with every secret removed, and any AgctlError they raise redacted too.

    Text, reasoning and tool-call arguments arrive in pieces, and a secret may be cut
    across two of them: the end of each stream that may begin a secret is held back until
    the next piece shows what it is, and flushed before usage, finish and the end.
    """
    held: dict[tuple[str, int], str] = {}

    def flush() -> Iterator[Event]:
        for (kind, index), text in held.items():
            if not text:
                continue
            if kind == "text":
                yield TextDelta(text)
            elif kind == "reasoning":
                yield ReasoningDelta(text)
            else:
                yield ToolCallDelta(index, arguments=text)
        held.clear()

    def hold(key: tuple[str, int], text: str) -> str:
        ready, held[key] = redactor.split_safe(held.get(key, "") + text)
        return ready

    try:
        for event in events:
            if isinstance(event, TextDelta):
                if ready := hold(("text", 0), event.text):
                    yield TextDelta(ready)
            elif isinstance(event, ReasoningDelta):
                if ready := hold(("reasoning", 0), event.text):
                    yield ReasoningDelta(ready)
            elif isinstance(event, ToolCallDelta):
                ready = hold(("tool_call", event.index), event.arguments)
                if ready or event.id is not None or event.name is not None:
                    yield ToolCallDelta(
                        event.index,
                        id=None if event.id is None else redactor.text(event.id),
                        name=None if event.name is None else redactor.text(event.name),
                        arguments=ready,
                    )
            elif isinstance(event, WirePart):
                # Opaque to agctl, but a thinking block's text may echo a secret too (its
                # signature then fails, and the wire's server says so: never the key).
                yield from flush()
                part = {
                    key: redactor.text(value) if isinstance(value, str) else value
                    for key, value in event.part.items()
                }
                yield event if part == event.part else WirePart(event.wire, part)
            elif isinstance(event, Finish):
                # A server's own word for why it stopped reaches output and errors as sent.
                yield from flush()
                reason = redactor.text(event.reason)
                yield event if reason == event.reason else Finish(reason)
            else:
                yield from flush()
                yield event
    except AgctlError as exc:
        exc.args = tuple(redactor.text(a) if isinstance(a, str) else a for a in exc.args)
        if hasattr(exc, "__notes__"):
            exc.__notes__ = [redactor.text(note) for note in exc.__notes__]
        raise
    yield from flush()


def mark_positions(count: int) -> list[int]:
    """Where a sent request is remembered (agctl.context.cache), and so where the wire's encoder
    notes how far its bytes go: its start and end, then powers of two from
    either end (about 2 log2 n marks, exact for a request that was only appended to,
    within a factor of two of its length elsewhere)."""
    positions = {0, count}
    step = 1
    while step < count:
        positions.update((step, count - step))
        step *= 2
    return sorted(positions)
