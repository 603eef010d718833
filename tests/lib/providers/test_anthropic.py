"""The Anthropic Messages wire: the exact bodies it sends (checked against the loopback fake,
which validates them as the API does and simulates its cache), and how it reads replies."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fake_anthropic import FakeAnthropic, anthropic_usage
from fake_openai import FakeOpenAI
from helpers import Adder

from agctl.base.errors import ProviderError, UsageError
from agctl.config.file import Resolved
from agctl.context.models import Message, Session, Slot
from agctl.context.view import request_messages
from agctl.providers import build_provider
from agctl.providers.anthropic import AnthropicWire, messages_url, min_cache_tokens
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    WirePart,
)
from agctl.providers.fields import Malformed
from agctl.providers.http import HttpProvider
from agctl.store import Store
from agctl.turn.reply import ReplyBuilder
from agctl.turn.send import TurnOptions, send_turn

KEY = "sk-ant-test"
MODEL = "claude-sonnet-4-5"
WIRE = AnthropicWire()
# Long enough to be cached on its own (4,700 characters: over 1,024 tokens at 4 bytes each).
LONG = "The style guide says: keep it short and exact. " * 100
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    """A fake Anthropic server on loopback that wants KEY; a test fails if it broke."""
    with FakeAnthropic(api_key=KEY) as server:
        yield server
    assert server.errors == []


def post(fake: FakeAnthropic, body: bytes, wire: AnthropicWire = WIRE) -> httpx.Response:
    """`body` posted as the wire would send it (its URL and headers)."""
    headers = {**wire.headers(), **wire.key_headers(KEY), "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as client:
        return client.post(
            wire.url(fake.base_url, ChatRequest(MODEL, [])), content=body, headers=headers
        )


def accepted(fake: FakeAnthropic, body: bytes, wire: AnthropicWire = WIRE) -> dict[str, Any]:
    """The fake's whole reply to `body`, which it must accept."""
    response = post(fake, body, wire)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def streamed(fake: FakeAnthropic, body: bytes) -> list[Any]:
    """The data of each event of the fake's streamed reply to `body`."""
    response = post(fake, body)
    assert response.status_code == 200, response.text
    return [
        orjson.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")
    ]


def decoded(request: ChatRequest, wire: AnthropicWire = WIRE) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(wire.body(request))
    return data


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def assistant(text: str | None, *calls: tuple[str, str, str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id_, name, arguments in calls
        ]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "content": text, "tool_call_id": call_id}


def text_block(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, **extra}


def marks(body: dict[str, Any]) -> dict[str, Any]:
    """Each cache_control in the body by where it is (`system.0`, `messages.3.content.1`)."""
    found = {
        f"system.{number}": block["cache_control"]
        for number, block in enumerate(body.get("system", []))
        if "cache_control" in block
    }
    for number, message in enumerate(body["messages"]):
        for place, block in enumerate(message["content"]):
            if "cache_control" in block:
                found[f"messages.{number}.content.{place}"] = block["cache_control"]
    return found


def events_of(wire: AnthropicWire, stream: list[Any]) -> list[Event]:
    """The events of a stream's data, fed one at a time, the end checked."""
    parser = wire.parser()
    events: list[Event] = []
    for data in stream:
        assert not parser.done
        events += parser.chunk(data)
    assert parser.done
    parser.end()
    return events


def built(events: list[Event]) -> Message:
    builder = ReplyBuilder()
    for event in events:
        builder.feed(event)
    return builder.message(MODEL)


# ---- where and how -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("https://claude.example", "https://claude.example/v1/messages"),
        ("https://claude.example/", "https://claude.example/v1/messages"),
        ("https://gateway.example/anthropic", "https://gateway.example/anthropic/v1/messages"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/messages"),
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1/messages"),
    ],
)
def test_the_messages_endpoint_under_a_host_root_or_a_v1(base_url: str, url: str) -> None:
    assert messages_url(base_url) == url
    assert WIRE.url(base_url, ChatRequest(MODEL, [])) == url


def test_the_key_and_the_version_travel_in_their_headers() -> None:
    assert WIRE.key_headers(KEY) == {"x-api-key": KEY}
    assert WIRE.headers() == {"anthropic-version": "2023-06-01"}
    assert AnthropicWire(version="2099-01-01").headers() == {"anthropic-version": "2099-01-01"}
    assert (WIRE.name, WIRE.stream_end) == ("anthropic", "message_stop")
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert WIRE.retry_delay(overloaded) is None  # the retry-after header says how long


# ---- the body ----------------------------------------------------------------------------


def test_a_small_request_has_these_exact_bytes_every_time(fake: FakeAnthropic) -> None:
    request = ChatRequest(MODEL, [system("Be brief."), user("hi")], temperature=0.5, stream=True)
    body = WIRE.body(request)
    assert body == (
        b'{"model":"claude-sonnet-4-5","max_tokens":4096,'
        b'"system":[{"type":"text","text":"Be brief."}],'
        b'"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],'
        b'"temperature":0.5,"stream":true}'
    )
    assert WIRE.body(request) == body
    assert WIRE.body(request._replace(stream=False)).endswith(b'"temperature":0.5}')
    events = events_of(WIRE, streamed(fake, body))
    assert built(events).content == "echo: hi"


def test_plain_text_has_the_same_bytes_however_it_is_held() -> None:
    """A message of plain text is encoded on a short way; the same text held otherwise (in
    parts, with another wire's parts, marked and unmarked) gives the same bytes."""
    plain = ChatRequest(MODEL, [user('q \u00e9"\n'), assistant("a </system>"), user("q2")])
    held = plain._replace(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": 'q \u00e9"\n'}]},
            assistant("a </system>"),
            user("q2"),
        ],
        wire_parts={1: {"gemini": [{"thoughtSignature": "Z2VtaW5p"}]}},
    )
    assert WIRE.body(held) == WIRE.body(plain) == orjson.dumps(orjson.loads(WIRE.body(plain)))
    long = plain._replace(messages=[user(LONG), assistant("a"), user("q2")])
    marked = decoded(long._replace(breakpoints=(1, 2)))["messages"]
    assert list(marks({"messages": marked})) == ["messages.0.content.0", "messages.1.content.0"]
    assert unmarked([b for m in marked for b in m["content"]]) == [
        b for m in decoded(long)["messages"] for b in m["content"]
    ]


def test_every_field_in_its_fixed_order_and_the_body_is_plain_orjson() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    request = ChatRequest(
        MODEL,
        [system("rules"), user("go")],
        temperature=0.2,
        max_tokens=5000,
        stream=True,
        tools=tools,
        tool_choice="auto",
        breakpoints=(1, 2),
    )
    body = WIRE.body(request)
    assert body == orjson.dumps(orjson.loads(body))
    order = ["model", "max_tokens", "system", "messages", "tools", "tool_choice"]
    assert list(orjson.loads(body)) == [*order, "temperature", "stream"]
    thinking = AnthropicWire(thinking_budget=2048).body(request)
    assert list(orjson.loads(thinking)) == [*order, "thinking", "stream"]
    assert list(decoded(ChatRequest(MODEL, [user("x")]))) == ["model", "max_tokens", "messages"]


def test_the_leading_system_run_is_the_system_field_and_a_later_one_a_tagged_user_message(
    fake: FakeAnthropic,
) -> None:
    request = ChatRequest(
        MODEL,
        [
            system("You are terse."),
            system("Project rules."),
            system(""),  # says nothing, and the API refuses an empty block
            user("q1"),
            assistant("a1"),
            system("Known facts (session memory):\n- k: v"),
            user("q2"),
        ],
    )
    body = decoded(request)
    assert body["system"] == [text_block("You are terse."), text_block("Project rules.")]
    assert body["messages"] == [
        {"role": "user", "content": [text_block("q1")]},
        {"role": "assistant", "content": [text_block("a1")]},
        {
            "role": "user",
            "content": [text_block("<system>\nKnown facts (session memory):\n- k: v\n</system>")],
        },
        {"role": "user", "content": [text_block("q2")]},
    ]
    accepted(fake, WIRE.body(request))
    assert "system" not in decoded(ChatRequest(MODEL, [user("x")]))


def test_a_tool_loop_sends_tool_uses_and_their_results_in_one_user_message(
    fake: FakeAnthropic,
) -> None:
    request = ChatRequest(
        MODEL,
        [
            user("weather in Paris and Rome?"),
            assistant(
                "Looking.",
                ("toolu_1", "weather", '{"city": "Paris"}'),
                ("toolu_2", "weather", '{"city":"Rome"}'),
                ("toolu_3", "clock", ""),
            ),
            tool("toolu_1", "18 C"),
            tool("toolu_2", "21 C"),
            tool("toolu_3", "noon"),
            assistant(None, ("toolu_4", "weather", "[1, 2]"), ("toolu_5", "weather", "{oops")),
            tool("toolu_4", "error: not an object"),
            tool("toolu_5", "error: not JSON"),
        ],
    )
    body = decoded(request)
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                text_block("Looking."),
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
                {"type": "tool_use", "id": "toolu_3", "name": "clock", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "21 C"},
                {"type": "tool_result", "tool_use_id": "toolu_3", "content": "noon"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                # Arguments that are no JSON object still go back, their text kept.
                {
                    "type": "tool_use",
                    "id": "toolu_4",
                    "name": "weather",
                    "input": {"arguments": "[1, 2]"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_5",
                    "name": "weather",
                    "input": {"arguments": "{oops"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_4",
                    "content": "error: not an object",
                },
                {"type": "tool_result", "tool_use_id": "toolu_5", "content": "error: not JSON"},
            ],
        },
    ]
    accepted(fake, WIRE.body(request))


def test_another_wires_call_ids_are_made_ones_the_api_accepts(fake: FakeAnthropic) -> None:
    request = ChatRequest(
        MODEL,
        [
            user("weather?"),
            assistant(None, ("functions.weather:0", "weather", "{}")),
            tool("functions.weather:0", "18 C"),
        ],
    )
    body = decoded(request)
    assert body["messages"][1]["content"][0]["id"] == "functions_weather_0"
    assert body["messages"][2]["content"][0]["tool_use_id"] == "functions_weather_0"
    accepted(fake, WIRE.body(request))


THINKING = {"type": "thinking", "thinking": "Paris first.", "signature": "c2lnbmF0dXJl"}
REDACTED = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}


def test_thinking_goes_back_first_and_verbatim_and_another_wires_parts_never(
    fake: FakeAnthropic,
) -> None:
    messages = [
        user("weather?"),
        assistant("Looking.", ("toolu_1", "weather", '{"city": "Paris"}')),
        tool("toolu_1", "18 C"),
        assistant("18 C in Paris."),
    ]
    gemini = [{"thoughtSignature": "Z2VtaW5p"}]
    request = ChatRequest(
        MODEL,
        messages,
        wire_parts={
            1: {"anthropic": [THINKING, REDACTED], "gemini": gemini},
            3: {"gemini": gemini},
        },
    )
    body = WIRE.body(request)
    assert orjson.loads(body)["messages"][1]["content"] == [
        THINKING,
        REDACTED,
        text_block("Looking."),
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
    ]
    assert orjson.loads(body)["messages"][3]["content"] == [text_block("18 C in Paris.")]
    assert b"thoughtSignature" not in body and b"Z2VtaW5p" not in body
    accepted(fake, body, AnthropicWire(thinking_budget=1024))


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("auto", None, {"type": "auto"}),
        ("auto", True, {"type": "auto"}),
        ("none", False, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (
            {"type": "function", "function": {"name": "weather"}},
            False,
            {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
        ),
    ],
)
def test_tools_and_the_choice_among_them(
    fake: FakeAnthropic, choice: Any, parallel: bool | None, expected: dict[str, Any] | None
) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "clock", "description": ""}},
    ]
    request = ChatRequest(
        MODEL, [user("go")], tools=tools, tool_choice=choice, parallel_tool_calls=parallel
    )
    body = decoded(request)
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"name": "clock", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert body.get("tool_choice") == expected
    accepted(fake, WIRE.body(request))
    assert "tools" not in decoded(request._replace(tools=[]))


def test_a_thinking_budget_adds_to_max_tokens_and_leaves_temperature_out(
    fake: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    wire = AnthropicWire(thinking_budget=2048, default_max_tokens=1000)
    request = ChatRequest(MODEL, [user("think")], temperature=0.7)
    with caplog.at_level(logging.WARNING, logger="agctl.provider"):
        body = decoded(request, wire)
    assert body["max_tokens"] == 3048
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "temperature" not in body
    assert "temperature 0.7 left out" in caplog.text
    assert decoded(request._replace(max_tokens=5000), wire)["max_tokens"] == 5000
    with pytest.raises(UsageError, match="max_tokens 2048 leaves nothing after the thinking"):
        wire.body(request._replace(max_tokens=2048))
    assert decoded(request, AnthropicWire(default_max_tokens=1000))["max_tokens"] == 1000
    accepted(fake, wire.body(request), wire)


def test_images_go_inline_or_by_url_and_an_unknown_part_is_refused(fake: FakeAnthropic) -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://img.example/cat.jpg"}},
    ]
    request = ChatRequest(MODEL, [{"role": "user", "content": content}])
    assert decoded(request)["messages"][0]["content"] == [
        text_block("What is this?"),
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://img.example/cat.jpg"}},
    ]
    accepted(fake, WIRE.body(request))
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(UsageError, match="'input_audio' content part, which the anthropic wire"):
        WIRE.body(ChatRequest(MODEL, [{"role": "user", "content": [audio]}]))
    plain = {"type": "image_url", "image_url": {"url": "data:text/plain,hello"}}
    with pytest.raises(UsageError, match="image the anthropic wire cannot send"):
        WIRE.body(ChatRequest(MODEL, [{"role": "user", "content": [plain]}]))
    with pytest.raises(UsageError, match="role 'developer'"):
        WIRE.body(ChatRequest(MODEL, [{"role": "developer", "content": "x"}]))


# ---- cache breakpoints -------------------------------------------------------------------

# A request as agctl orders it: system prompt; immutable zone (2); compressed zone (1, a
# summary); history (5, a tool call among them); session memory; the new input.
ZONED = [
    system(LONG),
    user("Reference document:\n" + LONG),
    assistant("Noted."),
    system("Summary of the earlier conversation: " + LONG),
    user("q1"),
    assistant("a1"),
    user("q2"),
    assistant(None, ("toolu_1", "lookup", '{"q": "x"}')),
    tool("toolu_1", "found"),
    system("Known facts (session memory):\n- k: v"),
    user("q3"),
]
# End of the system prompt, of the immutable zone, of the compressed zone, of the history.
ZONE_ENDS = (1, 3, 4, 9)


def test_a_mark_ends_each_zone_on_the_block_that_ends_it(fake: FakeAnthropic) -> None:
    unsent = copy.deepcopy(ZONED)
    body = decoded(ChatRequest(MODEL, ZONED, breakpoints=ZONE_ENDS))
    assert unsent == ZONED  # the marks are on the body's blocks, not on the request's
    assert marks(body) == {
        "system.0": EPHEMERAL,
        "messages.1.content.0": EPHEMERAL,  # "Noted.": the immutable zone's end
        "messages.2.content.0": EPHEMERAL,  # the summary, a tagged user message
        "messages.7.content.0": EPHEMERAL,  # the tool result: the history's end
    }
    first = accepted(fake, WIRE.body(ChatRequest(MODEL, ZONED, breakpoints=ZONE_ENDS)))
    again = accepted(fake, WIRE.body(ChatRequest(MODEL, ZONED, breakpoints=ZONE_ENDS)))
    written = first["usage"]["cache_creation_input_tokens"]
    assert written > 0 and first["usage"]["cache_read_input_tokens"] == 0
    assert again["usage"]["cache_read_input_tokens"] == written


def test_at_most_four_marks_the_last_ones(fake: FakeAnthropic) -> None:
    request = ChatRequest(MODEL, ZONED, breakpoints=(1, 3, 4, 6, 9))
    body = decoded(request)
    assert list(marks(body)) == [
        "messages.1.content.0",
        "messages.2.content.0",
        "messages.4.content.0",
        "messages.7.content.0",
    ]
    accepted(fake, WIRE.body(request))


def test_a_breakpoint_of_nothing_or_past_the_end_is_ignored_and_one_block_gets_one_mark() -> None:
    request = ChatRequest(MODEL, ZONED, breakpoints=(0, 3, 3, 12, 99))
    assert list(marks(decoded(request))) == ["messages.1.content.0"]
    # A message with no block of its own (an empty system message) ends where the one
    # before it does.
    request = ChatRequest(MODEL, [system(LONG), system(""), user("q")], breakpoints=(1, 2))
    assert list(marks(decoded(request))) == ["system.0"]


def test_a_mark_inside_the_system_run_and_inside_a_run_of_tool_results() -> None:
    messages = [
        system(LONG),
        system("Immutable rules: " + LONG),
        user("go"),
        assistant(None, ("toolu_1", "f", "{}"), ("toolu_2", "f", "{}")),
        tool("toolu_1", "one"),
        tool("toolu_2", "two"),
    ]
    body = decoded(ChatRequest(MODEL, messages, breakpoints=(1, 2, 5, 6)))
    # Each prefix ends on its own message's block: the first system block, the first
    # tool result of the two merged in one user message.
    assert list(marks(body)) == [
        "system.0",
        "system.1",
        "messages.2.content.0",
        "messages.2.content.1",
    ]


def test_no_mark_on_a_prefix_shorter_than_the_models_minimum() -> None:
    # about 1,500 tokens at 4 bytes a token
    messages = [system("x" * 6000), user("q1"), assistant("a1"), user("q2")]
    request = ChatRequest(MODEL, messages, breakpoints=(1, 3))
    assert list(marks(decoded(request))) == ["system.0", "messages.1.content.0"]
    for model in ("claude-3-5-haiku-20241022", "claude-haiku-4-5", "claude-opus-4-5-20251101"):
        assert marks(decoded(request._replace(model=model))) == {}
    # about 2,500 tokens: enough for 2,048 (the Haiku 3s), not for 4,096
    longer = request._replace(messages=[system("x" * 10_000), *messages[1:]])
    assert len(marks(decoded(longer._replace(model="claude-3-haiku-20240307")))) == 2
    assert marks(decoded(longer._replace(model="claude-haiku-4-5"))) == {}
    # The tools come first in the prompt: a short system prompt after long tools is cached.
    short = request._replace(messages=[system("Be brief."), *messages[1:]])
    assert marks(decoded(short)) == {}
    tools = [
        {"type": "function", "function": {"name": "f", "description": "y" * 6000}},
    ]
    assert list(marks(decoded(short._replace(tools=tools)))) == [
        "system.0",
        "messages.1.content.0",
    ]
    assert [min_cache_tokens(m) for m in ("claude-3-haiku-20240307", "claude-opus-4-1")] == [
        2048,
        1024,
    ]


def test_a_one_hour_ttl_is_on_every_mark_and_written_as_such(fake: FakeAnthropic) -> None:
    wire = AnthropicWire(cache_ttl="1h")
    body = wire.body(ChatRequest(MODEL, ZONED, breakpoints=ZONE_ENDS))
    assert set(map(orjson.dumps, marks(orjson.loads(body)).values())) == {
        b'{"type":"ephemeral","ttl":"1h"}'
    }
    usage = accepted(fake, body, wire)["usage"]
    assert (
        usage["cache_creation"]["ephemeral_1h_input_tokens"] == usage["cache_creation_input_tokens"]
    )
    assert usage["cache_creation_input_tokens"] > 0


def rendered(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt's blocks as the API's cache reads them: tools, system, then messages (each
    block with its message's role)."""
    blocks = [*body.get("tools", []), *body.get("system", [])]
    for message in body["messages"]:
        blocks += [{**block, "role": message["role"]} for block in message["content"]]
    return blocks


def unmarked(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks without their marks: a mark is not part of the prefix it ends."""
    return [{k: v for k, v in block.items() if k != "cache_control"} for block in blocks]


def usage_of(events: list[Event]) -> Usage:
    return next(event for event in events if isinstance(event, Usage))


def test_two_consecutive_turns_differ_only_after_the_first_ones_last_mark(
    fake: FakeAnthropic,
) -> None:
    session = Session(id="s1", system_prompt=LONG, memory={"city": "Paris"}, memory_in_context=True)
    history = [
        Message(role="user", content="q1"),
        Message(role="assistant", content="a1", wire_parts={"anthropic": [THINKING]}),
        Message(role="user", content="q2"),
        Message(role="assistant", content="a2"),
    ]
    immutable = [
        Message(role="user", content="Reference:\n" + LONG),
        Message(role="assistant", content="Noted."),
    ]
    compressed = [Message(role="system", content="Summary: " + LONG)]

    def turn(history: list[Message], prompt: str) -> tuple[bytes, Message]:
        """The body of the next turn on a slot holding `history`, as agctl builds it."""
        slot = Slot(id="main", immutable=immutable, compressed=compressed, messages=history)
        asked = Message(role="user", content=prompt)
        view = request_messages(session, slot, user_input=asked)
        request = ChatRequest(
            MODEL, view.requests, wire_parts=view.wire_parts, breakpoints=view.breakpoints
        )
        return WIRE.body(request), asked

    first_body, asked = turn(history, "q3")
    first_events = WIRE.reply(accepted(fake, first_body))
    reply = built(first_events)
    assert reply.content == "echo: q3"
    second_body, _ = turn([*history, asked, reply], "q4")

    before, after = orjson.loads(first_body), orjson.loads(second_body)
    assert list(marks(before)) == [
        "messages.1.content.0",  # "Noted.": the end of the system prompt and immutable zone
        "messages.2.content.0",  # the summary, a tagged user message
        "messages.6.content.0",  # a2: the history's end
    ]
    last = max(n for n, block in enumerate(rendered(before)) if "cache_control" in block) + 1
    # The blocks through the first body's last mark come first in the second, unchanged,
    # and every field before the messages too; what follows them differs.
    assert unmarked(rendered(after)[:last]) == unmarked(rendered(before)[:last])
    assert unmarked(rendered(after)[last:]) != unmarked(rendered(before)[last:])
    assert [after[key] for key in ("model", "max_tokens")] == [MODEL, 4096]
    # ... and so the API's cache serves the second turn all that the first one wrote.
    written = usage_of(first_events)
    assert written.cached_tokens == 0 and written.cache_write_tokens
    read = usage_of(WIRE.reply(accepted(fake, second_body)))
    assert read.cached_tokens == written.cache_write_tokens


# ---- reading a reply ---------------------------------------------------------------------


def test_a_whole_reply_gives_thinking_text_tool_calls_usage_and_finish(
    fake: FakeAnthropic,
) -> None:
    usage = anthropic_usage(30, 12, cache_read=100, cache_write_5m=20, cache_write_1h=50)
    fake.reply(
        "Looking it up.",
        thinking="The user wants the weather.",
        signature="c2lnbmF0dXJl",
        redacted_thinking=["ZW5jcnlwdGVk"],
        tool_uses=[{"id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
        usage=usage,
    )
    events = WIRE.reply(accepted(fake, WIRE.body(ChatRequest(MODEL, [user("weather?")]))))
    assert events == [
        ReasoningDelta("The user wants the weather."),
        WirePart(
            "anthropic",
            {
                "type": "thinking",
                "thinking": "The user wants the weather.",
                "signature": "c2lnbmF0dXJl",
            },
        ),
        WirePart("anthropic", {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}),
        TextDelta("Looking it up."),
        ToolCallDelta(3, id="toolu_1", name="weather", arguments='{"city":"Paris"}'),
        Usage(200, 12, cached_tokens=100, cache_write_tokens=70, cache_write_1h_tokens=50),
        Finish("tool_calls"),
    ]


def essentials(message: Message) -> tuple[Any, ...]:
    """What a reply holds, its calls' arguments parsed (the stream's JSON is spaced)."""
    calls = [
        (call.id, call.function.name, orjson.loads(call.function.arguments))
        for call in message.tool_calls or ()
    ]
    return message.content, message.reasoning, calls, message.wire_parts, message.usage


def test_a_streamed_reply_gives_what_the_whole_one_does(fake: FakeAnthropic) -> None:
    for _ in range(2):
        fake.reply(
            "Looking it up, then answering.",
            thinking="The user wants the weather in two cities.",
            redacted_thinking=["ZW5jcnlwdGVk"],
            tool_uses=[
                {"id": "toolu_1", "name": "weather", "input": {"city": "Paris", "unit": "C"}},
                {"id": "toolu_2", "name": "clock", "input": {}},
            ],
            usage=anthropic_usage(30, 12, cache_read=100, cache_write_1h=50),
            chunk_size=5,
        )
    request = ChatRequest(MODEL, [user("weather?")])
    whole = WIRE.reply(accepted(fake, WIRE.body(request)))
    stream = streamed(fake, WIRE.body(request._replace(stream=True)))
    events = events_of(WIRE, stream)
    # The stream's pieces: the tool input in pieces of 5 characters, each its own event.
    pieces = [
        e.arguments for e in events if isinstance(e, ToolCallDelta) and e.arguments and e.index == 3
    ]
    assert "".join(pieces) == '{"city": "Paris", "unit": "C"}' and len(pieces) == 6
    message = built(events)
    assert essentials(message) == essentials(built(whole))
    assert message.reasoning == "The user wants the weather in two cities."
    assert message.wire_parts == {
        "anthropic": [
            {
                "type": "thinking",
                "thinking": "The user wants the weather in two cities.",
                "signature": next(e for e in whole if isinstance(e, WirePart)).part["signature"],
            },
            {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
        ]
    }
    assert [
        (c.id, c.function.name, orjson.loads(c.function.arguments))
        for c in message.tool_calls or ()
    ] == [
        ("toolu_1", "weather", {"city": "Paris", "unit": "C"}),
        ("toolu_2", "clock", {}),
    ]
    assert events[-2:] == [
        Usage(180, 12, cached_tokens=100, cache_write_tokens=50, cache_write_1h_tokens=50),
        Finish("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_stop_reasons_are_agctls_finish_reasons(
    fake: FakeAnthropic, stop_reason: str, finish: str
) -> None:
    fake.reply("text", stop_reason=stop_reason)
    fake.reply("text", stop_reason=stop_reason)
    request = ChatRequest(MODEL, [user("x")])
    assert WIRE.reply(accepted(fake, WIRE.body(request)))[-1] == Finish(finish)
    streamed_events = events_of(WIRE, streamed(fake, WIRE.body(request._replace(stream=True))))
    assert streamed_events[-1] == Finish(finish)


def test_usage_not_reported_is_none_and_a_1h_share_larger_than_the_writes_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reply = {"content": [], "stop_reason": "end_turn"}
    assert WIRE.reply({**reply, "usage": {"input_tokens": 5, "output_tokens": 2}})[0] == Usage(5, 2)
    usage = {
        "input_tokens": 5,
        "output_tokens": 2,
        "cache_creation_input_tokens": 10,
        "cache_creation": {"ephemeral_1h_input_tokens": 11},
    }
    with caplog.at_level(logging.WARNING, logger="agctl.provider"):
        assert WIRE.reply({**reply, "usage": usage})[0] == Usage(15, 2, cache_write_tokens=10)
    assert "11 tokens written to the cache for 1 h, more than the 10" in caplog.text


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
STOP = [
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    {"type": "message_stop"},
]


def test_pings_unknown_events_and_other_blocks_carry_nothing() -> None:
    server_tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    events = events_of(
        WIRE,
        [
            START,
            {"type": "ping"},
            {"type": "a_future_event", "payload": 1},
            {"type": "content_block_start", "index": 0, "content_block": server_tool},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"q": "x"}'},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "hi"},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "citations_delta", "citation": {}},
            },
            {"type": "content_block_stop", "index": 1},
            *STOP,
        ],
    )
    assert events == [TextDelta("hi"), Usage(5, 3), Finish("stop")]


def text_block_events(*deltas: dict[str, Any]) -> list[Any]:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return [
        START,
        start,
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
    ]


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (["not an event"], "the event is a string, not an object"),
        ([{"message": {}}], "the event has no type"),
        ([{"type": 7}], r"the event.type is a number, not a string"),
        ([{"type": "message_start"}], "message_start.message is null, not an object"),
        (
            [{"type": "message_start", "message": {"usage": {"input_tokens": "5"}}}],
            r"message_start.message.usage.input_tokens is a string, not a whole number",
        ),
        (
            [
                START,
                {"type": "content_block_start", "index": -1, "content_block": {"type": "text"}},
            ],
            r"content_block_start.index is -1, out of range",
        ),
        (
            [START, {"type": "content_block_start", "index": 0, "content_block": "text"}],
            r"content_block_start.content_block is a string, not an object",
        ),
        (
            [
                START,
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "x"},
                },
            ],
            "content_block_delta for block 0, which has not started",
        ),
        ([START, {"type": "content_block_stop", "index": 2}], "block 2, which has not started"),
        (
            text_block_events({"type": "text_delta", "text": 5}),
            r"content_block_delta.delta.text is a number, not a string",
        ),
        (
            [START, {"type": "message_delta", "delta": {"stop_reason": 1}}],
            r"message_delta.delta.stop_reason is a number",
        ),
        (
            [START, {"type": "message_delta", "delta": {}, "usage": {"output_tokens": -3}}],
            r"message_delta.usage.output_tokens is -3, out of range",
        ),
        (
            [
                START,
                {
                    "type": "message_delta",
                    "delta": {},
                    "usage": {"cache_creation": {"ephemeral_1h_input_tokens": 1.5}},
                },
            ],
            r"message_delta.usage.cache_creation.ephemeral_1h_input_tokens is a number",
        ),
    ],
)
def test_a_malformed_event_names_where(stream: list[Any], message: str) -> None:
    parser = WIRE.parser()
    with pytest.raises(Malformed, match=message):
        for data in stream:
            parser.chunk(data)


def test_a_streamed_tool_use_without_input_has_the_arguments_of_a_whole_one() -> None:
    clock = {"type": "tool_use", "id": "toolu_1", "name": "clock", "input": {}}
    nothing = {"type": "input_json_delta", "partial_json": ""}
    stream = [
        START,
        {"type": "content_block_start", "index": 0, "content_block": clock},
        {"type": "content_block_delta", "index": 0, "delta": nothing},
        {"type": "content_block_stop", "index": 0},
        *STOP,
    ]
    events = events_of(WIRE, stream)
    assert events[:2] == [
        ToolCallDelta(0, id="toolu_1", name="clock"),
        ToolCallDelta(0, arguments="{}"),
    ]
    assert WIRE.reply({"content": [clock]})[0] == ToolCallDelta(
        0, id="toolu_1", name="clock", arguments="{}"
    )


def test_a_stream_without_its_start_or_with_a_nameless_tool_use_fails_at_its_end() -> None:
    parser = WIRE.parser()
    for data in STOP:
        parser.chunk(data)
    with pytest.raises(Malformed, match="no message_start"):
        parser.end()
    parser = WIRE.parser()
    nameless = {"type": "tool_use", "id": "toolu_1", "name": "", "input": {}}
    stream = [START, {"type": "content_block_start", "index": 0, "content_block": nameless}]
    for data in [*stream, {"type": "content_block_stop", "index": 0}, *STOP]:
        parser.chunk(data)
    assert parser.done
    with pytest.raises(Malformed, match="tool use 0 has no name"):
        parser.end()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ([], "the reply is a list, not an object"),
        ({"stop_reason": "end_turn"}, "content is missing"),
        ({"content": {"type": "text"}}, "content is an object, not a list"),
        ({"content": ["hi"]}, r"content\[0\] is a string, not an object"),
        (
            {"content": [{"type": "text", "text": None}, {"type": "text", "text": 3}]},
            r"content\[1\].text is a number",
        ),
        (
            {"content": [{"type": "tool_use", "id": "t", "input": {}}]},
            r"content\[0\].name is missing",
        ),
        (
            {"content": [{"type": "tool_use", "name": "", "input": {}}]},
            r"content\[0\].name is empty",
        ),
        (
            {"content": [{"type": "tool_use", "name": "f", "input": [1]}]},
            r"content\[0\].input is a list, not an object",
        ),
        (
            {"content": [{"type": "thinking", "thinking": "x", "signature": 5}]},
            r"content\[0\].signature is a number",
        ),
        ({"content": [], "usage": {"output_tokens": True}}, "usage.output_tokens is a boolean"),
        (
            {"content": [], "usage": {"cache_creation": []}},
            "usage.cache_creation is a list, not an object",
        ),
        ({"content": [], "stop_reason": ["end_turn"]}, r"the reply.stop_reason is a list"),
    ],
)
def test_a_malformed_whole_reply_names_where(reply: Any, message: str) -> None:
    with pytest.raises(Malformed, match=message):
        WIRE.reply(reply)


# ---- over HTTP: the shared transport, through build_provider -----------------------------


@pytest.fixture
def connect(fake: FakeAnthropic) -> Iterator[Callable[..., HttpProvider]]:
    """Builds the provider a profile of `provider: anthropic` pointed at the fake gives."""
    made: list[HttpProvider] = []

    def build(**changes: Any) -> HttpProvider:
        settings = Resolved(
            provider="anthropic",
            model=MODEL,
            base_url=fake.base_url,
            api_key=KEY,
            **{"max_retries": 0, **changes},
        )
        provider = build_provider(settings)
        assert isinstance(provider, HttpProvider) and provider.wire.name == "anthropic"
        made.append(provider)
        return provider

    yield build
    for provider in made:
        provider.close()


def sent(fake: FakeAnthropic) -> list[dict[str, Any]]:
    """The bodies of the requests the fake answered on the Messages path."""
    return [r.body for r in fake.requests if r.path == "/v1/messages"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_turns_read_the_cache_their_earlier_turns_wrote_and_send_thinking_back(
    store: Store, fake: FakeAnthropic, connect: Callable[..., HttpProvider], stream: bool
) -> None:
    store.create_session("s", system_prompt=LONG)
    provider = connect()
    options = TurnOptions(model=MODEL, stream=stream)
    fake.reply("Hello.", thinking="A greeting.", signature="c2lnLTE=")
    first = send_turn(store, "s", "Hi", provider, options)
    second = send_turn(store, "s", "Again", provider, options)
    third = send_turn(store, "s", "Once more", provider, options)

    assert first.reply.content == "Hello." and first.reply.reasoning == "A greeting."
    part = {"type": "thinking", "thinking": "A greeting.", "signature": "c2lnLTE="}
    assert store.load_slot("s").messages[1].wire_parts == {"anthropic": [part]}
    assert [r.finish_reason for r in (first, second, third)] == ["stop"] * 3
    request = fake.requests[0]
    assert (request.headers["x-api-key"], request.headers["anthropic-version"]) == (
        KEY,
        "2023-06-01",
    )
    bodies = sent(fake)
    assert [body.get("stream") for body in bodies] == [True if stream else None] * 3
    assert bodies[0]["system"] == [text_block(LONG, cache_control=EPHEMERAL)]
    # The reply's thinking goes back with it, first, verbatim.
    assert bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": [part, text_block("Hello.", cache_control=EPHEMERAL)],
    }
    # Each turn reads what the turns before it wrote: the system prompt, then the history.
    usages = [turn.usage for turn in (first, second, third)]
    reads = [usage.cached_tokens if usage else None for usage in usages]
    writes = [usage.cache_write_tokens if usage else None for usage in usages]
    assert writes[0] == len(LONG) // 4 + 1
    assert reads == [0, writes[0], sum(write or 0 for write in writes[:2])]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_tool_loop_sends_its_thinking_and_results_back_and_marks_the_turn_so_far(
    store: Store,
    fake: FakeAnthropic,
    connect: Callable[..., HttpProvider],
    tmp_path: Path,
    stream: bool,
) -> None:
    store.create_session("s", system_prompt=LONG)
    provider = connect(thinking_budget=1024, cache_ttl="1h")
    tools = Adder(tmp_path)
    fake.reply(
        thinking="Add them with the tool.",
        signature="c2lnLTI=",
        tool_uses=[{"id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}],
    )
    fake.reply("5.")
    result = send_turn(
        store, "s", "2+3?", provider, TurnOptions(model=MODEL, tools=tools, stream=stream)
    )

    assert result.reply.content == "5." and [run["a"] for run in tools.ran()] == [2]
    first, second = sent(fake)
    hour = {"type": "ephemeral", "ttl": "1h"}
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert first["max_tokens"] == 1024 + 4096
    assert first["tools"] == [
        {
            "name": "add",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}},
        }
    ]
    thinking = {"type": "thinking", "thinking": "Add them with the tool.", "signature": "c2lnLTI="}
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                thinking,
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "5",
                    "cache_control": hour,
                }
            ],
        },
    ]
    # The second step read the tools and system prompt the first one wrote, kept an hour.
    usage, step = result.usage, result.steps[0].reply.usage
    assert usage is not None and step is not None
    assert usage.cached_tokens == step["cache_write_tokens"] > len(LONG) // 4
    assert step["cache_write_1h_tokens"] == step["cache_write_tokens"]
    assert usage.cache_write_1h_tokens == usage.cache_write_tokens
    stored = store.load_slot("s").messages
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].wire_parts == {"anthropic": [thinking]}


def test_an_overloaded_server_is_retried_and_a_broken_stream_is_an_error(
    fake: FakeAnthropic, connect: Callable[..., HttpProvider]
) -> None:
    request = ChatRequest(MODEL, [user("hi")], stream=True)
    fake.fail("status", status=529, retry_after=0)
    slept: list[float] = []
    provider = connect(max_retries=1)
    provider._sleep = slept.append
    assert built(list(provider.stream(request))).content == "echo: hi"
    assert slept == [0]

    fake.fail("stream_error", error_type="overloaded_error", message="Overloaded now")
    with pytest.raises(ProviderError, match=r"error mid-stream .*Overloaded now"):
        list(connect().stream(request))
    nameless = {"type": "tool_use", "id": "toolu_1", "name": "", "input": {}}
    fake.fail(
        "sse",
        events=[
            START,
            {"type": "content_block_start", "index": 0, "content_block": nameless},
            {"type": "content_block_stop", "index": 0},
            *STOP,
        ],
    )
    with pytest.raises(ProviderError, match=r"malformed stream .*tool use 0 has no name"):
        list(connect().stream(request))
    fake.fail("sse", events=[START, STOP[0]])
    with pytest.raises(ProviderError, match="ended before message_stop"):
        list(connect().stream(request))
    fake.fail("garbage", body=b'{"type": "message", "content": "hi"}')
    with pytest.raises(ProviderError, match=r"malformed response .*content is a string"):
        list(connect().stream(request._replace(stream=False)))


def test_a_session_moved_to_the_openai_wire_and_back_keeps_its_thinking_for_anthropic_only(
    store: Store,
    fake: FakeAnthropic,
    server: FakeOpenAI,
    connect: Callable[..., HttpProvider],
    tmp_path: Path,
) -> None:
    store.create_session("s", system_prompt="Add things.")
    tools = Adder(tmp_path)
    options = TurnOptions(model=MODEL, tools=tools)
    fake.reply(
        thinking="Use the tool.",
        signature="c2lnLTM=",
        tool_uses=[{"id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}],
    )
    fake.reply("5.")
    send_turn(store, "s", "2+3?", connect(thinking_budget=1024), options)
    openai = build_provider(
        Resolved(provider="openai", model="gpt-test", base_url=server.base_url, api_key=KEY)
    )
    assert isinstance(openai, HttpProvider)
    server.reply(text="Still 5.")
    send_turn(store, "s", "Sure?", openai, TurnOptions(model="gpt-test"))
    openai.close()
    send_turn(store, "s", "And 2+4?", connect(thinking_budget=1024), options)

    # On the OpenAI wire: the call and its result as OpenAI's, no thinking anywhere.
    chat = server.requests[-1]
    assert b"thinking" not in chat.raw and b"c2lnLTM=" not in chat.raw
    assert [m["role"] for m in chat.body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert chat.body["messages"][2]["tool_calls"][0]["id"] == "toolu_1"
    # Back on Anthropic: the thinking goes back with the call it came with, and only there.
    messages = sent(fake)[-1]["messages"]
    thinking = {"type": "thinking", "thinking": "Use the tool.", "signature": "c2lnLTM="}
    assert messages[1]["content"][:2] == [
        thinking,
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}},
    ]
    assert [b["type"] for m in messages for b in m["content"]].count("thinking") == 1
    assert messages[5] == {"role": "assistant", "content": [text_block("Still 5.")]}
