"""Assembling a reply from a provider's events: used by turns, compression and merges,
so it sits below all three."""

from __future__ import annotations

from agctl.errors import ProviderError
from agctl.models import Message, utcnow
from agctl.providers.base import (
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)


class ReplyBuilder:
    """Assembles events into the assistant message, usage and finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def feed(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self.calls.setdefault(event.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = event.id or call["id"]
            call["name"] = event.name or call["name"]
            call["arguments"] += event.arguments
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.finish_reason = event.reason

    def message(self, model: str) -> Message:
        tool_calls = [
            {
                "id": c["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for i, c in sorted(self.calls.items())
        ]
        text = "".join(self.text)
        if not text and not tool_calls:
            raise ProviderError("the model returned an empty reply (no text, no tool calls)")
        usage = None
        if self.usage is not None:
            usage = {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
            }
        return Message(
            role="assistant",
            content=text or None,
            tool_calls=tool_calls or None,
            reasoning="".join(self.reasoning) or None,
            created_at=utcnow(),
            model=model,
            usage=usage,
            # A reasoner's completion count includes its reasoning, which is not sent back:
            # then the content is estimated instead.
            tokens=self.usage.completion_tokens if self.usage and not self.reasoning else None,
        )
