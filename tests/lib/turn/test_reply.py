"""A reply assembled from a provider's events (agctl.turn.reply.ReplyBuilder)."""

from __future__ import annotations

import pytest

from agctl.base.errors import ProviderError
from agctl.context.models import Message
from agctl.providers.base import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    WirePart,
)
from agctl.turn.reply import ReplyBuilder


def test_reply_builder_assembles_tool_calls_from_fragments() -> None:
    builder = ReplyBuilder()
    for event in [
        ReasoningDelta("think "),
        ReasoningDelta("more"),
        TextDelta("Looking"),
        ToolCallDelta(1, id="b", name="second"),
        ToolCallDelta(0, id="a", name="first"),
        ToolCallDelta(0, arguments='{"x":'),
        ToolCallDelta(1, arguments="{}"),
        ToolCallDelta(0, arguments=" 1}"),
        Usage(10, 5),
        Finish("tool_calls"),
    ]:
        builder.feed(event)
    message = builder.message("m")
    assert message.reasoning == "think more" and message.text() == "Looking"
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
    assert calls == [("a", "first", '{"x": 1}'), ("b", "second", "{}")]
    assert message.usage == {"prompt_tokens": 10, "completion_tokens": 5}
    assert message.tokens is None, "with reasoning, the completion count is not the content"


def test_a_new_id_on_an_index_in_use_starts_another_call() -> None:
    """Ollama sends every parallel call as index 0: each new id is a call of its own,
    kept in the order it began (and OpenAI's numbered calls still come in index order)."""
    builder = ReplyBuilder()
    for event in [
        ToolCallDelta(0, id="call_a", name="weather", arguments='{"city": '),
        ToolCallDelta(0, arguments='"Oslo"}'),
        ToolCallDelta(0, id="call_b", name="weather", arguments='{"city": "Lima"}'),
        ToolCallDelta(0, id="call_c", name="time"),
        ToolCallDelta(0, arguments="{}"),
        Finish("tool_calls"),
    ]:
        builder.feed(event)
    calls = [
        (c.id, c.function.name, c.function.arguments) for c in builder.message("m").tool_calls or ()
    ]
    assert calls == [
        ("call_a", "weather", '{"city": "Oslo"}'),
        ("call_b", "weather", '{"city": "Lima"}'),
        ("call_c", "time", "{}"),
    ]


def test_a_tool_call_with_no_name_is_reported_and_not_sent_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    builder = ReplyBuilder()
    for event in [
        TextDelta("Let me check."),
        ToolCallDelta(0, id="call_x", arguments='{"q": 1}'),
        ToolCallDelta(1, id="call_y", name="search", arguments="{}"),
    ]:
        builder.feed(event)
    message = builder.message("m")
    assert [c.function.name for c in message.tool_calls or ()] == ["search"]
    assert [c["id"] for c in builder.nameless] == ["call_x"]
    assert "tool call with no name" in caplog.text and "call_x" in caplog.text
    only_nameless = ReplyBuilder()
    only_nameless.feed(ToolCallDelta(0, id="call_z", arguments="{}"))
    with pytest.raises(ProviderError, match="1 tool call with no name"):
        only_nameless.message("m")


@pytest.mark.parametrize(
    ("finish", "message"),
    [
        (None, r"empty reply \(no text, no tool calls\)$"),
        ("stop", r"empty reply \(no text, no tool calls\)$"),
        (
            "content_filter",
            r"empty reply \(no text, no tool calls; it finished with 'content_filter'\)",
        ),
        ("length", "it finished with 'length'"),
    ],
)
def test_an_empty_reply_says_why_the_model_stopped(finish: str | None, message: str) -> None:
    """A filter or a limit that stopped the model before any output is what to fix, so the
    error names it."""
    builder = ReplyBuilder()
    builder.feed(ReasoningDelta("thinking only"))
    if finish is not None:
        builder.feed(Finish(finish))
    with pytest.raises(ProviderError, match=message):
        builder.message("m")


def test_wire_parts_are_kept_on_the_message_by_wire_in_order() -> None:
    builder = ReplyBuilder()
    first = {"type": "thinking", "thinking": "hm", "signature": "sig1"}
    second = {"type": "redacted_thinking", "data": "opaque"}
    for event in (
        ReasoningDelta("hm"),
        WirePart("anthropic", first),
        WirePart("anthropic", second),
        TextDelta("answer"),
        Finish("stop"),
    ):
        builder.feed(event)
    message = builder.message("claude-x")
    assert message.wire_parts == {"anthropic": [first, second]}
    assert message.reasoning == "hm"
    # Kept when stored and read back, and never in the OpenAI request form.
    assert Message.model_validate_json(message.model_dump_json()).wire_parts == message.wire_parts
    assert "wire_parts" not in message.to_openai()
    plain = ReplyBuilder()
    plain.feed(TextDelta("x"))
    assert plain.message("m").wire_parts is None
