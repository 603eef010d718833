"""The Gemini wire (agctl.providers.gemini): the exact bytes it sends, each accepted by the
fake Gemini server, and its replies read, whole and streamed, from that server; then the
same over the shared HTTP transport, as a gemini profile gets it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from fake_gemini import FakeGemini, gemini_usage, prompt_chars

from agctl.base.errors import ProviderError, UsageError
from agctl.config.file import Resolved
from agctl.providers import build_provider
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    Provider,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    WirePart,
)
from agctl.providers.fields import Malformed
from agctl.providers.gemini import GeminiWire
from agctl.turn.reply import ReplyBuilder

KEY = "AIza-test-key"
MODEL = "gemini-2.5-flash"
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture
def gemini() -> Iterator[FakeGemini]:
    """A fake Gemini server on loopback; a test fails if it saw a bad request."""
    with FakeGemini(api_key=KEY, cache_min_tokens=8) as fake:
        yield fake
    assert fake.errors == []


def request(*messages: dict[str, Any], **fields: Any) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=list(messages), **fields)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def calling(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def payload(chat: ChatRequest, wire: GeminiWire | None = None) -> Any:
    return orjson.loads((wire or GeminiWire()).body(chat))


def post(server: FakeGemini, chat: ChatRequest, wire: GeminiWire | None = None) -> list[Event]:
    """Send `chat` to the fake as the wire would, and read the reply with the wire's parser."""
    wire = wire or GeminiWire()
    response = httpx.post(
        wire.url(server.base_url, chat),
        content=wire.body(chat),
        headers={**wire.key_headers(KEY), "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    if not chat.stream:
        return wire.reply(response.json())
    parser = wire.parser()
    events: list[Event] = []
    for line in response.text.splitlines():
        if line.startswith("data:"):
            events += parser.chunk(json.loads(line[5:]))
    parser.end()
    return events


def continued(chat: ChatRequest, events: list[Event], *more: dict[str, Any]) -> ChatRequest:
    """The next request of the conversation: `chat`'s messages, the assistant message the
    events make (with the wire parts it keeps, as a turn stores them), then `more`."""
    builder = ReplyBuilder()
    for event in events:
        builder.feed(event)
    message = builder.message(MODEL)
    wire_parts = dict(chat.wire_parts or {})
    if message.wire_parts:
        wire_parts[len(chat.messages)] = message.wire_parts
    return chat._replace(
        messages=[*chat.messages, message.to_openai(), *more], wire_parts=wire_parts or None
    )


# ---- the request -------------------------------------------------------------------------


def test_a_small_request_is_these_exact_bytes(gemini: FakeGemini) -> None:
    chat = request(user("hi"), temperature=0.5, max_tokens=100)
    assert GeminiWire().body(chat) == (
        b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],'
        b'"generationConfig":{"temperature":0.5,"maxOutputTokens":100}}'
    )
    assert post(gemini, chat)[0] == TextDelta("echo: hi")


def test_the_url_keeps_a_version_adds_v1beta_otherwise_and_quotes_the_model() -> None:
    wire = GeminiWire()
    chat = request(user("x"))
    assert (
        wire.url("https://g.test/", chat)
        == "https://g.test/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert (
        wire.url("https://g.test/v1", chat)
        == "https://g.test/v1/models/gemini-2.5-flash:generateContent"
    )
    assert (
        wire.url(
            "http://proxy.test/google/v1alpha/",
            chat._replace(model="models/tuned model", stream=True),
        )
        == "http://proxy.test/google/v1alpha/models/tuned%20model:streamGenerateContent?alt=sse"
    )
    assert wire.url("https://g.test/api/v2beta3", chat._replace(model="a/b?c")).endswith(
        "/api/v2beta3/models/a%2Fb%3Fc:generateContent"
    )
    assert wire.url("https://g.test/vintage", chat).startswith("https://g.test/vintage/v1beta/")
    with pytest.raises(UsageError, match="no model"):
        wire.url("https://g.test", chat._replace(model="models/"))
    assert wire.key_headers("k") == {"x-goog-api-key": "k"}
    assert wire.headers() == {}


def test_the_leading_system_messages_are_the_system_instruction_and_a_later_one_a_user_turn(
    gemini: FakeGemini,
) -> None:
    chat = request(
        system("You are terse."),
        system("Memory: the user is Ada."),
        user("hi"),
        {"role": "assistant", "content": "Hello, Ada."},
        system("Summary so far: greetings."),
        user("and now?"),
    )
    assert payload(chat) == {
        "systemInstruction": {
            "parts": [{"text": "You are terse."}, {"text": "Memory: the user is Ada."}]
        },
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {"role": "model", "parts": [{"text": "Hello, Ada."}]},
            {
                "role": "user",
                "parts": [{"text": "<system>\nSummary so far: greetings.\n</system>"}],
            },
            {"role": "user", "parts": [{"text": "and now?"}]},
        ],
    }
    assert GeminiWire().body(chat).startswith(b'{"systemInstruction":{"parts":[{"text":"You are')
    assert post(gemini, chat)[0] == TextDelta("echo: and now?")


def test_plain_text_is_sent_alike_whether_content_is_a_string_or_text_parts() -> None:
    """Plain text messages take a short cut; it gives what the general path gives."""

    def text_parts(message: dict[str, Any]) -> dict[str, Any]:
        return {**message, "content": [{"type": "text", "text": message["content"]}]}

    messages = [user("hi"), {"role": "assistant", "content": "hello"}, user("")]
    assert payload(request(*messages)) == payload(request(*map(text_parts, messages)))
    assert payload(request(*messages))["contents"][2] == {"role": "user", "parts": [{"text": ""}]}


def test_a_tool_loop_answers_each_call_by_name_in_one_user_turn(gemini: FakeGemini) -> None:
    chat = request(
        user("weather in Oslo and Rome?"),
        calling(
            call("call_0", "weather", '{"city": "Oslo"}'),
            call("call_1", "clock", ""),
            call("call_2", "weather", "Rome, please"),
            content="Looking.",
        ),
        result("call_1", "12:00"),
        result("call_0", "rain"),
        result("call_2", "sun"),
        user("thanks"),
        tools=[WEATHER, {"type": "function", "function": {"name": "clock"}}],
        tool_choice="auto",
    )
    body = payload(chat)
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Looking."},
                {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}},
                {"functionCall": {"name": "clock", "args": {}}},
                {"functionCall": {"name": "weather", "args": {"arguments": "Rome, please"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "clock", "response": {"result": "12:00"}}},
                {"functionResponse": {"name": "weather", "response": {"result": "rain"}}},
                {"functionResponse": {"name": "weather", "response": {"result": "sun"}}},
            ],
        },
        {"role": "user", "parts": [{"text": "thanks"}]},
    ]
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "weather",
                    "description": "The weather in a city.",
                    "parametersJsonSchema": WEATHER["function"]["parameters"],
                },
                {"name": "clock"},
            ]
        }
    ]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    assert list(body) == ["contents", "tools", "toolConfig"]
    assert post(gemini, chat)[0] == TextDelta("echo: thanks")
    # The fake counts the calls a model turn made against the responses of the next.
    assert gemini.requests[-1].body == body


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "weather"}},
            {"mode": "ANY", "allowedFunctionNames": ["weather"]},
        ),
    ],
)
def test_tool_choice_is_a_function_calling_mode(choice: Any, config: dict[str, Any]) -> None:
    body = payload(request(user("x"), tools=[WEATHER], tool_choice=choice))
    assert body["toolConfig"] == {"functionCallingConfig": config}
    # Without tools there is nothing to choose: neither is sent (as ChatRequest.params).
    assert list(payload(request(user("x"), tool_choice=choice))) == ["contents"]


def test_a_call_id_goes_back_only_when_gemini_gave_it(gemini: FakeGemini) -> None:
    """Gemini 3 gives every call an id and wants it back on the call and its response; an
    id agctl made up or another wire gave is never sent (Gemini 2.x refuses one)."""
    chat = request(
        user("go"),
        calling(call("gem-7", "weather", "{}"), call("call_1", "weather", "{}")),
        result("gem-7", "a"),
        result("call_1", "b"),
        wire_parts={1: {"gemini": [{"call": 0, "id": "gem-7"}, {"call": 1, "id": "other"}]}},
    )
    contents = payload(chat)["contents"]
    assert contents[1]["parts"] == [
        {"functionCall": {"id": "gem-7", "name": "weather", "args": {}}},
        {"functionCall": {"name": "weather", "args": {}}},
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"id": "gem-7", "name": "weather", "response": {"result": "a"}}},
        {"functionResponse": {"name": "weather", "response": {"result": "b"}}},
    ]
    post(gemini, chat)


def test_thought_signatures_go_back_on_their_parts_and_anthropic_parts_never(
    gemini: FakeGemini,
) -> None:
    parts = {
        "gemini": [
            {"text": True, "thoughtSignature": "c2lnLXRleHQ="},
            {"call": 1, "thoughtSignature": "c2lnLWNhbGw="},
        ],
        "anthropic": [{"type": "thinking", "thinking": "ANTHROPIC-ONLY", "signature": "x"}],
    }
    chat = request(
        user("go"),
        calling(call("a", "weather", "{}"), call("b", "weather", "{}"), content="Both."),
        result("a", "1"),
        result("b", "2"),
        {"role": "assistant", "content": None, "tool_calls": [call("c", "clock", "{}")]},
        result("c", "3"),
        wire_parts={1: parts, 4: {"anthropic": parts["anthropic"]}},
    )
    body = GeminiWire().body(chat)
    contents = orjson.loads(body)["contents"]
    assert contents[1]["parts"] == [
        {"text": "Both.", "thoughtSignature": "c2lnLXRleHQ="},
        {"functionCall": {"name": "weather", "args": {}}},
        {"functionCall": {"name": "weather", "args": {}}, "thoughtSignature": "c2lnLWNhbGw="},
    ]
    assert contents[3]["parts"] == [{"functionCall": {"name": "clock", "args": {}}}]
    assert b"ANTHROPIC-ONLY" not in body and b"thinking" not in body
    post(gemini, chat)


def test_a_text_signature_goes_back_even_when_the_reply_had_no_text() -> None:
    chat = request(
        user("go"),
        calling(call("a", "clock", "")),
        wire_parts={1: {"gemini": [{"text": True, "thoughtSignature": "c2ln"}]}},
    )
    assert payload(chat)["contents"][1]["parts"] == [
        {"text": "", "thoughtSignature": "c2ln"},
        {"functionCall": {"name": "clock", "args": {}}},
    ]


def test_a_signed_call_loop_round_trips_through_the_parser(gemini: FakeGemini) -> None:
    """A model that signs its calls refuses a turn that sends them back unsigned (the fake,
    as Gemini 3); the signature the parser kept goes back on the call it came with."""
    gemini.require_signatures = True
    wire = GeminiWire(thinking_budget=256)
    first = request(user("weather?"), tools=[WEATHER])
    gemini.reply(
        thought="Oslo first.",
        function_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "fc-1"}],
        signature="c2lnbmVkLWNhbGw=",
    )
    events = post(gemini, first, wire)
    assert (
        WirePart("gemini", {"call": 0, "id": "fc-1", "thoughtSignature": "c2lnbmVkLWNhbGw="})
        in events
    )
    second = continued(first, events, result("fc-1", "rain"))
    assert post(gemini, second, wire)[-1] == Finish("stop")
    sent = gemini.requests[-1].body["contents"]
    assert sent[1]["parts"] == [
        {
            "functionCall": {"id": "fc-1", "name": "weather", "args": {"city": "Oslo"}},
            "thoughtSignature": "c2lnbmVkLWNhbGw=",
        }
    ]
    assert sent[2]["parts"][0]["functionResponse"]["id"] == "fc-1"
    unsigned = second._replace(wire_parts=None)
    refused = httpx.post(
        wire.url(gemini.base_url, unsigned),
        content=wire.body(unsigned),
        headers=wire.key_headers(KEY),
        timeout=10,
    )
    assert refused.status_code == 400
    assert "thought_signature" in refused.json()["error"]["message"]


def test_each_turn_keeps_the_bytes_of_every_earlier_content(gemini: FakeGemini) -> None:
    """Gemini's implicit cache compares what it was sent: the next turn's body begins with
    everything of this turn's up to the end of its contents, and the fake then reports the
    shared prefix as cached tokens."""
    wire = GeminiWire()
    long_system = system("You are a careful assistant. " * 20)
    first = request(long_system, user("weather in Oslo?"), tools=[WEATHER], tool_choice="auto")
    gemini.reply(function_calls=[{"name": "weather", "args": {"city": "Oslo"}}])
    second = continued(first, post(gemini, first, wire), result("call_0", "rain"))
    third = continued(second, post(gemini, second, wire), user("and Rome?"))
    bodies = [wire.body(first), wire.body(second), wire.body(third)]
    for earlier, later in itertools.pairwise(bodies):
        contents_end = earlier.index(b'],"tools":')
        assert later.startswith(earlier[:contents_end] + b",")
    cached = [
        usage.cached_tokens for usage in post(gemini, third, wire) if isinstance(usage, Usage)
    ]
    # All of the second request was matched: its system instruction, tools and contents.
    assert cached == [prompt_chars(payload(second)) // 4]


def test_a_user_image_is_inline_data_and_a_linked_one_is_refused(gemini: FakeGemini) -> None:
    image = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }
    assert payload(request(image))["contents"][0]["parts"] == [
        {"text": "what is this?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
    ]
    post(gemini, request(image))
    linked = {"type": "image_url", "image_url": {"url": "https://pics.test/a.png"}}
    with pytest.raises(UsageError, match=r"'image_url' part .* gemini wire"):
        GeminiWire().body(request({"role": "user", "content": [linked]}))
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(UsageError, match=r"'input_audio' part .* gemini wire"):
        GeminiWire().body(request({"role": "user", "content": [audio]}))
    with pytest.raises(UsageError, match="base64 data: URL"):
        GeminiWire().body(
            request(
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:,hi"}}],
                }
            )
        )
    with pytest.raises(UsageError, match=r"'image_url' part, which the gemini wire"):
        GeminiWire().body(
            request(
                system("x"),
                {"role": "tool", "tool_call_id": "c", "name": "f", "content": [linked]},
            )
        )


def test_a_tool_result_for_no_call_is_refused_unless_it_names_its_function() -> None:
    with pytest.raises(UsageError, match="call 'nope', which no earlier assistant message made"):
        GeminiWire().body(request(user("x"), result("nope", "1")))
    named = {**result("nope", "1"), "name": "clock"}
    assert payload(request(user("x"), named))["contents"][1]["parts"] == [
        {"functionResponse": {"name": "clock", "response": {"result": "1"}}}
    ]


def test_a_thinking_budget_asks_for_thoughts(gemini: FakeGemini) -> None:
    body = payload(request(user("x"), max_tokens=9), GeminiWire(thinking_budget=1024))
    assert body["generationConfig"] == {
        "maxOutputTokens": 9,
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
    }
    off = payload(request(user("x")), GeminiWire(thinking_budget=0))
    assert off["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 0, "includeThoughts": False}
    }
    budgets: list[Any] = [-2, True, 1.5, "8"]  # what a hand-written config may hold
    for budget in budgets:
        with pytest.raises(UsageError, match="thinking budget"):
            GeminiWire(thinking_budget=budget)
    gemini.reply("done", thought="let me think")
    events = post(gemini, request(user("x")), GeminiWire(thinking_budget=-1))
    assert events[:2] == [ReasoningDelta("let me think"), TextDelta("done")]


# ---- the reply ---------------------------------------------------------------------------


def test_a_whole_reply_gives_thoughts_text_calls_their_parts_usage_and_finish(
    gemini: FakeGemini,
) -> None:
    gemini.reply(
        "Checking.",
        thought="Two cities.",
        function_calls=[
            {"name": "weather", "args": {"city": "Oslo", "days": [1, 2]}, "id": "x1"},
            {"name": "weather", "args": {"city": "Rome"}},
        ],
        signature="c2ln",
        usage=gemini_usage(1500, 30, cached=1024, thoughts=12),
    )
    events = post(gemini, request(user("x"), tools=[WEATHER]), GeminiWire(thinking_budget=64))
    assert events == [
        ReasoningDelta("Two cities."),
        TextDelta("Checking."),
        ToolCallDelta(0, id="x1", name="weather", arguments='{"city":"Oslo","days":[1,2]}'),
        WirePart("gemini", {"call": 0, "id": "x1", "thoughtSignature": "c2ln"}),
        ToolCallDelta(1, id=None, name="weather", arguments='{"city":"Rome"}'),
        Usage(1500, 42, cached_tokens=1024, reasoning_tokens=12),
        Finish("tool_calls"),
    ]
    message = continued(request(), events).messages[-1]
    assert [c["id"] for c in message["tool_calls"]] == ["x1", "call_1"]


@pytest.mark.parametrize("usage_apart", [False, True])
def test_a_stream_gives_its_pieces_and_one_usage_the_last(
    gemini: FakeGemini, usage_apart: bool
) -> None:
    """Each chunk's usageMetadata is the running total; only the reply's own is given."""
    gemini.reply(
        "The rain in Oslo falls mainly.",
        thought="Think it over slowly.",
        chunk_size=5,
        usage=gemini_usage(40, 9, thoughts=6),
        usage_apart=usage_apart,
    )
    chat = request(user("x"), stream=True)
    events = post(gemini, chat, GeminiWire(thinking_budget=100))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    thoughts = [e.text for e in events if isinstance(e, ReasoningDelta)]
    assert "".join(texts) == "The rain in Oslo falls mainly." and len(texts) > 1
    assert "".join(thoughts) == "Think it over slowly." and len(thoughts) > 1
    assert [e for e in events if isinstance(e, Usage)] == [Usage(40, 15, reasoning_tokens=6)]
    assert events[-2:] == [Usage(40, 15, reasoning_tokens=6), Finish("stop")]


def test_a_streamed_signature_and_calls_are_kept(gemini: FakeGemini) -> None:
    gemini.reply("ok", signature="dGV4dA==")
    events = post(gemini, request(user("x"), stream=True))
    assert WirePart("gemini", {"text": True, "thoughtSignature": "dGV4dA=="}) in events
    gemini.reply(function_calls=[{"name": "clock"}, {"name": "weather", "args": {"city": "Oslo"}}])
    events = post(gemini, request(user("x"), stream=True))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls == [
        ToolCallDelta(0, name="clock", arguments="{}"),
        ToolCallDelta(1, name="weather", arguments='{"city":"Oslo"}'),
    ]
    assert events[-1] == Finish("tool_calls")


def test_a_later_usage_after_the_finish_is_given_again() -> None:
    parser = GeminiWire().parser()
    finish = {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}]}
    assert parser.chunk({**finish, "usageMetadata": {"promptTokenCount": 3}}) == [
        TextDelta("hi"),
        Usage(3, 0),
        Finish("stop"),
    ]
    assert parser.chunk({"usageMetadata": {"promptTokenCount": 3}}) == []
    late = {"promptTokenCount": 3, "candidatesTokenCount": 1}
    assert parser.chunk({"usageMetadata": late}) == [Usage(3, 1)]
    parser.end()


@pytest.mark.parametrize(
    ("gemini_reason", "calls", "reason"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("MAX_TOKENS", True, "length"),
        *[
            (name, False, "content_filter")
            for name in (
                "SAFETY",
                "RECITATION",
                "BLOCKLIST",
                "PROHIBITED_CONTENT",
                "SPII",
                "IMAGE_SAFETY",
            )
        ],
        ("MALFORMED_FUNCTION_CALL", False, "malformed_function_call"),
        ("OTHER", False, "other"),
    ],
)
def test_finish_reasons_are_agctls(gemini_reason: str, calls: bool, reason: str) -> None:
    parts: list[dict[str, Any]] = [{"text": "t"}]
    if calls:
        parts.append({"functionCall": {"name": "f"}})
    reply = {"candidates": [{"content": {"parts": parts}, "finishReason": gemini_reason}]}
    assert GeminiWire().reply(reply)[-1] == Finish(reason)
    parser = GeminiWire().parser()
    assert parser.chunk(reply)[-1] == Finish(reason)
    parser.end()


@pytest.mark.parametrize("stream", [False, True])
def test_a_blocked_prompt_says_it_was_blocked_and_why(gemini: FakeGemini, stream: bool) -> None:
    gemini.reply(block_reason="PROHIBITED_CONTENT")
    with pytest.raises(
        ProviderError, match=r"refused the prompt: it was blocked \(PROHIBITED_CONTENT\)"
    ):
        post(gemini, request(user("x"), stream=stream))


def test_a_stream_that_ends_before_a_finish_reason_is_malformed() -> None:
    parser = GeminiWire().parser()
    assert parser.chunk({"candidates": [{"content": {"parts": [{"text": "par"}]}}]}) == [
        TextDelta("par")
    ]
    with pytest.raises(Malformed, match="the stream ended before a finish reason"):
        parser.end()


def whole(candidate: Any = None, **response: Any) -> dict[str, Any]:
    if candidate is not None:
        response["candidates"] = [candidate]
    return response


def parts(*items: Any, finish: str = "STOP") -> dict[str, Any]:
    return {"content": {"parts": list(items)}, "finishReason": finish}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "the reply is a list, not an object"),
        (whole(), "candidates is missing"),
        (whole(candidates=[]), "candidates is empty"),
        (whole(candidates={}), "candidates is an object, not a list"),
        (whole("x"), r"candidates\[0\] is a string, not an object"),
        (whole({"content": {"parts": []}}), r"candidates\[0\].finishReason is missing"),
        (whole({"finishReason": 3}), r"candidates\[0\].finishReason is a number, not a string"),
        (whole({"content": [], "finishReason": "STOP"}), r"candidates\[0\].content is a list"),
        (whole({"content": {"parts": {}}}), r"content.parts is an object, not a list"),
        (whole(parts(7)), r"parts\[0\] is a number, not an object"),
        (whole(parts({"text": 1})), r"parts\[0\].text is a number, not a string"),
        (
            whole(parts({"text": "a", "thought": "yes"})),
            r"parts\[0\].thought is a string, not a boolean",
        ),
        (whole(parts({"thoughtSignature": 5})), r"parts\[0\].thoughtSignature is a number"),
        (
            whole(parts({"functionCall": "f"})),
            r"parts\[0\].functionCall is a string, not an object",
        ),
        (whole(parts({"functionCall": {}})), r"parts\[0\].functionCall.name is null"),
        (whole(parts({"functionCall": {"name": ""}})), r"functionCall.name is empty"),
        (whole(parts({"functionCall": {"name": "f", "args": []}})), r"functionCall.args is a list"),
        (whole(parts({"functionCall": {"name": "f", "id": 1}})), r"functionCall.id is a number"),
        (whole(parts(), usageMetadata=[]), "usageMetadata is a list, not an object"),
        (
            whole(parts(), usageMetadata={"promptTokenCount": -1}),
            r"usageMetadata.promptTokenCount is -1, out of range",
        ),
        (
            whole(parts(), usageMetadata={"thoughtsTokenCount": "3"}),
            "usageMetadata.thoughtsTokenCount is a string, not a whole number",
        ),
        (whole(promptFeedback="no"), "promptFeedback is a string, not an object"),
    ],
)
def test_a_malformed_field_is_named(data: Any, message: str) -> None:
    with pytest.raises(Malformed, match=message):
        GeminiWire().reply(data)


def test_a_malformed_stream_chunk_is_named() -> None:
    parser = GeminiWire().parser()
    with pytest.raises(Malformed, match="the chunk is a string, not an object"):
        parser.chunk("data")
    with pytest.raises(Malformed, match=r"parts\[1\].functionCall.args is a string"):
        parser.chunk(whole(parts({"text": "a"}, {"functionCall": {"name": "f", "args": "{}"}})))


# ---- over HTTP: the shared transport, as build_provider makes it --------------------------


def provider(server: FakeGemini, **settings: Any) -> Provider:
    """The provider a gemini profile pointed at the fake gets."""
    return build_provider(
        Resolved(provider="gemini", model=MODEL, base_url=server.base_url, api_key=KEY, **settings)
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_over_http_whole_and_streamed(gemini: FakeGemini, stream: bool) -> None:
    gemini.reply("Hello there.", usage=gemini_usage(12, 4))
    chat = request(system("Be brief."), user("hi"), stream=stream)
    events = list(provider(gemini).stream(chat))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there."
    assert [e for e in events if isinstance(e, Usage | Finish)] == [Usage(12, 4), Finish("stop")]
    (sent,) = gemini.requests
    # (The fake streams SSE only when asked ?alt=sse: the events above say it was.)
    method = "streamGenerateContent" if stream else "generateContent"
    assert sent.path == f"/v1beta/models/{MODEL}:{method}"
    assert sent.headers["x-goog-api-key"] == KEY
    assert "authorization" not in sent.headers
    assert sent.raw == GeminiWire().body(chat)


def test_a_signed_tool_loop_over_http(gemini: FakeGemini) -> None:
    """Gemini 3's loop: each step's calls come signed and with ids, and go back so; a turn
    that lost them is refused by the server, as Gemini refuses it."""
    gemini.require_signatures = True
    model = provider(gemini, thinking_budget=512)
    first = request(user("weather in Oslo and Rome?"), tools=[WEATHER], stream=True)
    gemini.reply(
        thought="Both at once.",
        function_calls=[
            {"name": "weather", "args": {"city": "Oslo"}, "id": "fc-a"},
            {"name": "weather", "args": {"city": "Rome"}, "id": "fc-b"},
        ],
    )
    events = list(model.stream(first))
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Both at once."
    assert events[-1] == Finish("tool_calls")
    second = continued(first, events, result("fc-b", "sun"), result("fc-a", "rain"))
    gemini.reply("Rain in Oslo, sun in Rome.")
    assert list(model.stream(second))[-1] == Finish("stop")
    model_turn, answers = gemini.requests[-1].body["contents"][1:]
    signed = [part for part in model_turn["parts"] if "thoughtSignature" in part]
    assert [part["functionCall"]["id"] for part in signed] == ["fc-a"]
    assert [part["functionResponse"] for part in answers["parts"]] == [
        {"id": "fc-b", "name": "weather", "response": {"result": "sun"}},
        {"id": "fc-a", "name": "weather", "response": {"result": "rain"}},
    ]
    with pytest.raises(ProviderError, match=r"400 .*missing a `thought_signature`"):
        list(model.stream(second._replace(wire_parts=None)))


def test_the_second_turn_reports_the_implicit_cache_as_cached_tokens(gemini: FakeGemini) -> None:
    model = provider(gemini)
    first = request(system("Answer in the voice of a ship's log. " * 30), user("Day one?"))
    events = list(model.stream(first))
    assert [e.cached_tokens for e in events if isinstance(e, Usage)] == [None]
    second = continued(first, events, user("Day two?"))
    events = list(model.stream(second._replace(stream=True)))
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert usage.cached_tokens == prompt_chars(payload(first)) // 4
    assert 0 < usage.cached_tokens < usage.prompt_tokens


def test_a_stream_cut_before_its_finish_is_a_provider_error(gemini: FakeGemini) -> None:
    text = {"candidates": [{"content": {"parts": [{"text": "half"}], "role": "model"}}]}
    gemini.fail("sse", events=[text])
    with pytest.raises(ProviderError, match=r"malformed stream from .*ended before a finish"):
        list(provider(gemini).stream(request(user("x"), stream=True)))


@pytest.mark.parametrize("stream", [False, True])
def test_a_blocked_prompt_over_http_is_not_retried(gemini: FakeGemini, stream: bool) -> None:
    gemini.reply(block_reason="SAFETY")
    with pytest.raises(ProviderError, match=r"blocked \(SAFETY\)") as raised:
        list(provider(gemini).stream(request(user("x"), stream=stream)))
    assert raised.value.exit_code == 6
    assert len(gemini.requests) == 1


def test_a_429_waits_the_retry_delay_its_body_asks_for(gemini: FakeGemini) -> None:
    """Gemini says how long to wait in the error body (google.rpc.RetryInfo), not in a
    Retry-After header: that wait is kept, and one past max_retry_wait fails at once."""
    from agctl.providers.http import HttpProvider, HttpSettings

    waits: list[float] = []
    settings = HttpSettings(base_url=gemini.base_url, api_key=KEY, max_retry_wait=10)
    model = HttpProvider(GeminiWire(), settings, sleep=waits.append)
    gemini.fail("status", status=429, retry_delay=2.5)
    gemini.reply("after the wait")
    events = list(model.stream(request(user("x"))))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "after the wait"
    assert waits == [2.5]
    gemini.fail("status", status=429, retry_delay=30)
    with pytest.raises(ProviderError, match=r"asks to wait 30 s .*max_retry_wait"):
        list(model.stream(request(user("x"))))
    assert waits == [2.5]
