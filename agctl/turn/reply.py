"""Assembling a reply from a provider's events: used by turns, compression and merges,
so it sits below all three."""

from __future__ import annotations

import logging

from agctl.base.errors import ProviderError
from agctl.context.models import Message, utcnow
from agctl.providers import base

log = logging.getLogger("agctl.turn")


class ReplyBuilder:
    """Assembles events into the assistant message, usage and finish reason.

    Tool calls are told apart by their index, and by their id: a fragment with a new id
    on an index in use starts another call (Ollama numbers every parallel call 0). They
    come out in index order, then in the order they began."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[tuple[int, dict[str, str]]] = []  # (index, call), as begun
        self._open: dict[int, dict[str, str]] = {}  # the call each index is building
        self.nameless: list[dict[str, str]] = []  # calls without a name: not sent back
        self.usage: base.Usage | None = None
        self.finish_reason: str | None = None
        self.parts: dict[str, list[dict[str, object]]] = {}  # by wire, as they came

    def feed(self, event: base.Event) -> None:
        if isinstance(event, base.TextDelta):
            self.text.append(event.text)
        elif isinstance(event, base.ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, base.ToolCallDelta):
            call = self._open.get(event.index)
            if call is None or (event.id and call["id"] and event.id != call["id"]):
                call = self._open[event.index] = {"id": "", "name": "", "arguments": ""}
                self.calls.append((event.index, call))
            call["id"] = event.id or call["id"]
            call["name"] = event.name or call["name"]
            call["arguments"] += event.arguments
        elif isinstance(event, base.Usage):
            self.usage = event
        elif isinstance(event, base.Finish):
            self.finish_reason = event.reason
        elif isinstance(event, base.WirePart):
            self.parts.setdefault(event.wire, []).append(event.part)

    def tool_calls(self) -> list[dict[str, object]]:
        """The calls in the wire form, each with an id; a call with no name is left out
        (nothing could run it, and a request carrying it back is refused) and reported."""
        ordered = sorted(self.calls, key=lambda begun: begun[0])  # stable: begun order kept
        calls: list[dict[str, object]] = []
        self.nameless = []
        for number, (_, call) in enumerate(ordered):
            if not call["name"]:
                self.nameless.append(call)
                log.warning(
                    "the model sent a tool call with no name (id %r, arguments %r): left out",
                    call["id"] or None,
                    call["arguments"][:200],
                )
                continue
            calls.append(
                {
                    "id": call["id"] or f"call_{number}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            )
        return calls

    def message(self, model: str) -> Message:
        tool_calls = self.tool_calls()
        text = "".join(self.text)
        if not text and not tool_calls:
            if self.nameless:
                raise ProviderError(
                    f"the model returned no text and {len(self.nameless)} tool "
                    f"call{'s' if len(self.nameless) != 1 else ''} with no name"
                )
            # Why it stopped, when it says more than "stop": a safety filter, a token limit.
            why = (
                f"; it finished with {self.finish_reason!r}"
                if self.finish_reason not in (None, "stop")
                else ""
            )
            raise ProviderError(f"the model returned an empty reply (no text, no tool calls{why})")
        # Only the counts the provider reported: one it did not stays out, not 0.
        usage = self.usage.reported() if self.usage is not None else None
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
            wire_parts=self.parts or None,
        )
