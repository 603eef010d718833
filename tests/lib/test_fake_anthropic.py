"""The fake Anthropic server, driven with httpx over loopback before agctl relies on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_anthropic import FakeAnthropic, anthropic_usage

KEY = "sk-ant-test"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
LONG = "The style guide says: keep it short and exact. " * 100  # 4,700 characters


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    """A fake Anthropic server on loopback that wants KEY; a test fails if it broke."""
    with FakeAnthropic(api_key=KEY) as server:
        yield server
    assert server.errors == []


@pytest.fixture
def client(fake: FakeAnthropic) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake.base_url, headers=HEADERS, timeout=5) as http:
        yield http


def body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The events of an SSE response, each `event:` name checked against its data's type."""
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    found = []
    for chunk in response.text.split("\n\n"):
        if not chunk:
            continue
        name_line, data_line = chunk.split("\n")
        name = name_line.removeprefix("event: ")
        event = json.loads(data_line.removeprefix("data: "))
        assert event["type"] == name
        found.append(event)
    return found


def assemble(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild the message from its events as the SDKs do (input JSON parsed at block stop)."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for event in stream:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
            message["content"] = []
        elif kind == "content_block_start":
            assert event["index"] == len(message["content"])
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            block = message["content"][event["index"]]
            if block["type"] == "tool_use":
                block["input"] = json.loads(partial[event["index"]])
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    return message


# Replies


def test_unscripted_whole_reply_echoes_with_the_documented_shape(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    request = body(
        system="be brief",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "second question"}]},
        ],
    )
    response = client.post("/v1/messages", json=request)
    assert response.status_code == 200
    assert response.headers["request-id"]
    reply = response.json()
    prompt = sum(len(t) // 4 + 1 for t in ["be brief", "first", "ok", "second question"])
    assert reply == {
        "id": "msg_fake0001",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "echo: second question"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": len("echo: second question") // 4 + 1,
            "service_tier": "standard",
        },
    }


def test_scripted_reply_carries_thinking_signature_text_and_tool_uses(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    usage = anthropic_usage(30, 12, cache_read=100, cache_write_1h=50)
    fake.reply(
        "Looking it up.",
        thinking="The user wants the weather.",
        signature="c2lnbmF0dXJl",
        tool_uses=[{"id": "toolu_1", "name": "weather", "input": '{"city": "Paris"}'}],
        usage=usage,
    )
    reply = client.post("/v1/messages", json=body()).json()
    assert reply["content"] == [
        {
            "type": "thinking",
            "thinking": "The user wants the weather.",
            "signature": "c2lnbmF0dXJl",
        },
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
    ]
    assert reply["stop_reason"] == "tool_use"
    assert reply["usage"] == usage
    assert usage["cache_creation_input_tokens"] == 50
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": 50,
    }


def test_scripted_replies_are_used_in_order_then_echo(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    fake.reply("one", stop_reason="max_tokens")
    fake.reply("two", stop_reason="stop_sequence", stop_sequence="END")
    got = []
    for _ in range(3):
        reply = client.post("/v1/messages", json=body("again")).json()
        got.append((reply["content"][0]["text"], reply["stop_reason"], reply["stop_sequence"]))
    assert got == [
        ("one", "max_tokens", None),
        ("two", "stop_sequence", "END"),
        ("echo: again", "end_turn", None),
    ]
    assert fake.pending() == (0, 0)
    with pytest.raises(ValueError, match="unknown stop reason"):
        fake.reply("x", stop_reason="stop")


# Streaming


def test_stream_follows_the_documented_event_order_and_reassembles_the_whole_reply(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    script: dict[str, Any] = {
        "text": "Here are the notes you asked for.",
        "thinking": "The user wants notes, so read the file.",
        "tool_uses": [
            {"id": "toolu_a", "name": "read_file", "input": {"path": "/tmp/n.txt", "limit": 20}},
            {"id": "toolu_b", "name": "now", "input": {}},
        ],
    }
    fake.reply(**script)
    whole = client.post("/v1/messages", json=body()).json()
    fake.reply(**script)
    stream = events(client.post("/v1/messages", json=body(stream=True)))

    kinds = [e["type"] for e in stream]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    start = stream[0]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == (
        [],
        None,
        1,
    )
    blocks = [e for e in stream if e["type"].startswith("content_block")]
    for index in range(4):  # each block: start, its deltas, stop, before the next starts
        own = [e["type"] for e in blocks if e["index"] == index]
        assert own[0] == "content_block_start"
        assert own[-1] == "content_block_stop"
        assert set(own[1:-1]) <= {"content_block_delta"}
    assert [e["index"] for e in blocks] == sorted(e["index"] for e in blocks)

    deltas = [e["delta"] for e in stream if e["type"] == "content_block_delta"]
    thinking = [d for d in deltas if d["type"] == "thinking_delta"]
    assert len(thinking) > 1
    thinking_block = [
        e["delta"]["type"] for e in stream if e["type"] == "content_block_delta" and e["index"] == 0
    ]
    assert thinking_block == ["thinking_delta"] * len(thinking) + ["signature_delta"]
    pieces = [
        e["delta"]["partial_json"]
        for e in stream
        if e["type"] == "content_block_delta" and e["index"] == 2
    ]
    assert pieces[0] == ""
    assert len([p for p in pieces if p]) == 3
    assert json.loads("".join(pieces)) == {"path": "/tmp/n.txt", "limit": 20}
    tool_start = next(e for e in blocks if e["index"] == 2)
    assert tool_start["content_block"] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "read_file",
        "input": {},
    }

    rebuilt = assemble(stream)
    assert rebuilt["content"] == whole["content"]
    assert rebuilt["content"][0]["signature"] == whole["content"][0]["signature"] != ""
    assert rebuilt["stop_reason"] == whole["stop_reason"] == "tool_use"
    assert rebuilt["usage"] == whole["usage"]
    assert stream[-2]["usage"] == {"output_tokens": whole["usage"]["output_tokens"]}


def test_redacted_thinking_streams_whole_in_its_start_event(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    fake.reply("done", redacted_thinking=["EmwKAhgBEgy3va"])
    stream = events(client.post("/v1/messages", json=body(stream=True)))
    starts = [e for e in stream if e["type"] == "content_block_start"]
    assert starts[0]["content_block"] == {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}
    assert not [e for e in stream if e["type"] == "content_block_delta" and e["index"] == 0]
    assert assemble(stream)["content"][1] == {"type": "text", "text": "done"}


def test_chunk_size_cuts_every_piece(fake: FakeAnthropic, client: httpx.Client) -> None:
    fake.reply(
        "abcdefg", thinking="hijk", tool_uses=[{"name": "f", "input": {"a": 1}}], chunk_size=2
    )
    stream = events(client.post("/v1/messages", json=body(stream=True)))
    deltas = [e["delta"] for e in stream if e["type"] == "content_block_delta"]
    pieces = [
        d.get("text") or d.get("thinking") or d.get("partial_json")
        for d in deltas
        if d["type"] != "signature_delta"  # a signature comes whole
    ]
    assert [p for p in pieces if p] == ["hi", "jk", "ab", "cd", "ef", "g", '{"', 'a"', ": ", "1}"]
    assert assemble(stream)["content"][2]["input"] == {"a": 1}


# Requests, keys and validation


def test_every_request_is_recorded_as_received(fake: FakeAnthropic, client: httpx.Client) -> None:
    raw = json.dumps(
        body(system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}])
    ).encode()
    client.post("/v1/messages", content=raw, headers={"content-type": "application/json"})
    [request] = fake.requests
    assert (request.method, request.path, request.raw) == ("POST", "/v1/messages", raw)
    assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert request.headers["X-Api-Key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize(
    ("headers", "status", "error_type", "message"),
    [
        (
            {"anthropic-version": "2023-06-01"},
            401,
            "authentication_error",
            "x-api-key header is required",
        ),
        (
            {"x-api-key": "sk-ant-wrong", "anthropic-version": "2023-06-01"},
            401,
            "authentication_error",
            "invalid x-api-key",
        ),
        ({"x-api-key": KEY}, 400, "invalid_request_error", "anthropic-version: header is required"),
    ],
)
def test_a_missing_or_wrong_key_or_version_is_refused_in_anthropics_error_shape(
    fake: FakeAnthropic, headers: dict[str, str], status: int, error_type: str, message: str
) -> None:
    fake.reply("never sent")
    response = httpx.post(f"{fake.base_url}/v1/messages", json=body(), headers=headers)
    assert response.status_code == status
    assert response.json() == {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake",
    }
    assert fake.pending() == (1, 0)


def test_the_key_may_come_as_a_bearer_token_as_the_sdk_sends_it(fake: FakeAnthropic) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "anthropic-version": "2026-10-21"}
    response = httpx.post(f"{fake.base_url}/v1/messages", json=body(), headers=headers)
    assert response.status_code == 200
    wrong = {**headers, "Authorization": "Bearer sk-ant-wrong"}
    response = httpx.post(f"{fake.base_url}/v1/messages", json=body(), headers=wrong)
    assert (response.status_code, response.json()["error"]["message"]) == (401, "invalid x-api-key")


def test_any_key_is_taken_when_none_is_set() -> None:
    with FakeAnthropic() as fake:
        response = httpx.post(
            f"{fake.base_url}/v1/messages", json=body(), headers={**HEADERS, "x-api-key": "k"}
        )
    assert response.status_code == 200


def tool_loop(result_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look it up", "signature": "c2ln"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": result_id, "content": "sunny"}],
        },
    ]


def test_a_tool_loop_with_its_thinking_sent_back_is_answered(client: httpx.Client) -> None:
    tools = [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}]
    request = body(
        messages=tool_loop("toolu_1"),
        tools=tools,
        thinking={"type": "enabled", "budget_tokens": 2048},
    )
    reply = client.post("/v1/messages", json=request).json()
    assert reply["content"] == [{"type": "text", "text": "echo: sunny"}]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"model": None}, "model"),
        ({"messages": []}, "messages"),
        ({"system": [{"type": "image"}]}, "system"),
        ({"messages": tool_loop("toolu_other")}, "unexpected `tool_use_id`"),
        (
            {
                "messages": [
                    {"role": "user", "content": "weather?"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "fn.w:0", "name": "w", "input": {}}],
                    },
                ]
            },
            "messages.1.content.0.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        ({"messages": [{"role": "system", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "does not match"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, ">= 1024"),
        ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "greater than"),
        ({"tools": [{"name": "f"}]}, "input_schema"),
        ({"tools": 5}, "tools"),
        ({"thinking": "on"}, "thinking"),
        ({"messages": [{"role": "user", "content": [7]}]}, "does not match"),
        ({"messages": [{"role": "user", "content": 7}]}, "content"),
        ({"max_tokens": True}, "max_tokens"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": str(n), "cache_control": {"type": "ephemeral"}}
                            for n in range(5)
                        ],
                    }
                ]
            },
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            {
                "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": "q",
                                "cache_control": {"type": "ephemeral", "ttl": "1h"},
                            }
                        ],
                    }
                ],
            },
            "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not "
            "come after a ttl='5m' cache_control block.",
        ),
    ],
)
def test_invalid_requests_get_400_naming_the_field(
    fake: FakeAnthropic, client: httpx.Client, change: dict[str, Any], fragment: str
) -> None:
    request = {key: value for key, value in {**body(), **change}.items() if value is not None}
    response = client.post("/v1/messages", json=request)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]


def test_unparsable_body_and_unknown_path(client: httpx.Client) -> None:
    bad = client.post("/v1/messages", content=b"{broken")
    assert (bad.status_code, bad.json()["error"]["type"]) == (400, "invalid_request_error")
    missing = client.post("/v1/complete", json=body())
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found_error")


# Faults


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (429, "rate_limit_error"),
        (500, "api_error"),
        (529, "overloaded_error"),
        (403, "permission_error"),
    ],
)
def test_status_fault_sends_anthropics_error_then_the_next_reply(
    fake: FakeAnthropic, client: httpx.Client, status: int, error_type: str
) -> None:
    fake.fail("status", status=status, retry_after=2)
    fake.reply("after the wait")
    response = client.post("/v1/messages", json=body(stream=True))
    assert response.status_code == status
    assert response.headers["retry-after"] == "2"
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == error_type
    retry = client.post("/v1/messages", json=body())
    assert retry.json()["content"][0]["text"] == "after the wait"


def test_stream_error_sends_an_error_event_after_the_stream_began(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    fake.fail("stream_error")
    fake.fail("stream_error", error_type="api_error", message="boom")
    stream = events(client.post("/v1/messages", json=body(stream=True)))
    assert [e["type"] for e in stream] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert stream[-1]["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    whole = client.post("/v1/messages", json=body())
    assert whole.status_code == 529
    assert whole.json()["error"] == {"type": "api_error", "message": "boom"}


def test_malformed_sse_and_garbage(fake: FakeAnthropic, client: httpx.Client) -> None:
    fake.fail("malformed_sse")
    fake.fail("garbage")
    text = client.post("/v1/messages", json=body(stream=True)).text
    assert "data: {not json" in text
    assert "message_stop" not in text
    garbage = client.post("/v1/messages", json=body())
    assert garbage.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        garbage.json()


def test_drop_mid_stream_cuts_the_connection(fake: FakeAnthropic, client: httpx.Client) -> None:
    fake.fail("drop_mid_stream")
    fake.fail("drop_mid_stream")
    seen: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/v1/messages", json=body(stream=True)) as response,
    ):
        seen.extend(line for line in response.iter_lines() if line.startswith("event:"))
    assert seen[:2] == ["event: message_start", "event: ping"]
    assert "event: message_stop" not in seen
    with pytest.raises(httpx.RemoteProtocolError):
        client.post("/v1/messages", json=body())


def test_slow_first_byte_times_the_client_out_then_answers(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    fake.fail("slow", seconds=30)
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/messages", json=body(), timeout=0.2)
    fake.fail("slow", seconds=0.1)
    fake.reply("kept")
    assert (
        client.post("/v1/messages", json=body("wait")).json()["content"][0]["text"] == "echo: wait"
    )
    assert client.post("/v1/messages", json=body()).json()["content"][0]["text"] == "kept"


def test_sse_fault_sends_the_given_events(fake: FakeAnthropic, client: httpx.Client) -> None:
    fake.fail("sse", events=[{"type": "ping"}, b"event: mystery\ndata: {}"])
    text = client.post("/v1/messages", json=body(stream=True)).text
    assert text == 'event: ping\ndata: {"type":"ping"}\n\nevent: mystery\ndata: {}\n\n'
    with pytest.raises(ValueError, match="unknown fault kind"):
        fake.fail("teapot")  # type: ignore[arg-type]


def test_a_hook_runs_before_the_reply_and_a_paused_stream_waits(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    seen: list[int] = []
    fake.before_reply(lambda: seen.append(len(fake.requests)))
    gate = fake.pause_stream(after=3)
    with client.stream("POST", "/v1/messages", json=body(stream=True)) as response:
        lines = response.iter_lines()
        held = [next(lines) for _ in range(9)]  # 3 events: event, data, blank line each
        assert seen == [1]  # the hook ran after the request arrived, before the answer
        gate.set()
        rest = list(lines)
    assert [line for line in held if line.startswith("event:")] == [
        "event: message_start",
        "event: ping",
        "event: content_block_start",
    ]
    assert rest[0] == "event: content_block_delta"
    assert "event: message_stop" in rest


# The prompt cache


def cached_body(question: str) -> dict[str, Any]:
    """A long system prompt marked for caching, then a question."""
    return body(
        system=[{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": question}],
    )


def usage_of(client: httpx.Client, request: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/messages", json=request)
    assert response.status_code == 200, response.text
    return dict(response.json()["usage"])


def test_a_breakpoint_writes_its_prefix_then_a_repeat_reads_it(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    system_tokens = len(LONG) // 4 + 1
    first = usage_of(client, cached_body("first question"))
    assert first["cache_creation_input_tokens"] == system_tokens
    assert first["cache_creation"] == {
        "ephemeral_5m_input_tokens": system_tokens,
        "ephemeral_1h_input_tokens": 0,
    }
    assert first["cache_read_input_tokens"] == 0
    assert first["input_tokens"] == len("first question") // 4 + 1

    second = usage_of(client, cached_body("another question"))
    assert second["cache_read_input_tokens"] == system_tokens
    assert second["cache_creation_input_tokens"] == 0
    assert second["input_tokens"] == len("another question") // 4 + 1
    assert fake.cached_prefixes() == 1

    changed = cached_body("first question")
    changed["system"][0]["text"] = LONG + "."
    missed = usage_of(client, changed)
    assert (missed["cache_read_input_tokens"], missed["cache_creation_input_tokens"]) == (
        0,
        system_tokens,
    )
    other_model = {**cached_body("first question"), "model": "claude-other"}
    assert usage_of(client, other_model)["cache_read_input_tokens"] == 0


def test_the_next_turn_reads_the_last_breakpoint_back_and_writes_its_own(
    fake: FakeAnthropic, client: httpx.Client
) -> None:
    history_mark = {"type": "ephemeral"}  # 5 minutes, after the 1-hour system mark
    turn_one = cached_body(LONG)
    turn_one["system"][0]["cache_control"]["ttl"] = "1h"
    turn_one["messages"][-1] = {
        "role": "user",
        "content": [{"type": "text", "text": LONG, "cache_control": history_mark}],
    }
    one = usage_of(client, turn_one)
    system_tokens = user_tokens = len(LONG) // 4 + 1
    assert one["cache_creation"] == {
        "ephemeral_5m_input_tokens": user_tokens,
        "ephemeral_1h_input_tokens": system_tokens,
    }
    assert one["input_tokens"] == 0

    # Turn two: the same prefix, the reply, a new question carrying the breakpoint.
    turn_two = cached_body("unused")
    turn_two["system"][0]["cache_control"]["ttl"] = "1h"
    turn_two["messages"] = [
        {"role": "user", "content": [{"type": "text", "text": LONG}]},
        {"role": "assistant", "content": "noted"},
        {
            "role": "user",
            "content": [{"type": "text", "text": LONG[::-1], "cache_control": history_mark}],
        },
    ]
    two = usage_of(client, turn_two)
    # The mark on the last message looks back to turn one's, whose bytes match but for it.
    assert two["cache_read_input_tokens"] == system_tokens + user_tokens
    assert (
        two["cache_creation"]["ephemeral_5m_input_tokens"] == (len("noted") // 4 + 1) + user_tokens
    )
    assert two["input_tokens"] == 0


def test_prefixes_under_the_minimum_are_not_cached(
    client: httpx.Client, fake: FakeAnthropic
) -> None:
    short = body(system=[{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}])
    for _ in range(2):
        usage = usage_of(client, short)
        assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (0, 0)
    assert fake.cached_prefixes() == 0
    with (
        FakeAnthropic(min_cache_tokens=0) as small,
        httpx.Client(base_url=small.base_url, headers=HEADERS) as http,
    ):
        assert usage_of(http, short)["cache_creation_input_tokens"] == len("short") // 4 + 1
        assert usage_of(http, short)["cache_read_input_tokens"] == len("short") // 4 + 1
