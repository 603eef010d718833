"""What makes one wire differ from another: where a request goes, how its key travels, the
bytes of its body, and how its replies read. The HTTP transport (agctl.providers.http) does
everything else once for every wire: retries and Retry-After, deadlines, reply caps, error
statuses, redaction, the lines of a stream.

A wire is an encoder and a parser, and nothing of HTTP: `openai` (chat completions),
`anthropic` (the Messages API) and `gemini` (generateContent). Each turns agctl's request —
OpenAI-shaped messages, the one form agctl stores — into its own body, and its replies into
agctl's events, so a session recorded on one wire continues on another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agctl.providers.base import ChatRequest, Event


class StreamParser(Protocol):
    """The events of one streamed reply, fed a `data:` line at a time (parsed JSON)."""

    # True once the event that ends the stream has been read (after it, nothing is read).
    done: bool

    def chunk(self, data: Any) -> list[Event]:
        """The events of one `data:` line; raise fields.Malformed for a bad one."""
        ...

    def end(self) -> None:
        """Check what only the whole reply shows (every tool call named, a finish read);
        raise fields.Malformed when it is incomplete."""
        ...


class Wire(Protocol):
    """One provider's format (see the module docstring)."""

    name: str
    # What ends a stream: "[DONE]" (a data line), the name of a last event the parser
    # marks `done` ("message_stop"), or None when the stream ends with its connection.
    stream_end: str | None
    # The model options (`-o KEY VALUE`) its requests may carry, with their JSON types
    # (agctl.providers.options), sent where the wire keeps such fields.
    options: dict[str, str]

    def url(self, base_url: str, request: ChatRequest) -> str:
        """The endpoint `request` is posted to, under `base_url`."""
        ...

    def key_headers(self, api_key: str) -> dict[str, str]:
        """The headers that carry the key."""
        ...

    def headers(self) -> dict[str, str]:
        """The wire's other fixed headers (a version), which a profile's headers override."""
        ...

    def body(self, request: ChatRequest) -> bytes:
        """The exact JSON bytes sent for `request`: the same request, the same bytes."""
        ...

    def reply(self, data: Any) -> list[Event]:
        """The events of a whole (not streamed) reply; raise fields.Malformed for a bad one."""
        ...

    def parser(self) -> StreamParser:
        """A parser for one streamed reply."""
        ...

    def retry_delay(self, error: dict[str, Any]) -> float | None:
        """The seconds an error body (a JSON object) asks to wait before a retry, where the
        wire says it there rather than in a Retry-After header (Gemini's RetryInfo)."""
        ...
